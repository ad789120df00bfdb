"""Shared machinery of the actor-critic on-policy algorithms (PPO, A2C)."""

import torch

from pytorchrl import ACT, ADV, LOGP, OBS, RET
from pytorchrl.agent.actors.distributions import CategoricalHead
from pytorchrl.agent.algorithms.base import Algorithm
from pytorchrl.agent.algorithms.fused_loss import categorical_actor_critic_loss
from pytorchrl.agent.algorithms.numpy_update import NumpyActorCriticUpdate, NumpyAdam, limit_blas_threads


def make_adam(params, lr, eps):
    """Adam with the fastest implementation available: the fused kernel (one operator for
    all parameters: 3x faster than foreach on small CPU networks), else foreach."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(params, lr=lr, eps=eps, foreach=True)


class OnPolicyAlgorithm(Algorithm):
    """Actor-critic algorithm trained on advantage-weighted log-probabilities.

    Subclasses define ``policy_loss``; this class adds the value and entropy terms, builds
    the optimizer and exposes the hyperparameters every on-policy algorithm shares.

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
        self._numpy_engine = None   # built on first use; False: not supported
        self.check_hyperparameters()

    def make_optimizer(self):
        if self.numpy_update_engine is not None:
            return NumpyAdam(self.actor.parameters(), self, eps=self.eps)
        return make_adam(self.actor.parameters(), lr=self.lr, eps=self.eps)

    @property
    def numpy_update_engine(self):
        if self._numpy_engine is None:
            engine = NumpyActorCriticUpdate.build(self) if self.numpy_update else None
            if engine is not None:
                limit_blas_threads()
            self._numpy_engine = engine or False
        return self._numpy_engine or None

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

    #: Clipping range handed to the fused categorical loss (None: A2C's unclipped loss).
    fused_clip = None
    #: Whether the policy loss has a fused form (``fused_loss.categorical_actor_critic_loss``).
    has_fused_loss = False

    def compute_loss(self, batch, fused=True):
        """Return (loss, info dict of floats) for one mini-batch.

        Parameters
        ----------
        batch : dict of tensors
            OBS, ACT, LOGP, ADV, RET of the mini-batch.
        fused : bool
            Use the one-node fused loss for categorical policies (same values and
            gradients, fewer operators); False always takes the reference autograd path.
        """
        adv = batch[ADV]
        if self.normalize_advantages and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        if fused and self.has_fused_loss and isinstance(self.actor.dist, CategoricalHead):
            logits, value = self.actor.logits_and_value(batch[OBS])
            loss, info = categorical_actor_critic_loss(
                logits, value, batch[ACT], batch[LOGP], adv, batch[RET], self.fused_clip,
                self.value_loss_coef, self.entropy_coef)
        else:
            loss, info = self._reference_loss(batch, adv)
        # One conversion for all the reported scalars instead of one per scalar.
        return loss, dict(zip(info, torch.stack(list(info.values())).tolist()))

    def _reference_loss(self, batch, adv):
        logp, entropy, value = self.actor.evaluate_actions(batch[OBS], batch[ACT],
                                                           entropy_grad=self.entropy_coef != 0.0)
        pi_loss, info = self.policy_loss(logp, batch[LOGP], adv)
        value_loss = 0.5 * (batch[RET] - value).pow(2).mean()
        entropy = entropy.mean()
        loss = pi_loss + self.value_loss_coef * value_loss - self.entropy_coef * entropy
        info = {"PolicyLoss": pi_loss.detach(), "ValueLoss": value_loss.detach(), "Entropy": entropy.detach(),
                "Loss": loss.detach(), **{k: v.detach() for k, v in info.items()}}
        return loss, info
