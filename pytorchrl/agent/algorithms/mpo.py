"""Maximum a Posteriori Policy Optimisation (Abdolmaleki et al., 2018); Box or Discrete actions."""

import torch
import torch.nn as nn

from pytorchrl.agent.losses import mpo, q_learning, sac
from pytorchrl.agent.accel.xp import TORCH
from pytorchrl.agent.algorithms.off_policy import OffPolicyAlgorithm

#: The multipliers' losses are scaled by this and their step sizes divided by it: their
#: gradients then stay far below any ``max_grad_norm`` (clipping applies to every parameter
#: group), so that each multiplier moves by exactly ``scale * (epsilon - KL)`` per step.
_MULTIPLIER_GRADIENT_SCALE = 1e-6

#: Parameter group of each Lagrange multiplier: (hyperparameter of its KL bound, of its step
#: size, of its upper bound).
_MULTIPLIERS = {"alpha_mean": ("kl_mean_constraint", "alpha_mean_scale", "alpha_mean_max"),
                "alpha_var": ("kl_var_constraint", "alpha_var_scale", "alpha_var_max"),
                "alpha": ("kl_constraint", "alpha_scale", "alpha_max")}


class _Multipliers(nn.Module):
    """The M-step's Lagrange multipliers as parameters (saved and sent with the learner's
    weights; trained by their own gradient, which travels as any other)."""

    def __init__(self):
        super().__init__()
        for name in _MULTIPLIERS:
            self.register_parameter(name, nn.Parameter(torch.tensor(0.0)))


class MPO(OffPolicyAlgorithm):
    """Maximum a Posteriori Policy Optimisation: a critic Q(s, a) fitted by TD to the
    target policy's expected Q-value, and a policy improved in two steps per mini-batch:

    - E-step: ``sample_action_num`` actions of the target policy per state (every action
      when discrete), weighted by ``exp(Q_target / eta)``, the temperature ``eta`` solving
      the dual of the KL bound ``dual_constraint`` (``losses.mpo.temperature``: a
      bisection in torch);
    - M-step: the policy fitted to the weighted actions by maximum likelihood, under KL
      bounds to the target policy: Box actions (a diagonal Gaussian before a tanh
      squashing) bound the mean's and the standard deviations' KL apart
      (``kl_mean_constraint``, ``kl_var_constraint``), Discrete actions the one KL
      (``kl_constraint``). Each bound has a Lagrange multiplier moved by gradient
      descent, ``alpha -= scale * (epsilon - KL)`` ``mstep_iterations`` times per update,
      then clipped to ``[0, max]``.

    Three kinds of optimizer: the critic (Adam, ``lr_q``), the policy (Adam, ``lr_pi``)
    and each multiplier (plain gradient descent). The target actor (policy and critic)
    follows by polyak averaging. The actor is an ``OffPolicyActor`` built for "MPO": the
    policy network of SAC's (a mean and a log standard deviation per state for Box
    actions, logits for Discrete ones) and one critic.

    Parameters
    ----------
    device, actor, envs
        As in ``Algorithm`` (``actor``: an ``OffPolicyActor`` built for "MPO").
    lr_q : float
        Learning rate of the critic.
    lr_pi : float
        Learning rate of the policy.
    gamma, polyak, num_updates, update_every, start_steps, mini_batch_size,
    target_update_interval, test_every, num_test_episodes
        As in ``OffPolicyAlgorithm``.
    dual_constraint : float
        The E-step's bound epsilon on KL(weighted policy || target policy), > 0.
    kl_mean_constraint : float
        Box actions: the M-step's bound on the KL of the mean, > 0.
    kl_var_constraint : float
        Box actions: the M-step's bound on the KL of the standard deviations, > 0.
    kl_constraint : float
        Discrete actions: the M-step's bound on KL(target policy || policy), > 0.
    alpha_scale : float
        Discrete actions: step size of the KL's multiplier.
    alpha_mean_scale : float
        Box actions: step size of the mean KL's multiplier.
    alpha_var_scale : float
        Box actions: step size of the standard deviations' KL's multiplier.
    alpha_mean_max : float
        Upper bound of the mean KL's multiplier.
    alpha_var_max : float
        Upper bound of the standard deviations' KL's multiplier.
    alpha_max : float
        Upper bound of the discrete KL's multiplier.
    mstep_iterations : int
        Descent steps of the multipliers per update (as pytorchrl's MPO: the policy takes
        one optimizer step per update, as every gradient does in a scheme).
    sample_action_num : int
        Box actions: actions sampled from the target policy per state, for the E-step and
        for the critic's target.
    max_grad_norm : float or None
        The critic's and the policy's gradients are each clipped to this norm (None: no
        clipping).

    The defaults are those of pytorchrl's ``MPO.create_factory``, which also takes
    ``policy_loss_addons`` (an empty list only: add-ons are PPO's and A2C's).
    """

    name = "MPO"
    group_lr = {"q": "lr_q", "pi": "lr_pi", "alpha_mean": "alpha_mean_step", "alpha_var": "alpha_var_step",
                "alpha": "alpha_step"}
    fixed_hyperparameters = ()

    def __init__(self, device, actor, envs=None, lr_q=1e-4, lr_pi=1e-4, gamma=0.99, polyak=0.995, num_updates=50,
                 test_every=5000, update_every=50, start_steps=1000, mini_batch_size=64, num_test_episodes=5,
                 target_update_interval=1, dual_constraint=0.1, kl_mean_constraint=0.01, kl_var_constraint=0.0001,
                 kl_constraint=0.01, alpha_scale=10.0, alpha_mean_scale=1.0, alpha_var_scale=100.0,
                 alpha_mean_max=0.1, alpha_var_max=10.0, alpha_max=1.0, mstep_iterations=5, sample_action_num=64,
                 max_grad_norm=0.1):
        if getattr(actor, "algorithm_name", None) != "MPO":
            raise ValueError("MPO needs an OffPolicyActor built for 'MPO'")
        super().__init__(device, actor, envs, gamma=gamma, polyak=polyak, num_updates=num_updates,
                         update_every=update_every, start_steps=start_steps, mini_batch_size=mini_batch_size,
                         target_update_interval=target_update_interval, max_grad_norm=max_grad_norm,
                         test_every=test_every, num_test_episodes=num_test_episodes, numpy_update=False)
        self.lr_q, self.lr_pi = float(lr_q), float(lr_pi)
        self.dual_constraint = float(dual_constraint)
        self.kl_mean_constraint, self.kl_var_constraint = float(kl_mean_constraint), float(kl_var_constraint)
        self.kl_constraint = float(kl_constraint)
        self.alpha_scale, self.alpha_mean_scale = float(alpha_scale), float(alpha_mean_scale)
        self.alpha_var_scale = float(alpha_var_scale)
        self.alpha_mean_max, self.alpha_var_max = float(alpha_mean_max), float(alpha_var_max)
        self.alpha_max = float(alpha_max)
        self.mstep_iterations = int(mstep_iterations)
        self.sample_action_num = int(sample_action_num)
        self.check_hyperparameters()
        self.multipliers = _Multipliers().to(self.device)

    @classmethod
    def create_factory(cls, policy_loss_addons=(), **hyperparameters):
        """As ``Algorithm.create_factory``; ``policy_loss_addons`` (pytorchrl's keyword) may
        only be empty: policy-loss add-ons are terms of PPO's and A2C's losses."""
        if policy_loss_addons:
            raise ValueError("MPO takes no policy_loss_addons (policy-loss add-ons are for PPO and A2C); "
                             "pass [] or leave it out")
        return super().create_factory(**hyperparameters)

    # ------------------------------------------------------------- parameters
    @property
    def learner_modules(self):
        return {"target": self.target, "multipliers": self.multipliers}

    def _multiplier_names(self):
        return ("alpha",) if self.actor.discrete else ("alpha_mean", "alpha_var")

    def parameter_groups(self):
        a = self.actor
        critic = list(a.critic_obs_net.parameters()) if a.critic_obs_net is not None else []
        critic += list(a.critics.parameters())
        if a.critic_act_net is not None:
            critic += list(a.critic_act_net.parameters())
        policy = list(a.policy_obs_net.parameters()) if a.policy_obs_net is not None else []
        policy += list(a.policy_net.parameters())
        groups = {"q": critic, "pi": policy}
        groups.update({name: [getattr(self.multipliers, name)] for name in self._multiplier_names()})
        return groups

    def _step_of(self, name):
        return getattr(self, _MULTIPLIERS[name][1]) * self.mstep_iterations / _MULTIPLIER_GRADIENT_SCALE

    @property
    def alpha_mean_step(self):
        """Step size of the mean KL's multiplier on its scaled gradient (an optimizer setting)."""
        return self._step_of("alpha_mean")

    @property
    def alpha_var_step(self):
        """Step size of the standard deviations' KL's multiplier on its scaled gradient."""
        return self._step_of("alpha_var")

    @property
    def alpha_step(self):
        """Step size of the discrete KL's multiplier on its scaled gradient."""
        return self._step_of("alpha")

    def make_optimizer(self, group, params):
        """Adam for the critic and the policy; plain gradient descent for a multiplier (its
        update rule is the descent step itself)."""
        if group in _MULTIPLIERS:
            return torch.optim.SGD(params, lr=getattr(self, self.group_lr[group]))
        return super().make_optimizer(group, params)

    def target_pairs(self):
        pairs = [(self.actor.critics, self.target.critics), (self.actor.policy_net, self.target.policy_net)]
        for name in ("critic_obs_net", "critic_act_net", "policy_obs_net"):
            if getattr(self.actor, name) is not None:
                pairs.append((getattr(self.actor, name), getattr(self.target, name)))
        return pairs

    def check_hyperparameters(self):
        super().check_hyperparameters()
        for name in ("lr_q", "lr_pi", "alpha_scale", "alpha_mean_scale", "alpha_var_scale", "alpha_mean_max",
                     "alpha_var_max", "alpha_max"):
            if getattr(self, name) < 0:
                raise ValueError(f"MPO hyperparameter {name} must be >= 0, got {getattr(self, name)}")
        for name in ("dual_constraint", "kl_mean_constraint", "kl_var_constraint", "kl_constraint"):
            if not getattr(self, name) > 0:
                raise ValueError(f"MPO hyperparameter {name} must be > 0, got {getattr(self, name)}")
        for name in ("mstep_iterations", "sample_action_num"):
            if getattr(self, name) < 1:
                raise ValueError(f"MPO hyperparameter {name} must be >= 1, got {getattr(self, name)}")

    @torch.no_grad()
    def after_update(self):
        super().after_update()
        # The projection of the multipliers' descent onto [0, max] (pytorchrl's clipping).
        for name in self._multiplier_names():
            getattr(self.multipliers, name).clamp_(0.0, getattr(self, _MULTIPLIERS[name][2]))

    # ----------------------------------------------------------------- losses
    def _gaussian(self, net, obs):
        """(mean, clipped log std) (N, D) of the policy ``net`` (the actor or the target)."""
        out = net.policy_output(obs)
        d = self.actor.act_dim
        return out[:, :d], out[:, d:].clamp(sac.LOG_STD_MIN, sac.LOG_STD_MAX)

    def _sampled_q(self, obs, mean, log_std):
        """Samples (M, N, D) of the target policy N(mean, std) before the squashing, and the
        target critic's Q-values (N, M) of their actions."""
        m, (n, d) = self.sample_action_num, mean.shape
        u = mean[None] + log_std.exp()[None] * torch.randn((m, n, d), device=mean.device, dtype=mean.dtype)
        obs_rep = obs.unsqueeze(0).expand(m, *obs.shape).reshape(m * n, *obs.shape[1:])
        q = self.target.q_values(obs_rep, torch.tanh(u).reshape(m * n, d))[0]
        return u, q.reshape(m, n).t()

    def loss_tensors(self, batch):
        obs, act, rew, obs2, discount, weights = self.unpack_batch(batch)
        actor, target, mult = self.actor, self.target, self.multipliers
        with torch.no_grad():
            if actor.discrete:
                lp2 = torch.log_softmax(target.policy_output(obs2), dim=-1)
                v2 = (lp2.exp() * target.q_values(obs2)[0]).sum(dim=-1, keepdim=True)
                target_lp = torch.log_softmax(target.policy_output(obs), dim=-1)
                eta, w, dual = mpo.temperature(target.q_values(obs)[0], self.dual_constraint, log_prior=target_lp)
            else:
                _, q2 = self._sampled_q(obs2, *self._gaussian(target, obs2))
                v2 = q2.mean(dim=1, keepdim=True)
                target_mean, target_log_std = self._gaussian(target, obs)
                samples, q_samples = self._sampled_q(obs, target_mean, target_log_std)
                eta, w, dual = mpo.temperature(q_samples, self.dual_constraint)
            y = q_learning.bellman_target(rew, discount, v2)
        if actor.discrete:
            q = actor.q_values(obs).gather(2, act.long().unsqueeze(0))
            log_probs = torch.log_softmax(actor.policy_output(obs), dim=-1)
            pi_loss, kl = mpo.categorical_mstep_loss(log_probs, target_lp, w, mult.alpha.detach())
            kls = {"alpha": kl}
            info = {"KL": kl.detach(), "Alpha": mult.alpha.detach().clone()}
        else:
            q = actor.q_values(obs, actor.scaler.from_env(act))
            mean, log_std = self._gaussian(actor, obs)
            pi_loss, kl_mean, kl_var = mpo.gaussian_mstep_loss(mean, log_std, target_mean, target_log_std, samples,
                                                               w, mult.alpha_mean.detach(), mult.alpha_var.detach())
            kls = {"alpha_mean": kl_mean, "alpha_var": kl_var}
            info = {"KLMean": kl_mean.detach(), "KLVar": kl_var.detach(),
                    "AlphaMean": mult.alpha_mean.detach().clone(), "AlphaVar": mult.alpha_var.detach().clone()}
        q_loss, td, _ = q_learning.critic_loss(TORCH, q, y, weights, scale=0.5, grad=False)
        losses = {"q": q_loss, "pi": pi_loss}
        for name, kl in kls.items():
            losses[name] = _MULTIPLIER_GRADIENT_SCALE * mpo.multiplier_loss(
                getattr(mult, name), getattr(self, _MULTIPLIERS[name][0]), kl)
        info.update({"LossQ": q_loss.detach(), "LossPi": pi_loss.detach(), "QMean": q.detach().mean(),
                     "Eta": eta, "Dual": dual})
        self.report_td_errors(info, td.detach().abs().mean(0), weights)
        return losses, info


__all__ = ["MPO"]
