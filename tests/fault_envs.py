"""Environments that fail on purpose, for the worker-failure tests.

They run inside Ray workers, which cannot import the tests package: ``register_for_ray``
makes Ray pickle this module's functions and classes by value. ``CrashingCartPole-v0`` is
also registered with gymnasium (``env.id: fault_envs:CrashingCartPole-v0`` in a
configuration file, with this directory on PYTHONPATH), for the command-line tests.
"""

import os
import signal
import sys

import gymnasium as gym


def register_for_ray():
    """Let Ray workers unpickle the functions of this module (sent by value)."""
    from ray import cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


class CrashAt(gym.Wrapper):
    """Ends the process it runs in at its ``crash_at``-th step, as a simulator that takes
    its process down does (no Python exception: the process is gone).

    Parameters
    ----------
    env : gymnasium.Env
        The environment wrapped.
    crash_at : int
        Step (counted from 1, across episodes) at which the process ends.
    how : str
        "exit" (``os._exit(3)``) or "sigkill" (the process sends itself SIGKILL).
    marker : str or None
        A file created just before the crash; environments built while it exists do not
        crash (see ``crashing_cartpole``), so that a process is taken down once only.
    """

    def __init__(self, env, crash_at, how="exit", marker=None):
        super().__init__(env)
        self.crash_at, self.how, self.marker, self.steps = crash_at, how, marker, 0

    def step(self, action):
        self.steps += 1
        if self.steps >= self.crash_at:
            if self.marker is not None:
                try:
                    os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:   # another env of the same process crashed first
                    return self.env.step(action)
            sys.stdout.flush()
            if self.how == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(3)
        return self.env.step(action)


def crashing_cartpole(env_id="CartPole-v1", crash_worker=2, crash_grad_worker=None, crash_at=100, how="exit",
                      marker=None, index_col_worker=0, index_grad_worker=0, index_env=0):
    """CartPole whose first environment in collection worker ``crash_worker`` (of gradient
    worker ``crash_grad_worker``, any if None) ends its process at its ``crash_at``-th step:
    at every build, or, with ``marker`` (a file path), only until that file exists (the
    first crash creates it). Collection worker 0 (the probe of ``VecEnv.create_factory``,
    the learner's local worker) never crashes."""
    env = gym.make(env_id)
    crashes = (index_col_worker == crash_worker and index_env == 0
               and (crash_grad_worker is None or index_grad_worker == crash_grad_worker)
               and (marker is None or not os.path.exists(marker)))
    return CrashAt(env, crash_at, how, marker) if crashes else env


class RaiseAt(gym.Wrapper):
    """Raises RuntimeError at its ``fail_at``-th step (an environment error, the process
    lives on)."""

    def __init__(self, env, fail_at):
        super().__init__(env)
        self.fail_at, self.steps = fail_at, 0

    def step(self, action):
        self.steps += 1
        if self.steps >= self.fail_at:
            raise RuntimeError(f"simulator diverged at step {self.fail_at}")
        return self.env.step(action)


def failing_remote_cartpole(env_id="CartPole-v1", fail_at=50, index_col_worker=0):
    """CartPole that raises at its ``fail_at``-th step in every remote collection worker
    (index >= 1): every collector of a round fails in the same step."""
    env = gym.make(env_id)
    return RaiseAt(env, fail_at) if index_col_worker >= 1 else env


class _CrashInRayWorker(gym.Wrapper):
    """Ends its process at its ``crash_at``-th step when it runs in a Ray worker (never in
    the driver): every remote collection worker crashes, again and again."""

    def __init__(self, env, crash_at):
        super().__init__(env)
        self.crash_at, self.steps = crash_at, 0
        try:
            import ray
            self.remote = ray.is_initialized() and ray.get_runtime_context().worker.mode == ray.WORKER_MODE
        except ImportError:
            self.remote = False

    def step(self, action):
        self.steps += 1
        if self.remote and self.steps >= self.crash_at:
            os._exit(3)
        return self.env.step(action)


class NaNRewardFrom(gym.Wrapper):
    """Rewards NaN from its ``nan_from``-th step on (counted from 1, across episodes): a
    simulator whose state has blown up, as far as the learner can tell."""

    def __init__(self, env, nan_from):
        super().__init__(env)
        self.nan_from, self.steps = nan_from, 0

    def step(self, action):
        self.steps += 1
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, float("nan") if self.steps >= self.nan_from else reward, terminated, truncated, info


def nan_reward_cartpole(env_id="CartPole-v1", nan_from=40, nan_grad_worker=None, index_grad_worker=0):
    """CartPole whose rewards turn NaN at its ``nan_from``-th step, in the environments of
    gradient worker ``nan_grad_worker`` only (all of them if None)."""
    env = gym.make(env_id)
    if nan_grad_worker is None or index_grad_worker == nan_grad_worker:
        env = NaNRewardFrom(env, nan_from)
    return env


def _nan_reward(nan_from=100, **kwargs):
    return NaNRewardFrom(gym.make("CartPole-v1", **kwargs), nan_from)


def _crashing_in_ray_workers(crash_at=150, **kwargs):
    return _CrashInRayWorker(gym.make("CartPole-v1", **kwargs), crash_at)


def _raising(fail_at=100, **kwargs):
    return RaiseAt(gym.make("CartPole-v1", **kwargs), fail_at)


# CrashingCartPole-v0: the process of every remote collector ends at its 150th step.
# RaisingCartPole-v0: every environment raises RuntimeError at its 100th step.
# NaNRewardCartPole-v0: every environment's rewards are NaN from its 100th step on
# (env.kwargs: {nan_from: N} moves it).
if "CrashingCartPole-v0" not in gym.registry:
    gym.register("CrashingCartPole-v0", entry_point=_crashing_in_ray_workers)
if "RaisingCartPole-v0" not in gym.registry:
    gym.register("RaisingCartPole-v0", entry_point=_raising)
if "NaNRewardCartPole-v0" not in gym.registry:
    gym.register("NaNRewardCartPole-v0", entry_point=_nan_reward)
