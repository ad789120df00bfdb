"""Actor-critic network for on-policy algorithms (PPO, A2C)."""

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from pytorchrl import ACT, IVAL, LOGP, VAL
from pytorchrl.agent.accel import Accelerator, accelerated
from pytorchrl.agent.accel.on_policy import NumpyPolicy
from pytorchrl.agent.actors.base import Actor
from pytorchrl.agent.actors.distributions import (BernoulliHead, CategoricalHead, DiagGaussianHead,
                                                  MultiCategoricalHead)
from pytorchrl.agent.actors.feature_extractors.mlp import MLP, ParallelMLP
from pytorchrl.agent.actors.memory_networks import get_memory_network
from pytorchrl.agent.actors.normalization import DEFAULT_CLIP, check_normalization
from pytorchrl.agent.factory import ComponentFactory
from pytorchrl.agent.spaces import (ON_POLICY_ACTION_SPACES, PackedBox, check_action_space,
                                    check_observation_space, packed_space)


def _orthogonal_init(module, gain):
    if hasattr(module, "orthogonal_init"):
        module.orthogonal_init(gain)
        return
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.orthogonal_(m.weight, gain=gain)
            nn.init.zeros_(m.bias)


def _twin_to_pair(actor, state_dict, prefix, *unused):
    """Read the weights of a ``ParallelMLP`` twin (``twin_net.*``, what an A2C actor with
    separate MLPs held before it had one network each) as those of the two ``MLP``."""
    twin = prefix + "twin_net."
    if twin + "first.weight" not in state_dict:
        return
    first_w, first_b = state_dict.pop(twin + "first.weight"), state_dict.pop(twin + "first.bias")
    h0 = first_w.shape[0] // 2
    layers = 1 + sum(1 for k in state_dict if k.startswith(twin + "weights."))
    for k, name in enumerate(("policy_net", "value_net")):
        net = f"{prefix}{name}.net."
        state_dict[net + "1.weight"] = first_w[k * h0:(k + 1) * h0].clone()
        state_dict[net + "1.bias"] = first_b[k * h0:(k + 1) * h0].clone()
        for i in range(layers - 1):
            # ParallelMLP multiplies h @ w[k]: nn.Linear holds the transpose.
            state_dict[f"{net}{3 + 2 * i}.weight"] = state_dict[f"{twin}weights.{i}"][k].T.clone()
            state_dict[f"{net}{3 + 2 * i}.bias"] = state_dict[f"{twin}biases.{i}"][k, 0].clone()
    for i in range(layers - 1):
        del state_dict[f"{twin}weights.{i}"], state_dict[f"{twin}biases.{i}"]


def default_feature_extractor(input_space):
    """``DictNet`` for packed Dict/Tuple observations, ``CNN`` for image observations
    (uint8 frames (C, H, W)), ``MLP`` otherwise."""
    from pytorchrl.agent.actors.feature_extractors.cnn import CNN
    from pytorchrl.agent.actors.feature_extractors.dict_net import DictNet
    if isinstance(packed_space(input_space), PackedBox):
        return DictNet
    shape = getattr(input_space, "shape", None) or ()
    if len(shape) == 3 and getattr(input_space, "dtype", None) == np.uint8 and min(shape[1:]) > 4:
        return CNN
    return MLP


def _int_value_refused(actor):
    """Why the numpy acting program cannot act for ``actor``: an intrinsic value head,
    whose value it does not compute (None without one)."""
    if getattr(actor, "ivalue_head", None) is not None:
        return "an intrinsic value head (int_value), which the numpy program does not compute"
    return None


@accelerated(Accelerator("acting", "numpy acting", NumpyPolicy.build,
                         ("act_torch", "get_action", "get_value", "_features", "normalize"), fallback="acting in torch",
                         refuses=_int_value_refused))
class OnPolicyActor(Actor):
    """Policy and value function for on-policy algorithms.

    ``act`` returns the environment action and, as extras, the action as trained on
    (``prl.ACT``: unclipped for Box spaces), its log-probability (``prl.LOGP``) and the
    value of the observation (``prl.VAL``).

    Parameters
    ----------
    device : str or torch.device
        Device on which the network lives.
    input_space : gymnasium.Space
        Observation space. A Dict or Tuple space is read packed (``PackedBox``: the
        observations given to ``act`` are packed vectors, as the vector envs hand them out).
    action_space : gymnasium.Space
        Action space: Discrete gets a categorical policy, Box a diagonal Gaussian,
        MultiDiscrete independent categoricals (``MultiCategoricalHead``), MultiBinary
        independent Bernoullis (``BernoulliHead``); others are refused
        (``UnsupportedSpaceError``).
    algorithm_name : str
        Name of the algorithm the actor serves (checked for compatibility).
    restart_model : str or None
        Path of a saved model (``model.state_dict``) or checkpoint to load after building.
    recurrent_net : str, MemoryNetwork class or None
        Recurrent memory after the feature extractor: "GRU", "LSTM" (``get_memory_network``)
        or a ``MemoryNetwork`` subclass; None: a feed-forward actor. Shared by policy and
        value when ``shared_policy_value_network``, else one memory per head. The actor's
        state is then carried between steps, zeroed where an episode ended.
    recurrent_net_kwargs : dict or None
        Keyword arguments of the memory network (``hidden_size``, 64 by default).
    feature_extractor_network : nn.Module class or None
        Network mapping observations to features (None: ``CNN`` for image observations,
        ``MLP`` otherwise); built as
        ``feature_extractor_network(input_space, **feature_extractor_kwargs)`` and exposing
        ``num_outputs`` (or inferred by a dummy forward pass).
    feature_extractor_kwargs : dict
        Keyword arguments of the feature extractor.
    shared_policy_value_network : bool
        One feature extractor for policy and value (True) or one each (False).
    ortho_init : bool
        Orthogonal initialisation of linear layers (gain sqrt(2), 0.01 for the policy
        output, 1 for the value output), as commonly used for PPO.
    log_std_init : float
        Initial log standard deviation of Gaussian policies.
    int_value : bool or None
        A second value head, of the intrinsic returns (``ivalue_head``, on the value
        features; RND_PPO's), whose estimate ``act`` returns as ``prl.IVAL``. None: only
        for ``algorithm_name`` RND_PPO.
    normalize_observations, observation_clip
        Observation normalisation, as in ``Actor`` (running statistics held by the actor,
        updated by the learner and sent with the acting weights).
    """

    ON_POLICY_ALGORITHMS = ("PPO", "A2C", "RND_PPO")
    #: Algorithms with one optimizer for the policy and one for the value function (A2C,
    #: as pytorchrl's): their separate MLP extractors are two ``MLP``, not one twin.
    SEPARATE_OPTIMIZER_ALGORITHMS = ("A2C",)
    #: Algorithms that train an intrinsic value head (``int_value=None`` gives them one).
    INT_VALUE_ALGORITHMS = ("RND_PPO",)

    def __init__(self, device, input_space, action_space, algorithm_name="PPO", restart_model=None,
                 feature_extractor_network=None, feature_extractor_kwargs=None,
                 shared_policy_value_network=True, ortho_init=True, log_std_init=0.0, recurrent_net=None,
                 recurrent_net_kwargs=None, int_value=None, normalize_observations=False,
                 observation_clip=DEFAULT_CLIP):
        if recurrent_net is not None:
            recurrent_net = get_memory_network(recurrent_net)
        if feature_extractor_network is None:
            feature_extractor_network = default_feature_extractor(input_space)
        if algorithm_name not in self.ON_POLICY_ALGORITHMS:
            raise ValueError(f"OnPolicyActor serves {self.ON_POLICY_ALGORITHMS}, not {algorithm_name!r}")
        self.check_spaces(input_space, action_space, algorithm_name)
        input_space = packed_space(input_space)
        super().__init__(device, input_space, action_space, algorithm_name, normalize_observations, observation_clip)
        self.shared_policy_value_network = shared_policy_value_network
        kwargs = dict(feature_extractor_kwargs or {})

        # Separate MLPs are computed as one ParallelMLP (same function, half the operators),
        # unless the algorithm trains policy and value with one optimizer each: the twin
        # holds both copies in each of its tensors, which one optimizer would then own.
        self.twin_net = None
        self.policy_net = self.value_net = None
        if (not shared_policy_value_network and feature_extractor_network is MLP
                and algorithm_name not in self.SEPARATE_OPTIMIZER_ALGORITHMS):
            self.twin_net = ParallelMLP(input_space, copies=2, **kwargs)
            num_features = self.twin_net.num_outputs
        else:
            self.policy_net = feature_extractor_network(input_space, **kwargs)
            if not shared_policy_value_network:
                self.value_net = feature_extractor_network(input_space, **kwargs)
            num_features = self._num_outputs(self.policy_net)

        self.memory = self.value_memory = None
        if recurrent_net is not None:
            memory_kwargs = dict(recurrent_net_kwargs or {})
            self.memory = recurrent_net(num_features, **memory_kwargs)
            if not shared_policy_value_network:
                self.value_memory = recurrent_net(num_features, **memory_kwargs)
            num_features = self.memory.num_outputs

        if isinstance(action_space, gym.spaces.Discrete):
            self.dist = CategoricalHead(num_features, int(action_space.n))
            self.action_shape = (1,)
            self.action_dtype = torch.int64
            self._low = self._high = None
        elif isinstance(action_space, gym.spaces.Box):
            dim = int(np.prod(action_space.shape))
            self.dist = DiagGaussianHead(num_features, dim, log_std_init)
            self.action_shape = (dim,)
            self.action_dtype = torch.float32
            self._low = torch.as_tensor(action_space.low, dtype=torch.float32).reshape(-1)
            self._high = torch.as_tensor(action_space.high, dtype=torch.float32).reshape(-1)
        elif isinstance(action_space, gym.spaces.MultiDiscrete):
            nvec = np.asarray(action_space.nvec).reshape(-1)
            self.dist = MultiCategoricalHead(num_features, nvec)
            self.action_shape = (len(nvec),)
            self.action_dtype = torch.int64
            self._low = self._high = None
        else:   # MultiBinary (check_spaces refused the rest)
            bits = int(np.prod(action_space.shape))
            self.dist = BernoulliHead(num_features, bits)
            self.action_shape = (bits,)
            self.action_dtype = torch.float32
            self._low = self._high = None
        self.value_head = nn.Linear(num_features, 1)
        if int_value is None:
            int_value = algorithm_name in self.INT_VALUE_ALGORITHMS
        self.ivalue_head = nn.Linear(num_features, 1) if int_value else None

        if ortho_init:
            for net in (self.twin_net, self.policy_net, self.value_net):
                if net is not None:
                    _orthogonal_init(net, np.sqrt(2))
            _orthogonal_init(self.dist.linear, 0.01)
            _orthogonal_init(self.value_head, 1.0)
            if self.ivalue_head is not None:
                _orthogonal_init(self.ivalue_head, 1.0)

        if self.value_net is not None and type(self.value_net) is MLP and type(self.policy_net) is MLP:
            self._register_load_state_dict_pre_hook(_twin_to_pair, with_module=True)

        self.to(self.device)
        if self._low is not None:
            self._low, self._high = self._low.to(self.device), self._high.to(self.device)
        if restart_model:
            self.load_restart_model(restart_model)

    @staticmethod
    def check_spaces(input_space, action_space, algorithm_name):
        """Refuse spaces this actor cannot serve (``UnsupportedSpaceError``, one line
        naming the space and ``algorithm_name``): called by ``create_factory`` too, so
        that a run is refused before any worker starts."""
        check_observation_space(input_space, algorithm_name)
        check_action_space(action_space, algorithm_name, ON_POLICY_ACTION_SPACES)

    def to_env_action(self, action):
        """The actions (B, *action_shape) as the environments take them: clipped to the
        bounds of a Box space, shifted by a MultiDiscrete space's ``start`` and shaped as
        its ``nvec``, int8 bits for a MultiBinary space; Discrete actions as they are."""
        space = self.action_space
        if self._low is not None:
            return torch.max(torch.min(action, self._high), self._low)
        if isinstance(space, gym.spaces.MultiDiscrete):
            start = np.asarray(space.start).reshape(-1)
            if start.any():
                action = action + torch.as_tensor(start, device=action.device)
            return action.reshape((-1,) + tuple(space.nvec.shape))
        if isinstance(space, gym.spaces.MultiBinary):
            return action.to(torch.int8).reshape((-1,) + tuple(space.shape))
        return action

    @staticmethod
    def _num_outputs(net):
        if hasattr(net, "num_outputs"):
            return int(net.num_outputs)
        raise ValueError(f"feature extractor {type(net).__name__} must expose num_outputs")

    @classmethod
    def create_factory(cls, input_space, action_space, algorithm_name="PPO", restart_model=None,
                       recurrent_net=None, recurrent_net_kwargs=None, feature_extractor_network=None,
                       feature_extractor_kwargs=None, shared_policy_value_network=True, ortho_init=True,
                       log_std_init=0.0, int_value=None, normalize_observations=False, observation_clip=DEFAULT_CLIP):
        """Return a picklable ``factory(device)`` building an OnPolicyActor (parameters as in the class).

        The parameters up to ``shared_policy_value_network`` are in pytorchrl's positional
        order (its scripts pass them positionally); ``ortho_init``, ``log_std_init``,
        ``int_value``, ``normalize_observations`` and ``observation_clip`` follow.
        """
        if recurrent_net is not None:
            recurrent_net = get_memory_network(recurrent_net)   # a wrong name fails here, not in a worker
        cls.check_spaces(input_space, action_space, algorithm_name)    # here, not in a worker
        check_normalization(input_space, normalize_observations, observation_clip)
        return ComponentFactory(cls, input_space=input_space, action_space=action_space,
                                algorithm_name=algorithm_name, restart_model=restart_model,
                                feature_extractor_network=feature_extractor_network,
                                feature_extractor_kwargs=dict(feature_extractor_kwargs or {}),
                                shared_policy_value_network=shared_policy_value_network,
                                ortho_init=ortho_init, log_std_init=log_std_init, recurrent_net=recurrent_net,
                                recurrent_net_kwargs=dict(recurrent_net_kwargs or {}), int_value=int_value,
                                normalize_observations=normalize_observations, observation_clip=observation_clip)

    def _features(self, obs):
        obs = self.normalize(obs)
        if self.twin_net is not None:
            pf, vf = self.twin_net(obs)
            return pf, vf
        pf = self.policy_net(obs)
        vf = pf if self.value_net is None else self.value_net(obs)
        return pf, vf

    # ------------------------------------------------------------------ memory
    def initial_state(self, num_envs):
        """Zero state (num_envs, state size) of a recurrent actor, float32 numpy; None
        for a feed-forward one."""
        if self.memory is None:
            return None
        size = self.memory.state_size + (0 if self.value_memory is None else self.value_memory.state_size)
        return np.zeros((num_envs, size), dtype=np.float32)

    def reset_state(self, state, env_indices):
        """A copy of ``state`` with the rows ``env_indices`` zeroed (their episode ended)."""
        if self.memory is None:
            return state
        state = np.array(state, dtype=np.float32)
        state[list(env_indices)] = 0.0
        return state

    def _memory_step(self, obs, state):
        """Features the heads read and the next state: (pf, vf, next_state), one step
        (``state`` None: the initial state)."""
        pf, vf = self._features(obs)
        if self.memory is None:
            return pf, vf, state
        if state is None:
            state = torch.as_tensor(self.initial_state(pf.shape[0]), device=pf.device)
        size = self.memory.state_size
        pf, policy_state = self.memory(pf, state[:, :size])
        if self.value_memory is None:
            return pf, pf, policy_state
        vf, value_state = self.value_memory(vf, state[:, size:])
        return pf, vf, torch.cat([policy_state, value_state], dim=1)

    def _memory_sequence(self, obs, rhs, done, return_states=False):
        """Features (T * B, ...) the heads read over sequences: ``obs`` (T, B, *obs_shape),
        ``rhs`` (B, state size) the state before the first step, ``done`` (T, B, 1) the
        episode ends (the state is zeroed after them, as while acting). With
        ``return_states``, also the state after every step (T, B, state size; see
        ``MemoryNetwork.sequence``)."""
        T, B = obs.shape[:2]
        pf, vf = self._features(obs.reshape(T * B, *obs.shape[2:]))
        size = self.memory.state_size
        pf, states = self.memory.sequence(pf.reshape(T, B, -1), rhs[:, :size], done, return_states=True)
        pf = pf.reshape(T * B, -1)
        if self.value_memory is None:
            vf = pf
        else:
            vf, value_states = self.value_memory.sequence(vf.reshape(T, B, -1), rhs[:, size:], done,
                                                          return_states=True)
            vf = vf.reshape(T * B, -1)
            states = torch.cat([states, value_states], dim=2)
        return (pf, vf, states) if return_states else (pf, vf)

    def _head_features(self, obs, rhs=None, done=None):
        if rhs is not None:
            return self._memory_sequence(obs, rhs, done)
        if self.memory is None:
            return self._features(obs)
        return self._memory_step(obs, None)[:2]     # single steps, each from the initial state

    # ------------------------------------------------------------------ acting
    def _heads(self, pf, vf, deterministic):
        action, logp = self.dist.sample(pf, deterministic)
        value = self.value_head(vf)
        return action, self.to_env_action(action), logp, value

    def get_action(self, obs, deterministic=False):
        """Act on a batch of observations (tensors; feed-forward actors).

        Returns (action, env_action, logp, value): ``action`` as stored for training,
        ``env_action`` as the environments take it (``to_env_action``), ``logp`` and ``value`` of shape (B, 1).
        """
        return self._heads(*self._features(obs), deterministic)

    def act_torch(self, obs, state=None, deterministic=False):
        if self.ivalue_head is not None:
            pf, vf, state = self._memory_step(obs, state)
            action, env_action, logp, value = self._heads(pf, vf, deterministic)
            return env_action, {ACT: action, LOGP: logp, VAL: value, IVAL: self.ivalue_head(vf)}, state
        if self.memory is None:
            action, env_action, logp, value = self.get_action(obs, deterministic)
        else:
            pf, vf, state = self._memory_step(obs, state)
            action, env_action, logp, value = self._heads(pf, vf, deterministic)
        return env_action, {ACT: action, LOGP: logp, VAL: value}, state

    def int_values(self, obs, state=None):
        """Intrinsic value estimates (N, 1) of ``obs`` (numpy, as ``values``; ``state``: the
        recurrent state of the rows), as a numpy array."""
        obs = torch.as_tensor(np.asarray(obs), device=self.device)
        state = None if state is None else torch.as_tensor(np.asarray(state), device=self.device)
        with torch.no_grad():
            return self.ivalue_head(self._memory_step(obs, state)[1]).cpu().numpy()

    def evaluate_with_int_value(self, obs, action, entropy_grad=True, rhs=None, done=None, distribution=False):
        """``evaluate_actions`` and the intrinsic value, from one forward pass: (logp,
        entropy, value, int_value), and the policy as a torch distribution last when
        ``distribution`` (for policy-loss add-ons). Arguments as in ``evaluate_actions``."""
        pf, vf = self._head_features(obs, rhs, done)
        logp, entropy = self.dist.log_prob_entropy(pf, action, entropy_grad)
        out = (logp, entropy, self.value_head(vf), self.ivalue_head(vf))
        return out + (self.dist.distribution(pf),) if distribution else out

    def get_value(self, obs, state=None):
        """Value estimate (B, 1) of a batch of observations (``state``: the recurrent state
        (B, state size) of a recurrent actor; None: its initial state)."""
        if self.memory is None:
            return self.value_head(self._features(obs)[1])
        return self.value_head(self._memory_step(obs, state)[1])

    value_torch = get_value

    @property
    def is_recurrent(self):
        return self.memory is not None

    def logits_and_value(self, obs, rhs=None, done=None):
        """Raw policy head output (logits for a categorical policy, means for a Gaussian one)
        and value estimate (B, 1) of a batch of observations.

        A recurrent actor reads sequences: ``obs`` (T, B, *obs_shape), ``rhs`` (B, state
        size) the state before their first step and ``done`` (T, B, 1) their episode ends;
        the outputs are then (T * B, ...), time first. Without them a recurrent actor reads
        each row as one step from its initial state.
        """
        pf, vf = self._head_features(obs, rhs, done)
        return self.dist.linear(pf), self.value_head(vf)

    def evaluate_actions(self, obs, action, entropy_grad=True, rhs=None, done=None):
        """Return (logp, entropy, value), each (B, 1), of ``action`` taken at ``obs``.

        ``entropy_grad=False`` computes the entropy outside the autograd graph (for
        reporting only, when the loss does not use it). ``rhs`` and ``done``: sequences
        of a recurrent actor, as in ``logits_and_value`` (``action`` is then (T * B, ...)).
        """
        pf, vf = self._head_features(obs, rhs, done)
        logp, entropy = self.dist.log_prob_entropy(pf, action, entropy_grad)
        return logp, entropy, self.value_head(vf)

    def evaluate_actions_and_distribution(self, obs, action, entropy_grad=True, rhs=None, done=None):
        """``evaluate_actions`` and, from the same forward pass, the policy at ``obs`` as a
        torch distribution (``action_distribution``): (logp, entropy, value, dist). What
        the on-policy algorithms call when policy-loss add-ons need the distribution."""
        pf, vf = self._head_features(obs, rhs, done)
        logp, entropy = self.dist.log_prob_entropy(pf, action, entropy_grad)
        return logp, entropy, self.value_head(vf), self.dist.distribution(pf)

    def action_distribution(self, obs, rhs=None, done=None):
        """The policy at a batch of observations as a ``torch.distributions`` object:
        ``Categorical`` for a Discrete action space, a diagonal Normal (one event over the
        action dimensions) for a Box; batch shape (B,), or (T * B,) for the sequences of a
        recurrent actor (``rhs``, ``done`` as in ``logits_and_value``)."""
        return self.dist.distribution(self._head_features(obs, rhs, done)[0])


    def evaluate_sequence(self, obs, action, rhs, done):
        """Log-probabilities and values over the sequences of a recurrent actor, and the
        memory's state after every step (what values an observation reached there).

        Parameters
        ----------
        obs : torch.Tensor
            Observations (T, B, *obs_shape), time first.
        action : torch.Tensor
            Actions taken (T * B, ...), time first.
        rhs : torch.Tensor
            State (B, state size) before the first step.
        done : torch.Tensor
            (T, B, 1) 1 where the episode ended after step t (the state is zeroed before
            step t + 1, as the collector did).

        Returns
        -------
        logp, value : torch.Tensor
            (T * B, 1) each, time first.
        states : torch.Tensor
            (T, B, state size): the state after step t, before the zeroing that follows an
            episode end (the observation after the last step is valued from
            ``states[-1]`` zeroed where ``done[-1]``, a truncated episode's final
            observation from the state of its last step).
        """
        pf, vf, states = self._memory_sequence(obs, rhs, done, return_states=True)
        logp, _ = self.dist.log_prob_entropy(pf, action, entropy_grad=False)
        return logp, self.value_head(vf), states
