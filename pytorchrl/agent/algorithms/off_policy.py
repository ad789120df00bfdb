"""What every replay-based algorithm shares: the replay schedule, target networks, warm-up."""

import copy

import torch

from pytorchrl import ACT, DISCOUNT, OBS, OBS2, REW, TD_ERROR, WEIGHT
from pytorchrl.agent import accel
from pytorchrl.agent.accel.private_torch import foreach_copy_, foreach_lerp_
from pytorchrl.agent.actors.off_policy_actor import OffPolicyActor
from pytorchrl.agent.algorithms.base import Algorithm


def numpy_update(build, reproduces, actor_reproduces):
    """The numpy update an off-policy algorithm declares (``accel.accelerated``).

    Parameters
    ----------
    build : callable
        ``build(algo) -> (engine, reason)`` (``accel.off_policy``).
    reproduces : tuple of str
        The algorithm's methods the update computes.
    actor_reproduces : tuple of str
        ``OffPolicyActor``'s methods it computes.
    """
    return accel.Accelerator("update", "numpy update", build,
                             ("compute_loss", "loss_tensors", "host_stats", "unpack_batch", "report_td_errors")
                             + tuple(reproduces),
                             actor_class=OffPolicyActor,
                             actor_reproduces=("_obs_features", "normalize") + tuple(actor_reproduces),
                             fallback="updating in torch")


def set_replay_schedule(algo, gamma, num_updates, update_every, start_steps, mini_batch_size, test_every,
                        num_test_episodes):
    """Give ``algo`` the hyperparameters a replay storage reads (``gamma``, ``num_updates``,
    ``update_every``, ``start_steps``, ``mini_batch_size``) and the evaluation's (see
    ``OffPolicyAlgorithm``), converted to their types."""
    algo.gamma = float(gamma)
    algo.num_updates = int(num_updates)
    algo.update_every = int(update_every)
    algo.start_steps = int(start_steps)
    algo.mini_batch_size = int(mini_batch_size)
    algo.test_every = int(test_every)
    algo.num_test_episodes = int(num_test_episodes)


def check_replay_schedule(algo, at_least_one=()):
    """Raise ValueError unless the hyperparameters of ``set_replay_schedule`` (and those
    named in ``at_least_one``) are in range on ``algo``."""
    for name in ("num_updates", "update_every", "mini_batch_size", "test_every", "num_test_episodes") + at_least_one:
        if getattr(algo, name) < 1:
            raise ValueError(f"{algo.name} hyperparameter {name} must be >= 1, got {getattr(algo, name)}")
    if algo.start_steps < 0:
        raise ValueError(f"{algo.name} hyperparameter start_steps must be >= 0, got {algo.start_steps}")
    if not 0.0 <= algo.gamma <= 1.0:
        raise ValueError(f"{algo.name} hyperparameter gamma must be in [0, 1], got {algo.gamma}")


class OffPolicyAlgorithm(Algorithm):
    """Base of the algorithms that learn from a replay storage (DDQN, DDPG, TD3, SAC).

    The replay storage reads ``update_every``, ``num_updates``, ``start_steps`` and
    ``mini_batch_size`` from here; this class keeps a target copy of the actor (moved
    towards the actor by polyak averaging every ``target_update_interval`` updates) and
    switches the actor's uniform-random warm-up off at the first update. Collectors store
    nothing but the transition itself (no ``acting_extras``); targets are bootstrapped at
    training time from ``OBS2`` with the storage's ``DISCOUNT``.

    Parameters
    ----------
    device, actor, envs
        As in ``Algorithm``.
    gamma : float
        Discount factor.
    polyak : float
        Target networks move as ``target = polyak * target + (1 - polyak) * online``
        (0: hard copies).
    num_updates : int
        Mini-batches (gradient steps) per ``update_every`` transitions collected.
    update_every : int
        Environment steps (transitions) between two stages of ``num_updates`` updates.
    start_steps : int
        Transitions collected with uniformly random actions before learning starts.
    mini_batch_size : int
        Transitions per mini-batch.
    target_update_interval : int
        Updates between two target-network updates.
    max_grad_norm : float or None
        Gradients of each network are clipped to this global norm (None: no clipping).
    test_every : int
        Evaluate deterministically on the test envs every this many collection rounds.
    num_test_episodes : int
        Episodes per evaluation.
    numpy_update : bool
        Compute the updates of actors built from the default MLP (DDQN, SAC with Box
        actions, DDPG, TD3) on the CPU in numpy: same arithmetic as torch, several times
        faster for these networks; other networks, losses and devices always use torch.
        Fixed at construction.
    """

    on_policy = False
    acting_extras = ()
    fixed_hyperparameters = ("numpy_update",)
    derived_attributes = Algorithm.derived_attributes + ("_target_tensors",)

    def __init__(self, device, actor, envs=None, gamma=0.99, polyak=0.995, num_updates=1, update_every=1,
                 start_steps=1000, mini_batch_size=256, target_update_interval=1, max_grad_norm=None,
                 test_every=10, num_test_episodes=5, numpy_update=True):
        super().__init__(device, actor, envs)
        self.numpy_update = bool(numpy_update)
        set_replay_schedule(self, gamma, num_updates, update_every, start_steps, mini_batch_size, test_every,
                            num_test_episodes)
        self.polyak = float(polyak)
        self.target_update_interval = int(target_update_interval)
        self.max_grad_norm = None if max_grad_norm is None else float(max_grad_norm)
        self.target = copy.deepcopy(actor)
        for p in self.target.parameters():
            p.requires_grad_(False)
        if actor.obs_norm is not None:
            # Bootstrapped values must read observations as the online networks do: the
            # target normalises with the actor's (running) statistics, not a frozen copy.
            self.target.obs_norm = actor.obs_norm
        self.actor.warmup.fill_(1.0 if self.start_steps > 0 else 0.0)

    @property
    def learner_modules(self):
        return {"target": self.target}

    def check_hyperparameters(self):
        check_replay_schedule(self, ("target_update_interval",))
        if not 0.0 <= self.polyak <= 1.0:
            raise ValueError(f"{self.name} hyperparameter polyak must be in [0, 1], got {self.polyak}")

    # --------------------------------------------------------------- updates
    def after_update(self):
        self.actor.warmup.fill_(0.0)
        if self.updates_applied % self.target_update_interval == 0:
            self.update_targets()

    def target_pairs(self):
        """(online modules, target modules) moved together by ``update_targets``."""
        return [(self.actor, self.target)]

    @torch.no_grad()
    def update_targets(self):
        """target <- polyak * target + (1 - polyak) * online, for every pair of ``target_pairs``."""
        pairs = self.__dict__.get("_target_tensors")
        if pairs is None:  # listed once: SAC and TD3 update their targets after every update
            pairs = self._target_tensors = [([p.detach() for p in online.parameters()], list(target.parameters()))
                                            for online, target in self.target_pairs()]
        for src, dst in pairs:
            if self.polyak == 0.0:
                foreach_copy_(dst, src)
            else:
                foreach_lerp_(dst, src, 1.0 - self.polyak)

    # ----------------------------------------------------------------- batches
    @staticmethod
    def unpack_batch(batch):
        """(obs, act, rew, obs2, discount, weights or None) of a replay mini-batch."""
        return batch[OBS], batch[ACT], batch[REW], batch[OBS2], batch[DISCOUNT], batch.get(WEIGHT)

    @staticmethod
    def report_td_errors(info, td, weights):
        """Add per-sample |TD errors| to ``info`` for a prioritized replay, as a tensor (N,)
        (``compute_loss`` reads it back with the other metrics; the storage takes it out
        before the info leaves the gradient worker)."""
        if weights is not None:
            info[TD_ERROR] = td.detach().abs().reshape(-1)
