"""Actor for off-policy algorithms: Q-networks (DQN) or a policy with critics (DDPG, TD3, SAC).

The networks an algorithm needs are built for it:

- ``DDQN``: one Q-network mapping an observation to a value per action (optionally
  dueling); acting is epsilon-greedy.
- ``DDPG`` (one critic), ``TD3`` (``num_critics``): a deterministic policy squashed into
  the action bounds, explored with Gaussian or Ornstein-Uhlenbeck noise, and critics
  Q(s, a).
- ``SAC`` (``num_critics``): a stochastic policy (tanh-squashed Gaussian for Box actions,
  categorical for Discrete ones) and critics Q(s, a) (Q(s) per action when discrete). With
  ``use_sde`` the Box policy explores with generalized state-dependent exploration (gSDE,
  Raffin et al., 2021; ``StateDependentNoiseHead``): exploration weights drawn per
  environment and kept for a while (``sde_sample_freq``), not a fresh draw every step.
- ``MPO``: SAC's policy (its mean and log standard deviation per state are the M-step's
  decoupled Gaussian) and one critic.

Critics built from the default MLP are computed together (one batched matrix product
per layer for all of them: on small networks the operator count, not arithmetic, is what
costs). Only the networks used to act travel to collectors (``acting_state_dict``): the
Q-network for DDQN, the policy for the others, plus the exploration buffers
(``epsilon``, ``warmup``).

A DDQN actor may have a memory (``recurrent_net``: GRU or LSTM) between the observation
features and the Q-network's MLP: recurrent DQN as in R2D2 (Kapturowski et al., 2019).
Its state is carried from step to step while acting (zeroed where an episode ended) and
re-run over stored sequences in training (``memory_unroll``, with a burn-in); it learns
from a ``RecurrentReplayBuffer``.
"""

import math

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from pytorchrl.agent.accel import Accelerator, accelerated
from pytorchrl.agent.losses import q_learning, sac
from pytorchrl.agent.accel.off_policy import NumpyOffPolicyActing
from pytorchrl.agent.accel.xp import TORCH
from pytorchrl.agent.actors.base import Actor
from pytorchrl.agent.actors.distributions import StateDependentNoiseHead
from pytorchrl.agent.actors.feature_extractors.ensemble import EnsembleMLP
from pytorchrl.agent.actors.feature_extractors.mlp import MLP
from pytorchrl.agent.actors.feature_extractors.precision import check_precision
from pytorchrl.agent.actors.memory_networks import get_memory_network
from pytorchrl.agent.actors.normalization import DEFAULT_CLIP, check_normalization
from pytorchrl.agent.factory import ComponentFactory
from pytorchrl.agent.notices import say_once
from pytorchrl.agent.spaces import check_action_space, check_observation_space, packed_space

#: Algorithms served, with the critics (Q-networks) each uses: "q" maps an observation to a
#: value per action, "qsa" maps an (observation, action) pair to one value.
ALGORITHM_NETWORKS = {"DDQN": ("q", None), "DQN": ("q", None), "DDPG": ("qsa", "deterministic"),
                      "TD3": ("qsa", "deterministic"), "SAC": ("qsa", "stochastic"),
                      "MPO": ("qsa", "stochastic")}
NOISES = (None, "Gauss", "OU", "NoNoise")


def check_off_policy_spaces(input_space, action_space, algorithm_name):
    """Refuse spaces the off-policy actor cannot serve (``UnsupportedSpaceError``: one line
    naming the space and the algorithm): a Q-network (DDQN) needs a Discrete action space,
    the deterministic policies of DDPG and TD3 a Box one, SAC either; MultiDiscrete,
    MultiBinary and others have no off-policy head. Dict and Tuple observations are read
    packed, as one flat vector."""
    check_observation_space(input_space, algorithm_name)
    critic_kind, policy_kind = ALGORITHM_NETWORKS[algorithm_name]
    supported = (gym.spaces.Discrete,) if critic_kind == "q" else (gym.spaces.Box,) \
        if policy_kind == "deterministic" else (gym.spaces.Discrete, gym.spaces.Box)
    check_action_space(action_space, algorithm_name, supported)


def _check_mlp_precision(precision, common_feature_extractor):
    """``precision`` if valid for the actor's networks, else ValueError: bf16 is computed by
    the default MLP (``EnsembleMLP``) only."""
    check_precision(precision)
    if precision != "fp32" and common_feature_extractor is not MLP:
        raise ValueError(f"precision {precision!r} is computed by the default MLP networks "
                         f"(common_feature_extractor=MLP), not by {getattr(common_feature_extractor, '__name__', common_feature_extractor)}")
    return precision


#: Algorithms whose actor may have a memory (``recurrent_net``).
RECURRENT_ALGORITHMS = ("DDQN", "DQN")


def _memory_class(algorithm_name, recurrent_net, recurrent_nets=False, sequence_overlap=0.5,
                  recurrent_net_kwargs=None):
    """The memory network class of an actor (None: feed-forward), refusing what is not
    served: a memory for another algorithm than DDQN, an unknown name, an overlap outside
    [0, 1); the memory's settings given without a memory are said to have no effect."""
    if not 0.0 <= float(sequence_overlap) < 1.0:
        raise ValueError(f"sequence_overlap must be in [0, 1), got {sequence_overlap!r}")
    if recurrent_net is None and recurrent_nets:
        recurrent_net = "GRU"   # older pytorchrl scripts' switch: a GRU memory
    if recurrent_net is None:
        if float(sequence_overlap) != 0.5 or recurrent_net_kwargs:
            say_once(("no memory", algorithm_name), "OffPolicyActor: sequence_overlap and recurrent_net_kwargs have "
                                                    "no effect without recurrent_net (a feed-forward actor)")
        return None
    if algorithm_name not in RECURRENT_ALGORITHMS:
        raise ValueError(f"recurrent_net is supported for DDQN only (recurrent DQN, R2D2-style); "
                         f"{algorithm_name} actors are feed-forward")
    return get_memory_network(recurrent_net)


#: gSDE's settings with their defaults (Stable-Baselines3's for SAC), other than ``use_sde``.
SDE_DEFAULTS = {"log_std_init": -3.0, "sde_sample_freq": -1, "full_std": True, "use_expln": False}


def _check_sde(algorithm_name, action_space, use_sde, common_feature_extractor, common_feature_extractor_kwargs,
               **settings):
    """Refuse gSDE where it is not served (another algorithm than SAC, Discrete actions, a
    network without hidden layer) and its settings given without it (they would have no
    effect); ``settings`` are those of ``SDE_DEFAULTS``."""
    if not use_sde:
        changed = sorted(k for k, v in settings.items() if v != SDE_DEFAULTS[k])
        if changed:
            raise ValueError(f"{', '.join(changed)} configure gSDE and have no effect without use_sde=True")
        return
    if algorithm_name != "SAC":
        raise ValueError(f"use_sde (gSDE) is served for SAC's Gaussian policy, not for {algorithm_name}")
    if not isinstance(action_space, gym.spaces.Box):
        raise ValueError(f"use_sde (gSDE) needs a Box action space, got {type(action_space).__name__}")
    if common_feature_extractor is MLP and not (common_feature_extractor_kwargs or {}).get("hidden_sizes", [256]):
        raise ValueError("use_sde (gSDE) needs a policy network with a hidden layer: its noise is a function of "
                         "the last hidden layer")
    if int(settings["sde_sample_freq"]) == 0 or int(settings["sde_sample_freq"]) < -1:
        raise ValueError(f"sde_sample_freq must be -1 (a new noise at the start of each rollout) or >= 1, "
                         f"got {settings['sde_sample_freq']!r}")


class _Scaled(nn.Module):
    """Maps actions in [-1, 1] to the bounds of a Box space and back (no parameters)."""

    def __init__(self, space):
        super().__init__()
        low = torch.tensor(np.array(space.low, dtype=np.float32)).reshape(-1)
        high = torch.tensor(np.array(space.high, dtype=np.float32)).reshape(-1)
        self.register_buffer("scale", (high - low) / 2, persistent=False)
        self.register_buffer("center", (high + low) / 2, persistent=False)

    def to_env(self, a):
        return a * self.scale + self.center

    def from_env(self, a):
        return (a - self.center) / self.scale


@accelerated(Accelerator("acting", "numpy acting", NumpyOffPolicyActing.build,
                         ("act_torch", "q_values", "q_head", "policy_output", "sample_policy", "deterministic_policy",
                          "_obs_features", "normalize", "_random_actions"), fallback="acting in torch"))
class OffPolicyActor(Actor):
    """Networks of an off-policy algorithm (see the module docstring).

    Parameters
    ----------
    device : str or torch.device
        Device of the networks.
    input_space : gymnasium.Space
        Observation space.
    action_space : gymnasium.spaces.Discrete or gymnasium.spaces.Box
        Action space (DDQN: Discrete; DDPG/TD3: Box; SAC, MPO: either).
    algorithm_name : str
        "DDQN", "DDPG", "TD3", "SAC" or "MPO": which networks to build.
    noise : str or None
        Exploration noise of deterministic policies (DDPG, TD3): "Gauss" (default for
        them), "OU" (Ornstein-Uhlenbeck, reset at episode ends) or "NoNoise".
    restart_model : str or None
        Path of a saved state dict to load after building.
    sequence_overlap : float
        Recurrent actors: the fraction, in [0, 1), of a stored sequence (burn-in and
        training steps of a ``RecurrentReplayBuffer``) that the next sequence of the same
        environment repeats; sequences start ``(1 - sequence_overlap) * (burn_in +
        sequence_length)`` steps apart (at least 1).
    recurrent_net : str, MemoryNetwork class or None
        DDQN only: a memory between the observation features and the Q-network's MLP,
        "GRU", "LSTM" (``get_memory_network``) or a ``MemoryNetwork`` subclass; None: a
        feed-forward actor. Other algorithms refuse it.
    recurrent_net_kwargs : dict
        Keyword arguments of the memory network (``hidden_size``, 64 by default).
    recurrent_nets : bool
        Older pytorchrl scripts' switch for a recurrent actor (True: a GRU memory).
    obs_feature_extractor : nn.Module class or None
        Network applied to observations before the MLP (e.g. a CNN for images), built as
        ``obs_feature_extractor(input_space, **obs_feature_extractor_kwargs)``; one for
        the critics and one for the policy. None: the flattened observation.
    obs_feature_extractor_kwargs : dict
        Its keyword arguments.
    act_feature_extractor : nn.Module class or None
        Network applied to actions before critics Q(s, a) (None: the action itself).
    act_feature_extractor_kwargs : dict
        Its keyword arguments.
    common_feature_extractor : nn.Module class
        Network over the (observation, action) features: ``MLP`` (computed as one ensemble
        for all critics) or another class built as ``cls(input_space, **kwargs)``.
    common_feature_extractor_kwargs : dict
        Its keyword arguments (for MLP: ``hidden_sizes``, ``activation``; default 256, 256
        with ReLU).
    num_critics : int
        Critics of TD3 and SAC (their minimum is the target); DDQN and DDPG use one.
    noise_kwargs : dict
        Parameters of the noise: ``sigma`` (default 0.1, in units of half the action
        range), and for OU ``theta`` (0.15) and ``dt`` (1e-2).
    dueling : bool
        DDQN: split the Q-network's output into a state value and action advantages.
    precision : str
        Number format of the MLP networks (critics, Q-network, policy): "fp32", or "bf16":
        the products between their hidden layers in bfloat16 with float32 accumulation
        (``EnsembleMLP``), in updates and acting alike, on the numpy and torch paths. It
        pays on CPUs with AVX512-BF16/AMX and on GPUs, for mini-batches of 128 rows or
        more (SAC's 256: its updates are mostly such products). Needs the default MLP
        (``common_feature_extractor=MLP``); an image extractor takes its own ``precision``
        in ``obs_feature_extractor_kwargs``.
    normalize_observations, observation_clip
        Observation normalisation, as in ``Actor`` (running statistics held by the actor,
        updated by the learner and sent with the acting weights).
    use_sde : bool
        SAC with Box actions: explore with gSDE (``StateDependentNoiseHead``, with a mean
        clipped to [-2, 2] as Stable-Baselines3's SAC does): the policy network gives
        latent features (its last hidden layer), from which the head computes the mean,
        and the noise ``latent @ W`` with exploration weights ``W`` drawn per environment
        (``reset_noise``). Its ``log_std`` is a weight, trained and sent to collectors; the
        drawn weights are each actor's own. Training draws one matrix per mini-batch
        (``sample_sde_eps``). Refused for other algorithms.
    log_std_init : float
        gSDE: initial log standard deviation of the exploration weights (SB3's -3).
    sde_sample_freq : int
        gSDE: new exploration weights every ``sde_sample_freq`` acting steps; -1: only at
        the start of each rollout (``reset_noise``, called by the collectors), as in SB3.
    full_std : bool
        gSDE: one standard deviation per (latent feature, action dimension) (True) or per
        latent feature.
    use_expln : bool
        gSDE: standard deviation ``expln(log_std)`` (slower growth above 0) instead of
        ``exp(log_std)``.
    """

    def __init__(self, device, input_space, action_space, algorithm_name="DDQN", noise=None, restart_model=None,
                 sequence_overlap=0.5, recurrent_net=None, recurrent_net_kwargs=None, obs_feature_extractor=None,
                 obs_feature_extractor_kwargs=None, act_feature_extractor=None, act_feature_extractor_kwargs=None,
                 common_feature_extractor=MLP, common_feature_extractor_kwargs=None, num_critics=2,
                 noise_kwargs=None, dueling=False, recurrent_nets=False, precision="fp32", normalize_observations=False,
                 observation_clip=DEFAULT_CLIP, use_sde=False, log_std_init=-3.0, sde_sample_freq=-1, full_std=True,
                 use_expln=False):
        if algorithm_name not in ALGORITHM_NETWORKS:
            raise ValueError(f"OffPolicyActor serves {sorted(ALGORITHM_NETWORKS)}, not {algorithm_name!r}")
        memory_cls = _memory_class(algorithm_name, recurrent_net, recurrent_nets, sequence_overlap,
                                   recurrent_net_kwargs)
        check_off_policy_spaces(input_space, action_space, algorithm_name)
        input_space = packed_space(input_space)
        if noise not in NOISES:
            raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")
        precision = _check_mlp_precision(precision, common_feature_extractor)
        _check_sde(algorithm_name, action_space, use_sde, common_feature_extractor, common_feature_extractor_kwargs,
                   log_std_init=log_std_init, sde_sample_freq=sde_sample_freq, full_std=full_std,
                   use_expln=use_expln)
        super().__init__(device, input_space, action_space, algorithm_name, normalize_observations, observation_clip)
        self.precision = precision
        critic_kind, policy_kind = ALGORITHM_NETWORKS[algorithm_name]
        self.discrete = isinstance(action_space, gym.spaces.Discrete)   # check_off_policy_spaces passed
        self.sequence_overlap = float(sequence_overlap)
        self.noise = (noise or "Gauss") if policy_kind == "deterministic" else None
        self.noise_kwargs = {"sigma": 0.1, "theta": 0.15, "dt": 1e-2, **(noise_kwargs or {})}
        self.dueling = bool(dueling)
        if self.dueling and critic_kind != "q":
            raise ValueError("dueling Q-networks are for DDQN")
        self.num_actions = int(action_space.n) if self.discrete else None
        self.act_dim = 1 if self.discrete else int(np.prod(action_space.shape))
        self.action_shape = (1,) if self.discrete else (self.act_dim,)
        self.action_dtype = torch.int64 if self.discrete else torch.float32
        self.num_critics = int(num_critics) if algorithm_name in ("TD3", "SAC") else 1
        if self.num_critics < 1:
            raise ValueError(f"num_critics must be >= 1, got {num_critics}")
        common_kwargs = {"hidden_sizes": [256, 256], "activation": nn.ReLU, **(common_feature_extractor_kwargs or {})}

        # Critics: [obs features] (+ [action features]) -> common network -> one output.
        self.critic_obs_net = self._obs_net(obs_feature_extractor, obs_feature_extractor_kwargs)
        obs_size = self._size_of(self.critic_obs_net, input_space)
        # DDQN's memory: [obs features] -> memory -> common network.
        self.memory = None
        if memory_cls is not None:
            self.memory = memory_cls(obs_size, **(recurrent_net_kwargs or {}))
            obs_size = self.memory.num_outputs
        self.critic_act_net = None
        in_size = obs_size
        if critic_kind == "qsa":
            if act_feature_extractor is not None:
                self.critic_act_net = act_feature_extractor(action_space, **(act_feature_extractor_kwargs or {}))
                in_size += self._size_of(self.critic_act_net, action_space)
            else:
                in_size += self.num_actions if self.discrete else self.act_dim
        self.critic_kind = critic_kind
        if critic_kind == "q" or self.discrete:
            q_out = self.num_actions + (1 if self.dueling else 0)
            in_size = obs_size
        else:
            q_out = 1
        self.critics = self._common_net(common_feature_extractor, common_kwargs, in_size, q_out, self.num_critics)

        # Policy: [obs features] -> common network -> action head.
        self.policy_kind = policy_kind
        self.policy_obs_net = self.policy_net = self.sde_head = None
        self.use_sde = bool(use_sde)
        self.sde_sample_freq = int(sde_sample_freq)
        self._sde_eps = None       # this actor's exploration draws (n_envs, latent, act_dim): not a weight
        self._sde_steps = 0        # acting steps since they were drawn
        if policy_kind is not None:
            self.policy_obs_net = self._obs_net(obs_feature_extractor, obs_feature_extractor_kwargs)
            p_in = self._size_of(self.policy_obs_net, input_space)
            if self.use_sde:
                self.policy_net = _LatentNet(self._common_net, common_feature_extractor, common_kwargs, p_in)
                self.sde_head = StateDependentNoiseHead(self.policy_net.num_outputs, self.act_dim, log_std_init,
                                                        full_std, use_expln)
            else:
                p_out = self.num_actions if self.discrete else (2 * self.act_dim if policy_kind == "stochastic"
                                                               else self.act_dim)
                self.policy_net = self._common_net(common_feature_extractor, common_kwargs, p_in, p_out, 1)
        self.scaler = None if self.discrete else _Scaled(action_space)

        # Exploration state travels with the acting weights: collectors act as the learner says.
        self.register_buffer("epsilon", torch.tensor(1.0))   # DDQN: probability of a random action
        self.register_buffer("warmup", torch.tensor(1.0))    # 1: uniform random actions (before learning)
        self.to(self.device)
        if restart_model:
            self.load_restart_model(restart_model)

    @classmethod
    def create_factory(cls, input_space, action_space, algorithm_name="DDQN", noise=None, restart_model=None,
                       sequence_overlap=0.5, recurrent_net=None, recurrent_net_kwargs=None,
                       obs_feature_extractor=None, obs_feature_extractor_kwargs=None, act_feature_extractor=None,
                       act_feature_extractor_kwargs=None, common_feature_extractor=MLP,
                       common_feature_extractor_kwargs=None, num_critics=2, noise_kwargs=None, dueling=False,
                       recurrent_nets=False, precision="fp32", normalize_observations=False,
                       observation_clip=DEFAULT_CLIP, use_sde=False, log_std_init=-3.0, sde_sample_freq=-1,
                       full_std=True, use_expln=False):
        """Return a picklable ``factory(device)`` building an OffPolicyActor (parameters as in the class)."""
        # A wrong name, algorithm or precision fails here, not in a worker.
        recurrent_net = _memory_class(algorithm_name, recurrent_net, recurrent_nets, sequence_overlap,
                                      recurrent_net_kwargs)
        _check_mlp_precision(precision, common_feature_extractor)
        if algorithm_name in ALGORITHM_NETWORKS:
            check_off_policy_spaces(input_space, action_space, algorithm_name)
        _check_sde(algorithm_name, action_space, use_sde, common_feature_extractor, common_feature_extractor_kwargs,
                   log_std_init=log_std_init, sde_sample_freq=sde_sample_freq, full_std=full_std,
                   use_expln=use_expln)
        check_normalization(input_space, normalize_observations, observation_clip)
        return ComponentFactory(
            cls, input_space=input_space, action_space=action_space, algorithm_name=algorithm_name, noise=noise,
            restart_model=restart_model, sequence_overlap=sequence_overlap, recurrent_net=recurrent_net,
            recurrent_net_kwargs=dict(recurrent_net_kwargs or {}), obs_feature_extractor=obs_feature_extractor,
            obs_feature_extractor_kwargs=dict(obs_feature_extractor_kwargs or {}),
            act_feature_extractor=act_feature_extractor,
            act_feature_extractor_kwargs=dict(act_feature_extractor_kwargs or {}),
            common_feature_extractor=common_feature_extractor,
            common_feature_extractor_kwargs=dict(common_feature_extractor_kwargs or {}), num_critics=num_critics,
            noise_kwargs=dict(noise_kwargs or {}), dueling=dueling, precision=precision,
            normalize_observations=normalize_observations, observation_clip=observation_clip, use_sde=use_sde,
            log_std_init=log_std_init, sde_sample_freq=sde_sample_freq, full_std=full_std, use_expln=use_expln)

    # ----------------------------------------------------------------- building
    def _obs_net(self, cls, kwargs):
        return None if cls is None else cls(self.input_space, **(kwargs or {}))

    @staticmethod
    def _size_of(net, space):
        if net is None:
            return int(np.prod(space.shape)) if space.shape else 1
        if not hasattr(net, "num_outputs"):
            raise ValueError(f"feature extractor {type(net).__name__} must expose num_outputs")
        return int(net.num_outputs)

    def _common_net(self, cls, kwargs, in_size, out_size, copies):
        if cls is MLP:
            return EnsembleMLP(in_size, kwargs.get("hidden_sizes", [256, 256]), out_size, copies,
                               kwargs.get("activation", nn.ReLU), precision=self.precision)
        return _GenericHeads(cls, kwargs, in_size, out_size, copies)

    # ------------------------------------------------------------------ networks
    def _obs_features(self, net, obs):
        obs = self.normalize(obs)
        return obs.reshape(obs.shape[0], -1).float() if net is None else net(obs)

    def q_values(self, obs, action=None, state=None):
        """Critic outputs (num_critics, B, k): Q(s) per action (k = num_actions) for DDQN
        and discrete SAC, Q(s, a) (k = 1) for critics of continuous actions (``action``:
        (B, act_dim) in [-1, 1] units, i.e. as the policy outputs them).

        A recurrent actor steps its memory once from ``state`` (B, state size; None: the
        initial state); ``memory_step`` also returns the next state."""
        if self.memory is not None:
            return self.memory_step(obs, state)[0]
        return self.q_head(self._obs_features(self.critic_obs_net, obs), action)

    def q_head(self, x, action=None):
        """Critic outputs (as ``q_values``) from observation features ``x`` (B, ...): the
        memory's outputs for a recurrent actor."""
        if self.critic_kind == "qsa" and not self.discrete:
            a = action if self.critic_act_net is None else self.critic_act_net(action)
            x = torch.cat([x, a], dim=1)
        q = self.critics(x)
        return q_learning.dueling_q(TORCH, q) if self.dueling else q

    # -------------------------------------------------------------------- memory
    def memory_step(self, obs, state=None):
        """Recurrent actor: ``(Q-values (1, B, num_actions), next state (B, state size))``
        of one step on ``obs`` from ``state`` (None: the initial state)."""
        x = self._obs_features(self.critic_obs_net, obs)
        if state is None:
            state = x.new_zeros((x.shape[0], self.memory.state_size))
        out, state = self.memory(x, state)
        return self.q_head(out), state

    def memory_unroll(self, obs, state, done, burn_in=0):
        """Run the memory over sequences, the first ``burn_in`` steps without gradient.

        Parameters
        ----------
        obs : torch.Tensor
            Observations (S, B, *obs_shape), time first.
        state : torch.Tensor
            State (B, state size) before the first step (as stored while acting).
        done : torch.Tensor
            (S, B, 1) 1 where an episode ended after step t: the state is zeroed before
            step t + 1, as the collector did.
        burn_in : int
            Steps that only bring the state up to date: computed without gradient, their
            outputs are not returned.

        Returns
        -------
        out : torch.Tensor
            Memory outputs (S - burn_in, B, hidden size) of the steps after the burn-in
            (what ``q_head`` reads).
        states : torch.Tensor
            States (S - burn_in, B, state size) after each of those steps, before the
            zeroing of an ended episode's (what ``q_head(memory(.., states[t]))`` of the
            observation that followed step t starts from).
        """
        S, B = obs.shape[:2]
        if burn_in > 0:
            with torch.no_grad():
                x = self._obs_features(self.critic_obs_net, obs[:burn_in].reshape(burn_in * B, *obs.shape[2:]))
                _, states = self.memory.sequence(x.reshape(burn_in, B, -1), state, done[:burn_in],
                                                 return_states=True)
                state = states[-1] * (1.0 - done[burn_in - 1])
        T = S - burn_in
        x = self._obs_features(self.critic_obs_net, obs[burn_in:].reshape(T * B, *obs.shape[2:]))
        return self.memory.sequence(x.reshape(T, B, -1), state, done[burn_in:], return_states=True)

    def policy_output(self, obs):
        """Raw output (B, k) of the policy network (with gSDE: its latent features)."""
        return self.policy_net(self._obs_features(self.policy_obs_net, obs))[0]

    def sample_policy(self, obs, deterministic=False, sde_eps=None):
        """SAC's policy: ``(action, log-probability (B, 1), probabilities or None)``.

        Box actions: a tanh-squashed Gaussian sample in [-1, 1] units (reparametrized, so
        gradients flow) with the log-probability of the squashed sample. Discrete: a
        sample of the categorical distribution (B, 1), with ``log_probs`` and ``probs``
        (B, num_actions) returned as ``(action, log_probs, probs)``.

        With gSDE, ``sde_eps`` holds the standard normal draws of the exploration weights
        (``StateDependentNoiseHead.sample``): one matrix (``sample_sde_eps``) in training;
        None: this actor's acting draws, one per row (``reset_noise``).
        """
        out = self.policy_output(obs)
        if self.use_sde:
            if deterministic:
                return torch.tanh(self.sde_head.mean(out)), None, None
            if sde_eps is None:
                sde_eps = self._acting_eps(out.shape[0])
            a, logp = self.sde_head.sample(out, sde_eps)
            return a, logp, None
        if sde_eps is not None:
            raise ValueError("sde_eps are gSDE's draws; this actor has no gSDE (use_sde=False)")
        if self.discrete:
            log_probs = F.log_softmax(out, dim=-1)
            probs = log_probs.exp()
            action = log_probs.argmax(-1, keepdim=True) if deterministic else torch.multinomial(probs, 1)
            return action, log_probs, probs
        mean = out[:, :self.act_dim]
        if deterministic:
            return torch.tanh(mean), None, None
        a, logp, _ = sac.squashed_gaussian(TORCH, out, torch.randn_like(mean))
        return a, logp, None

    def deterministic_policy(self, obs):
        """DDPG/TD3's policy: actions (B, act_dim) in [-1, 1] units."""
        return torch.tanh(self.policy_output(obs))

    # -------------------------------------------------------------------- acting
    def initial_state(self, num_envs):
        """Zero state (num_envs, state size) of a recurrent actor's memory, float32 numpy;
        Ornstein-Uhlenbeck noise keeps a state (num_envs, act_dim) per environment too;
        other actors none."""
        if self.memory is not None:
            return np.zeros((num_envs, self.memory.state_size), dtype=np.float32)
        if self.noise == "OU":
            return np.zeros((num_envs, self.act_dim), dtype=np.float32)
        return None

    def reset_state(self, state, env_indices):
        """``state`` with the rows ``env_indices`` (episodes that ended) zeroed: a copy for a
        memory's state (the collector stored the one it passed), in place for noise."""
        if self.memory is not None:
            state = np.array(state, dtype=np.float32)
        if state is not None:
            state[env_indices] = 0.0
        return state

    @property
    def is_recurrent(self):
        return self.memory is not None

    def act_torch(self, obs, state=None, deterministic=False):
        n = obs.shape[0]
        q = None
        if self.memory is not None:
            # The memory reads every observation, random actions included: the state stored
            # with each step is the one the network had there.
            q, state = self.memory_step(obs, state)
        if not deterministic and float(self.warmup) > 0:
            return self._random_actions(n), {}, state
        if self.policy_kind is None:   # DDQN: epsilon-greedy on the Q-values
            action = (self.q_values(obs) if q is None else q)[0].argmax(-1, keepdim=True)
            if not deterministic:
                eps = float(self.epsilon)
                explore = torch.from_numpy(self.np_rng.random(n) < eps).to(action.device)
                if bool(explore.any()):
                    action = torch.where(explore[:, None], self._random_actions(n).to(action.device), action)
            return action, {}, state
        if self.policy_kind == "stochastic":
            action = self.sample_policy(obs, deterministic)[0]
            return (action if self.discrete else self.scaler.to_env(action)), {}, state
        action = self.deterministic_policy(obs)
        if not deterministic and self.noise != "NoNoise":
            noise, state = self._noise(n, state)
            action = (action + torch.from_numpy(noise).to(action.device)).clamp(-1.0, 1.0)
        return self.scaler.to_env(action), {}, state

    # --------------------------------------------------------------------- gSDE
    def reset_noise(self, num_envs=1):
        """Draw new gSDE exploration weights, one matrix per environment (no effect without
        gSDE). Collectors call it at the start of every rollout; with ``sde_sample_freq`` >
        0 acting also calls it every ``sde_sample_freq`` steps. The draws are this actor's
        own: weight updates (``load_state_dict``) leave them, and the current ``log_std``
        scales them at every step.

        Parameters
        ----------
        num_envs : int
            Environments acted for (rows of the observations ``act`` will get).
        """
        if not self.use_sde:
            return
        shape = (int(num_envs), self.sde_head.latent_dim, self.act_dim)
        self._sde_eps = torch.from_numpy(self.np_rng.standard_normal(shape, dtype=np.float32)).to(self.device)
        self._sde_steps = 0

    def sample_sde_eps(self):
        """Standard normal draws (latent_dim, act_dim) of one gSDE exploration matrix, for a
        training mini-batch (SB3 draws one per gradient step); torch's generator, so a
        captured update draws anew at every replay."""
        return torch.randn((self.sde_head.latent_dim, self.act_dim), device=self.device)

    def _acting_eps(self, n):
        if self._sde_eps is None or self._sde_eps.shape[0] != n or \
                (self.sde_sample_freq > 0 and self._sde_steps >= self.sde_sample_freq):
            self.reset_noise(n)
        self._sde_steps += 1
        return self._sde_eps

    def _random_actions(self, n):
        if self.discrete:
            return torch.from_numpy(self.np_rng.integers(0, self.num_actions, (n, 1)))
        a = self.np_rng.uniform(-1.0, 1.0, (n, self.act_dim)).astype(np.float32)
        return self.scaler.to_env(torch.from_numpy(a).to(self.device))

    def _noise(self, n, state):
        sigma = float(self.noise_kwargs["sigma"])
        if self.noise == "OU":
            if state is None:
                state = np.zeros((n, self.act_dim), dtype=np.float32)
            theta, dt = float(self.noise_kwargs["theta"]), float(self.noise_kwargs["dt"])
            state = state + theta * -state * dt + sigma * math.sqrt(dt) * \
                self.np_rng.standard_normal(state.shape).astype(np.float32)
            return state, state
        return (sigma * self.np_rng.standard_normal((n, self.act_dim))).astype(np.float32), state

    # ------------------------------------------------------------------- weights
    def acting_modules(self):
        """Names of the submodules collectors act with (and the observation statistics,
        ``obs_norm``, which ``acting_state_dict`` sends too)."""
        if self.policy_kind is None:
            return ("critic_obs_net", "memory", "critics")
        return ("policy_obs_net", "policy_net", "sde_head")

    def acting_state_dict(self):
        prefixes = tuple(f"{m}." for m in self.acting_modules() + ("obs_norm",))
        return {k: v for k, v in self.state_dict().items()
                if k.startswith(prefixes) or k in ("epsilon", "warmup")}


class _LatentNet(nn.Module):
    """The policy network of gSDE: the common network up to its last hidden layer, whose
    activations (B, num_outputs) are the latent features.

    Parameters
    ----------
    build : callable
        ``OffPolicyActor._common_net``.
    cls, kwargs
        The common network's class and keyword arguments (MLP: ``hidden_sizes``,
        ``activation``).
    in_size : int
        Input size.
    """

    def __init__(self, build, cls, kwargs, in_size):
        super().__init__()
        if cls is MLP:
            # An ensemble of one whose output layer is the last hidden layer, activated here.
            sizes = list(kwargs.get("hidden_sizes", [256, 256]))
            self.body = build(cls, {**kwargs, "hidden_sizes": sizes[:-1]}, in_size, sizes[-1], 1)
            self.act = self.body.act
            self.num_outputs = int(sizes[-1])
        else:
            space = gym.spaces.Box(-np.inf, np.inf, (int(in_size),), dtype=np.float32)
            self.body = cls(space, **kwargs)
            self.act = None
            self.num_outputs = OffPolicyActor._size_of(self.body, space)

    def forward(self, x):
        """Latent features (1, B, num_outputs), stacked as the ensembles' outputs."""
        return self.act(self.body(x)) if self.act is not None else self.body(x)[None]


class _GenericHeads(nn.Module):
    """``copies`` networks ``cls(Box(in_size), **kwargs)`` each with a linear output layer,
    stacked like ``EnsembleMLP``'s output (for feature extractors other than MLP)."""

    def __init__(self, cls, kwargs, in_size, out_size, copies):
        super().__init__()
        space = gym.spaces.Box(-np.inf, np.inf, (int(in_size),), dtype=np.float32)
        self.bodies = nn.ModuleList(cls(space, **kwargs) for _ in range(copies))
        self.heads = nn.ModuleList(nn.Linear(OffPolicyActor._size_of(b, space), out_size) for b in self.bodies)

    def forward(self, x):
        return torch.stack([h(b(x)) for b, h in zip(self.bodies, self.heads)])


__all__ = ["OffPolicyActor"]
