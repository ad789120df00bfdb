"""Fast paths of the on-policy actor-critics (``OnPolicyActor`` with PPO or A2C).

- ``NumpyPolicy``: ``OnPolicyActor.act`` (action, log-probability, value) in numpy for
  MLP actors on the CPU: acting on one observation per environment is dominated by
  torch's per-operator dispatch.
- ``NumpyActorCriticUpdate``: the gradients of a categorical MLP actor-critic's loss in
  numpy (the loss kernel ``losses.actor_critic.categorical_actor_critic``, then the
  backward pass through the heads and ``networks``), several times faster than autograd
  for networks of 64 units.
- ``fused_categorical_loss``: the same kernel as one autograd node in torch, for the
  categorical actors the numpy update does not serve (images, memories, GPUs): the loss's
  twenty small operators and their backward nodes cost more in dispatch than in arithmetic.

The reference classes declare them (``OnPolicyActor``, ``PPO``, ``A2C``) with the methods
each reproduces; tests/unit/test_accel_parity.py runs each against its reference.
"""

import numpy as np
import torch

from pytorchrl import ACT, ADV, LOGP, OBS, RET, VAL
from pytorchrl.agent.losses.actor_critic import categorical_actor_critic, normalize_advantages
from pytorchrl.agent.accel.networks import float2d, pair_of, program_of, set_grads, view
from pytorchrl.agent.accel.threads import limit_blas_threads
from pytorchrl.agent.accel.observations import numpy_normalizer
from pytorchrl.agent.accel.sampling import categorical_sample, gaussian_log_density
from pytorchrl.agent.accel.xp import NUMPY, TORCH
from pytorchrl.agent.actors.distributions import CategoricalHead, DiagGaussianHead

def _trunk(actor):
    """``(program, None)`` of an on-policy actor's feature networks (a shared ``MLP``, a
    policy/value ``ParallelMLP`` or two separate ``MLP``), or ``(None, reason)``."""
    if getattr(actor, "memory", None) is not None:
        return None, "recurrent actor (numpy runs feed-forward networks)"
    if actor.twin_net is not None:
        return program_of(actor.twin_net)
    if actor.value_net is not None:
        return pair_of(actor.policy_net, actor.value_net)
    return program_of(actor.policy_net)


class NumpyPolicy:
    """``OnPolicyActor.act`` in numpy: callable ``(obs, state, deterministic) -> (env_action,
    {ACT, LOGP, VAL}, state)``, drawing its randomness from the actor's ``np_rng``; and
    ``value(obs)``, the value estimates.

    Parameters
    ----------
    actor : OnPolicyActor
        The actor (checked by ``build``).
    trunk : NumpyChain or NumpyTwin
        Its feature networks.
    """

    def __init__(self, actor, trunk):
        self.trunk = trunk
        self.normalize = numpy_normalizer(actor)
        self.rng = actor.np_rng
        self.discrete = isinstance(actor.dist, CategoricalHead)
        self.w_pi, self.b_pi = view(actor.dist.linear.weight).T, view(actor.dist.linear.bias)
        self.w_v, self.b_v = view(actor.value_head.weight).T, view(actor.value_head.bias)
        if not self.discrete:
            self.log_std = view(actor.dist.log_std)
            self.low = actor._low.cpu().numpy()
            self.high = actor._high.cpu().numpy()

    @classmethod
    def build(cls, actor):
        """``(NumpyPolicy, None)`` for ``actor``, or ``(None, reason)`` when numpy cannot
        compute what its torch path computes."""
        if actor.device.type != "cpu":
            return None, f"device {actor.device}"
        if type(actor.dist) not in (CategoricalHead, DiagGaussianHead):
            # MultiDiscrete and MultiBinary heads: numpy has no program for them.
            return None, f"policy head {type(actor.dist).__name__} for the action space " \
                         f"{' '.join(str(actor.action_space).split())} (numpy acts for Discrete and Box spaces)"
        trunk, reason = _trunk(actor)
        if trunk is None:
            return None, reason
        return cls(actor, trunk), None

    def _features(self, obs):
        return self.trunk.features(self.normalize(np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)))

    def value(self, obs):
        """Value estimates (N, 1) of a numpy batch of observations."""
        return self._features(obs)[1] @ self.w_v + self.b_v

    def __call__(self, obs, state=None, deterministic=False):
        pf, vf = self._features(obs)
        value = vf @ self.w_v + self.b_v
        out = pf @ self.w_pi + self.b_pi
        if self.discrete:
            log_probs = NUMPY.log_softmax(out)
            if deterministic:
                action = log_probs.argmax(axis=1).astype(np.int64)[:, None]
            else:
                # Inverse-CDF sampling: one uniform number per row.
                action = categorical_sample(np.exp(log_probs), self.rng.random((len(out), 1), dtype=np.float32))
            logp = np.take_along_axis(log_probs, action, axis=1)
            return action, {ACT: action, LOGP: logp, VAL: value}, state
        std = np.exp(self.log_std)
        action = out if deterministic else out + std * self.rng.standard_normal(out.shape, dtype=np.float32)
        zs = (action - out) / std
        logp = gaussian_log_density(zs, self.log_std)
        env_action = np.clip(action, self.low, self.high)
        return env_action, {ACT: action, LOGP: logp.astype(np.float32), VAL: value}, state


def _categorical_reason(algo):
    # Gaussian, MultiDiscrete and MultiBinary heads: the kernel is a single categorical's.
    if type(getattr(algo.actor, "dist", None)) is not CategoricalHead:
        return f"policy head {type(getattr(algo.actor, 'dist', None)).__name__} (categorical policies only)"
    return None


class NumpyActorCriticUpdate:
    """The loss and gradients of a categorical MLP actor-critic (PPO, A2C), in numpy.

    Calling it with a mini-batch fills every parameter's ``.grad`` (numpy arrays viewed as
    tensors) and returns the loss statistics, as ``compute_loss`` followed by ``backward``.

    Parameters
    ----------
    algo : OnPolicyAlgorithm
        The algorithm (checked by ``build``); its ``policy_objective`` is the policy loss.
    trunk : NumpyChain or NumpyTwin
        The actor's feature networks.
    """

    def __init__(self, algo, trunk):
        actor = algo.actor
        self.algo = algo
        self.trunk = trunk
        self.normalize = numpy_normalizer(actor)
        self.w_pi, self.b_pi = view(actor.dist.linear.weight), view(actor.dist.linear.bias)
        self.w_v, self.b_v = view(actor.value_head.weight), view(actor.value_head.bias)
        self.heads = [actor.dist.linear.weight, actor.dist.linear.bias, actor.value_head.weight,
                      actor.value_head.bias]
        self.params = self.heads + trunk.params

    @classmethod
    def build(cls, algo):
        """``(engine, None)`` for ``algo``, or ``(None, reason)`` when numpy cannot compute
        exactly what its torch path computes."""
        if algo.device.type != "cpu":
            return None, f"device {algo.device}"
        reason = _categorical_reason(algo)
        if reason is not None:
            return None, reason
        trunk, reason = _trunk(algo.actor)
        if trunk is None:
            return None, reason
        actor = algo.actor
        heads = [actor.dist.linear.weight, actor.dist.linear.bias, actor.value_head.weight, actor.value_head.bias]
        if {id(p) for p in heads + trunk.params} != {id(p) for p in actor.parameters()}:
            return None, "the actor has parameters this update would not train"
        limit_blas_threads()
        return cls(algo, trunk), None

    def __call__(self, batch):
        """Fill every parameter's ``.grad`` with the loss gradient of ``batch``; return the statistics."""
        algo = self.algo
        x = self.normalize(float2d(batch[OBS]))
        act = batch[ACT].numpy().astype(np.int64, copy=False)
        adv = batch[ADV].numpy()
        if algo.normalize_advantages:
            adv = normalize_advantages(NUMPY, adv)
        cache = []
        pf, vf = self.trunk.features(x, cache)
        logits = pf @ self.w_pi.T + self.b_pi
        value = vf @ self.w_v.T + self.b_v
        vclip = algo.value_clip
        _, info, g_logits, g_value = categorical_actor_critic(
            NUMPY, logits, value, act, batch[LOGP].numpy(), adv, batch[RET].numpy(),
            batch[VAL].numpy() if vclip is not None else None, algo.policy_objective, vclip,
            algo.value_loss_coef, algo.entropy_coef, algo.value_loss_scale)
        grads = [g_logits.T @ pf, g_logits.sum(0), g_value.T @ vf, g_value.sum(0)]
        grads += self.trunk.backward(cache, g_logits @ self.w_pi, g_value @ self.w_v)
        set_grads(self.params, grads)
        return {k: float(v) for k, v in info.items()}


class _FusedCategoricalLoss(torch.autograd.Function):
    """``categorical_actor_critic`` as one autograd node: the forward pass computes the
    loss and, analytically, its gradients w.r.t. the logits and the value; backward only
    scales them."""

    @staticmethod
    def forward(ctx, logits, value, act, old_logp, adv, ret, old_value, objective, value_clip, value_coef,
                entropy_coef, value_scale, keys):
        loss, info, g_logits, g_value = categorical_actor_critic(
            TORCH, logits, value, act, old_logp, adv, ret, old_value, objective, value_clip, value_coef,
            entropy_coef, value_scale)
        ctx.save_for_backward(g_logits, g_value)
        stats = [v for k, v in info.items() if k != "Loss"]
        keys.extend(k for k in info if k != "Loss")
        ctx.mark_non_differentiable(*stats)
        return (loss, *stats)

    @staticmethod
    def backward(ctx, grad_loss, *unused):
        g_logits, g_value = ctx.saved_tensors
        return (g_logits * grad_loss, g_value * grad_loss) + (None,) * 11


def fused_categorical_loss(algo, logits, value, batch, adv):
    """The actor-critic loss of ``algo`` (its ``policy_objective``, value clipping and
    coefficients) for a categorical policy's ``logits`` and ``value`` (N, 1), as one
    autograd node: ``(loss, info)`` with the same values and gradients as the reference.

    Parameters
    ----------
    algo : OnPolicyAlgorithm
        The algorithm.
    logits, value : torch.Tensor
        The actor's outputs (requiring grad).
    batch : dict of tensors
        The mini-batch (ACT, LOGP, RET and, with value clipping, VAL).
    adv : torch.Tensor
        The advantages (normalised if wanted).
    """
    keys = []
    vclip = algo.value_clip
    out = _FusedCategoricalLoss.apply(logits, value, batch[ACT].long(), batch[LOGP], adv, batch[RET],
                                      batch[VAL] if vclip is not None else None, algo.policy_objective,
                                      vclip, float(algo.value_loss_coef), float(algo.entropy_coef),
                                      float(algo.value_loss_scale), keys)
    loss = out[0]
    info = dict(zip(keys, out[1:]))
    info["Loss"] = loss.detach()
    return loss, info


class FusedCategoricalLoss:
    """The fused loss of a categorical actor-critic (``fused_categorical_loss``), built by
    ``build`` for any device and feature extractor (recurrent sequences included).

    Parameters
    ----------
    algo : OnPolicyAlgorithm
        The algorithm.
    """

    def __init__(self, algo):
        self.algo = algo

    @classmethod
    def build(cls, algo):
        """``(fused loss, None)``, or ``(None, reason)`` for a policy that is not categorical."""
        reason = _categorical_reason(algo)
        return (None, reason) if reason else (cls(algo), None)

    def __call__(self, logits, value, batch, adv):
        return fused_categorical_loss(self.algo, logits, value, batch, adv)


__all__ = ["NumpyPolicy", "NumpyActorCriticUpdate", "FusedCategoricalLoss", "fused_categorical_loss"]
