"""Double DQN (van Hasselt et al., 2016): Q-learning with a target network and double-Q targets."""

import torch
import torch.nn.functional as F

from pytorchrl import DISCOUNT, OBS2, REW, TARGET
from pytorchrl.agent.algorithms.off_policy import OffPolicyAlgorithm
from pytorchrl.agent.numpy_offpolicy import NumpyDDQNUpdate

LOSSES = ("mse", "huber")


class DDQN(OffPolicyAlgorithm):
    """Deep Q-learning with double-Q targets.

    The target of a transition is ``r + discount * Q_target(s', argmax_a Q(s', a))``: the
    online network picks the next action, the target network values it. Acting is
    epsilon-greedy; epsilon starts at ``initial_epsilon`` and is multiplied by
    ``epsilon_decay`` after every update, down to ``min_epsilon`` (it travels to the
    collectors with the Q-network's weights). A linear schedule over environment steps is
    a schedule of ``initial_epsilon`` with ``epsilon_decay: 1.0``.

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
    """

    name = "DDQN"
    numpy_engine = NumpyDDQNUpdate
    fixed_hyperparameters = OffPolicyAlgorithm.fixed_hyperparameters + ("targets_on_collector",)

    @property
    def collector_modules(self):
        return ("target",) if self.targets_on_collector else ()

    @property
    def preprocessed_keys(self):
        return (TARGET,) if self.targets_on_collector else ()

    def __init__(self, device, actor, envs=None, lr=1e-4, eps=1e-8, gamma=0.99, polyak=0.995, num_updates=50,
                 update_every=50, start_steps=20000, mini_batch_size=64, target_update_interval=1,
                 max_grad_norm=None, test_every=10, num_test_episodes=5, initial_epsilon=1.0, epsilon_decay=0.999,
                 min_epsilon=0.05, loss="mse", numpy_update=True, targets_on_collector=False):
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
        self.check_hyperparameters()
        self._set_epsilon()

    def parameter_groups(self):
        return {"actor": list(self.actor.critic_obs_net.parameters() if self.actor.critic_obs_net else [])
                + list(self.actor.critics.parameters())}

    def target_pairs(self):
        pairs = [(self.actor.critics, self.target.critics)]
        if self.actor.critic_obs_net is not None:
            pairs.append((self.actor.critic_obs_net, self.target.critic_obs_net))
        return pairs

    def check_hyperparameters(self):
        super().check_hyperparameters()
        for name in ("initial_epsilon", "min_epsilon", "epsilon_decay"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"DDQN hyperparameter {name} must be in [0, 1], got {getattr(self, name)}")
        if self.loss not in LOSSES:
            raise ValueError(f"DDQN hyperparameter loss must be one of {LOSSES}, got {self.loss!r}")
        if self.lr < 0:
            raise ValueError(f"DDQN hyperparameter lr must be >= 0, got {self.lr}")

    @property
    def epsilon(self):
        """Current probability of a random action."""
        return max(self.min_epsilon, self.initial_epsilon * self.epsilon_decay ** self.updates_applied)

    def _set_epsilon(self):
        self.actor.epsilon.fill_(self.epsilon)

    def update_algorithm_parameter(self, parameter_name, new_parameter_value):
        super().update_algorithm_parameter(parameter_name, new_parameter_value)
        self._set_epsilon()

    def after_update(self):
        super().after_update()
        self._set_epsilon()

    @torch.no_grad()
    def bellman_targets(self, rew, obs2, discount):
        """Double-Q targets ``rew + discount * Q_target(obs2, argmax_a Q(obs2, a))`` (B, 1) of
        tensors on this algorithm's device (``discount``: gamma^n, 0 after termination)."""
        next_act = self.actor.q_values(obs2)[0].argmax(1, keepdim=True)
        return rew + discount * self.target.q_values(obs2)[0].gather(1, next_act)

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

    def compute_loss(self, batch):
        obs, act, rew, obs2, discount, weights = self.unpack_batch(batch)
        q = self.actor.q_values(obs)[0].gather(1, act.long())
        if self.targets_on_collector:
            target = self.stored_targets(batch)
        else:
            target = self.bellman_targets(rew, obs2, discount)
        td = q - target
        if self.loss == "huber":
            per_sample = F.smooth_l1_loss(q, target, reduction="none")
        else:
            per_sample = td.pow(2)
        loss = self.weighted_mean(per_sample, weights)
        info = {"Loss": float(loss.detach()), "QMean": float(q.detach().mean()), "Epsilon": self.epsilon}
        self.report_td_errors(info, td, weights)
        return loss, info
