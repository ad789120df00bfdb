"""Helpers of the distributed-scheme tests: factories, test environments, process checks.

Imported by the distributed test modules (not a conftest: the session's ``ray_session``
fixture lives in tests/conftest.py). The environment functions here run inside Ray
workers, which cannot import the tests package, so this module registers itself to be
pickled by value (see ``register_for_ray``).
"""

import os
import sys
import time

import gymnasium as gym

import pytorchrl as prl
from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.actors.feature_extractors.mlp import MLP
from pytorchrl.agent.algorithms import PPO
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import GAEBuffer
from pytorchrl.envs import make_gym_env

#: Resources of every remote worker in the tests: six workers fit in the 2 CPUs of the
#: session's Ray instance.
SMALL = {"num_cpus": 0.25}

#: PPO hyperparameters that learn CartPole within ~20k steps in every layout.
PPO_KWARGS = dict(lr=2e-3, num_epochs=10, clip_param=0.2, entropy_coef=0.0, value_loss_coef=0.5,
                  max_grad_norm=0.5, mini_batch_size=256, gamma=0.98, test_every=10_000, num_test_episodes=5)


def register_for_ray(*modules):
    """Let Ray workers unpickle the functions of this module and of ``modules`` (names of
    test modules, e.g. the caller's ``__name__``): they are sent by value, since the workers
    cannot import ``tests``."""
    from ray import cloudpickle
    for name in (__name__, *modules):
        cloudpickle.register_pickle_by_value(sys.modules[name])


def factories(env_fn=make_gym_env, env_kwargs=None, vec_env_size=8, rollout_size=32, seed=0, **ppo):
    """Scheme keyword arguments (algo/actor/storage/train env factories) for PPO on CartPole.

    Parameters
    ----------
    env_fn, env_kwargs : callable, dict
        Environment function and its arguments (default: gymnasium CartPole-v1).
    vec_env_size : int
        Environments per collection worker.
    rollout_size : int
        Steps per environment in one rollout (the storage size).
    seed : int
        Base seed of the environments.
    **ppo
        Overrides of ``PPO_KWARGS``.
    """
    train, action_space, obs_space = VecEnv.create_factory(
        env_fn=env_fn, env_kwargs=env_kwargs or {"env_id": "CartPole-v1"}, vec_env_size=vec_env_size, seed=seed)
    algo, name = PPO.create_factory(**{**PPO_KWARGS, **ppo})
    actor = OnPolicyActor.create_factory(obs_space, action_space, name, feature_extractor_network=MLP,
                                         feature_extractor_kwargs={"hidden_sizes": [64, 64], "activation": "tanh"})
    storage = GAEBuffer.create_factory(size=rollout_size, gae_lambda=0.8)
    return dict(algo_factory=algo, actor_factory=actor, storage_factory=storage, train_envs_factory=train)


def ddqn_factories(update_every=64, start_steps=32, hidden=16, replay=2000, **ddqn):
    """Scheme keyword arguments (algo/actor/storage/train env factories) for DDQN on one
    CartPole env per collector: a small Q-network, a ReplayBuffer of ``replay``; ``ddqn``:
    more DDQN hyperparameters (``update_every`` is also a collector's rollout length)."""
    from pytorchrl.agent.actors import OffPolicyActor
    from pytorchrl.agent.algorithms import DDQN
    from pytorchrl.agent.storages import ReplayBuffer
    train, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": "CartPole-v1"}, vec_env_size=1,
                                                           seed=0)
    algo, name = DDQN.create_factory(update_every=update_every, start_steps=start_steps, **ddqn)
    actor = OffPolicyActor.create_factory(obs_space, action_space, name,
                                          common_feature_extractor_kwargs={"hidden_sizes": [hidden]})
    return dict(algo_factory=algo, actor_factory=actor, storage_factory=ReplayBuffer.create_factory(size=replay),
                train_envs_factory=train)


class SleepyStep(gym.Wrapper):
    """Sleeps ``delay`` seconds in every step: a straggling environment. After
    ``stall_after`` steps (None: never) it sleeps ``stall_delay`` seconds a step instead: an
    environment that cannot get far, however loaded the machine is."""

    def __init__(self, env, delay, stall_after=None, stall_delay=1.0):
        super().__init__(env)
        self.delay = delay
        self.stall_after = stall_after
        self.stall_delay = stall_delay
        self.steps = 0

    def step(self, action):
        self.steps += 1
        stalled = self.stall_after is not None and self.steps > self.stall_after
        time.sleep(self.stall_delay if stalled else self.delay)
        return self.env.step(action)


def slow_cartpole(env_id="CartPole-v1", delay=0.03, slow_worker=2, index_col_worker=0, index_env=0):
    """CartPole whose first environment sleeps ``delay`` s per step in collection worker
    ``slow_worker`` only (every vector step of that worker takes ``delay``)."""
    env = gym.make(env_id)
    if index_col_worker == slow_worker and index_env == 0:
        env = SleepyStep(env, delay)
    return env


class FailingStep(gym.Wrapper):
    """Raises after ``fail_after`` steps: an environment that breaks mid-run."""

    def __init__(self, env, fail_after):
        super().__init__(env)
        self.fail_after = fail_after
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps > self.fail_after:
            raise RuntimeError(f"simulator crashed after {self.fail_after} steps")
        return self.env.step(action)


def broken_cartpole(env_id="CartPole-v1", broken_worker=2, when="build", index_col_worker=0):
    """CartPole that fails in collection worker ``broken_worker``: at construction
    (``when="build"``) or after 100 steps (``when="step"``); collection worker 0 (the
    probe made by ``VecEnv.create_factory``) always works."""
    if index_col_worker == broken_worker and when == "build":
        raise FileNotFoundError("simulator licence file /opt/sim/licence.key not found")
    env = gym.make(env_id)
    if index_col_worker == broken_worker:
        env = FailingStep(env, 100)
    return env


def wait_gone(pids, timeout=15.0):
    """Return the pids among ``pids`` still running after waiting up to ``timeout`` s."""
    import psutil
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    # A zombie has ended; only its parent (the raylet) has not collected it yet.
    return [p.pid for p in alive if _status(p) != psutil.STATUS_ZOMBIE]


def _status(proc):
    import psutil
    try:
        return proc.status()
    except psutil.NoSuchProcess:
        return psutil.STATUS_ZOMBIE


class LayoutProbe:
    """What a run of a scheme preset's layout did, read along the run and checked against
    the preset: by the tiny run of each Ray preset (tests/cli/test_cli_presets.py) and by the
    learning test that trains a preset's example configuration (the preset's layout is
    checked once, where it is built anyway).

    ``observe`` takes the infos of each ``Learner.step`` (the run loops' ``on_infos``);
    ``check`` asserts the layout before the learner stops."""

    def __init__(self, learner):
        from pytorchrl.tools.metrics import WorkerTimings
        self.learner = learner
        self.processes = learner.scheme.process_info()
        self.timings = WorkerTimings()      # what the command line adds to each row of metrics.csv

    def observe(self, infos):
        self.timings.observe(infos)
        return infos

    def gradient_workers_reported(self):
        """How many gradient workers have reported a collection round (every per-worker
        total): a run shorter than one round of each (a tiny budget on a loaded machine,
        asynchronous gradients) cannot show their metrics yet."""
        return sum(1 for totals in self.timings.totals.values() if len(totals) == len(self.timings.KEYS))

    def train(self):
        """Step the learner to its budget, observing every step, and on until each of
        several gradient workers has reported a round (what ``check`` needs to see)."""
        grads = self.learner.scheme.num_grad_workers
        while not self.learner.done() or (grads > 1 and self.gradient_workers_reported() < grads):
            self.observe(self.learner.step())

    def check(self, name, metrics):
        """Assert that the run had preset ``name``'s layout. ``metrics``: the learner's, with
        its scheme metrics (``get_metrics(add_scheme_metrics=True)``)."""
        from pytorchrl.scheme.presets import PRESETS
        preset, scheme, uw = PRESETS[name], self.learner.scheme, self.learner.update_worker
        s = preset.scheme
        assert scheme.num_col_workers == s["num_col_workers"] and scheme.num_grad_workers == s["num_grad_workers"]
        assert scheme.uses_ray == preset.uses_ray
        assert uw.grad_communication == (prl.ASYNC if s["grad_workers_communication"] == "async" else prl.SYNC)
        assert bool(uw.decentralized) == bool(s.get("decentralized_update_execution", False))
        metrics = {**metrics, **self.timings.metrics()}
        # One process per remote worker: collectors run in processes of their own when a
        # gradient worker has several, gradient workers when there are several. (A
        # collection-only scheme, 0 gradient workers, has the collectors of one.)
        cols, grads = s["num_col_workers"], s["num_grad_workers"]
        assert len(self.processes) == (grads if grads > 1 else 0) + (cols * max(grads, 1) if cols > 1 else 0)
        per_worker = sorted(k for k in metrics if k.startswith("Workers/"))
        if grads > 1:     # per-gradient-worker timings and samples
            assert len(per_worker) == 4 * grads and all(metrics[k] > 0 for k in per_worker), per_worker
        else:
            assert per_worker == []
        if s["col_workers_communication"] == "sync" and cols > 1:
            assert metrics["Scheme/MaxPolicyLag"] == 0


__all__ = ["SMALL", "PPO_KWARGS", "register_for_ray", "factories", "slow_cartpole", "broken_cartpole",
           "wait_gone", "LayoutProbe", "prl"]


def remote_pids(scheme):
    """The process ids of the remote workers of ``scheme``, checked to be one process per
    worker and none of them this one."""
    info = scheme.process_info()
    pids = [pid for _, pid in info]
    assert len(set(pids)) == len(pids), "two workers share a process"
    assert os.getpid() not in pids
    return pids


def free_cpus():
    """CPUs of the Ray cluster free now: taken before a test builds its scheme, the level
    ``resources_released`` waits for."""
    import ray
    return ray.available_resources().get("CPU", 0.0)


def resources_released(free_before, timeout=15.0):
    """Wait until the Ray cluster has at least ``free_before`` CPUs free again (what
    ``free_cpus()`` read before the test built its scheme: the actors of a stopped or failed
    scheme give theirs back shortly after they die); True if that happened. Relative to the
    test's start, so that a worker another test left dying does not fail this one."""
    import ray
    # Polled: Ray offers no event for resources coming back.
    return wait_until(lambda: ray.available_resources().get("CPU", 0.0) >= free_before - 1e-6, timeout)


def wait_until(condition, timeout=15.0, every=0.05):
    """Call ``condition()`` every ``every`` s until it is true or ``timeout`` s have passed;
    returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)
