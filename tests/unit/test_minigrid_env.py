"""The MiniGrid family (``env.family: minigrid``): construction, observation shapes and the
networks ``actor.feature_extractor: auto`` gives them, refusals. Skipped without minigrid
(the "minigrid" extra; it is not in the "test" extra: its pygame-ce clashes with pygame)."""

import sys

import numpy as np
import pytest
import torch

from pytorchrl.agent.actors.feature_extractors.cnn import CNN
from pytorchrl.agent.actors.feature_extractors.mlp import MLP
from pytorchrl.config import ConfigError, validate_config
from pytorchrl.config.build import build_actor_factory, build_env_factories
from pytorchrl.envs import minigrid_test_env_factory, minigrid_train_env_factory
from pytorchrl.envs.minigrid import MISSION_BITS, mission_bits

from _util import needs_extra

needs_extra("minigrid", "minigrid")

TASK = "MiniGrid-Empty-5x5-v0"


def minigrid_config(**env):
    """A resolved PPO configuration on a MiniGrid task with the ``env`` keys given."""
    return validate_config({"env": {"family": "minigrid", "id": TASK, **env}, "algorithm": {"name": "PPO"},
                            "storage": {"size": 16}, "learner": {"target_steps": 1000}})


@pytest.mark.parametrize("observation,shape", [("image", (7, 7, 3)), ("onehot", (980,)), ("rgb", (3, 56, 56))])
@pytest.mark.parametrize("factory", [minigrid_train_env_factory, minigrid_test_env_factory])
def test_observation_shapes(factory, observation, shape):
    env = factory(TASK, 0, 0, observation=observation)
    assert env.observation_space.shape == shape and env.observation_space.dtype == np.uint8
    assert env.action_space.n == 7
    obs, _ = env.reset()
    assert obs.shape == shape and obs.dtype == np.uint8 and env.observation_space.contains(obs)
    obs, reward, terminated, truncated, _ = env.step(2)   # forward
    assert obs.shape == shape and reward == 0.0 and not (terminated or truncated)
    env.close()


def test_image_is_the_symbolic_view_and_onehot_encodes_it():
    image = minigrid_train_env_factory(TASK, 0, 0, seed=5).reset()[0]
    onehot = minigrid_train_env_factory(TASK, 0, 0, seed=5, observation="onehot").reset()[0].reshape(7, 7, 20)
    # (object, colour, state) indices per cell, image[x, y]: the agent stands at the bottom
    # middle of its view (an empty cell, 1), facing the goal (8, green: 1) two cells ahead.
    assert image[3, 6, 0] == 1 and image[5, 4, 0] == 8 and image[5, 4, 1] == 1
    assert set(np.unique(image[..., 0])) == {1, 2, 8}      # empty, wall, goal
    # 11 object, 6 colour and 3 state slots per cell, one of each set.
    assert (onehot[..., :11].argmax(-1) == image[..., 0]).all()
    assert (onehot[..., 11:17].argmax(-1) == image[..., 1]).all()
    assert (onehot.sum(-1) == 3).all()


def test_reaching_the_goal_ends_the_episode_with_minigrid_reward():
    env = minigrid_train_env_factory(TASK, 0, 0, seed=0)
    env.reset()
    # Empty-5x5: the agent starts at (1, 1) facing east, the goal is at (3, 3).
    rewards = [env.step(a)[1:3] for a in (2, 2, 1, 2, 2)]   # forward x2, turn right, forward x2
    reward, terminated = rewards[-1]
    assert terminated and reward == pytest.approx(1 - 0.9 * 5 / 100)
    env.close()


def test_seeds_are_reproducible_and_differ_between_train_and_test():
    def first_steps(factory, seed):
        env = factory("MiniGrid-Empty-Random-5x5-v0", 0, 0, seed=seed)
        return np.stack([env.reset()[0]] + [env.step(a)[0] for a in (0, 2, 1)])
    np.testing.assert_array_equal(first_steps(minigrid_train_env_factory, 3),
                                  first_steps(minigrid_train_env_factory, 3))
    starts = {first_steps(f, s).tobytes() for f in (minigrid_train_env_factory, minigrid_test_env_factory)
              for s in range(4)}
    assert len(starts) > 1


@pytest.mark.parametrize("observation,extractor,agent_shape", [("image", MLP, (3, 7, 7)), ("onehot", MLP, (980,)),
                                                               ("rgb", CNN, (3, 56, 56))])
def test_auto_feature_extractor_fits_the_observation(observation, extractor, agent_shape):
    # The vector env hands HWC uint8 grids channels first, (3, 7, 7): too small for the
    # Atari CNN (36x36 at least), so auto gives the MLP; the 56x56 pixels get the CNN.
    config = minigrid_config(observation=observation, vec_env_size=2)
    train_factory, _, action_space, obs_space = build_env_factories(config)
    assert obs_space.shape == agent_shape
    actor = build_actor_factory(config, obs_space, action_space, "PPO")("cpu")
    # (PPO's default actor shares one network between policy and value.)
    assert type(actor.policy_net) is extractor
    envs = train_factory("cpu", 0, 0, "train")
    with torch.no_grad():
        action, _, logp, value = actor.get_action(envs.reset())
    assert action.shape == (2, 1) and logp.shape == value.shape == (2, 1)
    assert torch.isfinite(value).all()
    envs.close()


def test_dict_observation_is_minigrids_dict_with_the_mission_as_word_bits():
    env = minigrid_train_env_factory(TASK, 0, 0, observation="dict")
    space = env.observation_space
    assert set(space.spaces) == {"image", "direction", "mission"}
    assert space["image"].shape == (7, 7, 3) and space["direction"].n == 4 and space["mission"].n == MISSION_BITS
    obs, _ = env.reset()
    assert space.contains(obs)
    assert np.array_equal(obs["mission"], mission_bits(env.unwrapped.mission))
    assert obs["mission"].sum() == len(set(env.unwrapped.mission.split()))    # no two words of it share a bit
    env.close()


def test_dict_observation_trains_through_dictnet():
    config = minigrid_config(observation="dict", vec_env_size=2)
    train_factory, _, action_space, obs_space = build_env_factories(config)
    actor = build_actor_factory(config, obs_space, action_space, "PPO")("cpu")
    assert type(actor.policy_net).__name__ == "DictNet"
    envs = train_factory("cpu", 0, 0, "train")
    with torch.no_grad():
        action, _, logp, value = actor.get_action(envs.reset())
    assert action.shape == (2, 1) and torch.isfinite(value).all()
    envs.close()


@pytest.mark.parametrize("env,expected", [
    ({"observation": "pixels"}, "env.observation: expected one of image, onehot, rgb, dict, got 'pixels'"),
    ({"frame_stack": 4}, "env.frame_stack: is an option of the atari and mujoco families; env.family is "
                         "'minigrid', which has options observation"),
    ({"id": "CartPole-v1"}, "env.id: 'CartPole-v1' is not an environment of the minigrid family"),
    ({"id": "MiniGrid-Empty-6x6"}, "env.id: unknown minigrid environment 'MiniGrid-Empty-6x6' (did you mean"),
    ({"kwargs": {"size": 5}}, "env.kwargs: the minigrid family takes no gymnasium.make arguments"),
])
def test_refusals_are_one_line(env, expected):
    with pytest.raises(ConfigError) as info:
        minigrid_config(**env)
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_observation_is_refused_for_other_families():
    with pytest.raises(ConfigError, match="env.observation: is an option of the minigrid family"):
        validate_config({"env": {"id": "CartPole-v1", "observation": "image"}, "algorithm": {"name": "PPO"},
                         "storage": {"size": 16}, "learner": {"target_steps": 1000}})


def test_missing_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "minigrid", None)   # import minigrid now fails, as without it
    with pytest.raises(ConfigError, match=r'env.family: minigrid: MiniGrid environments need minigrid: '
                                          r'pip install "pytorchrl\[minigrid\]"'):
        minigrid_config()
