"""Double DQN (van Hasselt et al., 2016): Q-learning with a target network and double-Q targets."""

import torch
import torch.nn.functional as F

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
    """

    name = "DDQN"
    numpy_engine = NumpyDDQNUpdate

    def __init__(self, device, actor, envs=None, lr=1e-4, eps=1e-8, gamma=0.99, polyak=0.995, num_updates=50,
                 update_every=50, start_steps=20000, mini_batch_size=64, target_update_interval=1,
                 max_grad_norm=None, test_every=10, num_test_episodes=5, initial_epsilon=1.0, epsilon_decay=0.999,
                 min_epsilon=0.05, loss="mse", numpy_update=True):
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

    def compute_loss(self, batch):
        obs, act, rew, obs2, discount, weights = self.unpack_batch(batch)
        q = self.actor.q_values(obs)[0].gather(1, act.long())
        with torch.no_grad():
            next_act = self.actor.q_values(obs2)[0].argmax(1, keepdim=True)
            target = rew + discount * self.target.q_values(obs2)[0].gather(1, next_act)
        td = q - target
        if self.loss == "huber":
            per_sample = F.smooth_l1_loss(q, target, reduction="none")
        else:
            per_sample = td.pow(2)
        loss = self.weighted_mean(per_sample, weights)
        info = {"Loss": float(loss.detach()), "QMean": float(q.detach().mean()), "Epsilon": self.epsilon}
        self.report_td_errors(info, td, weights)
        return loss, info
