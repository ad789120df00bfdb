"""Deterministic policy gradients: DDPG (Lillicrap et al., 2016) and TD3 (Fujimoto et al., 2018)."""

import torch

from pytorchrl.agent.accel import accelerated
from pytorchrl.agent.losses import deterministic, q_learning
from pytorchrl.agent.accel.off_policy import NumpyTD3Update
from pytorchrl.agent.accel.xp import TORCH
from pytorchrl.agent.algorithms.off_policy import OffPolicyAlgorithm, numpy_update

#: What the numpy update of DDPG and TD3 computes besides the common replay methods.
_REPRODUCES = ("policy_step", "next_actions")
_ACTOR_REPRODUCES = ("q_values", "q_head", "policy_output", "deterministic_policy")


@accelerated(numpy_update(NumpyTD3Update.build, _REPRODUCES, _ACTOR_REPRODUCES))
class DDPG(OffPolicyAlgorithm):
    """DDPG: a deterministic policy trained to maximise a critic Q(s, a), both with target
    networks; exploration noise is the actor's (``noise``: Gauss or OU).

    Two optimizers: the critic (``lr_q``) and the policy (``lr_pi``).

    Parameters
    ----------
    device, actor, envs
        As in ``Algorithm`` (``actor``: an ``OffPolicyActor`` built for "DDPG" or "TD3").
    lr_q : float
        Learning rate of the critics.
    lr_pi : float
        Learning rate of the policy.
    gamma, polyak, num_updates, update_every, start_steps, mini_batch_size,
    target_update_interval, max_grad_norm, test_every, num_test_episodes, numpy_update
        As in ``OffPolicyAlgorithm``.
    eps : float
        Adam's epsilon (of both optimizers).

    The defaults are those of pytorchrl's ``DDPG.create_factory`` (``lr_q`` 1e-3, ``lr_pi``
    1e-4, 50 updates of 64 transitions every 50 env steps, ``max_grad_norm`` 0.5,
    ``test_every`` 5000; docs/agents.md lists them).
    """

    name = "DDPG"
    group_lr = {"q": "lr_q", "pi": "lr_pi"}
    #: Policy updates happen every ``target_update_interval`` updates (TD3's delay), or every update.
    delayed_policy = False

    def __init__(self, device, actor, envs=None, lr_q=1e-3, lr_pi=1e-4, gamma=0.99, polyak=0.995, num_updates=50,
                 update_every=50, start_steps=1000, mini_batch_size=64, target_update_interval=1,
                 max_grad_norm=0.5, test_every=5000, num_test_episodes=5, numpy_update=True, eps=1e-8):
        super().__init__(device, actor, envs, gamma=gamma, polyak=polyak, num_updates=num_updates,
                         update_every=update_every, start_steps=start_steps, mini_batch_size=mini_batch_size,
                         target_update_interval=target_update_interval, max_grad_norm=max_grad_norm,
                         test_every=test_every, num_test_episodes=num_test_episodes, numpy_update=numpy_update)
        if getattr(actor, "policy_kind", None) != "deterministic":
            raise ValueError(f"{self.name} needs an OffPolicyActor built for 'DDPG' or 'TD3'")
        self.lr_q, self.lr_pi = float(lr_q), float(lr_pi)
        self.eps = float(eps)
        self.check_hyperparameters()

    def check_hyperparameters(self):
        super().check_hyperparameters()
        for name in ("lr_q", "lr_pi"):
            if getattr(self, name) < 0:
                raise ValueError(f"{self.name} hyperparameter {name} must be >= 0, got {getattr(self, name)}")

    def parameter_groups(self):
        a = self.actor
        critics = list(a.critic_obs_net.parameters()) if a.critic_obs_net is not None else []
        critics += list(a.critics.parameters())
        if a.critic_act_net is not None:
            critics += list(a.critic_act_net.parameters())
        policy = list(a.policy_obs_net.parameters()) if a.policy_obs_net is not None else []
        policy += list(a.policy_net.parameters())
        return {"q": critics, "pi": policy}

    def policy_step(self):
        """Whether the next update trains the policy (and, for TD3, the targets)."""
        return not self.delayed_policy or (self.updates_applied + 1) % self.target_update_interval == 0

    def next_actions(self, obs2):
        """Actions of the target policy at the next observations (TD3 smooths them)."""
        return self.target.deterministic_policy(obs2)

    def update_variant(self):
        """Whether the update trains the policy (``policy_step``): the two updates of TD3's
        delay are two different computations."""
        return (self.policy_step(),)

    def loss_tensors(self, batch):
        obs, act, rew, obs2, discount, weights = self.unpack_batch(batch)
        actor = self.actor
        a = actor.scaler.from_env(act)
        with torch.no_grad():
            q2 = self.target.q_values(obs2, self.next_actions(obs2)).min(0).values
            y = q_learning.bellman_target(rew, discount, q2)
        q = actor.q_values(obs, a)
        q_loss, td, _ = q_learning.critic_loss(TORCH, q, y, weights, grad=False)
        losses = {"q": q_loss}
        info = {"LossQ": q_loss.detach(), "QMean": q.detach().mean()}
        if self.policy_step():
            pi_loss, _ = deterministic.policy_loss(TORCH, actor.q_values(obs, actor.deterministic_policy(obs))[0],
                                                   grad=False)
            losses["pi"] = pi_loss
            info["LossPi"] = pi_loss.detach()
        self.report_td_errors(info, td.detach().abs().mean(0), weights)
        return losses, info


@accelerated(numpy_update(NumpyTD3Update.build_smoothed, _REPRODUCES, _ACTOR_REPRODUCES))
class TD3(DDPG):
    """TD3: DDPG with ``num_critics`` critics (their minimum is the target), target policy
    smoothing, and the policy and targets updated every ``target_update_interval`` updates
    only (the policy delay).

    Parameters
    ----------
    device, actor, envs, lr_q, lr_pi, gamma, polyak, num_updates, update_every, start_steps,
    mini_batch_size, max_grad_norm, test_every, num_test_episodes, numpy_update, eps
        As in ``DDPG``.
    target_update_interval : int
        Policy delay: critic updates per policy (and target) update.
    target_noise : float
        Standard deviation of the noise added to target actions (in units of half the
        action range).
    noise_clip : float
        The target noise is clipped to +- this.

    The defaults are those of pytorchrl's ``TD3.create_factory`` (learning rates 1e-4, 50
    updates of 100 transitions every 50 env steps, ``target_update_interval`` 1: no policy
    delay, ``max_grad_norm`` 0.5, ``test_every`` 5000; docs/agents.md lists them).
    """

    name = "TD3"
    delayed_policy = True

    def __init__(self, device, actor, envs=None, lr_q=1e-4, lr_pi=1e-4, gamma=0.99, polyak=0.995, num_updates=50,
                 update_every=50, start_steps=1000, mini_batch_size=100, target_update_interval=1,
                 max_grad_norm=0.5, test_every=5000, num_test_episodes=5, target_noise=0.2, noise_clip=0.5,
                 numpy_update=True, eps=1e-8):
        self.target_noise, self.noise_clip = float(target_noise), float(noise_clip)
        super().__init__(device, actor, envs, lr_q=lr_q, lr_pi=lr_pi, gamma=gamma, polyak=polyak,
                         num_updates=num_updates, update_every=update_every, start_steps=start_steps,
                         mini_batch_size=mini_batch_size, target_update_interval=target_update_interval,
                         max_grad_norm=max_grad_norm, test_every=test_every, num_test_episodes=num_test_episodes,
                         numpy_update=numpy_update, eps=eps)

    def check_hyperparameters(self):
        super().check_hyperparameters()
        for name in ("target_noise", "noise_clip"):
            if getattr(self, name) < 0:
                raise ValueError(f"TD3 hyperparameter {name} must be >= 0, got {getattr(self, name)}")

    def next_actions(self, obs2):
        a2 = self.target.deterministic_policy(obs2)
        return deterministic.smoothed_actions(TORCH, a2, torch.randn_like(a2), self.target_noise, self.noise_clip)


__all__ = ["DDPG", "TD3"]
