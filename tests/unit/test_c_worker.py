"""CWorker in this process: the rollouts it collects are exactly what happened in the envs.

Observations encode (env index, step in episode, episode number), so every stored entry
can be checked against the environment's own history: observation order, rewards, episode
ends, bootstrap values at rollout ends and at truncations, and the chaining of rollouts.
"""

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.actors.feature_extractors.mlp import MLP
from pytorchrl.agent.algorithms import PPO
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import GAEBuffer
from pytorchrl.scheme.collection.c_worker import CWorker
from pytorchrl.scheme.transport import unpack

pytestmark = pytest.mark.usefixtures("no_ray_import")


class TaggedEnv(gym.Env):
    """Observation [index, t, episode]; reward = t after the step; terminates after
    ``length`` steps (never if None)."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, index, length):
        self.index, self.length, self.episode, self.t = index, length, -1, 0

    def _obs(self):
        return np.array([self.index, self.t, self.episode], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.episode = 0, self.episode + 1
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), float(self.t), self.length is not None and self.t >= self.length, False, {}


def tagged_env(index_env):
    """Env 0 terminates every 4 steps; env 1 never terminates but is truncated every 3 steps."""
    if index_env == 0:
        return TaggedEnv(0, 4)
    return gym.wrappers.TimeLimit(TaggedEnv(1, None), max_episode_steps=3)


def make_worker(size=5, **kwargs):
    env_factory, action_space, obs_space = VecEnv.create_factory(tagged_env, vec_env_size=2)
    algo_factory, name = PPO.create_factory(test_every=1, num_test_episodes=2)
    actor_factory = OnPolicyActor.create_factory(obs_space, action_space, name, feature_extractor_network=MLP,
                                                 feature_extractor_kwargs={"hidden_sizes": [8]}, ortho_init=False)
    return CWorker(0, 0, algo_factory, actor_factory, GAEBuffer.create_factory(size=size),
                   train_envs_factory=env_factory, **kwargs)


def obs_rows(*rows):
    return torch.tensor(rows, dtype=torch.float32)


@pytest.fixture
def worker():
    w = make_worker()
    yield w
    w.stop()


def test_rollout_records_the_environment_history(worker):
    data, info = worker.collect_data()
    assert info["collected_samples"] == 10
    assert not info["cut"]
    # env 0: t = 0,1,2,3 then terminated at the 4th step -> reset (episode 1, t = 0)
    torch.testing.assert_close(data[prl.OBS][:, 0], obs_rows([0, 0, 0], [0, 1, 0], [0, 2, 0], [0, 3, 0], [0, 0, 1]))
    # env 1: t = 0,1,2 then truncated at the 3rd step -> reset (episode 1), t = 0, 1
    torch.testing.assert_close(data[prl.OBS][:, 1], obs_rows([1, 0, 0], [1, 1, 0], [1, 2, 0], [1, 0, 1], [1, 1, 1]))
    torch.testing.assert_close(data[prl.REW].reshape(5, 2), torch.tensor([[1., 1.], [2., 2.], [3., 3.], [4., 1.],
                                                                          [1., 2.]]))
    term = data[prl.TERM].reshape(5, 2).bool()
    trunc = data[prl.TRUNC].reshape(5, 2).bool()
    assert term.tolist() == [[False, False], [False, False], [False, False], [True, False], [False, False]]
    assert trunc.tolist() == [[False, False], [False, False], [False, True], [False, False], [False, False]]
    assert sorted(info["episodes"]) == [(6.0, 3), (10.0, 4)]

    actor = worker.actor
    with torch.no_grad():
        # values are those of the observations acted on, plus the bootstrap of the next one
        torch.testing.assert_close(data[prl.VAL][:5].reshape(10, 1), actor.get_value(data[prl.OBS].reshape(10, 3)))
        after = obs_rows([0, 1, 1], [1, 2, 1])
        torch.testing.assert_close(data[prl.VAL][5].reshape(2, 1), actor.get_value(after))
        # the truncated episode is bootstrapped with the value of its final observation
        final = obs_rows([1, 3, 0])
        tv = data[prl.TRUNC_VAL].reshape(5, 2)
        torch.testing.assert_close(tv[2, 1].reshape(1, 1), actor.get_value(final))
        mask = torch.ones(5, 2, dtype=torch.bool)
        mask[2, 1] = False
        assert (tv[mask] == 0).all()
        # log-probabilities are those of the stored actions
        logp, _, _ = actor.evaluate_actions(data[prl.OBS].reshape(10, 3), data[prl.ACT].reshape(10, 1))
        torch.testing.assert_close(data[prl.LOGP].reshape(10, 1), logp, atol=1e-5, rtol=1e-5)


def test_rollouts_chain(worker):
    first, _ = worker.collect_data()
    second, info = worker.collect_data()
    # the second rollout starts where the first one ended
    torch.testing.assert_close(second[prl.OBS][0], obs_rows([0, 1, 1], [1, 2, 1]))
    torch.testing.assert_close(second[prl.VAL][0], first[prl.VAL][5])
    # env 1 is truncated again at its 3rd step of episode 1 = step 0 of rollout 2
    assert bool(second[prl.TRUNC].reshape(5, 2)[0, 1])
    # env 0 terminates at step 2 (t 2 -> 3 -> 4); env 1 again at step 3
    assert sorted(info["episodes"]) == [(6.0, 3), (6.0, 3), (10.0, 4)]
    # the first rollout handed out earlier is unchanged
    torch.testing.assert_close(first[prl.OBS][0, 0], obs_rows([0, 0, 0])[0])


def test_data_survives_compression():
    plain, packed = make_worker(), make_worker(compress_data_to_send=True)
    try:
        packed.actor.load_state_dict(plain.actor.state_dict())
        d1, _ = plain.collect_data()
        d2, info = packed.collect_data()
        assert info["raw_bytes"] > 0 and info["sent_bytes"] > 0
        d2 = {k: torch.as_tensor(v) for k, v in unpack(d2).items()}
        assert set(d2) == set(d1)
        # TaggedEnv ignores the actions and both actors have the same weights: everything
        # but the sampled actions and their log-probabilities is the same in both rollouts.
        for k in set(d1) - {prl.ACT, prl.LOGP}:
            torch.testing.assert_close(d2[k], d1[k], msg=k)
        assert d2[prl.ACT].dtype == d1[prl.ACT].dtype and d2[prl.ACT].shape == d1[prl.ACT].shape
        with torch.no_grad():
            logp, _, _ = packed.actor.evaluate_actions(d2[prl.OBS].reshape(10, 3), d2[prl.ACT].reshape(10, 1))
        torch.testing.assert_close(d2[prl.LOGP].reshape(10, 1), logp, atol=1e-5, rtol=1e-5)
    finally:
        plain.stop()
        packed.stop()


def test_interrupt_cuts_only_its_own_round(worker):
    worker.interrupt(7)
    data, info = worker.collect_data(listen_to=["sync"], round_id=8)   # another round: not cut
    assert not info["cut"] and info["collected_samples"] == 10
    worker.interrupt(9)
    data, info = worker.collect_data(listen_to=["sync"], round_id=9)   # cut before its first step
    assert info["cut"]
    assert info["collected_samples"] == 0 and data[prl.REW].shape[0] == 0
    # without listening to "sync" nothing can cut a rollout
    worker.interrupt(10)
    _, info = worker.collect_data(round_id=10)
    assert not info["cut"] and info["collected_samples"] == 10


def test_weights_and_versions(worker):
    other = make_worker()
    try:
        weights = other.get_weights()
        worker.set_weights(weights, version=5)
        _, info = worker.collect_data()
        assert info["version"] == 5
        for k, v in worker.actor.state_dict().items():
            assert torch.equal(v, weights[k])
        worker.set_weights(weights)          # no version given: one more
        assert worker.collect_data()[1]["version"] == 6
    finally:
        other.stop()


def test_update_every_follows_storage_size(worker):
    assert worker.update_every == 5
    worker.update_storage_parameter("size", 2)
    assert worker.update_every == 2
    data, info = worker.collect_data()
    assert info["collected_samples"] == 4 and data[prl.OBS].shape[0] == 2


def test_evaluate_on_test_envs():
    env_factory, _, _ = VecEnv.create_factory(tagged_env, vec_env_size=1)
    w = make_worker(test_envs_factory=env_factory)
    try:
        # env 0 of the test vector terminates after 4 steps with return 1+2+3+4
        assert w.evaluate(3) == 10.0
        _, info = w.collect_data()
        assert info["TestReward"] == 10.0          # test_every=1: every collection evaluates
    finally:
        w.stop()


# ------------------------------------------------------------- sampling on the hot path
class ConstantObsEnv(gym.Env):
    """Never ends. Discrete: always the same observation. ``box``: a 2-d Box action space;
    the last action received is the end of the observation."""

    def __init__(self, box=False):
        self.box = box
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32) if box \
            else gym.spaces.Discrete(3)
        self.last = np.zeros(2, dtype=np.float32)

    def _obs(self):
        return np.array([0.3, -0.7, *(self.last if self.box else (0.0, 0.0))], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.last = np.zeros(2, dtype=np.float32)
        return self._obs(), {}

    def step(self, action):
        if self.box:
            self.last = np.asarray(action, dtype=np.float32).copy()
        return self._obs(), 0.0, False, False, {}


def constant_obs_worker(box, num_envs, size, **actor_kwargs):
    env_factory, action_space, obs_space = VecEnv.create_factory(ConstantObsEnv, {"box": box}, vec_env_size=num_envs)
    algo_factory, name = PPO.create_factory()
    actor_factory = OnPolicyActor.create_factory(obs_space, action_space, name, feature_extractor_network=MLP,
                                                 feature_extractor_kwargs={"hidden_sizes": [8]}, **actor_kwargs)
    return CWorker(0, 0, algo_factory, actor_factory, GAEBuffer.create_factory(size=size),
                   train_envs_factory=env_factory)


def test_collected_discrete_actions_follow_the_policy():
    w = constant_obs_worker(False, num_envs=50, size=80, ortho_init=False)   # 4000 samples
    try:
        data, _ = w.collect_data()
        obs = data[prl.OBS][0, :1]
        with torch.no_grad():
            probs = torch.cat([w.actor.evaluate_actions(obs, torch.tensor([[a]]))[0] for a in range(3)], 1).exp()[0]
        n = data[prl.ACT].numel()
        freq = torch.bincount(data[prl.ACT].reshape(-1), minlength=3).float() / n
        tol = 4 * torch.sqrt(probs * (1 - probs) / n) + 1e-3
        assert ((freq - probs).abs() < tol).all(), (freq, probs)
    finally:
        w.stop()


def test_collected_box_actions_are_gaussian_stored_unclipped_and_sent_clipped():
    log_std = 0.5
    w = constant_obs_worker(True, num_envs=40, size=50, log_std_init=log_std, ortho_init=False)   # 2000 samples
    try:
        data, _ = w.collect_data()
        act = data[prl.ACT]                          # (T, N, 2), unclipped
        assert act.dtype == torch.float32 and act.shape == (50, 40, 2)
        assert (act.abs() > 1.0).any(), "stored actions must not be clipped"
        # the env received the clipped action: it shows in the next observation
        torch.testing.assert_close(data[prl.OBS][1:, :, 2:], act[:-1].clamp(-1.0, 1.0))
        # standardised by the policy's mean at each observation, the samples are N(0, 1)
        with torch.no_grad():
            mean = w.actor.get_action(data[prl.OBS].reshape(-1, 4), deterministic=True)[0]
        z = (act.reshape(-1, 2) - mean) / float(np.exp(log_std))
        n = z.shape[0]
        torch.testing.assert_close(z.mean(0), torch.zeros(2), atol=5 / np.sqrt(n), rtol=0)
        torch.testing.assert_close(z.std(0), torch.ones(2), atol=0.06, rtol=0)
        with torch.no_grad():
            logp, _, _ = w.actor.evaluate_actions(data[prl.OBS].reshape(-1, 4), act.reshape(-1, 2))
        torch.testing.assert_close(data[prl.LOGP].reshape(-1, 1), logp, atol=1e-4, rtol=1e-4)
    finally:
        w.stop()


def test_the_attributes_pytorchrl_documents():
    """CWorker's attributes as pytorchrl documents them (seed 004): ``obs``, ``rhs`` and
    ``done`` are the latest observation, recurrent state and done flags of the training
    environments; ``iter`` counts the rollouts sent; ``update_every`` is a rollout's steps."""
    worker = make_worker(size=4)
    try:
        assert worker.done.tolist() == [False, False] and worker.rhs is worker.state is None
        assert (worker.index_worker, worker.iter, worker.actor_version, worker.update_every) == (0, 0, 0, 4)
        assert worker.fraction_samples == 1.0 and worker.compress_data_to_send is False
        assert worker.envs_test is None and worker.envs_train.num_envs == 2
        worker.collect_data()
        # The 4th step ended env 0's episode (it terminates every 4); env 1 is truncated every 3.
        assert worker.done.tolist() == [True, False] and worker.iter == 1
        np.testing.assert_array_equal(worker.obs[:, :2], [[0, 0], [1, 1]])   # env 0 reset, env 1 one step on
        worker.collect_data()
        assert worker.done.tolist() == [True, False]     # step 8: env 0 ends again, env 1 is at t=2
    finally:
        worker.stop()


def test_the_worker_set_attributes_pytorchrl_documents():
    """CWorkerSet's attributes as pytorchrl documents them (seed 004): the worker class, the
    Ray resources of its remote workers (one CPU, no GPU by default: it must schedule on a
    machine without one), the workers' keyword arguments and their number."""
    from pytorchrl.scheme.collection.c_worker_set import CWorkerSet
    env_factory, action_space, obs_space = VecEnv.create_factory(tagged_env, vec_env_size=2)
    algo_factory, name = PPO.create_factory()
    actor_factory = OnPolicyActor.create_factory(obs_space, action_space, name)
    col_set = CWorkerSet(0, 0, algo_factory, actor_factory, GAEBuffer.create_factory(size=4),
                         train_envs_factory=env_factory)
    try:
        assert col_set.worker_class is CWorker and col_set.num_workers == 0
        assert col_set.remote_config == {"num_cpus": 1, "num_gpus": 0}
        assert col_set.worker_params["algo_factory"] is algo_factory and col_set.local_worker().device.type == "cpu"
    finally:
        col_set.stop()


def test_a_rollout_returned_in_process_is_not_copied():
    """The delivery to the caller hands over the storage's ``get_data`` as it is (the
    in-process fast path); packed only when asked or compressing; a request naming a
    server picks that server's delivery."""
    from pytorchrl.scheme.collection.delivery import Deliveries, Request
    deliveries = Deliveries(False, (0, 1))
    delivery, server = deliveries.of(None, None)
    assert delivery is deliveries.caller and server is None
    data, info = {"obs": np.zeros((4, 3), dtype=np.float32)}, {}
    assert delivery.deliver(data, info, Request(None, None, None, None)) is data and info == {}
    packed = delivery.deliver(data, info, Request(True, None, None, None))
    np.testing.assert_array_equal(unpack(packed)["obs"], data["obs"])
    assert info["raw_bytes"] == data["obs"].nbytes
    assert deliveries.of("replay", None) == (deliveries.replay, "replay")
    assert deliveries.of(None, "queue") == (deliveries.queue, "queue")
