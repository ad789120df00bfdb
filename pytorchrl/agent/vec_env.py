"""Vectorized environments: gymnasium envs stepped together, with torch in and out.

Two back-ends produce the same outputs:

- ``"sync"`` (default): every env in this process, stepped by a plain loop. For cheap envs
  (CartPole: ~8 us a step) this is several times faster than subprocesses, and cheaper
  than ``gymnasium.vector.SyncVectorEnv`` because nothing but the arrays we need is built.
- ``"subprocess"``: ``gymnasium.vector.AsyncVectorEnv``, for envs whose step is expensive.

Both reset an env in the same step its episode ends (the returned observation is the
first one of the new episode) and report the final observation of episodes cut by a time
limit, so that storages can bootstrap truncation and not termination.

Image observations given as height x width x channels (the gymnasium and pixel-render
convention) are handed out channels first (C, H, W), as torch's convolutions take them;
see ``VecEnv.create_factory``'s ``channels_first``.
"""

import csv
import os
import time

import gymnasium as gym
import numpy as np
import torch

from pytorchrl.agent.factory import accepted_kwargs
# looks_like_hwc_image is defined with the spaces and public here, where it was first.
from pytorchrl.agent.spaces import looks_like_hwc_image, pack_env, packed_space  # noqa: F401


class EnvError(RuntimeError):
    """Raised when an environment cannot be built or fails while stepping.

    The message names the environment (its id, or its function's name), which one of the
    vector failed, and the original error, so that callers (the command line, remote
    workers) can report it in one line. ``component`` is set by the collection worker
    that met it: "envs_train" or "envs_test".
    """

    component = None


def _call_env_fn(env_fn, env_kwargs, index_col_worker, index_grad_worker, index_env, mode):
    extra = accepted_kwargs(env_fn, {"index_col_worker": index_col_worker,
                                     "index_grad_worker": index_grad_worker,
                                     "index_env": index_env, "mode": mode})
    try:
        return env_fn(**env_kwargs, **extra)
    except Exception as exc:  # any failure of user code: report it with its cause
        name = getattr(env_fn, "__name__", repr(env_fn))
        raise EnvError(f"environment factory {name}({env_kwargs}) failed: "
                                f"{type(exc).__name__}: {exc}") from exc


def chw_space(space):
    """The Box ``space`` of shape (H, W, C) with its axes moved to (C, H, W)."""
    return gym.spaces.Box(low=np.transpose(space.low, (2, 0, 1)), high=np.transpose(space.high, (2, 0, 1)),
                          dtype=space.dtype)


class ChannelsFirst(gym.ObservationWrapper):
    """Hands out (H, W, C) image observations as contiguous (C, H, W) arrays.

    Parameters
    ----------
    env : gymnasium.Env
        Environment with a 3-dimensional Box observation space, channels last.
    """

    def __init__(self, env):
        super().__init__(env)
        if not isinstance(env.observation_space, gym.spaces.Box) or len(env.observation_space.shape) != 3:
            raise ValueError(f"channels_first=True needs (H, W, C) Box observations, "
                             f"got {env.observation_space}")
        self.observation_space = chw_space(env.observation_space)

    def observation(self, observation):
        return np.ascontiguousarray(np.transpose(observation, (2, 0, 1)))


def _resolve_channels_first(channels_first, space):
    if channels_first is None:
        return looks_like_hwc_image(space)
    if channels_first not in (True, False):
        raise ValueError(f"channels_first must be None, True or False, got {channels_first!r}")
    if channels_first and not (isinstance(space, gym.spaces.Box) and len(space.shape) == 3):
        raise ValueError(f"channels_first=True needs (H, W, C) Box observations, got {space}")
    return channels_first


class _InProcessVector:
    """Steps a list of gymnasium envs in this process, resetting ended episodes at once."""

    def __init__(self, envs):
        self.envs = envs
        self.num_envs = len(envs)
        space = envs[0].observation_space
        self._obs = np.zeros((self.num_envs,) + space.shape, dtype=space.dtype)
        self._rew = np.zeros(self.num_envs, dtype=np.float32)
        self._term = np.zeros(self.num_envs, dtype=bool)
        self._trunc = np.zeros(self.num_envs, dtype=bool)
        self.final_info = {}

    def reset(self, seed=None):
        for i, env in enumerate(self.envs):
            try:
                obs, _ = env.reset(seed=None if seed is None else seed + i)
            except Exception:
                self.failed_env = i
                raise
            self._obs[i] = obs
        return self._obs

    def step(self, actions):
        """Step every env; returns (obs, rew, term, trunc, final_obs) with final_obs a dict
        index -> last observation of the episodes that ended in this step."""
        final_obs = {}
        obs_buf, rew, term, trunc = self._obs, self._rew, self._term, self._trunc
        for i, env in enumerate(self.envs):
            try:
                obs, r, te, tr, info = env.step(actions[i])
                rew[i] = r
                term[i] = te
                trunc[i] = tr
                if te or tr:
                    final_obs[i] = obs
                    self.final_info[i] = info
                    obs, _ = env.reset()
            except Exception:
                self.failed_env = i   # named in the EnvError raised by TorchVecEnv
                raise
            obs_buf[i] = obs
        return obs_buf, rew, term, trunc, final_obs

    def reset_one(self, i):
        try:
            obs, _ = self.envs[i].reset()
        except Exception:
            self.failed_env = i
            raise
        self._obs[i] = obs
        return obs

    def close(self):
        for env in self.envs:
            env.close()


def _info_of(vector_info, i):
    """The info dict of env ``i`` from gymnasium's vector info (arrays per key, masks under
    ``_key``; a nested dict, such as an episode record, is a vector info of its own)."""
    out = {}
    for key, value in vector_info.items():
        if key.startswith("_"):
            continue
        mask = vector_info.get("_" + key)
        if mask is not None and not mask[i]:
            continue   # env i did not report this key
        out[key] = _info_of(value, i) if isinstance(value, dict) else value[i]
    return out


class _SubprocessVector:
    """gymnasium's AsyncVectorEnv behind the same interface as _InProcessVector."""

    def __init__(self, env_fns):
        self.vec = gym.vector.AsyncVectorEnv(
            env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        self.num_envs = self.vec.num_envs

    def reset(self, seed=None):
        obs, _ = self.vec.reset(seed=seed)
        return obs

    def step(self, actions):
        obs, rew, term, trunc, info = self.vec.step(actions)
        final_obs = {}
        self.final_info = {}
        if "_final_obs" in info:
            for i in np.flatnonzero(info["_final_obs"]):
                final_obs[int(i)] = info["final_obs"][i]
                self.final_info[int(i)] = _info_of(info.get("final_info", {}), i)
        return obs, rew.astype(np.float32), term, trunc, final_obs

    def reset_one(self, i):
        mask = np.zeros(self.num_envs, dtype=bool)
        mask[i] = True
        obs, _ = self.vec.reset(options={"reset_mask": mask})
        return obs[i]

    def close(self):
        self.vec.close()


class TorchVecEnv:
    """A batch of environments with torch tensors in and out, and episode statistics.

    Parameters
    ----------
    env_fns : list of callables
        One zero-argument callable per environment, each returning a gymnasium.Env.
    device : torch.device or str
        Device of the returned tensors.
    vectorization : str
        ``"sync"`` (all envs in this process) or ``"subprocess"`` (one process per env).
    log_dir : str or None
        Where to append one CSV line per finished episode (return, length, time); None
        disables the file.
    log_name : str
        File name (without extension) of the episode log inside ``log_dir``.
    info_keywords : tuple of str
        Keys of the env's ``info`` dict recorded in the episode log (in-process only).
    seed : int or None
        Seed of the first env; env ``i`` gets ``seed + i``.
    name : str or None
        Name of the environments in error messages (default: the first env's registered
        id, else ``DEFAULT_NAME``).
    collector : tuple of int or None
        ``(index_grad_worker, index_col_worker)`` of the worker these environments were
        built for (``VecEnv.create_factory`` gives it; None: not known). Read by storages
        that write files of their own, so that collectors sharing a folder do not write
        over each other's.
    """

    DEFAULT_NAME = "environment"

    def __init__(self, env_fns, device="cpu", vectorization="sync", log_dir=None,
                 log_name="monitor", info_keywords=(), seed=None, name=None, collector=None):
        self.device = torch.device(device)
        self.collector = None if collector is None else tuple(int(i) for i in collector)
        self._env_fns = list(env_fns)
        self._reward_env = None   # the environment whose compute_reward hindsight relabelling calls
        if vectorization == "sync":
            self._vec = _InProcessVector([fn() for fn in env_fns])
            probe = self._vec.envs[0]
        elif vectorization == "subprocess":
            self._vec = _SubprocessVector(env_fns)
            probe = self._vec.vec
        else:
            raise ValueError(f"vectorization must be 'sync' or 'subprocess', got {vectorization!r}")
        self.num_envs = self._vec.num_envs
        spec = getattr(probe, "spec", None) if vectorization == "sync" else None
        self.name = name or getattr(spec, "id", None) or self.DEFAULT_NAME
        self.observation_space = probe.single_observation_space if vectorization != "sync" \
            else probe.observation_space
        self.action_space = probe.single_action_space if vectorization != "sync" \
            else probe.action_space
        self.info_keywords = tuple(info_keywords)
        self._discrete = isinstance(self.action_space, gym.spaces.Discrete)
        self._seed = seed
        self._ep_return = np.zeros(self.num_envs, dtype=np.float64)
        self._ep_length = np.zeros(self.num_envs, dtype=np.int64)
        self.finished_episodes = []  # (return, length) pairs not yet consumed
        self._held = set()           # envs whose episodes are not recorded (see ``hold``)
        self._log = None
        self._log_file = None
        if log_dir is not None:
            os.makedirs(log_dir, exist_ok=True)
            path = os.path.join(log_dir, f"{log_name}.csv")
            new = not os.path.exists(path)
            self._log_file = open(path, "a", newline="")
            self._log = csv.writer(self._log_file)
            if new:
                self._log.writerow(["r", "l", "t", *self.info_keywords])
        self._t0 = time.time()

    def _to_torch(self, arr, dtype=None):
        t = torch.from_numpy(np.asarray(arr))
        if dtype is not None:
            t = t.to(dtype)
        return t.to(self.device) if self.device.type != "cpu" else t

    def reset_numpy(self):
        """Reset every env; returns the observations as a numpy array (num_envs, *obs_shape).

        The array is this object's buffer: copy it before the next call.
        """
        self._ep_return[:] = 0
        self._ep_length[:] = 0
        try:
            obs = self._vec.reset(seed=self._seed)
        except Exception as exc:
            raise self._error("reset()", exc) from exc
        # The seed only applies to the first reset: later resets continue the env's RNG.
        self._seed = None
        return obs

    def reset(self):
        """Reset every env; returns the observations as a tensor (num_envs, *obs_shape)."""
        return self._to_torch(self.reset_numpy()).clone()

    def step_numpy(self, action, record=True):
        """Step every env with ``action`` (numpy array, one row per env); numpy in, numpy out.

        The collection workers' hot path: no tensor is built. The returned arrays are this
        object's buffers: copy what must outlive the next call. ``record=False`` leaves the
        episode statistics and the episode log alone (steps that are no training: RND_PPO's
        warm-up of its observation statistics).

        Returns
        -------
        obs : np.ndarray
            Next observations (first observation of a new episode where one ended).
        rew : np.ndarray
            Rewards, float32, shape (num_envs,).
        term : np.ndarray
            bool, episode ended by termination.
        trunc : np.ndarray
            bool, episode ended by truncation (time limit) and not termination.
        final_obs : dict
            env index -> final observation of every episode that ended in this step.
        """
        if self._discrete and action.ndim > 1:
            action = action.reshape(self.num_envs)
        try:
            obs, rew, term, trunc, final_obs = self._vec.step(action)
        except Exception as exc:
            raise self._error("step()", exc) from exc
        trunc = trunc & ~term
        if record:
            self._ep_return += rew
            self._ep_length += 1
            if final_obs:
                self._record_episodes(final_obs)
        return obs, rew, term, trunc, final_obs

    def _error(self, call, exc):
        """The EnvError (one line) for ``exc`` raised by the environments in ``call``."""
        index = getattr(self._vec, "failed_env", None)
        self._vec.failed_env = None
        which = f"env {index} of {self.num_envs}" if index is not None else f"{self.num_envs} envs"
        text = " ".join(str(exc).split()) or "(no message)"
        return EnvError(f"environment {self.name} ({which}) failed in {call}: {type(exc).__name__}: {text}")

    def hold(self, i):
        """Leave env ``i``'s episodes out of the statistics and the episode log until
        ``reset_env(i)``: it steps with actions that are not the agent's (a storage replays
        a demonstration in its place, PPODBuffer)."""
        self._held.add(i)

    def reset_env(self, i):
        """Reset env ``i`` alone, end its hold (``hold``) and return its first observation
        (a copy); the episode it was in is dropped from the statistics."""
        try:
            obs = np.array(self._vec.reset_one(i))
        except Exception as exc:
            raise self._error("reset()", exc) from exc
        self._held.discard(i)
        self._ep_return[i] = 0.0
        self._ep_length[i] = 0
        return obs

    def _record_episodes(self, final_obs):
        for i in final_obs:
            if i in self._held:
                self._ep_return[i] = 0.0
                self._ep_length[i] = 0
                continue
            self.finished_episodes.append((float(self._ep_return[i]), int(self._ep_length[i])))
            if self._log is not None:
                info = self._vec.final_info.get(i, {})
                self._log.writerow([round(self._ep_return[i], 6), int(self._ep_length[i]),
                                    round(time.time() - self._t0, 6),
                                    *(info.get(k, "") for k in self.info_keywords)])
            self._ep_return[i] = 0.0
            self._ep_length[i] = 0
        if self._log_file is not None:
            self._log_file.flush()

    def step(self, action):
        """Step every env with ``action`` (tensor or array, one row per env); tensors out.

        Returns (obs, rew, term, trunc, final_obs) as ``step_numpy``, the first four as new
        tensors on this object's device.
        """
        if isinstance(action, torch.Tensor):
            action = action.detach().cpu().numpy()
        obs, rew, term, trunc, final_obs = self.step_numpy(np.asarray(action))
        return (self._to_torch(obs).clone(), self._to_torch(rew).clone(),
                self._to_torch(term).clone(), self._to_torch(trunc).clone(), final_obs)

    def pop_finished_episodes(self):
        """Return and forget the (return, length) of the episodes finished since the last call."""
        eps, self.finished_episodes = self.finished_episodes, []
        return eps

    def goal_reward_fn(self):
        """The environments' vectorised ``compute_reward(achieved_goal, desired_goal, info)``
        (goal environments: gymnasium-robotics, ``PointReach-v0``), which hindsight relabelling
        calls, or None when they have none. In-process: the first environment's; with
        subprocesses: that of one more environment built in this process. The outermost
        wrapper that defines it answers (gymnasium's ``get_wrapper_attr``): a wrapper that
        rescales the goals it hands out computes rewards on goals in its own scale."""
        if self._reward_env is None:
            in_process = isinstance(self._vec, _InProcessVector)
            self._reward_env = (self._vec.envs[0] if in_process else self._env_fns[0](), not in_process)
        env = self._reward_env[0]
        try:
            return env.get_wrapper_attr("compute_reward") if hasattr(env, "get_wrapper_attr") else \
                getattr(env.unwrapped, "compute_reward", None)
        except AttributeError:
            return None

    def close(self):
        """Close every env and the episode log."""
        self._vec.close()
        if self._reward_env is not None and self._reward_env[1]:
            self._reward_env[0].close()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None


class _VecEnvFactory:
    """Picklable factory returned by VecEnv.create_factory (see there)."""

    def __init__(self, env_fn, env_kwargs, vec_env_size, log_dir, info_keywords, vectorization, seed,
                 transpose=False):
        self.transpose = transpose
        self.env_fn = env_fn
        self.env_kwargs = dict(env_kwargs)
        self.vec_env_size = vec_env_size
        self.log_dir = log_dir
        self.info_keywords = tuple(info_keywords)
        self.vectorization = vectorization
        self.seed = seed

    def __repr__(self):
        env_id = self.env_kwargs.get("env_id") or self.env_kwargs.get("id")
        env = env_id if isinstance(env_id, str) else getattr(self.env_fn, "__name__", type(self.env_fn).__name__)
        return f"VecEnv({env}, vec_env_size={self.vec_env_size})"

    def __call__(self, device="cpu", index_col_worker=0, index_grad_worker=0, mode="train"):
        fns = [_EnvThunk(self.env_fn, self.env_kwargs, index_col_worker, index_grad_worker, i, mode,
                         self.transpose)
               for i in range(self.vec_env_size)]
        seed = None
        if self.seed is not None:
            # Distinct, reproducible streams for every env of every worker and mode.
            seed = self.seed + 10_000 * index_grad_worker + 1_000 * index_col_worker \
                + (500 if mode == "test" else 0)
        # Named in error messages by the id it was given, else by its registered id (read
        # by TorchVecEnv), else by its function's name.
        env_id = self.env_kwargs.get("env_id") or self.env_kwargs.get("id")
        envs = TorchVecEnv(fns, device=device, vectorization=self.vectorization, log_dir=self.log_dir,
                           log_name=f"{mode}_monitor_g{index_grad_worker}_c{index_col_worker}",
                           info_keywords=self.info_keywords, seed=seed,
                           name=env_id if isinstance(env_id, str) else None,
                           collector=(index_grad_worker, index_col_worker))
        if envs.name == TorchVecEnv.DEFAULT_NAME:
            envs.name = getattr(self.env_fn, "__name__", envs.name)
        return envs


class _EnvThunk:
    """Picklable zero-argument env constructor (AsyncVectorEnv pickles its env_fns)."""

    def __init__(self, env_fn, env_kwargs, index_col_worker, index_grad_worker, index_env, mode,
                 transpose=False):
        self.args = (env_fn, env_kwargs, index_col_worker, index_grad_worker, index_env, mode)
        self.transpose = transpose

    def __call__(self):
        env = _call_env_fn(*self.args)
        # Dict and Tuple observations travel packed in one float32 vector (agent.spaces).
        return ChannelsFirst(env) if self.transpose else pack_env(env)


class VecEnv:
    """Builds factories of vectorized environments (see ``create_factory``)."""

    @classmethod
    def create_factory(cls, env_fn, env_kwargs=None, vec_env_size=1, log_dir=None, info_keywords=(),
                       vectorization="sync", seed=None, channels_first=None):
        """Return a factory of vectorized environments and the spaces of one environment.

        Parameters
        ----------
        env_fn : callable
            Builds one gymnasium.Env from ``env_kwargs``. It also receives ``index_col_worker``,
            ``index_grad_worker``, ``index_env`` and ``mode`` if its signature accepts them.
        env_kwargs : dict
            Keyword arguments for ``env_fn``.
        vec_env_size : int
            Number of environments stepped together by each collection worker.
        log_dir : str or None
            Directory for per-worker episode logs (CSV); None writes none.
        info_keywords : tuple of str
            Info keys to record in the episode logs.
        vectorization : str
            ``"sync"`` (in-process loop, default) or ``"subprocess"``.
        seed : int or None
            Base seed; every env of every worker gets a distinct seed derived from it.
        channels_first : bool or None
            Whether the environments' observations are images given channels last
            (H, W, C) that the vector env must hand out channels first (C, H, W), the
            layout of the CNN feature extractors. None (default) decides from the
            observation space: a uint8 Box of shape (H, W, C) with C in 1, 3, 4 and H, W
            larger than 4 is transposed, anything else (vectors, images already (C, H, W))
            is left as it is. True forces the transposition of any 3-dimensional Box;
            False never transposes.

        Returns
        -------
        factory : callable
            ``factory(device, index_col_worker=0, index_grad_worker=0, mode="train")`` -> TorchVecEnv.
        action_space : gymnasium.Space
            Action space of one environment.
        obs_space : gymnasium.Space
            Observation space of one environment, as the vector env hands observations out
            (transposed to (C, H, W) when ``channels_first`` applies; a Dict or Tuple space
            as the ``PackedBox`` its observations are packed in, see ``pytorchrl.agent.spaces``).
        """
        env_kwargs = dict(env_kwargs or {})
        if not isinstance(vec_env_size, int) or vec_env_size < 1:
            raise ValueError(f"vec_env_size must be a positive integer, got {vec_env_size!r}")
        if vectorization not in ("sync", "subprocess"):
            raise ValueError(f"vectorization must be 'sync' or 'subprocess', got {vectorization!r}")
        probe = _call_env_fn(env_fn, env_kwargs, 0, 0, 0, "train")
        action_space, obs_space = probe.action_space, probe.observation_space
        probe.close()
        obs_space = packed_space(obs_space)
        transpose = _resolve_channels_first(channels_first, obs_space)
        if transpose:
            obs_space = chw_space(obs_space)
        factory = _VecEnvFactory(env_fn, env_kwargs, vec_env_size, log_dir, info_keywords,
                                 vectorization, seed, transpose)
        return factory, action_space, obs_space
