"""Shared machinery of the actor-critic on-policy algorithms (PPO, A2C)."""

import torch

from pytorchrl import ACT, ADV, DONE, LOGP, OBS, RET, RHS, VAL
from pytorchrl.agent.actors.base import say_once
from pytorchrl.agent.actors.distributions import CategoricalHead
from pytorchrl.agent.algorithms.base import Algorithm, make_adam
from pytorchrl.agent.algorithms.fused_loss import categorical_actor_critic_loss
from pytorchrl.agent.numpy_engine import NumpyActorCriticUpdate, NumpyAdam, limit_blas_threads


def sequence_args(batch):
    """Keyword arguments that make a recurrent actor read ``batch`` as sequences (its
    initial states and episode ends); none for a batch of single steps."""
    if RHS not in batch:
        return {}
    return {"rhs": batch[RHS], "done": batch[DONE]}


class OnPolicyAlgorithm(Algorithm):
    """Actor-critic algorithm trained on advantage-weighted log-probabilities.

    Subclasses define ``policy_loss``; this class adds the value and entropy terms, builds
    the optimizer and exposes the hyperparameters every on-policy algorithm shares.
    Collectors store the log-probability and value of every step (``acting_extras``) and
    bootstrap rollouts with the value of their last observation (``bootstrap``).

    Parameters
    ----------
    device, actor, envs
        As in ``Algorithm``.
    lr : float
        Learning rate of the Adam optimizer.
    eps : float
        Adam's epsilon.
    gamma : float
        Discount factor.
    num_epochs : int
        Passes over each collected rollout.
    num_mini_batch : int
        Mini-batches per epoch (ignored when ``mini_batch_size`` is set).
    mini_batch_size : int or None
        Samples per mini-batch; None splits the rollout into ``num_mini_batch`` parts.
    entropy_coef : float
        Weight of the entropy bonus.
    value_loss_coef : float
        Weight of the value loss.
    max_grad_norm : float
        Gradients are clipped to this global norm (0 or None disables clipping).
    normalize_advantages : bool
        Standardise advantages within each mini-batch.
    test_every : int
        Evaluate deterministically on the test envs every this many collection rounds.
    num_test_episodes : int
        Episodes per evaluation.
    numpy_update : bool
        Compute updates of MLP actors with categorical policies on the CPU in numpy (same
        arithmetic as torch, about three times faster for small networks); other actors,
        policies and devices always use torch. Fixed at construction.
    """

    fixed_hyperparameters = ("numpy_update",)
    acting_extras = (LOGP, VAL)
    #: The policy loss computed by the fused and numpy paths (a subclass's own
    #: ``policy_loss`` takes the reference autograd path instead).
    fused_policy_loss = None

    def __init__(self, device, actor, envs=None, lr=3e-4, eps=1e-5, gamma=0.99, num_epochs=4,
                 num_mini_batch=1, mini_batch_size=None, entropy_coef=0.0, value_loss_coef=0.5,
                 max_grad_norm=0.5, normalize_advantages=True, test_every=10, num_test_episodes=10,
                 numpy_update=True):
        super().__init__(device, actor, envs)
        self.lr = float(lr)
        self.eps = float(eps)
        self.gamma = float(gamma)
        self.num_epochs = int(num_epochs)
        self.num_mini_batch = int(num_mini_batch)
        self.mini_batch_size = None if mini_batch_size is None else int(mini_batch_size)
        self.entropy_coef = float(entropy_coef)
        self.value_loss_coef = float(value_loss_coef)
        self.max_grad_norm = None if max_grad_norm is None else float(max_grad_norm)
        self.normalize_advantages = bool(normalize_advantages)
        self.test_every = int(test_every)
        self.num_test_episodes = int(num_test_episodes)
        self.numpy_update = bool(numpy_update)
        self.check_hyperparameters()

    def make_optimizer(self, group, params):
        if self.update_engine is not None:
            return NumpyAdam(params, self)
        return make_adam(params, lr=self.lr, eps=self.eps)

    def build_update_engine(self):
        """The numpy update (``NumpyActorCriticUpdate``) when ``numpy_update`` is set and it
        computes exactly this algorithm's loss for this actor and device (else said once)."""
        if not self.numpy_update:
            return None
        engine, reason = NumpyActorCriticUpdate.build(self)
        if engine is None:
            say_once(("numpy update", type(self).__name__, reason),
                     f"{type(self).__name__}: numpy update not used ({reason}); updating in torch")
            return None
        limit_blas_threads()
        return engine

    def fused_loss_applies(self):
        """True when ``policy_loss`` is the one the fused and numpy losses compute."""
        return type(self).fused_policy_loss is not None and type(self).policy_loss is type(self).fused_policy_loss

    def bootstrap(self, obs, state=None):
        """Value estimates (N, 1) of ``obs`` (numpy), through the actor's acting program
        (``state``: recurrent state of the rows, for recurrent actors)."""
        return self.actor.values(obs, state)

    def check_hyperparameters(self):
        for name in ("num_epochs", "num_mini_batch", "test_every", "num_test_episodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{self.name} hyperparameter {name} must be >= 1, got {getattr(self, name)}")
        for name in ("mini_batch_size", "max_grad_norm"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise TypeError(f"{self.name} hyperparameter {name} must be a number or None, got {value!r}")
        if self.mini_batch_size is not None and self.mini_batch_size < 1:
            raise ValueError(f"{self.name} hyperparameter mini_batch_size must be >= 1, got {self.mini_batch_size}")
        for name in ("lr", "gamma", "entropy_coef", "value_loss_coef", "clip_param"):
            if getattr(self, name, 0.0) < 0:
                raise ValueError(f"{self.name} hyperparameter {name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"{self.name} hyperparameter gamma must be in [0, 1], got {self.gamma}")

    def policy_loss(self, logp, old_logp, adv):
        """Return (policy loss, info dict of 0-d tensors) for one mini-batch."""
        raise NotImplementedError

    #: Hyperparameter holding the clipping range of the fused and numpy losses (None:
    #: A2C's unclipped loss).
    fused_clip_param = None

    @property
    def fused_clip(self):
        """Clipping range of the fused and numpy losses (None: unclipped)."""
        return None if self.fused_clip_param is None else getattr(self, self.fused_clip_param)

    #: Range of PPO's value clipping (None: the value loss is not clipped).
    value_clip = None

    def compute_loss(self, batch, fused=True):
        """Return (loss, info dict of floats) for one mini-batch.

        Parameters
        ----------
        batch : dict of tensors
            OBS, ACT, LOGP, ADV, RET of the mini-batch. A sequence mini-batch (recurrent
            actors) also holds RHS, the state (B, ...) before its first step; its OBS and
            DONE are then (T, B, ...) and the other entries (T * B, ...), time first.
        fused : bool
            Use the one-node fused loss for categorical policies (same values and
            gradients, fewer operators); False always takes the reference autograd path.
        """
        adv = batch[ADV]
        if self.normalize_advantages and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        if fused and self.fused_loss_applies() and type(self.actor.dist) is CategoricalHead:
            logits, value = self.actor.logits_and_value(batch[OBS], **sequence_args(batch))
            loss, info = categorical_actor_critic_loss(
                logits, value, batch[ACT], batch[LOGP], adv, batch[RET], self.fused_clip,
                self.value_loss_coef, self.entropy_coef, batch.get(VAL), self.value_clip)
        else:
            loss, info = self._reference_loss(batch, adv)
        # One conversion for all the reported scalars instead of one per scalar.
        return loss, dict(zip(info, torch.stack(list(info.values())).tolist()))

    def _reference_loss(self, batch, adv):
        logp, entropy, value = self.actor.evaluate_actions(batch[OBS], batch[ACT],
                                                           entropy_grad=self.entropy_coef != 0.0,
                                                           **sequence_args(batch))
        pi_loss, info = self.policy_loss(logp, batch[LOGP], adv)
        if self.value_clip is None:
            value_loss = 0.5 * (batch[RET] - value).pow(2).mean()
        else:
            clipped = batch[VAL] + (value - batch[VAL]).clamp(-self.value_clip, self.value_clip)
            value_loss = 0.5 * torch.max((value - batch[RET]).pow(2), (clipped - batch[RET]).pow(2)).mean()
        entropy = entropy.mean()
        loss = pi_loss + self.value_loss_coef * value_loss - self.entropy_coef * entropy
        info = {"PolicyLoss": pi_loss.detach(), "ValueLoss": value_loss.detach(), "Entropy": entropy.detach(),
                "Loss": loss.detach(), **{k: v.detach() for k, v in info.items()}}
        return loss, info
