"""VecEnv: factory, index keyword arguments, episode ends, statistics, back-ends, errors, logs."""

import csv
import glob
import os

import gymnasium as gym
import numpy as np
import pytest
import torch

from pytorchrl.agent.env import EnvError, VecEnv
from pytorchrl.envs import make_gym_env


# ----------------------------------------------------------------- test environments
class CountEnv(gym.Env):
    """Observation = [tag, t]; reward ``reward`` per step; terminates after ``length`` steps
    (never if None). ``tag`` lets a test see which env produced an observation."""

    def __init__(self, length=5, reward=1.0, tag=0.0, info_at_end=None):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.length, self.reward, self.tag = length, reward, float(tag)
        self.info_at_end = info_at_end or {}
        self.t = 0

    def _obs(self):
        return np.array([self.tag, self.t], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        term = self.length is not None and self.t >= self.length
        return self._obs(), self.reward, term, False, (dict(self.info_at_end) if term else {})


def five_step_env():
    """Terminates after exactly 5 steps, reward 1 per step."""
    return CountEnv(length=5, reward=1.0)


def time_limited_env(max_steps=3):
    """Never terminates by itself; TimeLimit truncates it after ``max_steps`` steps, reward 2."""
    return gym.wrappers.TimeLimit(CountEnv(length=None, reward=2.0), max_episode_steps=max_steps)


def indexed_env(index_env, mode, index_col_worker, index_grad_worker, base=0.0):
    """Names every index keyword: the observation encodes them."""
    tag = base + 1000 * index_grad_worker + 100 * index_col_worker + 10 * index_env + (1 if mode == "test" else 0)
    return CountEnv(length=5, tag=tag)


def plain_env(length=5):
    """Names no index keyword: passing one would raise TypeError."""
    return CountEnv(length=length)


def forwarding_env(**kwargs):
    """A catch-all ``**kwargs`` (forwarded to a constructor that rejects unknown names) must not
    be sent the index keywords."""
    return CountEnv(**kwargs)


def broken_env(**kwargs):
    raise RuntimeError("boom-42: missing ROM file")


def broken_for_second_env(index_env):
    if index_env == 1:
        raise FileNotFoundError("no such level: level-2")
    return CountEnv()


class StepFailsEnv(CountEnv):
    def step(self, action):
        raise ValueError("physics exploded")


def step_fails_env():
    return StepFailsEnv()


def run(envs, num_steps, action=0):
    """Step ``num_steps`` times with a constant action; return the list of step outputs."""
    out = []
    for _ in range(num_steps):
        out.append(envs.step(torch.full((envs.num_envs, 1), action, dtype=torch.int64)))
    return out


# ------------------------------------------------------------------------- factory
def test_create_factory_returns_spaces_and_builds_envs():
    factory, action_space, obs_space = VecEnv.create_factory(env_fn=five_step_env, vec_env_size=3)
    assert action_space == gym.spaces.Discrete(2)
    assert obs_space.shape == (2,)
    envs = factory("cpu")
    try:
        assert envs.num_envs == 3
        obs = envs.reset()
        assert isinstance(obs, torch.Tensor) and obs.shape == (3, 2)
        obs, rew, term, trunc, final_obs = envs.step(torch.zeros(3, 1, dtype=torch.int64))
        assert obs.shape == (3, 2) and rew.shape == (3,) and term.shape == (3,) and trunc.shape == (3,)
        assert rew.dtype == torch.float32 and term.dtype == torch.bool and trunc.dtype == torch.bool
        assert final_obs == {}
    finally:
        envs.close()


def test_gym_ids_through_make_gym_env():
    factory, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": "CartPole-v1"}, vec_env_size=2)
    assert action_space.n == 2 and obs_space.shape == (4,)
    envs = factory("cpu")
    assert envs.reset().shape == (2, 4)
    envs.close()


def test_invalid_arguments():
    with pytest.raises(ValueError):
        VecEnv.create_factory(five_step_env, vec_env_size=0)
    with pytest.raises(ValueError):
        VecEnv.create_factory(five_step_env, vectorization="threads")


def test_env_fn_receives_index_kwargs_when_it_names_them():
    factory, _, _ = VecEnv.create_factory(env_fn=indexed_env, env_kwargs={"base": 0.5}, vec_env_size=3)
    envs = factory("cpu", index_col_worker=2, index_grad_worker=1, mode="test")
    tags = envs.reset()[:, 0]
    torch.testing.assert_close(tags, torch.tensor([1201.5, 1211.5, 1221.5]))
    envs.close()
    envs = factory("cpu")   # defaults: worker 0 of gradient worker 0, train mode
    torch.testing.assert_close(envs.reset()[:, 0], torch.tensor([0.5, 10.5, 20.5]))
    envs.close()


@pytest.mark.parametrize("env_fn", [plain_env, forwarding_env])
def test_env_fn_without_index_kwargs_gets_none(env_fn):
    factory, _, _ = VecEnv.create_factory(env_fn=env_fn, env_kwargs={"length": 4}, vec_env_size=2)
    envs = factory("cpu", index_col_worker=3, index_grad_worker=2, mode="train")
    envs.reset()
    outs = run(envs, 4)
    assert outs[-1][2].all()   # env_kwargs did arrive: episodes of length 4
    envs.close()


# ------------------------------------------------------------------- episode ends
def test_termination_final_obs_and_reset_obs():
    factory, _, _ = VecEnv.create_factory(env_fn=five_step_env, vec_env_size=2)
    envs = factory("cpu")
    envs.reset()
    outs = run(envs, 6)
    for t, (obs, rew, term, trunc, final_obs) in enumerate(outs[:4], start=1):
        assert not term.any() and not trunc.any() and final_obs == {}
        torch.testing.assert_close(obs[:, 1], torch.full((2,), float(t)))
        torch.testing.assert_close(rew, torch.ones(2))
    obs, rew, term, trunc, final_obs = outs[4]       # step 5: termination
    assert term.all() and not trunc.any()
    assert sorted(final_obs) == [0, 1]
    for i in (0, 1):
        np.testing.assert_allclose(np.asarray(final_obs[i]), [0.0, 5.0])
    torch.testing.assert_close(obs[:, 1], torch.zeros(2))   # the returned obs is the reset one
    obs, _, term, _, final_obs = outs[5]
    assert not term.any() and final_obs == {}
    torch.testing.assert_close(obs[:, 1], torch.ones(2))
    envs.close()


def test_truncation_by_time_limit():
    factory, _, _ = VecEnv.create_factory(env_fn=time_limited_env, env_kwargs={"max_steps": 3}, vec_env_size=2)
    envs = factory("cpu")
    envs.reset()
    outs = run(envs, 7)
    for k, (obs, rew, term, trunc, final_obs) in enumerate(outs, start=1):
        assert not term.any()
        torch.testing.assert_close(rew, torch.full((2,), 2.0))
        if k % 3 == 0:
            assert trunc.all()
            for i in (0, 1):
                np.testing.assert_allclose(np.asarray(final_obs[i]), [0.0, 3.0])
            torch.testing.assert_close(obs[:, 1], torch.zeros(2))
        else:
            assert not trunc.any() and final_obs == {}
    assert [e for e in envs.pop_finished_episodes()] == [(6.0, 3)] * 4
    envs.close()


def terminates_at_time_limit():
    return gym.wrappers.TimeLimit(CountEnv(length=3), max_episode_steps=3)


def test_termination_wins_over_truncation_in_the_same_step():
    factory, _, _ = VecEnv.create_factory(env_fn=terminates_at_time_limit, vec_env_size=1)
    envs = factory("cpu")
    envs.reset()
    _, _, term, trunc, final_obs = run(envs, 3)[-1]
    assert term.all() and not trunc.any() and 0 in final_obs
    envs.close()


def mixed_env(index_env):
    """Env 0 terminates after 2 steps, env 1 is truncated after 3 steps."""
    if index_env == 0:
        return CountEnv(length=2, reward=1.0, tag=0)
    return gym.wrappers.TimeLimit(CountEnv(length=None, reward=0.5, tag=1), max_episode_steps=3)


def test_episode_statistics():
    factory, _, _ = VecEnv.create_factory(env_fn=mixed_env, vec_env_size=2)
    envs = factory("cpu")
    envs.reset()
    outs = run(envs, 7)
    flags = [(bool(o[2][0]), bool(o[3][0]), bool(o[2][1]), bool(o[3][1])) for o in outs]
    # env 0 terminates at steps 2, 4, 6; env 1 is truncated at steps 3, 6
    assert [f[0] for f in flags] == [False, True, False, True, False, True, False]
    assert [f[3] for f in flags] == [False, False, True, False, False, True, False]
    assert not any(f[1] or f[2] for f in flags)
    eps = envs.pop_finished_episodes()
    assert sorted(eps) == sorted([(2.0, 2)] * 3 + [(1.5, 3)] * 2)
    assert envs.pop_finished_episodes() == []       # consumed
    run(envs, 1)                                     # step 8: env 0 ends again
    assert envs.pop_finished_episodes() == [(2.0, 2)]
    envs.close()


def test_reset_clears_running_episode_statistics():
    factory, _, _ = VecEnv.create_factory(env_fn=five_step_env, vec_env_size=1)
    envs = factory("cpu")
    envs.reset()
    run(envs, 3)
    envs.reset()                  # abandon the running episode
    run(envs, 5)
    assert envs.pop_finished_episodes() == [(5.0, 5)]
    envs.close()


# --------------------------------------------------------------------------- seeds
def first_obs(seed, size=2):
    factory, _, _ = VecEnv.create_factory(make_gym_env, {"env_id": "CartPole-v1"}, vec_env_size=size, seed=seed)
    envs = factory("cpu")
    obs = envs.reset()
    envs.close()
    return obs


def test_seeds_are_reproducible_and_distinct():
    a, b, c = first_obs(7), first_obs(7), first_obs(8)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert not torch.equal(a[0], a[1])           # every env of a vector gets its own seed


def test_seeds_differ_between_workers_and_modes():
    factory, _, _ = VecEnv.create_factory(make_gym_env, {"env_id": "CartPole-v1"}, vec_env_size=1, seed=3)
    firsts = []
    for kw in ({}, {"index_col_worker": 1}, {"index_grad_worker": 1}, {"mode": "test"}):
        envs = factory("cpu", **kw)
        firsts.append(envs.reset())
        envs.close()
    for i in range(len(firsts)):
        for j in range(i + 1, len(firsts)):
            assert not torch.equal(firsts[i], firsts[j])


# ----------------------------------------------------------------------- back-ends
def trajectory(vectorization, env_fn, env_kwargs, num_steps, seed=11, size=3):
    factory, _, _ = VecEnv.create_factory(env_fn, env_kwargs, vec_env_size=size, seed=seed,
                                          vectorization=vectorization)
    envs = factory("cpu")
    try:
        rng = np.random.default_rng(0)
        record = [envs.reset().clone()]
        for _ in range(num_steps):
            action = torch.as_tensor(rng.integers(0, 2, size=(size, 1)))
            obs, rew, term, trunc, final_obs = envs.step(action)
            record.append((obs.clone(), rew.clone(), term.clone(), trunc.clone(),
                           {i: np.asarray(v).copy() for i, v in final_obs.items()}))
        return record, envs.pop_finished_episodes()
    finally:
        envs.close()


@pytest.mark.parametrize("env_fn,env_kwargs", [
    (make_gym_env, {"env_id": "CartPole-v1", "max_episode_steps": 20}),
    (mixed_env, {}),
], ids=["cartpole", "custom"])
def test_subprocess_matches_sync(env_fn, env_kwargs):
    sync, sync_eps = trajectory("sync", env_fn, env_kwargs, 60)
    sub, sub_eps = trajectory("subprocess", env_fn, env_kwargs, 60)
    torch.testing.assert_close(sync[0], sub[0])
    ended = 0
    for s, p in zip(sync[1:], sub[1:]):
        for a, b in zip(s[:4], p[:4]):
            torch.testing.assert_close(a, b)
        assert sorted(s[4]) == sorted(p[4])
        for i in s[4]:
            np.testing.assert_allclose(s[4][i], p[4][i])
        ended += len(s[4])
    assert ended > 3, "the comparison must cover episode ends"
    assert sorted(sync_eps) == sorted(sub_eps)


def recorded_cartpole(index_env):
    """CartPole whose info holds a nested dict at each episode end (gymnasium's episode
    record), as Atari's and other wrapped envs' infos do."""
    return gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1", max_episode_steps=15 + index_env))


def test_subprocess_final_infos_keep_nested_dicts_of_the_env_that_ended():
    """A nested dict in gymnasium's vector info is an info of its own (arrays per key):
    each ended env's final info holds its own record, the same as the in-process one."""
    infos = {}
    for vectorization in ("sync", "subprocess"):
        factory, _, _ = VecEnv.create_factory(recorded_cartpole, {}, vec_env_size=3, seed=5,
                                              vectorization=vectorization)
        envs = factory("cpu")
        try:
            envs.reset()
            got = infos[vectorization] = []
            for _ in range(40):
                _, _, _, _, final_obs = envs.step(torch.zeros((3, 1), dtype=torch.int64))
                got.extend((i, envs._vec.final_info[i]["episode"]["l"]) for i in sorted(final_obs))
        finally:
            envs.close()
    assert len(infos["sync"]) >= 6
    assert [(i, int(length)) for i, length in infos["subprocess"]] == \
        [(i, int(length)) for i, length in infos["sync"]]


# -------------------------------------------------------------------------- errors
def test_broken_env_fn_raises_env_error_with_cause():
    with pytest.raises(EnvError) as err:
        VecEnv.create_factory(env_fn=broken_env, env_kwargs={"level": 3})
    msg = str(err.value)
    assert "boom-42: missing ROM file" in msg
    assert "RuntimeError" in msg
    assert "broken_env" in msg


def test_unknown_gym_id_raises_env_error():
    with pytest.raises(EnvError) as err:
        VecEnv.create_factory(make_gym_env, {"env_id": "NoSuchEnvAtAll-v9"})
    assert "NoSuchEnvAtAll" in str(err.value)


def test_env_error_when_building_a_later_env():
    factory, _, _ = VecEnv.create_factory(env_fn=broken_for_second_env, vec_env_size=2)   # probe is env 0
    with pytest.raises(EnvError) as err:
        factory("cpu")
    assert "no such level: level-2" in str(err.value)
    assert "FileNotFoundError" in str(err.value)


def test_env_error_when_stepping():
    factory, _, _ = VecEnv.create_factory(env_fn=step_fails_env, vec_env_size=1)
    envs = factory("cpu")
    envs.reset()
    with pytest.raises(EnvError) as err:
        envs.step(torch.zeros(1, 1, dtype=torch.int64))
    assert "physics exploded" in str(err.value)
    envs.close()


# ---------------------------------------------------------------------------- logs
def read_log(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def env_with_info():
    return CountEnv(length=5, info_at_end={"level": 7})


def test_episode_csv_log(tmp_path):
    log_dir = str(tmp_path / "logs")
    factory, _, _ = VecEnv.create_factory(env_fn=env_with_info, vec_env_size=2, log_dir=log_dir,
                                          info_keywords=("level",))
    envs = factory("cpu")
    envs.reset()
    run(envs, 12)                        # two finished episodes per env
    files = glob.glob(os.path.join(log_dir, "*.csv"))
    assert len(files) == 1
    rows = read_log(files[0])            # readable while the envs are still open (flushed)
    assert len(rows) == 4
    for row in rows:
        assert float(row["r"]) == 5.0 and int(row["l"]) == 5 and float(row["t"]) >= 0.0
        assert row["level"] == "7"
    envs.close()
    # test envs of another worker log to their own file; nothing is overwritten
    test_envs = factory("cpu", index_col_worker=1, mode="test")
    test_envs.reset()
    run(test_envs, 5)
    test_envs.close()
    files = sorted(glob.glob(os.path.join(log_dir, "*.csv")))
    assert len(files) == 2
    assert sorted(len(read_log(f)) for f in files) == [2, 4]


def test_no_log_without_log_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    factory, _, _ = VecEnv.create_factory(env_fn=five_step_env, vec_env_size=1)
    envs = factory("cpu")
    envs.reset()
    run(envs, 5)
    envs.close()
    assert os.listdir(tmp_path) == []
