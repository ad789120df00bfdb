"""Actor-critic loss of a categorical policy as one autograd node.

``OnPolicyAlgorithm.compute_loss`` builds the loss from ~20 small operators (log-softmax,
ratio, clipping, value error, entropy, ...). On the small mini-batches of RL every one of
them, and its backward node, costs more in dispatch than in arithmetic. Here the forward
pass computes the loss and, analytically, its gradients with respect to the policy logits
and the value in the same sweep; backward only scales them. The result is the same loss
and the same gradients (tests/test_fused_loss.py checks both against the autograd path).

Gradients used (N samples, p = softmax(logits), lp = log p, a = taken action, A = advantage):

- d logp_a / d logits = onehot(a) - p
- PPO: d/d logp of -mean(min(r A, clip(r) A)) is -A r / N where the unclipped term is the
  smaller one (or the ratio is inside the clipping range), 0 where the clipped one is.
- A2C: d/d logp of -mean(logp A) is -A / N.
- d/d logits of -c_e mean(H) is c_e p (lp + H) / N, with H = -sum p lp.
- d/d value of c_v 0.5 mean((v - R)^2) is c_v (v - R) / N; with PPO's value clipping
  (v_c = v_old + clip(v - v_old, -eps, eps), loss 0.5 max((v - R)^2, (v_c - R)^2)) it is
  c_v (v - R) / N where the unclipped error is the larger one, c_v (v_c - R) / N where the
  clipped one is and v - v_old lies inside the range, 0 elsewhere.
"""

import torch
import torch.nn.functional as F

from pytorchrl.agent.numpy_engine import clipped_value_error


class _CategoricalActorCriticLoss(torch.autograd.Function):

    @staticmethod
    def forward(ctx, logits, value, act, old_logp, adv, ret, clip, value_coef, entropy_coef, old_value, value_clip):
        n = logits.shape[0]
        lp = F.log_softmax(logits, dim=-1)
        p = lp.exp()
        logp = lp.gather(1, act)
        ent = -(p * lp).sum(1, keepdim=True)
        stats = {}
        if clip is None:
            pi_loss = -(logp * adv).mean()
            g_logp = adv / -n
        else:
            log_ratio = logp - old_logp
            ratio = log_ratio.exp()
            surr1 = ratio * adv
            clipped = ratio.clamp(1.0 - clip, 1.0 + clip)
            surr2 = clipped * adv
            pi_loss = -torch.minimum(surr1, surr2).mean()
            active = (surr1 <= surr2) | (clipped == ratio)
            g_logp = torch.where(active, surr1, 0.0) / -n
            stats["ApproxKL"] = ((ratio - 1) - log_ratio).mean()
            stats["ClipFraction"] = ((ratio - 1).abs() > clip).float().mean()
        diff, value_loss = clipped_value_error(value, ret, old_value, value_clip)
        entropy = ent.mean()
        loss = pi_loss + value_coef * value_loss - entropy_coef * entropy

        g_logits = p * -g_logp
        g_logits.scatter_add_(1, act, g_logp)
        if entropy_coef != 0.0:
            g_logits += p * (lp + ent) * (entropy_coef / n)
        g_value = diff * (value_coef / n)
        ctx.save_for_backward(g_logits, g_value)
        ctx.mark_non_differentiable(*stats.values(), pi_loss, value_loss, entropy)
        return (loss, pi_loss, value_loss, entropy, *stats.values())

    @staticmethod
    def backward(ctx, grad_loss, *unused):
        g_logits, g_value = ctx.saved_tensors
        return g_logits * grad_loss, g_value * grad_loss, None, None, None, None, None, None, None, None, None


def categorical_actor_critic_loss(logits, value, act, old_logp, adv, ret, clip, value_coef, entropy_coef,
                                  old_value=None, value_clip=None):
    """Loss of a categorical actor-critic in one autograd node.

    Parameters
    ----------
    logits : torch.Tensor
        Policy logits (N, num_actions), requiring grad.
    value : torch.Tensor
        Value estimates (N, 1), requiring grad.
    act : torch.Tensor
        Actions taken (N, 1), int64.
    old_logp : torch.Tensor
        Log-probabilities of ``act`` under the behaviour policy (N, 1) (unused without clip).
    adv : torch.Tensor
        Advantages (N, 1), already normalised if wanted.
    ret : torch.Tensor
        Return targets (N, 1).
    clip : float or None
        PPO clipping range; None gives the A2C policy loss.
    value_coef, entropy_coef : float
        Weights of the value loss and of the entropy bonus.
    old_value : torch.Tensor or None
        Values (N, 1) when the data was collected (for ``value_clip``).
    value_clip : float or None
        PPO's clipping range of the value change; None: unclipped value loss.

    Returns
    -------
    loss : torch.Tensor
        Scalar to back-propagate.
    info : dict of 0-d tensors
        PolicyLoss, ValueLoss, Entropy, Loss and, with clip, ApproxKL and ClipFraction.
    """
    out = _CategoricalActorCriticLoss.apply(logits, value, act.long(), old_logp, adv, ret,
                                            None if clip is None else float(clip),
                                            float(value_coef), float(entropy_coef), old_value,
                                            None if value_clip is None else float(value_clip))
    loss, pi_loss, value_loss, entropy = out[:4]
    info = {"PolicyLoss": pi_loss, "ValueLoss": value_loss, "Entropy": entropy, "Loss": loss.detach()}
    if clip is not None:
        info["ApproxKL"], info["ClipFraction"] = out[4], out[5]
    return loss, info
