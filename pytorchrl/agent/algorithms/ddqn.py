"""Double DQN (van Hasselt et al., 2016): Q-learning with a target network and double-Q
targets (or DQN's max targets, ``double_q=False``)."""

import torch

from pytorchrl import ACT, BOOTSTRAP_STEP, DISCOUNT, DONE, OBS, OBS2, REW, RHS, TARGET, WEIGHT
from pytorchrl.agent.accel import accelerated
from pytorchrl.agent.losses import q_learning
from pytorchrl.agent.accel.off_policy import NumpyDDQNUpdate
from pytorchrl.agent.accel.xp import TORCH
from pytorchrl.agent.algorithms.off_policy import OffPolicyAlgorithm, numpy_update

LOSSES = ("mse", "huber")


@accelerated(numpy_update(NumpyDDQNUpdate.build, ("bellman_targets", "next_values", "stored_targets", "td_loss"),
                          ("q_values", "q_head")))
class DDQN(OffPolicyAlgorithm):
    """Deep Q-learning with double-Q targets.

    The target of a transition is ``r + discount * Q_target(s', argmax_a Q(s', a))``: the
    online network picks the next action, the target network values it (with
    ``double_q=False``, DQN's ``r + discount * max_a Q_target(s', a)``). Acting is
    epsilon-greedy; epsilon starts at ``initial_epsilon`` and is multiplied by
    ``epsilon_decay`` after every update, down to ``min_epsilon`` (it travels to the
    collectors with the Q-network's weights). A linear schedule over environment steps is
    a schedule of ``initial_epsilon`` with ``epsilon_decay: 1.0``.

    With a recurrent actor (R2D2-style, ``RecurrentReplayBuffer``) a mini-batch is
    sequences: the Q-network's memory is re-run from the state stored at each sequence's
    start, the burn-in steps without gradient, and the loss covers the training steps
    after them; their double-Q targets (n-step when the storage is) read both networks'
    memories unrolled over the same sequence (``sequence_loss``).

    Parameters
    ----------
    device, actor, envs
        As in ``Algorithm`` (``actor``: an ``OffPolicyActor`` built for "DDQN").
    lr : float
        Learning rate of the Adam optimizer.
    eps : float
        Adam's epsilon.
    gamma, polyak, num_updates, update_every, start_steps, mini_batch_size,
    target_update_interval, max_grad_norm, test_every, num_test_episodes, numpy_update
        As in ``OffPolicyAlgorithm``.
    initial_epsilon : float
        Probability of a random action at the start.
    epsilon_decay : float
        Factor applied to epsilon after every update.
    min_epsilon : float
        Lowest epsilon.
    loss : str
        "mse" (squared TD error) or "huber" (smooth L1, as Stable-Baselines3's DQN).
    targets_on_collector : bool
        Collector-side pre-processing (EXARL's ASYNC workflow): each collector computes the
        Bellman targets of its rollout with the weights it acted with, the Q-network's and
        the target network's (which then travels to the collectors with every weight
        broadcast), and sends them with the transitions (``prl.TARGET``); the learner fits
        Q(s, a) to the stored targets and computes none. A transition's target is
        therefore as old as the weights that collected it. False (default): targets are
        computed on the learner at every update. Fixed at construction.
    double_q : bool
        Double-Q targets (true: the online network picks the next action) or DQN's targets
        (false: the target network's maximum, as Stable-Baselines3's DQN; they overestimate
        more, and an update skips the online network's pass over the next observations).

    The defaults are those of pytorchrl's ``DDQN.create_factory`` (``lr`` 1e-4, 50 updates
    of 64 transitions every 50 env steps after 20,000 random ones, ``max_grad_norm`` 0.5,
    ``test_every`` 5000; docs/agents.md lists them).
    """

    name = "DDQN"
    fixed_hyperparameters = OffPolicyAlgorithm.fixed_hyperparameters + ("targets_on_collector",)
    # The actor holds the exploration rate it acts with: a hot-swap of its schedule reaches it.
    hyperparameter_effects = OffPolicyAlgorithm.hyperparameter_effects + ("_set_epsilon",)

    @property
    def collector_modules(self):
        return ("target",) if self.targets_on_collector else ()

    @property
    def preprocessed_keys(self):
        return (TARGET,) if self.targets_on_collector else ()

    def __init__(self, device, actor, envs=None, lr=1e-4, eps=1e-8, gamma=0.99, polyak=0.995, num_updates=50,
                 update_every=50, start_steps=20000, mini_batch_size=64, target_update_interval=1,
                 max_grad_norm=0.5, test_every=5000, num_test_episodes=5, initial_epsilon=1.0, epsilon_decay=0.999,
                 min_epsilon=0.05, loss="mse", numpy_update=True, targets_on_collector=False, double_q=True):
        super().__init__(device, actor, envs, gamma=gamma, polyak=polyak, num_updates=num_updates,
                         update_every=update_every, start_steps=start_steps, mini_batch_size=mini_batch_size,
                         target_update_interval=target_update_interval, max_grad_norm=max_grad_norm,
                         test_every=test_every, num_test_episodes=num_test_episodes, numpy_update=numpy_update)
        if getattr(actor, "policy_kind", "x") is not None or not getattr(actor, "discrete", False):
            raise ValueError("DDQN needs an OffPolicyActor built for 'DDQN' (a Q-network over Discrete actions)")
        self.lr = float(lr)
        self.eps = float(eps)
        self.initial_epsilon = float(initial_epsilon)
        self.epsilon_decay = float(epsilon_decay)
        self.min_epsilon = float(min_epsilon)
        self.loss = loss
        if not isinstance(targets_on_collector, bool):
            raise TypeError(f"DDQN hyperparameter targets_on_collector must be true or false, "
                            f"got {targets_on_collector!r}")
        self.targets_on_collector = targets_on_collector
        self.double_q = double_q
        if targets_on_collector and actor.is_recurrent:
            raise ValueError("DDQN(targets_on_collector=True) computes targets of single transitions; a recurrent "
                             "actor trains on sequences (set targets_on_collector to false)")
        self.check_hyperparameters()
        self._set_epsilon()

    def _q_network(self, actor):
        """The modules of ``actor`` that compute Q-values (observation features, memory, MLP)."""
        return [m for m in (actor.critic_obs_net, actor.memory, actor.critics) if m is not None]

    def parameter_groups(self):
        return {"actor": [p for m in self._q_network(self.actor) for p in m.parameters()]}

    def target_pairs(self):
        return list(zip(self._q_network(self.actor), self._q_network(self.target)))

    def check_hyperparameters(self):
        super().check_hyperparameters()
        for name in ("initial_epsilon", "min_epsilon", "epsilon_decay"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"DDQN hyperparameter {name} must be in [0, 1], got {getattr(self, name)}")
        if self.loss not in LOSSES:
            raise ValueError(f"DDQN hyperparameter loss must be one of {LOSSES}, got {self.loss!r}")
        if not isinstance(self.double_q, bool):
            raise TypeError(f"DDQN hyperparameter double_q must be true or false, got {self.double_q!r}")
        if self.lr < 0:
            raise ValueError(f"DDQN hyperparameter lr must be >= 0, got {self.lr}")

    @property
    def epsilon(self):
        """Current probability of a random action."""
        return max(self.min_epsilon, self.initial_epsilon * self.epsilon_decay ** self.updates_applied)

    def _set_epsilon(self):
        self.actor.epsilon.fill_(self.epsilon)

    def after_update(self):
        super().after_update()
        self._set_epsilon()

    @torch.no_grad()
    def bellman_targets(self, rew, obs2, discount):
        """Targets (B, 1) of tensors on this algorithm's device (``discount``: gamma^n, 0
        after termination): double-Q ``rew + discount * Q_target(obs2, argmax_a Q(obs2, a))``,
        or ``rew + discount * max_a Q_target(obs2, a)`` without ``double_q``."""
        return q_learning.bellman_target(rew, discount, self.next_values(self.target.q_values(obs2)[0],
                                                                         lambda: self.actor.q_values(obs2)[0]))

    def next_values(self, q_target, q_online):
        """Value (N, 1) of the next observations from the target network's Q-values
        ``q_target`` (N, actions): at the online network's greedy actions (``q_online``, a
        callable returning its Q-values, called only for double-Q targets), or the maximum."""
        return q_learning.next_values(TORCH, q_target, q_online() if self.double_q else None)

    def preprocess_rollout(self, data):
        """With ``targets_on_collector``: add the rollout's Bellman targets (``prl.TARGET``,
        (M, 1) float32 on the rollout's device), computed with this collector's weights."""
        if not self.targets_on_collector:
            return data
        rew = data[REW]
        dev = self.device
        target = self.bellman_targets(rew.to(dev), data[OBS2].to(dev), data[DISCOUNT].to(dev))
        data[TARGET] = target.to(rew.device)
        return data

    def stored_targets(self, batch):
        """The collector's targets of a mini-batch (``targets_on_collector``), refusing a
        batch without them: they would otherwise be recomputed silently."""
        target = batch.get(TARGET)
        if target is None:
            raise KeyError(f"DDQN(targets_on_collector=True) needs the collectors' targets in every mini-batch "
                           f"(key {TARGET!r}); this batch has {sorted(batch)}: its storage does not keep them")
        return target

    def host_stats(self):
        """The exploration rate of the update (``Epsilon``)."""
        return {"Epsilon": self.epsilon}

    def loss_tensors(self, batch):
        if RHS in batch:
            return self.sequence_loss(batch)
        obs, act, rew, obs2, discount, weights = self.unpack_batch(batch)
        q = self.actor.q_values(obs)[0].gather(1, act.long())
        if self.targets_on_collector:
            target = self.stored_targets(batch)
        else:
            target = self.bellman_targets(rew, obs2, discount)
        loss, info, td = self.td_loss(q, target, weights)
        self.report_td_errors(info, td, weights)
        return loss, info

    def td_loss(self, q, target, weights):
        """``(loss, info, td)``: the (importance-weighted) mean squared or Huber error of the
        Q-values ``q`` against ``target`` (same shapes, ``weights`` (B, 1) broadcast over
        the other dimensions), its statistics (0-d tensors) and the TD errors ``q - target``."""
        loss, td, _ = q_learning.td_loss(TORCH, q, target, weights, self.loss, grad=False)
        return loss, {"Loss": loss.detach(), "QMean": q.detach().mean()}, td

    # ------------------------------------------------------------ sequences
    def sequence_loss(self, batch):
        """Loss and info tensors of a mini-batch of sequences (recurrent actor,
        ``RecurrentReplayBuffer``), as ``loss_tensors``.

        ``batch``: ``OBS``, ``OBS2`` (S, B, *obs_shape) and ``DONE`` (S, B, 1), time first;
        ``RHS`` (B, state size), the state stored at each sequence's start; ``ACT``,
        ``REW``, ``DISCOUNT`` (T, B, 1) and ``BOOTSTRAP_STEP`` (T, B) of the last T steps
        (the training steps; the first S - T are the burn-in). The TD errors reported for
        prioritized replay are (B * T,), sequence after sequence.
        """
        obs, done, rhs = batch[OBS], batch[DONE], batch[RHS]
        act, weights = batch[ACT], batch.get(WEIGHT)
        T, B = act.shape[:2]
        burn_in = obs.shape[0] - T
        out, states = self.actor.memory_unroll(obs, rhs, done, burn_in)
        q = self.actor.q_head(out.reshape(T * B, -1))[0].gather(1, act.reshape(T * B, 1).long()).reshape(T, B, 1)
        loss, info, td = self.td_loss(q, self.sequence_targets(batch, states.detach()), weights)
        self.report_td_errors(info, td.transpose(0, 1), weights)
        return loss, info

    @torch.no_grad()
    def sequence_targets(self, batch, states):
        """Targets (T, B, 1) of the training steps of a sequence mini-batch.

        Step t's target is ``REW[t] + DISCOUNT[t] * Q_target(s', argmax_a Q(s', a))`` (with
        ``double_q``; else ``max_a Q_target(s', a)``) where
        s' is ``OBS2`` of the step ``BOOTSTRAP_STEP[t]`` = e (the last of its n-step window,
        never past an episode end) and each network reads s' from its own memory's state
        after step e: ``states`` (T, B, state size) for the online network (after each
        training step), the target network's from its own unroll (with the same burn-in).
        """
        obs, obs2, done, rhs = batch[OBS], batch[OBS2], batch[DONE], batch[RHS]
        boot = batch[BOOTSTRAP_STEP].long()
        T, B = boot.shape
        burn_in = obs.shape[0] - T
        cols = torch.arange(B, device=boot.device).expand(T, B)
        next_obs = obs2[boot, cols].reshape(T * B, *obs2.shape[2:])
        pos = boot - burn_in
        _, target_states = self.target.memory_unroll(obs, rhs, done, burn_in)
        q_target = self.target.memory_step(next_obs, target_states[pos, cols].reshape(T * B, -1))[0][0]
        values = self.next_values(
            q_target, lambda: self.actor.memory_step(next_obs, states[pos, cols].reshape(T * B, -1))[0][0])
        return q_learning.bellman_target(batch[REW], batch[DISCOUNT], values.reshape(T, B, 1))
