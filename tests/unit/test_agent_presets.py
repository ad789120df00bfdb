"""Named agents (top-level ``preset: NAME``) and environment families (``env.family``):
every agent preset's example configuration validates and trains a tiny budget (those with
remote workers: tests/distributed/test_agent_presets_ray.py); explicit keys win over a preset; family
options, ids and packages are checked with one clear message."""

import importlib.util

import numpy as np
import pytest

from pytorchrl import cli
from pytorchrl.config import ConfigError, load_config, validate_config
from pytorchrl.config.agent_presets import AGENT_PRESETS, get_agent_preset
from pytorchrl.config.loader import resolve_agent_preset
from pytorchrl.config.build import build_actor_factory, build_env_factories
from pytorchrl.config.schema import FEATURE_EXTRACTORS

from _util import needs_extra
from cli_helpers import assert_one_line_error, pytorchrl_in_process, tiny, train_checking_float32

from agent_preset_helpers import ON_RAY, TINY_RUNS, example_config, train_tiny


# ------------------------------------------------------------------------ agent presets
def test_every_agent_preset_has_a_valid_example_config():
    assert list(TINY_RUNS) == list(AGENT_PRESETS)
    for name, agent in AGENT_PRESETS.items():
        # The example is the preset's file itself, so that its hyperparameters are on view
        # where users look; the package ships the same file for ``preset: NAME``.
        with open(example_config(agent)) as f, open(agent.path) as g:
            assert f.read() == g.read(), f"examples/configs/{agent.file} differs from {agent.path}"
        assert agent.description and "\n" not in agent.description
        if resolve_agent_preset(agent)["env"].get("family") in ("atari", "mujoco"):
            continue  # validated where their simulator loads (test_agent_preset_trains)
        config = load_config(example_config(agent))
        named = validate_config({"preset": name})
        assert {k: v for k, v in named.items() if k != "preset"} == {k: v for k, v in config.items() if k != "preset"}
        # A resolved configuration (a run's config.yaml) validates to itself.
        assert validate_config(config) == config


def test_presets_build_on_each_other_and_explicit_keys_win():
    a2c, a3c = validate_config({"preset": "A2C"}), validate_config({"preset": "A3C"})
    assert a3c["algorithm"] == a2c["algorithm"] and a3c["storage"] == a2c["storage"]
    assert a3c["scheme"]["preset"] == "a3c" and a3c["scheme"]["grad_workers_communication"] == "async"
    impala = validate_config({"preset": "IMPALA"})
    assert impala["algorithm"] == a2c["algorithm"] and impala["storage"]["name"] == "VTraceBuffer"
    apex = validate_config({"preset": "Ape-X"})
    assert apex["algorithm"]["name"] == "DDQN" and apex["storage"]["name"] == "PERBuffer"
    assert apex["storage"]["n_step"] == 3 and apex["scheme"]["col_workers_communication"] == "async"
    r2d2 = validate_config({"preset": "R2D2-Lite"})
    assert r2d2["algorithm"]["name"] == "DDQN" and r2d2["actor"]["recurrent_net"] == "GRU"
    assert r2d2["storage"]["name"] == "RecurrentReplayBuffer" and r2d2["env"]["id"] == "MaskedCartPole-v1"
    lstm = validate_config({"preset": "R2D2-Lite", "actor": {"recurrent_net": "LSTM"}})
    assert lstm["actor"]["recurrent_net"] == "LSTM" and lstm["storage"] == r2d2["storage"]

    config = validate_config({"preset": "PPO", "algorithm": {"lr": 1e-4}, "scheme": {"preset": "dd-ppo"}})
    assert config["algorithm"]["lr"] == 1e-4 and config["algorithm"]["num_epochs"] == 20    # the rest: PPO's
    assert config["scheme"]["decentralized_update_execution"] and config["env"]["vec_env_size"] == 8
    assert [s["name"] for s in config["schedules"]] == ["lr", "clip_param"]


def test_another_algorithm_storage_or_family_replaces_the_presets_section():
    config = validate_config({"preset": "PPO", "algorithm": {"name": "A2C"}})
    assert config["algorithm"]["name"] == "A2C" and config["algorithm"]["lr"] == 1e-4     # A2C's default (pytorchrl's)
    assert config["schedules"] == []    # PPO's schedules name clip_param, which A2C has not
    config = validate_config({"preset": "PPO", "storage": {"name": "VanillaOnPolicyBuffer", "size": 16}})
    assert config["storage"] == {"name": "VanillaOnPolicyBuffer", "size": 16}   # no GAEBuffer key left over
    needs_extra("mujoco", "mujoco")     # (the family's configuration checks its package)
    config = validate_config({"preset": "PPO", "env": {"family": "mujoco", "id": "Hopper-v5"}})
    assert config["env"]["vec_env_size"] == 1 and config["env"]["family"] == "mujoco"


def test_an_error_in_a_value_of_the_preset_says_so():
    with pytest.raises(ConfigError) as info:
        validate_config({"preset": "PPO", "storage": {"name": "ReplayBuffer", "size": 100}})
    assert str(info.value) == ("config error: storage.name: PPO learns from an on-policy storage (GAEBuffer, "
                               "VanillaOnPolicyBuffer, VTraceBuffer), got 'ReplayBuffer'")
    with pytest.raises(ConfigError) as info:
        validate_config({"preset": "DQN", "scheme": {"preset": "drl-actor-model"}})
    assert str(info.value).startswith("config error: algorithm.num_updates: has no effect with scheme.data_path: "
                                      "replay_server")
    assert str(info.value).endswith("(the value of preset DQN; write the key in the file to change it)")
    with pytest.raises(ConfigError) as info:      # a value the file wrote: no note
        validate_config({"preset": "PPO", "algorithm": {"lr": -1}})
    assert str(info.value) == "config error: algorithm.lr: must be >= 0, got -1.0"


def test_an_algorithm_of_the_other_family_drops_the_presets_actor_and_storage():
    with pytest.raises(ConfigError, match="^config error: storage.size: missing required key$"):
        validate_config({"preset": "PPO", "algorithm": {"name": "DDQN"}})
    config = validate_config({"preset": "PPO", "algorithm": {"name": "DDQN"}, "storage": {"size": 1000}})
    assert config["storage"]["name"] == "ReplayBuffer" and config["schedules"] == []
    assert config["actor"]["hidden_sizes"] is None and config["env"]["vec_env_size"] == 8   # env: PPO's


def test_an_unknown_agent_preset_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigError) as info:
        validate_config({"preset": "PPO-atari"})
    message = str(info.value)
    assert message.startswith("config error: preset: expected one of 'A2C', 'PPO', ")
    assert "(did you mean 'PPO-Atari'?)" in message
    with pytest.raises(KeyError, match="unknown agent preset 'x'; valid: A2C, PPO, "):
        get_agent_preset("x")
    result = pytorchrl_in_process("train", example_config(AGENT_PRESETS["A2C"]), "preset=Impala", cwd=tmp_path)
    assert_one_line_error(result, "preset: expected one of")


def test_presets_command_lists_the_agents(capsys):
    assert cli.main(["presets"]) == 0
    out = capsys.readouterr().out
    assert "scheme layouts" in out and "agents" in out and "dd-ppo  (Ray)" in out
    for name, agent in AGENT_PRESETS.items():
        assert f"{name}  (examples/configs/{agent.file})" in out and agent.description in out
    assert cli.main(["presets", "IMPALA"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("IMPALA  (examples/configs/impala_cartpole.yaml)")
    assert "storage: {name: VTraceBuffer" in out and "algorithm: {name: A2C" in out
    assert "scheme: {preset: async-collectors" in out and "    - {name: lr, target: algorithm" in out


@pytest.mark.parametrize("name", [name for name in AGENT_PRESETS if name not in ON_RAY])
def test_agent_preset_trains(name):
    train_tiny(name)


# -------------------------------------------------------------------- environment families
@pytest.mark.parametrize("env, expected", [
    ({"episodic_life": True}, "env.episodic_life: is an option of the atari family; env.family is 'gym', "
                              "which has none"),
    ({"family": "atar"}, "env.family: expected one of 'gym', 'atari', 'mujoco', 'minigrid', 'robotics', got 'atar' (did you mean 'atari'?)"),
    pytest.param({"family": "mujoco", "id": "Pendulum-v1"},
                 "env.id: 'Pendulum-v1' is not an environment of the mujoco family",
                 marks=pytest.mark.skipif(importlib.util.find_spec("mujoco") is None,
                                          reason='needs the "mujoco" extra: pip install "pytorchrl[mujoco]"')),
    ({"family": "mujoco", "id": "HalfCheetah-v5", "frame_stack": 0}, "env.frame_stack: must be >= 1, got 0"),
    ({"family": "mujoco", "id": "HalfCheetah-v5", "clip_rewards": True},
     "env.clip_rewards: is an option of the atari family; env.family is 'mujoco', which has options frame_skip, "
     "frame_stack, reward_delay"),
    ({"family": "mujoco", "id": "HalfCheetah-v5", "kwargs": {"max_episode_steps": 10}},
     "env.kwargs: the mujoco family takes no gymnasium.make arguments; its options are env keys: frame_skip, "
     "frame_stack, reward_delay"),
])
def test_family_options_and_ids_are_checked(env, expected):
    with pytest.raises(ConfigError) as info:
        validate_config(tiny(env=env))
    assert str(info.value).startswith(f"config error: {expected}"), str(info.value)


def test_atari_family_ids_and_options(tmp_path):
    needs_extra("ale_py", "atari")
    for env, expected in [
            ({"family": "atari", "id": "CartPole-v1"}, "env.id: 'CartPole-v1' is not an environment of the atari "
                                                       "family"),
            ({"family": "atari", "id": "PongNoFrameskip-v9"}, "env.id: unknown atari environment "
                                                              "'PongNoFrameskip-v9' (did you mean "),
            ({"family": "atari", "id": "PongNoFrameskip-v4", "frame_skip": 2},
             "env.frame_skip: is an option of the mujoco family; env.family is 'atari'")]:
        with pytest.raises(ConfigError) as info:
            validate_config(tiny(env=env))
        assert str(info.value).startswith(f"config error: {expected}"), str(info.value)
    # On the command line: one line, exit status 2.
    result = pytorchrl_in_process("train", example_config(AGENT_PRESETS["PPO-Atari"]), "env.id=CartPole-v1",
                                  cwd=tmp_path)
    assert_one_line_error(result, "env.id: 'CartPole-v1' is not an environment of the atari family")


def test_atari_family_builds_frames_and_a_cnn_actor():
    needs_extra("ale_py", "atari")
    config = validate_config(tiny(env={"family": "atari", "id": "BreakoutNoFrameskip-v4", "frame_stack": 2,
                                       "max_episode_steps": 30, "sticky_actions": True, "test_env": True}))
    train, test, action_space, obs_space = build_env_factories(config)
    assert obs_space.shape == (2, 84, 84) and obs_space.dtype == np.uint8 and action_space.n == 4
    actor = build_actor_factory(config, obs_space, action_space, "PPO")("cpu")
    assert isinstance(actor.policy_net, FEATURE_EXTRACTORS["cnn"])
    envs = train("cpu")
    try:
        envs.reset()
        steps = 0
        truncated = False
        while not truncated and steps < 100:     # max_episode_steps reached the factory: a game lasts 30
            _, _, _, trunc, _ = envs.step(np.zeros(2, dtype=np.int64))
            truncated = bool(trunc.any())
            steps += 1
        assert truncated and steps <= 30
    finally:
        envs.close()
    assert test is not None


def test_actor_precision_reaches_the_image_extractors_of_both_families_and_trains():
    """actor.precision goes to the image feature extractor of PPO's actor and of DDQN's
    (its observation extractor); bf16 trains a tiny budget with float32 weights; a flat
    observation space (mlp) refuses it; it cannot change while training."""
    needs_extra("ale_py", "atari")
    from pytorchrl.tools.live_control import resolve_key

    atari = {"family": "atari", "id": "PongNoFrameskip-v4", "frame_stack": 2, "max_episode_steps": 40,
             "test_env": False}
    config = validate_config(tiny(env=atari, actor={"precision": "bf16"}, storage={"name": "GAEBuffer", "size": 16},
                                  learner={"target_steps": 64}))
    _, _, action_space, obs_space = build_env_factories(config)
    assert build_actor_factory(config, obs_space, action_space, "PPO")("cpu").policy_net.precision == "bf16"
    dqn = dict(tiny(env=atari, actor={"precision": "bf16"}), algorithm={"name": "DDQN"},
               storage={"name": "ReplayBuffer", "size": 100})
    dqn = validate_config(dqn)
    off_policy = build_actor_factory(dqn, obs_space, action_space, "DDQN")("cpu")
    assert [m.precision for m in off_policy.modules() if isinstance(m, FEATURE_EXTRACTORS["cnn"])]
    assert all(m.precision == "bf16" for m in off_policy.modules() if isinstance(m, FEATURE_EXTRACTORS["cnn"]))

    train_checking_float32(config)

    with pytest.raises(ConfigError, match="actor.precision: bf16 applies to the image feature extractors .* "
                                          "not to PPO's actor.feature_extractor mlp"):
        validate_config(tiny(actor={"feature_extractor": "mlp", "precision": "bf16"}))
    flat = validate_config(tiny(actor={"precision": "bf16"}))     # auto: CartPole's vectors get the mlp
    _, _, action_space, obs_space = build_env_factories(flat)
    with pytest.raises(ConfigError, match=r"actor.precision: bf16 applies .* PPO's observations \(4,\) get the mlp"):
        build_actor_factory(flat, obs_space, action_space, "PPO")
    with pytest.raises(ValueError, match="cannot change 'actor.precision' while training"):
        resolve_key("actor.precision", {"lr": 1e-3}, {"size": 16})


def test_evaluation_plays_whole_games_of_the_family(tmp_path):
    """`pytorchrl evaluate` rebuilds a run's environment with its family's test factory."""
    needs_extra("ale_py", "atari")
    import torch

    from pytorchrl.tools.evaluate import build_policy

    config = load_config(example_config(AGENT_PRESETS["PPO-Atari"]), ["env.max_episode_steps=20"])
    _, _, action_space, obs_space = build_env_factories(config)
    torch.save(build_actor_factory(config, obs_space, action_space, "PPO")("cpu").state_dict(),
               tmp_path / "model.state_dict")
    env, actor = build_policy(config, str(tmp_path / "model.state_dict"))
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (4, 84, 84) and isinstance(actor.policy_net, FEATURE_EXTRACTORS["cnn"])
        for _ in range(20):
            obs, _, terminated, truncated, info = env.step(0)
        assert truncated and not terminated and info["game_length"] == 20   # env.max_episode_steps reached it
    finally:
        env.close()
