"""The actor protocol: what a collection worker needs from a network to act.

A collector knows nothing of an algorithm's quantities. It calls, once per vectorized
step, ``env_action, extras, next_state = actor.act(obs, state)`` and hands ``extras`` to
its storage, which keeps the ones the algorithm declared (``Algorithm.acting_extras``:
log-probability and value for PPO, nothing for DQN). Recurrent actors carry ``state``
between steps; the collector resets it where an episode ended (``reset_state``).

How ``act`` computes is chosen once per actor and device (``build_fast_acting``): the
"acting" fast path its class declares (``pytorchrl.agent.accel``: a numpy program for
small CPU networks) where it applies, else the torch path ``act_torch``. When a fast path
does not apply the actor says why, once, in the log.

An actor may normalise its observations (``normalize_observations``): a running mean and
variance held as buffers (``obs_norm``, an ``ObservationNormalizer``), applied to every
input of its networks (``normalize``), on every path.
"""

import numpy as np
import torch
import torch.nn as nn

from pytorchrl.agent import accel
from pytorchrl.agent.actors.normalization import DEFAULT_CLIP, ObservationNormalizer, check_normalization

class Actor(nn.Module):
    """Base class of actors: networks that pick actions for a batch of observations.

    Subclasses implement ``act_torch``; they may declare a faster acting program with
    ``accel.accelerated`` (kind "acting"), and narrow what collectors receive with
    ``acting_state_dict``.

    Parameters
    ----------
    device : str or torch.device
        Device on which the network lives.
    input_space : gymnasium.Space
        Observation space.
    action_space : gymnasium.Space
        Action space.
    algorithm_name : str
        Name of the algorithm the actor serves.
    normalize_observations : bool
        Normalise the observations with running statistics (``ObservationNormalizer``:
        float entries only; image observations are refused).
    observation_clip : float
        Normalised observations are clipped to [-observation_clip, observation_clip].
    """

    def __init__(self, device, input_space, action_space, algorithm_name, normalize_observations=False,
                 observation_clip=DEFAULT_CLIP):
        super().__init__()
        self.device = torch.device(device)
        self.input_space = input_space
        self.action_space = action_space
        self.algorithm_name = algorithm_name
        check_normalization(input_space, normalize_observations, observation_clip)
        self.obs_norm = ObservationNormalizer(input_space, observation_clip) if normalize_observations else None
        self._acting = None
        # Sampling randomness of the numpy acting programs; seeded from torch so that
        # torch.manual_seed governs it, and saved with the actor's state.
        self.np_rng = np.random.default_rng(int(torch.randint(0, 2 ** 31 - 1, ()).item()))

    # ------------------------------------------------------------------ protocol
    def normalize(self, obs):
        """``obs`` (a tensor batch) as the networks read it: normalised by ``obs_norm``
        when the actor normalises its observations, else unchanged."""
        return obs if self.obs_norm is None else self.obs_norm(obs)

    def merge_observation_moments(self, stats):
        """Add a rollout's observation statistics (``ObservationNormalizer.moments``) to the
        running ones (the learner's side; see ``pytorchrl.agent.actors.normalization``).

        Parameters
        ----------
        stats : dict
            ``count``, ``mean`` and ``var``.

        Raises
        ------
        ValueError
            The actor does not normalise its observations.
        """
        if self.obs_norm is None:
            raise ValueError(f"{type(self).__name__} does not normalise its observations "
                             f"(normalize_observations=False): it has no statistics to update")
        self.obs_norm.merge(stats)

    def act(self, obs, state=None, deterministic=False):
        """Pick actions for a batch of observations.

        Parameters
        ----------
        obs : np.ndarray
            Observations, one row per environment (N, *obs_shape).
        state : object or None
            Recurrent state of the N environments (``initial_state``), None for
            feed-forward actors.
        deterministic : bool
            Take the mode of the policy (evaluation) instead of exploring.

        Returns
        -------
        env_action : np.ndarray
            Actions as the environments take them (N, ...).
        extras : dict of np.ndarray
            Per-step quantities the algorithm may need stored, each (N, ...): e.g.
            ``prl.ACT`` (the action as trained on, when it differs from ``env_action``),
            ``prl.LOGP``, ``prl.VAL``.
        next_state : object or None
            Recurrent state after this step.
        """
        acting = self._acting
        if acting is None:
            acting = self._acting = self.build_fast_acting() or self._torch_acting
        return acting(obs, state, deterministic)

    def act_torch(self, obs, state=None, deterministic=False):
        """``act`` in torch: ``obs`` is a tensor on the actor's device; returns
        ``(env_action, extras, next_state)`` with tensors. Subclasses implement it."""
        raise NotImplementedError

    def values(self, obs, state=None):
        """Value estimates (N, 1) of a numpy batch of observations, as a numpy array (what
        on-policy rollouts are bootstrapped with): through the acting program chosen by
        ``act`` when it computes values, else ``value_torch``. ``state`` is the recurrent
        state (N, ...) of the rows (None for feed-forward actors)."""
        acting = self._acting
        if acting is None:
            acting = self._acting = self.build_fast_acting() or self._torch_acting
        fast = getattr(acting, "value", None)
        if fast is not None and state is None:
            return fast(obs)
        with torch.inference_mode():
            args = () if state is None else (torch.as_tensor(state, device=self.device),)
            return self.value_torch(torch.as_tensor(obs, device=self.device), *args).cpu().numpy()

    def value_torch(self, obs, state=None):
        """Value estimates (B, 1) of a tensor batch (``state``: recurrent state of its rows,
        for recurrent actors); actors that estimate values implement it."""
        raise NotImplementedError(f"{type(self).__name__} does not estimate values")

    def initial_state(self, num_envs):
        """Recurrent state of ``num_envs`` environments at the start of their episodes
        (None: the actor is not recurrent)."""
        return None

    def reset_state(self, state, env_indices):
        """``state`` with the rows of ``env_indices`` (environments whose episode just
        ended) set back to the initial state. Feed-forward actors return it unchanged."""
        return state

    def reset_noise(self, num_envs=1):
        """Draw new exploration noise that is held for many steps (gSDE's exploration
        weights), one per environment. Collectors call it at the start of every rollout;
        actors without such noise do nothing.

        Parameters
        ----------
        num_envs : int
            Environments the next ``act`` calls act for.
        """

    @property
    def is_recurrent(self):
        """True when the actor has a recurrent memory: its state is re-run over sequences
        in training and is a tensor inside ``act_torch``. A state kept only for exploration
        (Ornstein-Uhlenbeck noise) does not make an actor recurrent."""
        return False

    def acting_state_dict(self):
        """The weights collectors need to act (what a weight broadcast sends).

        The default is the whole state dict; actors with parts only a learner uses
        (critics) leave them out.
        """
        return self.state_dict()

    def load_acting_state_dict(self, weights):
        """Load weights produced by ``acting_state_dict`` (in place: numpy views stay valid)."""
        self.load_state_dict(weights, strict=not self._acting_subset())

    def _acting_subset(self):
        return type(self).acting_state_dict is not Actor.acting_state_dict

    # ------------------------------------------------------------------- acting paths
    def route_acting(self, program):
        """Act (and estimate values) through ``program`` instead of this actor's networks.

        Used by collectors of a central inference server (SEED): ``program`` is called as
        ``act`` is and its ``value(obs)`` gives ``values``. Training paths (``act_torch``,
        the algorithms' losses) are not affected. None: back to the actor's own program.

        Parameters
        ----------
        program : callable or None
            ``program(obs, state, deterministic)`` -> ``(env_action, extras, next_state)``,
            with a ``value(obs)`` method.
        """
        self._routed = program
        self._acting = program

    @property
    def routed_acting(self):
        """The program set by ``route_acting`` (None: the actor acts itself)."""
        return getattr(self, "_routed", None)

    def build_fast_acting(self):
        """A faster callable with ``act``'s signature for this actor and device, or None:
        the "acting" fast path the class declares, when it applies (else said once).

        Called once, on the first ``act``.
        """
        return accel.build(self, "acting")

    def _torch_acting(self, obs, state, deterministic):
        # A recurrent memory's state enters act_torch as a tensor and leaves as numpy again:
        # collectors and storages keep states as plain arrays. Other states (OU noise) are
        # numpy on both sides already.
        # (A recurrent actor given no state starts from its initial one: numpy out too.)
        recurrent = self.is_recurrent
        with torch.inference_mode():
            obs_t = torch.as_tensor(obs, device=self.device)
            if recurrent and isinstance(state, np.ndarray):
                state = torch.as_tensor(state, device=self.device)
            env_action, extras, next_state = self.act_torch(obs_t, state, deterministic)
            if recurrent and isinstance(next_state, torch.Tensor):
                next_state = next_state.cpu().numpy()
        return (env_action.cpu().numpy(), {k: v.cpu().numpy() for k, v in extras.items()}, next_state)

    def _apply(self, fn, *args, **kwargs):
        # Moving or converting parameters invalidates numpy views held by a fast path (a
        # routed program holds none and stays).
        self._acting = getattr(self, "_routed", None)
        return super()._apply(fn, *args, **kwargs)

    def __getstate__(self):
        # A fast path holds numpy views of these parameters: a copy (deepcopy, pickle)
        # must build its own on first use, never share or copy the views.
        state = self.__dict__.copy()
        state["_acting"] = None
        # A route leads to a server of this process: a copy acts itself.
        state["_routed"] = None
        return state

    def load_restart_model(self, path):
        """Load the weights of a saved model or of a full checkpoint into this actor.

        Used for ``restart_model``. The file is read without executing code from it
        (``weights_only``); a checkpoint's learner-only networks (``algo.*``) are left out.

        Parameters
        ----------
        path : str
            A ``model.state_dict`` saved by a run, or its ``checkpoint.pt``.

        Raises
        ------
        ValueError
            One line naming the file and the cause (unreadable, or another network).
        """
        self.load_saved_weights(read_actor_weights(path), path)

    def load_saved_weights(self, weights, source):
        """Load ``weights`` (``read_actor_weights``) into this actor.

        Parameters
        ----------
        weights : dict
            The state dict.
        source : str
            Where they come from (the file), for the message.

        Raises
        ------
        ValueError
            One line naming ``source`` when they belong to another network.
        """
        try:
            self.load_state_dict(weights)
        except RuntimeError as exc:
            detail = " ".join(str(exc).split())
            raise ValueError(f"{source} does not match this {type(self).__name__}: {detail[:300]}") from None


def read_actor_weights(path):
    """The actor weights (a state dict of CPU tensors) saved in a run's ``model.state_dict``
    or ``checkpoint.pt``, read without executing code from the file; a checkpoint's
    learner-only networks (``algo.*``) are left out.

    Parameters
    ----------
    path : str
        The file.

    Raises
    ------
    ValueError
        One line naming the file and the cause (missing, unreadable, not a state dict).
    """
    from pytorchrl.checkpoint import read_torch
    weights = read_torch(path, "model")
    if isinstance(weights, dict) and "format" in weights and "worker" in weights:
        weights = weights["worker"]["algo"]["actor"]
    if not isinstance(weights, dict):
        raise ValueError(f"{path} is not a saved model (a state dict)")
    return {k: v for k, v in weights.items() if not str(k).startswith("algo.")}
