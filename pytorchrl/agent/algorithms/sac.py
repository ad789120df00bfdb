"""Soft Actor-Critic (Haarnoja et al., 2018) with automatic entropy tuning; Box or Discrete actions."""

import math

import torch
import torch.nn as nn

from pytorchrl.agent.accel import accelerated
from pytorchrl.agent.losses import q_learning, sac
from pytorchrl.agent.accel.off_policy import NumpySACUpdate
from pytorchrl.agent.accel.xp import TORCH
from pytorchrl.agent.algorithms.off_policy import OffPolicyAlgorithm, numpy_update


class _LogAlpha(nn.Module):
    """The entropy coefficient's logarithm as a module (saved and sent with the learner's weights)."""

    def __init__(self, value):
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor(float(value)))


@accelerated(numpy_update(NumpySACUpdate.build, (), ("q_values", "q_head", "policy_output", "sample_policy")))
class SAC(OffPolicyAlgorithm):
    """Soft Actor-Critic: a stochastic policy trained against the minimum of ``num_critics``
    critics, with an entropy bonus whose weight alpha is tuned so that the policy's entropy
    stays near ``target_entropy``.

    Three optimizers: the critics (``lr_q``), the policy (``lr_pi``) and alpha
    (``lr_alpha``); each loss trains its own networks only. With Discrete actions the
    expectations over the policy are computed exactly (Christodoulou, 2019).

    Parameters
    ----------
    device, actor, envs
        As in ``Algorithm`` (``actor``: an ``OffPolicyActor`` built for "SAC").
    lr_q : float
        Learning rate of the critics.
    lr_pi : float
        Learning rate of the policy.
    lr_alpha : float
        Learning rate of log(alpha).
    gamma, polyak, num_updates, update_every, start_steps, mini_batch_size,
    target_update_interval, max_grad_norm, test_every, num_test_episodes, numpy_update
        As in ``OffPolicyAlgorithm``.
    initial_alpha : float
        Entropy coefficient at the start.
    target_entropy : float or None
        Entropy the tuning aims at; None: -dim(A) for Box actions, 0.98 log(n) for n
        discrete actions.
    eps : float
        Adam's epsilon (of the three optimizers).

    The defaults are those of pytorchrl's ``SAC.create_factory`` (learning rates 1e-4, 50
    updates of 64 transitions every 50 env steps, ``max_grad_norm`` 0.5, ``test_every``
    5000; docs/agents.md lists them).
    """

    name = "SAC"
    group_lr = {"q": "lr_q", "pi": "lr_pi", "alpha": "lr_alpha"}

    def __init__(self, device, actor, envs=None, lr_q=1e-4, lr_pi=1e-4, lr_alpha=1e-4, gamma=0.99, polyak=0.995,
                 num_updates=50, update_every=50, start_steps=1000, mini_batch_size=64, target_update_interval=1,
                 max_grad_norm=0.5, test_every=5000, num_test_episodes=5, initial_alpha=1.0, target_entropy=None,
                 numpy_update=True, eps=1e-8):
        super().__init__(device, actor, envs, gamma=gamma, polyak=polyak, num_updates=num_updates,
                         update_every=update_every, start_steps=start_steps, mini_batch_size=mini_batch_size,
                         target_update_interval=target_update_interval, max_grad_norm=max_grad_norm,
                         test_every=test_every, num_test_episodes=num_test_episodes, numpy_update=numpy_update)
        if getattr(actor, "policy_kind", None) != "stochastic":
            raise ValueError("SAC needs an OffPolicyActor built for 'SAC'")
        self.lr_q, self.lr_pi, self.lr_alpha = float(lr_q), float(lr_pi), float(lr_alpha)
        self.eps = float(eps)
        self.initial_alpha = float(initial_alpha)
        if target_entropy is None:
            target_entropy = 0.98 * math.log(actor.num_actions) if actor.discrete else -float(actor.act_dim)
        self.target_entropy = float(target_entropy)
        self.check_hyperparameters()
        if self.initial_alpha <= 0:
            raise ValueError(f"SAC hyperparameter initial_alpha must be > 0, got {initial_alpha}")
        self.alpha_module = _LogAlpha(math.log(self.initial_alpha)).to(self.device)

    @property
    def learner_modules(self):
        return {"target": self.target, "alpha": self.alpha_module}

    def parameter_groups(self):
        a = self.actor
        critics = list(a.critic_obs_net.parameters()) if a.critic_obs_net is not None else []
        critics += list(a.critics.parameters())
        if a.critic_act_net is not None:
            critics += list(a.critic_act_net.parameters())
        policy = list(a.policy_obs_net.parameters()) if a.policy_obs_net is not None else []
        policy += list(a.policy_net.parameters())
        if a.sde_head is not None:
            policy += list(a.sde_head.parameters())
        return {"q": critics, "pi": policy, "alpha": [self.alpha_module.log_alpha]}

    def target_pairs(self):
        pairs = [(self.actor.critics, self.target.critics)]
        for name in ("critic_obs_net", "critic_act_net"):
            if getattr(self.actor, name) is not None:
                pairs.append((getattr(self.actor, name), getattr(self.target, name)))
        return pairs

    def check_hyperparameters(self):
        super().check_hyperparameters()
        for name in ("lr_q", "lr_pi", "lr_alpha"):
            if getattr(self, name) < 0:
                raise ValueError(f"SAC hyperparameter {name} must be >= 0, got {getattr(self, name)}")

    @property
    def alpha(self):
        """Current entropy coefficient."""
        return float(self.alpha_module.log_alpha.detach().exp())

    def loss_tensors(self, batch):
        obs, act, rew, obs2, discount, weights = self.unpack_batch(batch)
        actor, target = self.actor, self.target
        log_alpha = self.alpha_module.log_alpha
        alpha = log_alpha.detach().exp()
        if actor.discrete:
            with torch.no_grad():
                _, logp2, p2 = actor.sample_policy(obs2)
                y = sac.soft_target(rew, discount, target.q_values(obs2).min(0).values, logp2, alpha, probs_next=p2)
            q_all = actor.q_values(obs)
            q = q_all.gather(2, act.long().unsqueeze(0).expand(q_all.shape[0], -1, -1))
            _, logp, p = actor.sample_policy(obs)
            pi_loss, alpha_loss, entropy = sac.discrete_policy_and_alpha_losses(
                TORCH, q_all, logp, p, log_alpha, alpha, self.target_entropy)
        else:
            a = actor.scaler.from_env(act)
            # gSDE: one exploration matrix for the whole update, as Stable-Baselines3 draws
            # one per gradient step (the actor's acting draws are left to its collectors).
            noise = {"sde_eps": actor.sample_sde_eps()} if actor.use_sde else {}
            with torch.no_grad():
                a2, logp2, _ = actor.sample_policy(obs2, **noise)
                y = sac.soft_target(rew, discount, target.q_values(obs2, a2).min(0).values, logp2, alpha)
            q = actor.q_values(obs, a)
            a_pi, logp_pi, _ = actor.sample_policy(obs, **noise)
            pi_loss, alpha_loss, entropy, _ = sac.policy_and_alpha_losses(
                TORCH, actor.q_values(obs, a_pi), logp_pi, log_alpha, alpha, self.target_entropy, grad=False)
        q_loss, td, _ = q_learning.critic_loss(TORCH, q, y, weights, scale=0.5, grad=False)
        info = {"LossQ": q_loss.detach(), "LossPi": pi_loss.detach(), "LossAlpha": alpha_loss.detach(),
                "Alpha": alpha, "QMean": q.detach().mean(), "Entropy": entropy.mean()}
        self.report_td_errors(info, td.detach().abs().mean(0), weights)
        return {"q": q_loss, "pi": pi_loss, "alpha": alpha_loss}, info


__all__ = ["SAC"]
