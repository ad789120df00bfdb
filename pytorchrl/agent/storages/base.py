"""The storage protocol: where collected data waits between acting and learning.

A storage has two sides, used by different workers (or by the same object when
everything runs in one process):

- **Collector side.** ``start(obs)`` begins a rollout from the environments' current
  observations; ``insert(step)`` records one vectorized step; ``finish(state)`` ends the
  rollout (on-policy storages ask the algorithm's ``bootstrap`` hook for the values they
  need); ``get_data()`` hands the rollout over as a dict of tensors.
- **Learner side.** ``add_data(data)`` receives rollouts (from any number of collectors);
  ``ready()`` says whether mini-batches can be drawn; ``batches()`` yields them (on-policy
  storages: epochs x mini-batches, then they forget the data; replay storages:
  ``num_updates`` mini-batches per ``update_every`` transitions inserted, once
  ``start_steps`` are in); ``after_update(batch, info)`` takes feedback from the update
  (priorities of prioritized replay).

The collector side is the same for every storage and lives here: preallocated arrays
written through numpy (one assignment per array and step), with the observation row the
actor reads being a view of the buffer (no copy on the way in).
"""

from abc import ABC, abstractmethod

import numpy as np
import torch

from pytorchrl import ACT, OBS, OBS2, REW, RHS, TERM, TRUNC
from pytorchrl.agent.factory import check_parameter
from pytorchrl.agent.factory import ComponentFactory

#: Key of ``insert``'s step dict holding ``{env index: final observation}`` of the
#: episodes that ended in this step (the observation in ``OBS2`` is then the first one
#: of the next episode).
FINAL_OBS = "final_obs"


def as_numpy(x):
    """``x`` as a numpy array (tensors are moved to the CPU)."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


class Storage(ABC):
    """Base class of storages (see the module docstring for the protocol).

    Parameters
    ----------
    device : torch.device or str
        Device of the mini-batches produced on the learner side.
    actor : Actor
        The actor (its action shape and dtype size the buffers).
    algorithm : Algorithm
        The algorithm: which per-step extras to keep (``acting_extras``), how to bootstrap,
        and the hyperparameters the learner side follows (read each time, so that
        hot-swaps apply at once).
    envs : TorchVecEnv or None
        Environments of a collector (their number sets the buffer width); None for a
        learner-side storage.
    """

    def __init__(self, device, actor, algorithm, envs=None):
        self.device = torch.device(device)
        self.actor = actor
        self.algorithm = algorithm
        self.envs = envs
        self.step = 0
        self._rec = None          # key -> numpy array (T[+1], N, ...) of the rollout
        self._final_obs = []      # (t, env index, final observation, truncated) of ended episodes
        self._start_state = None  # recurrent state (N, ...) of the actor at the rollout's start
        self._final_state = {}    # (t, env index) -> recurrent state that reached the final observation

    @classmethod
    def create_factory(cls, size, **kwargs):
        """Return a picklable ``factory(device, actor, algorithm, envs)`` (parameters as in the class)."""
        return ComponentFactory(cls, size=size, **kwargs)

    # ------------------------------------------------------------ hyperparameters
    @property
    def hyperparameters(self):
        """Parameters that ``update_storage_parameter`` may change."""
        return {"size": self.size}

    def check_parameter_value(self, name, value):
        """Raise ValueError if ``value`` is not allowed for parameter ``name``."""
        if name == "size" and value < 1:
            raise ValueError(f"storage size must be >= 1, got {value}")

    def update_storage_parameter(self, parameter_name, new_parameter_value):
        """Change a storage parameter; it applies from the next rollout (or batch) on.

        Parameters
        ----------
        parameter_name : str
            One of ``self.hyperparameters``; anything else raises ValueError listing them.
        new_parameter_value : object
            The new value, of the parameter's type.
        """
        setattr(self, parameter_name, self.check_update(parameter_name, new_parameter_value))

    def check_update(self, parameter_name, new_parameter_value):
        """What ``update_storage_parameter(parameter_name, new_parameter_value)`` would set
        (the value converted to the parameter's type), or the ValueError/TypeError it would
        raise: name, type, range, and parameters fixed once the storage is built. Nothing
        changes.

        Parameters
        ----------
        parameter_name : str
            One of ``self.hyperparameters``.
        new_parameter_value : object
            The value asked for.
        """
        value = check_parameter(self.hyperparameters, parameter_name, new_parameter_value,
                                f"{type(self).__name__} parameter", owner=self)
        self.check_parameter_value(parameter_name, value)
        return value

    # ------------------------------------------------------------ collection side
    @abstractmethod
    def rollout_steps(self, num_envs):
        """Vectorized steps in one rollout of a collector with ``num_envs`` environments."""

    def recorded_keys(self):
        """Per-step keys the rollout keeps besides observations: the action, reward and
        episode ends, and the algorithm's ``acting_extras``."""
        return (ACT, REW, TERM, TRUNC) + tuple(self.algorithm.acting_extras)

    def start(self, obs, state=None):
        """Begin a rollout whose first observations are ``obs`` (N, *obs_shape; copied);
        ``state``: the recurrent state (N, ...) of a recurrent actor before its first step
        (kept with the rollout: training re-runs the memory from it)."""
        obs = as_numpy(obs)
        self._start_state = None if state is None else as_numpy(state).copy()
        self._final_state = {}
        T = self.rollout_steps(obs.shape[0])
        rec = self._rec
        if rec is None or rec[OBS].shape[:2] != (T + 1, obs.shape[0]):
            # One observation more than steps: the last one is where the next rollout starts.
            rec = self._rec = {OBS: np.zeros((T + 1,) + obs.shape, dtype=obs.dtype)}
            self._writers = None
        rec[OBS][0] = obs
        self.step = 0
        self._final_obs = []

    def current_obs(self):
        """Observations (N, *obs_shape) the next action is taken from: a numpy view."""
        return self._rec[OBS][self.step]

    def insert(self, step):
        """Record one vectorized step taken from ``current_obs()``.

        Parameters
        ----------
        step : dict
            ``prl.ACT`` (N, ...), ``prl.REW`` (N,), ``prl.TERM`` and ``prl.TRUNC`` (N,
            bool), ``prl.OBS2`` (N, *obs_shape: the observation after the step, the first
            of a new episode where one ended), ``FINAL_OBS`` (dict env index -> final
            observation of each episode that ended), the actor's extras and, for a
            recurrent actor, ``prl.RHS``: its state after the step, before the ended
            episodes' rows are reset (what values their final observations). Keys the
            storage does not keep are ignored; arrays are copied.
        """
        t = self.step
        writers = self._writers
        if writers is None:
            writers = self._writers = self._make_writers(step)
        for key, buf in writers:
            buf[t] = step[key]
        rec = self._rec
        rec[OBS][t + 1] = step[OBS2]
        final = step.get(FINAL_OBS)
        if final:
            trunc = step[TRUNC]
            rhs = step.get(RHS)
            for i, o in final.items():
                self._final_obs.append((t, i, np.array(o), bool(trunc[i])))
                if rhs is not None:
                    self._final_state[(t, i)] = np.array(as_numpy(rhs)[i])
        self.step = t + 1

    def _make_writers(self, step):
        """Allocate the per-step arrays from the first step's values: (key, array) pairs."""
        T, n = self._rec[OBS].shape[:2]
        T -= 1
        writers = []
        for key in self.recorded_keys():
            if key not in step:
                raise KeyError(f"{type(self).__name__} needs {key!r} at every step (declared by "
                               f"{type(self.algorithm).__name__}), but the actor's act() did not return it")
            value = as_numpy(step[key])
            if key in (REW, TERM, TRUNC):
                buf = np.zeros((T, n), dtype=np.float32)
            else:
                buf = np.zeros((T,) + value.shape, dtype=value.dtype)
            self._rec[key] = buf
            writers.append((key, buf))
        return writers

    def finish(self, state=None):
        """End the rollout (``state``: the actor's recurrent state after its last step)."""

    @property
    def full(self):
        """True when the rollout holds all its steps."""
        return self._rec is not None and self.step >= self._rec[OBS].shape[0] - 1

    def rollout_observations(self):
        """The observations the actions of the rollout were taken from (steps, N,
        *obs_shape): a view, without the one the next rollout starts from."""
        return self._rec[OBS][:self.step]

    def next_rollout_obs(self):
        """Observations after the last recorded step (the start of the next rollout), a copy."""
        return self._rec[OBS][self.step].copy()

    @abstractmethod
    def get_data(self, data_to_cpu=True):
        """The recorded rollout (possibly cut short), as a dict of tensors ready to send."""

    # -------------------------------------------------------------- learner side
    @abstractmethod
    def add_data(self, data):
        """Receive one rollout produced by ``get_data`` (of this or another collector)."""

    @abstractmethod
    def ready(self):
        """True when ``batches()`` would yield at least one mini-batch."""

    @abstractmethod
    def batches(self):
        """Yield the mini-batches (dicts of tensors on ``device``) available now."""

    def after_update(self, batch, info):
        """Feedback from the update of ``batch``: ``info`` is the algorithm's info dict;
        per-sample entries the storage uses (priorities) are removed from it."""

    def clear(self):
        """Forget every piece of data received (a component was replaced)."""

    # ------------------------------------------------------------------- helpers
    def _to_device(self, arrays):
        """Dict of numpy arrays -> dict of tensors on ``device`` (no copy on the CPU)."""
        out = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}
        if self.device.type != "cpu":
            out = {k: v.to(self.device, non_blocking=True) for k, v in out.items()}
        return out
