"""The actor-critic losses of PPO and A2C: policy objectives, value loss, entropy bonus.

Each function returns the loss's value and, with ``grad=True``, its gradient with respect
to what the networks output (log-probabilities, values, a categorical policy's logits).
Gradients are with respect to each sample of a mini-batch of N samples (the 1/N of the
mean included). Notation: p = softmax(logits), lp = log p, a = the action taken, A = the
advantage, r = exp(logp - old logp) the probability ratio.
"""

from pytorchrl.agent.accel.xp import TORCH


def normalize_advantages(xp, adv):
    """Advantages standardised over the mini-batch (unbiased std, as torch's ``std``);
    unchanged for a single sample."""
    if xp.size(adv) < 2:
        return adv
    return (adv - adv.mean()) / (xp.std(adv) + 1e-8)


def ppo_policy_loss(xp, logp, old_logp, adv, clip_param, kl_coef=0.0, grad=True):
    """PPO's clipped surrogate ``-mean(min(r A, clip(r, 1 - eps, 1 + eps) A))``, plus
    ``kl_coef`` times the sample estimate ``mean((r - 1) - log r)`` of KL(old || new) (the
    KL penalty of Schulman et al., 2017, with a fixed coefficient).

    Parameters
    ----------
    xp : namespace
        ``NUMPY`` or ``TORCH``.
    logp, old_logp, adv : array (N, 1)
        Log-probabilities of the actions under the current and the behaviour policy, and
        the advantages.
    clip_param : float
        The clipping range eps.
    kl_coef : float
        Weight of the KL penalty (0: none).
    grad : bool
        Also return the gradient with respect to ``logp``.

    Returns
    -------
    loss : 0-d array
    stats : dict of 0-d arrays
        ``ApproxKL`` (mean of (r - 1) - log r) and ``ClipFraction``, outside any gradient.
    g_logp : array (N, 1) or None
        d loss / d logp: -A r / N where the unclipped term is the smaller one (or the
        ratio lies inside the range), 0 where the clipped one is; plus kl_coef (r - 1) / N.
    """
    n = logp.shape[0]
    log_ratio = logp - old_logp
    ratio = xp.exp(log_ratio)
    surr1 = ratio * adv
    clipped = xp.clip(ratio, 1.0 - clip_param, 1.0 + clip_param)
    surr2 = clipped * adv
    loss = -xp.minimum(surr1, surr2).mean()
    if kl_coef != 0.0:
        loss = loss + kl_coef * ((ratio - 1.0) - log_ratio).mean()
    r, lr = xp.stop(ratio), xp.stop(log_ratio)
    stats = {"ApproxKL": ((r - 1) - lr).mean(), "ClipFraction": xp.as_float(xp.abs(r - 1) > clip_param).mean()}
    g_logp = None
    if grad:
        active = (surr1 <= surr2) | (clipped == ratio)
        g_logp = xp.where(active, surr1, 0.0) / -n
        if kl_coef != 0.0:
            g_logp = g_logp + kl_coef * (ratio - 1.0) / n
    return loss, stats, g_logp


def a2c_policy_loss(xp, logp, old_logp, adv, grad=True):
    """A2C's policy gradient loss ``-mean(logp A)``; its gradient w.r.t. ``logp`` is -A / N.
    Parameters and returns as ``ppo_policy_loss`` (no statistics; ``old_logp`` unused)."""
    loss = -(logp * adv).mean()
    return loss, {}, (adv / -logp.shape[0] if grad else None)


def value_loss(xp, value, ret, old_value=None, value_clip=None, grad=True, scale=0.5):
    """The value loss ``s mean((v - R)^2)``, or PPO's clipped form
    ``s mean(max((v - R)^2, (v_c - R)^2))`` with ``v_c = v_old + clip(v - v_old, -c, c)``;
    ``s`` is 0.5 (PPO's, as CleanRL and the PPO paper's code write it) or 1 (A2C's, as
    pytorchrl and Stable-Baselines3 write it: the mean squared error).

    Parameters
    ----------
    xp : namespace
        ``NUMPY`` or ``TORCH``.
    value, ret : array (N, 1)
        Value estimates and return targets.
    old_value : array (N, 1) or None
        Values when the data was collected (needed with ``value_clip``).
    value_clip : float or None
        The range c of the value change; None: no clipping.
    grad : bool
        Also return the gradient with respect to ``value``.
    scale : float
        The factor ``s`` of the mean.

    Returns
    -------
    loss : 0-d array
    g_value : array (N, 1) or None
        2s (v - R) / N where the unclipped error is the larger one, 2s (v_c - R) / N where
        the clipped one is and v - v_old lies inside the range, 0 elsewhere.
    """
    g_scale = 2.0 * scale / value.shape[0]
    diff = value - ret
    if value_clip is None:
        return scale * (diff * diff).mean(), (diff * g_scale if grad else None)
    delta = value - old_value
    diff_c = old_value + xp.clip(delta, -value_clip, value_clip) - ret
    loss = scale * xp.maximum(diff * diff, diff_c * diff_c).mean()
    if not grad:
        return loss, None
    unclipped = diff * diff >= diff_c * diff_c
    inside = (delta >= -value_clip) & (delta <= value_clip)
    return loss, (xp.where(unclipped, diff, 0.0) + xp.where(~unclipped & inside, diff_c, 0.0)) * g_scale


def actor_critic_loss(policy_loss, value_loss_, entropy, value_loss_coef, entropy_coef):
    """The total actor-critic loss ``policy + c_v value - c_e entropy``."""
    return policy_loss + value_loss_coef * value_loss_ - entropy_coef * entropy


def categorical_log_probs(xp, logits, act):
    """``(lp, p, logp, entropy)`` of a categorical policy: log-probabilities and
    probabilities of every action (N, K), of the actions taken ``act`` (N, 1, integers)
    and the entropy of each row (N, 1)."""
    lp = xp.log_softmax(logits)
    p = xp.exp(lp)
    return lp, p, xp.take(lp, act), -(p * lp).sum(axis=1, keepdims=True)


def categorical_logits_grad(xp, lp, p, entropy, act, g_logp, entropy_coef):
    """d loss / d logits of a loss whose gradient w.r.t. the taken actions' log-probability
    is ``g_logp`` (N, 1), minus ``entropy_coef`` times the mean entropy:
    ``g_logp (onehot(a) - p) + c_e p (lp + H) / N``."""
    g = xp.add_at(p * -g_logp, act, g_logp)
    if entropy_coef != 0.0:
        g = g + p * (lp + entropy) * (entropy_coef / p.shape[0])
    return g


def categorical_actor_critic(xp, logits, value, act, old_logp, adv, ret, old_value, policy_objective,
                             value_clip, value_loss_coef, entropy_coef, value_scale=0.5):
    """The whole actor-critic loss of a categorical policy and its gradients with respect to
    the logits and the value: what the numpy engine and the fused torch loss compute.

    Parameters
    ----------
    xp : namespace
        ``NUMPY`` or ``TORCH`` (outside autograd).
    logits : array (N, K)
        Policy logits.
    value : array (N, 1)
        Value estimates.
    act : integer array (N, 1)
        Actions taken.
    old_logp, adv, ret : array (N, 1)
        Behaviour log-probabilities, advantages (normalised if wanted) and return targets.
    old_value : array (N, 1) or None
        Values at collection (for ``value_clip``).
    policy_objective : callable
        ``policy_objective(xp, logp, old_logp, adv, grad=True) -> (loss, stats, g_logp)``:
        the algorithm's policy loss (``OnPolicyAlgorithm.policy_objective``).
    value_clip : float or None
        PPO's range of the value change (None: unclipped value loss).
    value_loss_coef, entropy_coef : float
        Weights of the value loss and of the entropy bonus.
    value_scale : float
        The factor of the value loss's mean (``value_loss``'s ``scale``).

    Returns
    -------
    loss : 0-d array
    info : dict of 0-d arrays
        PolicyLoss, ValueLoss, Entropy, Loss and the policy objective's statistics.
    g_logits : array (N, K)
    g_value : array (N, 1)
    """
    lp, p, logp, ent = categorical_log_probs(xp, logits, act)
    pi_loss, stats, g_logp = policy_objective(xp, logp, old_logp, adv, grad=True)
    v_loss, g_v = value_loss(xp, value, ret, old_value, value_clip, scale=value_scale)
    entropy = ent.mean()
    loss = actor_critic_loss(pi_loss, v_loss, entropy, value_loss_coef, entropy_coef)
    g_logits = categorical_logits_grad(xp, lp, p, ent, act, g_logp, entropy_coef)
    info = {"PolicyLoss": pi_loss, "ValueLoss": v_loss, "Entropy": entropy, "Loss": loss, **stats}
    return loss, info, g_logits, g_v * value_loss_coef


def reference_actor_critic(logp, entropy, value, old_logp, adv, ret, old_value, policy_loss, value_clip,
                           value_loss_coef, entropy_coef, value_scale=0.5):
    """The actor-critic loss of any policy in torch, for autograd (the reference path).

    Parameters
    ----------
    logp, entropy, value : torch.Tensor (N, 1)
        The actor's log-probabilities of the actions taken, entropies and values.
    old_logp, adv, ret, old_value
        As in ``categorical_actor_critic``.
    policy_loss : callable
        ``policy_loss(logp, old_logp, adv) -> (loss, stats)`` (the algorithm's).
    value_clip, value_loss_coef, entropy_coef, value_scale
        As in ``categorical_actor_critic``.

    Returns
    -------
    loss : torch.Tensor
    info : dict of 0-d tensors (outside the graph)
    """
    pi_loss, stats = policy_loss(logp, old_logp, adv)
    v_loss, _ = value_loss(TORCH, value, ret, old_value, value_clip, grad=False, scale=value_scale)
    entropy = entropy.mean()
    loss = actor_critic_loss(pi_loss, v_loss, entropy, value_loss_coef, entropy_coef)
    info = {"PolicyLoss": pi_loss, "ValueLoss": v_loss, "Entropy": entropy, "Loss": loss, **stats}
    return loss, {k: v.detach() for k, v in info.items()}


__all__ = ["normalize_advantages", "ppo_policy_loss", "a2c_policy_loss", "value_loss", "actor_critic_loss",
           "categorical_log_probs", "categorical_logits_grad", "categorical_actor_critic", "reference_actor_critic"]
