"""Exploration by Random Network Distillation on PPO (Burda et al., 2018).

A fixed random network (the target) maps observations to features; a predictor network
learns to reproduce them. Its error on an observation is high where the agent has rarely
been: that error, scaled by a running standard deviation of the intrinsic returns, is an
intrinsic reward. The actor has a second value head for it (``OnPolicyActor``'s
``int_value``); intrinsic returns are non-episodic (an episode end does not stop them),
and the policy follows ``ext_adv_coeff * A_ext + int_adv_coeff * A_int``.

Where each part runs:

- collectors (the algorithm built beside training environments): observation statistics
  warmed up with random actions before the first rollout (``warm_up``, skipped when a
  resumed run gave them back); after each rollout, ``preprocess_rollout`` updates them
  with the rollout's observations, computes the intrinsic rewards with the predictor and
  target of the weights it acted with, and sends them with the statistics the predictor's
  inputs were normalised with;
- the storage (``GAEBuffer``) computes the intrinsic advantages and returns (intrinsic
  GAE with ``gamma_intrinsic`` that ignores episode ends) and the predictor's inputs;
- the update trains the policy, both value heads and the predictor, on a random
  ``predictor_proportion`` of each mini-batch for the predictor.

The predictor and the target are learner modules (``rnd_predictor``, ``rnd_target``):
they travel with every weight broadcast, so every worker has the same target, and the
predictor's gradients travel with the actor's.

Collectors acting through an inference server (SEED) hold no weights: the two
computations that need them, the predictor's errors (``intrinsic_errors``) and the
intrinsic values of the bootstrap (``intrinsic_values``), are ``server_calls`` that the
server runs with its current weights (the learner's latest publication, at least as new
as the weights the rollout acted with), while the statistics stay on the collector.

Checkpoints keep the collector-side statistics (``collector_state``): a resumed run's
collectors start from them and skip the warm-up.
"""

import copy

import gymnasium as gym
import numpy as np
import torch

from pytorchrl import ACT, ADV, IADV, IRET, IREW, IVAL, LOGP, OBS, RET, VAL
from pytorchrl.agent.losses.actor_critic import normalize_advantages, reference_actor_critic, value_loss
from pytorchrl.agent.accel.xp import TORCH
from pytorchrl.agent.algorithms.on_policy import sequence_args
from pytorchrl.agent.algorithms.ppo import PPO
from pytorchrl.agent.running_stats import RunningMeanStd

#: Rollout keys of the observation statistics the intrinsic rewards were computed with.
OBS_MEAN, OBS_STD = "rnd_obs_mean", "rnd_obs_std"
#: Mini-batch key of the predictor's inputs (observations normalised and clipped).
RND_OBS = "rnd_obs"
#: Normalised observations are clipped to this range (Burda et al.).
OBS_CLIP = 5.0


def rnd_network(network, obs_space, kwargs):
    """One RND network: ``network`` (a class, a feature extractor name or None: the actor's
    default for the space) built for float observations of ``obs_space``'s shape."""
    from pytorchrl.agent.actors.feature_extractors import get_feature_extractor
    from pytorchrl.agent.actors.on_policy_actor import default_feature_extractor
    if isinstance(network, str):
        network = get_feature_extractor(network)
    if network is None:
        network = default_feature_extractor(obs_space)
    # The inputs are normalised floats: a uint8 space would make the CNN scale them by 1/255.
    space = gym.spaces.Box(-OBS_CLIP, OBS_CLIP, shape=obs_space.shape, dtype=np.float32)
    return network(space, **dict(kwargs or {}))


class RND_PPO(PPO):  # noqa: N801 (pytorchrl's name)
    """PPO with Random Network Distillation intrinsic rewards.

    Needs an ``OnPolicyActor`` with an intrinsic value head (``int_value``, given by
    default to actors built for RND_PPO) and an on-policy storage (``GAEBuffer``). The
    numpy update and the fused loss compute PPO's loss only: they step aside (said once)
    and the torch path computes this one.

    Parameters
    ----------
    gamma_intrinsic : float
        Discount factor of the intrinsic returns.
    ext_adv_coeff : float
        Weight of the extrinsic advantages in the policy's advantages.
    int_adv_coeff : float
        Weight of the intrinsic advantages in the policy's advantages.
    predictor_proportion : float
        Probability that a sample of a mini-batch trains the predictor (Burda et al.
        train it on a random part of each batch, so it does not learn faster than the
        policy explores); 1 or more: every sample (pytorchrl's factory default, 2.0).
    pre_normalization_steps : int
        Rounds of random-action steps that warm up the observation statistics before the
        first rollout (0: none).
    pre_normalization_length : int
        Vectorized steps of each warm-up round: ``pre_normalization_steps *
        pre_normalization_length`` steps of every environment in all.
    intrinsic_rewards_network : str, nn.Module class or None
        Network of the target and the predictor, built as ``network(obs_space,
        **kwargs)`` (a feature extractor: its output features are the embedding): a
        feature extractor name (MLP, CNN, Fixup), a class, or None for the actor's default
        for the observations (MLP for vectors, CNN for images).
    intrinsic_rewards_target_network_kwargs : dict or None
        Keyword arguments of the target network.
    intrinsic_rewards_predictor_network_kwargs : dict or None
        Keyword arguments of the predictor network (its output size must match the
        target's).

    All other parameters are those of ``PPO``; the defaults are those of pytorchrl's
    ``RND_PPO.create_factory`` where it has them (``lr`` 1e-4, ``eps`` 1e-8,
    ``use_clipped_value_loss`` True, ``entropy_coef`` 0.01, ``predictor_proportion`` 2.0,
    ``test_every`` 1000, ``num_test_episodes`` 5). ``numpy_update`` asks for a fast path that never serves
    RND_PPO's loss: with it (the default) the log says once that the update runs in torch.
    """

    name = "RND_PPO"
    acting_extras = (LOGP, VAL, IVAL)
    preprocessed_keys = (IREW, OBS_MEAN, OBS_STD)
    server_calls = ("intrinsic_errors", "intrinsic_values")
    # The warm-up runs once, before a collector's first rollout: a later value would act nowhere.
    fixed_hyperparameters = PPO.fixed_hyperparameters + (
        "intrinsic_rewards_network", "intrinsic_rewards_target_network_kwargs",
        "intrinsic_rewards_predictor_network_kwargs", "pre_normalization_steps", "pre_normalization_length")

    def __init__(self, device, actor, envs=None, lr=1e-4, eps=1e-8, gamma=0.99, num_epochs=4, num_mini_batch=1,
                 mini_batch_size=None, clip_param=0.2, entropy_coef=0.01, value_loss_coef=0.5, max_grad_norm=0.5,
                 normalize_advantages=True, test_every=1000, num_test_episodes=5, numpy_update=True,
                 use_clipped_value_loss=True, kl_coef=0.0, policy_loss_addons=(), gamma_intrinsic=0.99,
                 ext_adv_coeff=2.0, int_adv_coeff=1.0, predictor_proportion=2.0, pre_normalization_steps=50,
                 pre_normalization_length=128, intrinsic_rewards_network=None,
                 intrinsic_rewards_target_network_kwargs=None, intrinsic_rewards_predictor_network_kwargs=None):
        if getattr(actor, "ivalue_head", None) is None:
            raise ValueError(f"RND_PPO needs an actor with an intrinsic value head (OnPolicyActor(..., "
                             f"int_value=True), the default for algorithm_name 'RND_PPO'); "
                             f"{type(actor).__name__} has none")
        self.gamma_intrinsic = float(gamma_intrinsic)
        self.ext_adv_coeff = float(ext_adv_coeff)
        self.int_adv_coeff = float(int_adv_coeff)
        self.predictor_proportion = float(predictor_proportion)
        self.pre_normalization_steps = int(pre_normalization_steps)
        self.pre_normalization_length = int(pre_normalization_length)
        self.intrinsic_rewards_network = intrinsic_rewards_network
        self.intrinsic_rewards_target_network_kwargs = dict(intrinsic_rewards_target_network_kwargs or {})
        self.intrinsic_rewards_predictor_network_kwargs = dict(intrinsic_rewards_predictor_network_kwargs or {})
        obs_space = actor.input_space
        self.rnd_target = rnd_network(intrinsic_rewards_network, obs_space,
                                      self.intrinsic_rewards_target_network_kwargs).to(device)
        self.rnd_predictor = rnd_network(intrinsic_rewards_network, obs_space,
                                         self.intrinsic_rewards_predictor_network_kwargs).to(device)
        for p in self.rnd_target.parameters():
            p.requires_grad_(False)
        # Collector-side state: observation statistics and the running intrinsic returns
        # (one per environment) whose standard deviation scales the intrinsic rewards.
        self.obs_rms = RunningMeanStd(tuple(obs_space.shape))
        self.int_return_rms = RunningMeanStd(())
        self._int_returns = None
        super().__init__(device, actor, envs, lr=lr, eps=eps, gamma=gamma, num_epochs=num_epochs,
                         num_mini_batch=num_mini_batch, mini_batch_size=mini_batch_size, clip_param=clip_param,
                         entropy_coef=entropy_coef, value_loss_coef=value_loss_coef, max_grad_norm=max_grad_norm,
                         normalize_advantages=normalize_advantages, test_every=test_every,
                         num_test_episodes=num_test_episodes, numpy_update=numpy_update,
                         use_clipped_value_loss=use_clipped_value_loss, kl_coef=kl_coef,
                         policy_loss_addons=policy_loss_addons)

    def check_hyperparameters(self):
        super().check_hyperparameters()
        if not 0.0 <= self.gamma_intrinsic <= 1.0:
            raise ValueError(f"RND_PPO hyperparameter gamma_intrinsic must be in [0, 1], got {self.gamma_intrinsic}")
        for name in ("ext_adv_coeff", "int_adv_coeff", "predictor_proportion", "pre_normalization_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"RND_PPO hyperparameter {name} must be >= 0, got {getattr(self, name)}")
        if self.pre_normalization_length < 1:
            raise ValueError(f"RND_PPO hyperparameter pre_normalization_length must be >= 1, "
                             f"got {self.pre_normalization_length}")

    def state_dict(self):
        """``PPO.state_dict`` without the RND networks' construction among the
        hyperparameters (a class is no checkpoint value, and they are fixed once built:
        a resumed run builds them from its own configuration; their weights are saved)."""
        state = super().state_dict()
        fixed = ("intrinsic_rewards_network", "intrinsic_rewards_target_network_kwargs",
                 "intrinsic_rewards_predictor_network_kwargs")
        state["hyperparameters"] = {k: v for k, v in state["hyperparameters"].items() if k not in fixed}
        return state

    # ------------------------------------------------------------ networks
    @property
    def learner_modules(self):
        """The RND networks: ``rnd_target`` (fixed) and ``rnd_predictor`` (trained)."""
        return {"rnd_target": self.rnd_target, "rnd_predictor": self.rnd_predictor}

    @property
    def collector_modules(self):
        """Both RND networks: collectors compute the intrinsic rewards."""
        return ("rnd_target", "rnd_predictor")

    def parameter_groups(self):
        """One group: the actor's parameters and the predictor's (never the target's)."""
        return {"actor": list(self.actor.parameters()) + list(self.rnd_predictor.parameters())}

    def rnd_errors(self, rnd_obs):
        """Per-sample squared error (N,) of the predictor on normalised observations."""
        return (self.rnd_predictor(rnd_obs) - self.rnd_target(rnd_obs)).pow(2).mean(dim=1)

    @staticmethod
    def normalize_observations(obs, mean, std):
        """The predictor's inputs: ``(obs - mean) / std`` clipped to [-5, 5], float32.

        Parameters
        ----------
        obs : torch.Tensor
            Observations (..., *obs_shape).
        mean, std : torch.Tensor
            Statistics of one observation (*obs_shape).
        """
        return ((obs.float() - mean) / std).clamp(-OBS_CLIP, OBS_CLIP)

    # ------------------------------------------------------------ collector side
    def warm_up(self, envs):
        """Fill the observation statistics with ``pre_normalization_steps *
        pre_normalization_length`` random-action steps of every environment of ``envs``
        (once: an algorithm whose statistics hold data, e.g. restored from a checkpoint, is
        left as it is). The warm-up's steps are not recorded (no episode statistics, no
        episode log); the collector resets the environments afterwards.

        Parameters
        ----------
        envs : TorchVecEnv
            A collector's training environments.

        Returns
        -------
        bool
            Whether ``envs`` were stepped (the collector then resets them).
        """
        total = self.pre_normalization_steps * self.pre_normalization_length
        if self.obs_rms.count > 0 or total == 0:
            return False
        space = copy.deepcopy(envs.action_space)
        # Seeded from torch, so that torch.manual_seed governs the warm-up too.
        space.seed(int(torch.randint(0, 2 ** 31 - 1, ()).item()))
        obs = envs.reset_numpy().copy()
        rows = [obs]
        for i in range(1, total + 1):
            actions = np.stack([space.sample() for _ in range(envs.num_envs)])
            obs = envs.step_numpy(actions, record=False)[0].copy()
            rows.append(obs)
            if i % self.pre_normalization_length == 0:
                self.obs_rms.update(np.concatenate(rows[:self.pre_normalization_length]).reshape(-1, *obs.shape[1:]))
                rows = rows[self.pre_normalization_length:]
        return True

    def preprocess_rollout(self, data):
        """Add the intrinsic rewards to a finished rollout (see the module docstring).

        The observation statistics take in the rollout's observations first; the reward
        of step t is the predictor's error on the observation it was taken from, divided
        by the running standard deviation of the non-episodic intrinsic returns
        ``R_t = gamma_intrinsic * R_{t-1} + r_t`` of each environment.

        Parameters
        ----------
        data : dict of tensors
            A rollout of ``GAEBuffer.get_data``: ``OBS`` (T, N, *obs_shape), ...

        Returns
        -------
        dict of tensors
            ``data`` with ``IREW`` (T, N, 1) and the statistics (``OBS_MEAN``, ``OBS_STD``)
            the predictor's inputs are normalised with.
        """
        obs = data[OBS]
        T, n = obs.shape[:2]
        if T == 0:
            return data
        flat = obs.reshape(T * n, *obs.shape[2:]).cpu().numpy()
        obs_rms = copy.deepcopy(self.obs_rms)
        obs_rms.update(flat)
        mean, std = obs_rms.mean.astype(np.float32), obs_rms.std.astype(np.float32)
        errors = np.asarray(self.collector_call("intrinsic_errors", flat, mean, std)).reshape(T, n)
        # Kept only once the errors came: an inference server that died meanwhile leaves the
        # statistics as they were, and the collector asks the replacement again.
        self.obs_rms = obs_rms
        irew = self.normalize_intrinsic_rewards(errors)
        data = dict(data)
        data[IREW] = torch.as_tensor(irew[:, :, None], dtype=torch.float32, device=obs.device)
        data[OBS_MEAN], data[OBS_STD] = torch.from_numpy(mean).to(obs.device), torch.from_numpy(std).to(obs.device)
        return data

    def intrinsic_errors(self, obs, mean, std):
        """The predictor's errors with this algorithm's weights (a ``server_calls`` method).

        Parameters
        ----------
        obs : np.ndarray
            (M, *obs_shape) observations.
        mean, std : np.ndarray
            (*obs_shape) float32 statistics they are normalised with.

        Returns
        -------
        np.ndarray
            (M,) squared errors of the predictor against the target.
        """
        dev = self.device
        with torch.no_grad():
            rnd_obs = self.normalize_observations(torch.as_tensor(obs, device=dev), torch.as_tensor(mean, device=dev),
                                                  torch.as_tensor(std, device=dev))
            return self.rnd_errors(rnd_obs).cpu().numpy()

    def intrinsic_values(self, obs, state=None):
        """The actor's intrinsic value estimates (N, 1) of ``obs`` (numpy; ``state``: the
        recurrent state of the rows, or None) with this algorithm's weights (a
        ``server_calls`` method)."""
        return self.actor.int_values(obs, state)

    def collector_state(self):
        """The collector-side statistics: ``obs_rms`` (observations), ``int_return_rms``
        (intrinsic returns), both ``RunningMeanStd.state_dict``, and ``int_returns``, the
        running intrinsic return of each environment (None before the first rollout)."""
        returns = self._int_returns
        return {"obs_rms": self.obs_rms.state_dict(), "int_return_rms": self.int_return_rms.state_dict(),
                "int_returns": None if returns is None else np.array(returns)}

    def load_collector_state(self, state):
        """Restore a ``collector_state`` (a collector of a resumed run: its warm-up is then
        skipped, the statistics holding data).

        Parameters
        ----------
        state : dict
            ``obs_rms``, ``int_return_rms`` and ``int_returns`` (arrays may be tensors).

        Raises
        ------
        ValueError
            A key is missing, or the observation statistics are of another shape.
        """
        missing = sorted({"obs_rms", "int_return_rms", "int_returns"} - set(state or {}))
        if missing:
            raise ValueError(f"RND_PPO's collector state lacks {missing}")
        self.obs_rms.load_state_dict(state["obs_rms"], "observation statistics")
        self.int_return_rms.load_state_dict(state["int_return_rms"], "intrinsic return statistics")
        returns = state["int_returns"]
        self._int_returns = None if returns is None else np.array(returns, dtype=np.float64)

    def normalize_intrinsic_rewards(self, errors):
        """Intrinsic rewards (T, N) of raw predictor errors (T, N): the running intrinsic
        returns of the N environments advance through them, their statistics take them in,
        and the errors are divided by the returns' standard deviation.

        Parameters
        ----------
        errors : np.ndarray
            (T, N) predictor errors, time first.
        """
        T, n = errors.shape
        running = self._int_returns
        if running is None or running.shape != (n,):
            running = np.zeros(n, dtype=np.float64)
        returns = np.empty((T, n), dtype=np.float64)
        for t in range(T):
            running = running * self.gamma_intrinsic + errors[t]
            returns[t] = running
        # New objects replace the old ones whole: a checkpoint's read (collector_state, in
        # a remote collector's control thread) never sees half an update.
        rms = copy.deepcopy(self.int_return_rms)
        rms.update(returns.reshape(-1))
        self._int_returns, self.int_return_rms = running, rms
        return (errors / rms.std).astype(np.float32)

    def bootstrap_intrinsic(self, obs, state=None):
        """Intrinsic value estimates (N, 1) of ``obs`` (numpy; ``state``: recurrent state of
        the rows): what the intrinsic returns are bootstrapped with (``intrinsic_values``,
        on the inference server when the collector acts through one)."""
        return self.collector_call("intrinsic_values", obs, state)

    # ------------------------------------------------------------ learner side
    def intrinsic_samples(self, rollout):
        """What the storage adds to the samples of a received rollout (T, N, ...): the
        predictor's inputs ``RND_OBS``, its observations normalised with the statistics
        the collector sent."""
        return {RND_OBS: self.normalize_observations(rollout[OBS], rollout[OBS_MEAN], rollout[OBS_STD])}

    def advantages(self, batch):
        """The policy's advantages: ``ext_adv_coeff * ADV + int_adv_coeff * IADV``,
        standardised when ``normalize_advantages``."""
        adv = self.ext_adv_coeff * batch[ADV] + self.int_adv_coeff * batch[IADV]
        return normalize_advantages(TORCH, adv) if self.normalize_advantages else adv

    def predictor_mask(self, n, device):
        """Which of ``n`` samples train the predictor: each with probability
        ``predictor_proportion`` (float 0/1, shape (n,))."""
        return (torch.rand(n, device=device) < self.predictor_proportion).float()

    def loss_tensors(self, batch, fused=True):
        """PPO's loss on the combined advantages with the extrinsic value loss, plus
        ``value_loss_coef`` times the intrinsic value loss (clipped as the extrinsic one
        with ``use_clipped_value_loss``) and the predictor's mean squared error on the
        samples of ``predictor_mask`` (``Algorithm.loss_tensors``; ``fused`` is ignored:
        no fused loss computes this one)."""
        kwargs = dict(entropy_grad=self.entropy_coef != 0.0, **sequence_args(batch))
        addons = bool(self.policy_loss_addons)
        out = self.actor.evaluate_with_int_value(batch[OBS], batch[ACT], distribution=addons, **kwargs)
        logp, entropy, value, ivalue = out[:4]
        policy_loss = self._with_addon_terms(self.policy_loss, out[4], batch) if addons else self.policy_loss
        loss, info = reference_actor_critic(logp, entropy, value, batch[LOGP], self.advantages(batch), batch[RET],
                                            batch.get(VAL), policy_loss, self.value_clip, self.value_loss_coef,
                                            self.entropy_coef)
        iv_loss, _ = value_loss(TORCH, ivalue, batch[IRET], batch.get(IVAL), self.value_clip, grad=False)
        errors = self.rnd_errors(batch[RND_OBS])
        mask = self.predictor_mask(errors.shape[0], errors.device)
        rnd_loss = (mask * errors).sum() / mask.sum().clamp(min=1.0)
        loss = loss + self.value_loss_coef * iv_loss + rnd_loss
        info.update(IntValueLoss=iv_loss.detach(), PredictorLoss=rnd_loss.detach(), Loss=loss.detach(),
                    IntrinsicReward=batch[IREW].mean())
        return loss, info

    def compute_loss(self, batch, fused=True):
        """``loss_tensors`` with its info read back, computed eagerly: the random predictor
        mask is drawn anew at every update, which the CUDA graph update does not replay."""
        loss, info = self.loss_tensors(batch, fused)
        return loss, self.info_to_host(info)
