"""MuJoCo environments: flat float32 observations, frame stack, frame skip, seeding."""

import numpy as np
import pytest

from pytorchrl.envs import mujoco_test_env_factory, mujoco_train_env_factory

from _util import needs_extra

TASK = "HalfCheetah-v5"


@pytest.fixture(scope="module", autouse=True)
def mujoco_available():
    needs_extra("mujoco", "mujoco")
    try:
        mujoco_train_env_factory(TASK, 0, 0).close()
    except Exception as exc:  # no mujoco package, no OpenGL-free build, ...
        pytest.skip(f"MuJoCo cannot load: {type(exc).__name__}: {exc}")


@pytest.mark.parametrize("factory", [mujoco_train_env_factory, mujoco_test_env_factory])
def test_flat_float32_observations(factory):
    env = factory(TASK, 0, 0)
    assert env.observation_space.shape == (17,) and env.observation_space.dtype == np.float32
    obs, _ = env.reset()
    assert obs.shape == (17,) and obs.dtype == np.float32
    obs, reward, *_ = env.step(env.action_space.sample())
    assert obs.shape == (17,) and obs.dtype == np.float32 and np.isfinite(reward)
    env.close()


def test_frame_stack_concatenates_newest_last():
    single = mujoco_train_env_factory(TASK, 0, 0, seed=3)
    stacked = mujoco_train_env_factory(TASK, 0, 0, seed=3, frame_stack=3)
    assert stacked.observation_space.shape == (51,)
    history = [single.reset()[0]]
    obs = stacked.reset()[0]
    np.testing.assert_array_equal(obs, np.concatenate([history[0]] * 3))
    actions = np.random.default_rng(0).uniform(-1, 1, (5, 6)).astype(np.float32)
    for a in actions:
        history.append(single.step(a)[0])
        obs = stacked.step(a)[0]
    np.testing.assert_array_equal(obs, np.concatenate(history[-3:]))


def test_frame_skip_and_reward_delay():
    single = mujoco_train_env_factory(TASK, 0, 0, seed=1)
    skipped = mujoco_train_env_factory(TASK, 0, 0, seed=1, frame_skip=2, reward_delay=2)
    single.reset()
    skipped.reset()
    actions = np.random.default_rng(1).uniform(-1, 1, (4, 6)).astype(np.float32)
    rewards = []
    for a in actions:
        rewards.append(sum(single.step(a)[1] for _ in range(2)))
        obs_single = single.unwrapped._get_obs()
        obs, r, *_ = skipped.step(a)
        np.testing.assert_allclose(obs, obs_single.astype(np.float32))
        if len(rewards) % 2:
            assert r == 0.0
        else:
            assert r == pytest.approx(rewards[-1] + rewards[-2])


def test_seeding_reproducible_and_distinct():
    def first_obs(**kwargs):
        return mujoco_train_env_factory(TASK, **kwargs).reset()[0]

    a = first_obs(index_col_worker=0, index_grad_worker=0, index_env=0, seed=5)
    np.testing.assert_array_equal(a, first_obs(index_col_worker=0, index_grad_worker=0, index_env=0, seed=5))
    assert not np.array_equal(a, first_obs(index_col_worker=0, index_grad_worker=0, index_env=1, seed=5))
    assert not np.array_equal(a, mujoco_test_env_factory(TASK, 0, 0, seed=5).reset()[0])
