"""``algorithm.policy_loss_addons`` in a configuration: each entry's keys validated with one-line
messages, the behaviours built from checkpoints that our own runs write (a model and a full
checkpoint), refused for the off-policy algorithms, listed by ``pytorchrl keys``; and the
example configuration."""

import os

import pytest
import torch

from pytorchrl import cli
from pytorchrl.agent.algorithms.policy_loss_addons import AttractionKL, SavedActorFactory
from pytorchrl.config import (ConfigError, build_actor_factory, build_algorithm_factory, build_env_factories,
                              build_learner, load_config, validate_config)

from cli_helpers import REPO, tiny

EXAMPLE = os.path.join(REPO, "examples", "configs", "ppo_attraction_kl.yaml")
ACTOR = {"hidden_sizes": [8], "shared_policy_value_network": False}


def _config(addons, algorithm="PPO", **sections):
    return tiny(algorithm={"name": algorithm, "policy_loss_addons": addons}, actor=ACTOR, **sections)


def _save_model(config, path):
    """A model of ``config``'s actor, saved as a run saves ``model.state_dict``."""
    resolved = validate_config({**config, "algorithm": {"name": config["algorithm"]["name"]}})
    _, _, action_space, obs_space = build_env_factories(resolved)
    actor = build_actor_factory(resolved, obs_space, action_space, resolved["algorithm"]["name"])("cpu")
    torch.save(actor.state_dict(), path)
    return str(path)


@pytest.fixture
def model(tmp_path):
    return _save_model(_config([]), tmp_path / "model.state_dict")


def _error(raw):
    with pytest.raises(ConfigError) as info:
        validate_config(raw)
    text = str(info.value)
    assert "\n" not in text
    return text


def test_entries_resolve_with_absolute_paths_and_equal_weights(model, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = validate_config(_config([{"name": "RepulsionKL", "checkpoints": ["model.state_dict", model]},
                                      {"name": "AttractionKL", "checkpoints": [model], "weights": [2],
                                       "loss_term_weight": 3}], algorithm="A2C"))
    first, second = config["algorithm"]["policy_loss_addons"]
    assert first == {"name": "RepulsionKL", "checkpoints": [model, model], "weights": [1.0, 1.0],
                     "loss_term_weight": 1.0, "eps": 1e-8}
    assert second["weights"] == [2.0] and second["loss_term_weight"] == 3.0
    assert validate_config(_config([]))["algorithm"]["policy_loss_addons"] == []
    assert validate_config(tiny())["algorithm"]["policy_loss_addons"] == []


@pytest.mark.parametrize("entry, message", [
    ({"name": "AttractKL"}, "algorithm.policy_loss_addons.0.name: expected one of 'AttractionKL', 'RepulsionKL', "
                            "got 'AttractKL' (did you mean 'AttractionKL'?)"),
    ({"checkpoints": ["nope.state_dict"]}, "algorithm.policy_loss_addons.0.checkpoints.0: no such file "
                                           "'nope.state_dict' (a model.state_dict or checkpoint.pt of an earlier run"),
    ({"weights": [1.0, 2.0]}, "algorithm.policy_loss_addons.0.weights: 2 weight(s) for 1 checkpoint(s): give one "
                              "weight per checkpoint"),
    ({"weights": [-1.0]}, "algorithm.policy_loss_addons.0.weights.0: must be >= 0, got -1.0"),
    ({"weights": [0]}, "algorithm.policy_loss_addons.0.weights: all weights are 0"),
    ({"weights": "1"}, "algorithm.policy_loss_addons.0.weights: expected a non-empty list of numbers, got '1'"),
    ({"checkpoints": []}, "algorithm.policy_loss_addons.0.checkpoints: expected a non-empty list of strings"),
    ({"loss_term_weight": -2}, "algorithm.policy_loss_addons.0.loss_term_weight: must be >= 0, got -2"),
    ({"eps": 0.0}, "algorithm.policy_loss_addons.0.eps: must be in (0, 0.5], got 0.0"),
    ({"weight": [1.0]}, "algorithm.policy_loss_addons.0.weight: unknown key of a policy-loss add-on (did you mean "
                        "'weights'?)"),
])
def test_each_key_of_an_entry_is_checked_in_one_line(model, entry, message):
    assert message in _error(_config([{"name": "AttractionKL", "checkpoints": [model], **entry}]))


def test_the_list_and_the_algorithm_are_checked(model):
    assert "algorithm.policy_loss_addons.0.checkpoints: missing required key" in \
        _error(_config([{"name": "AttractionKL"}]))
    assert "algorithm.policy_loss_addons.0: expected a mapping of keys, got 'AttractionKL'" in \
        _error(_config(["AttractionKL"]))
    assert "algorithm.policy_loss_addons: expected a list of add-ons" in _error(_config({"name": "AttractionKL"}))
    for off_policy in ("DDQN", "SAC"):
        raw = tiny(algorithm={"name": off_policy, "policy_loss_addons": [{"name": "AttractionKL",
                                                                          "checkpoints": [model]}]})
        assert _error(raw) == (f"config error: algorithm.policy_loss_addons: policy-loss add-ons are for PPO, A2C and RND_PPO "
                               f"(terms added to an on-policy policy loss); {off_policy} takes none: remove the key")


def test_behaviours_are_built_from_a_runs_model_and_checkpoint_and_train(tmp_path):
    teacher = build_learner(validate_config(_config([], learner={"target_steps": 64})), log_dir=str(tmp_path))
    try:
        teacher.step()
        model, checkpoint = teacher.save_model(), teacher.save_checkpoint()
        weights = {k: v.clone() for k, v in teacher.update_worker.local_worker.actor.state_dict().items()}
    finally:
        teacher.stop()
    config = validate_config(_config([{"name": "AttractionKL", "checkpoints": [model, checkpoint],
                                       "weights": [1, 3], "loss_term_weight": 5.0}],
                                     learner={"target_steps": 96}))
    _, _, action_space, obs_space = build_env_factories(config)
    factory, name = build_algorithm_factory(config, obs_space, action_space)
    (addon,) = factory.kwargs["policy_loss_addons"]
    assert name == "PPO" and isinstance(addon, AttractionKL)
    assert addon.behavior_weights == (0.25, 0.75) and addon.loss_term_weight == 5.0
    assert all(isinstance(f, SavedActorFactory) for f in addon.behavior_factories)
    for f in addon.behavior_factories:
        for key, value in f("cpu").state_dict().items():
            torch.testing.assert_close(value, weights[key])
    with pytest.raises(ValueError, match="pass the observation and action spaces"):
        build_algorithm_factory(config)
    learner = build_learner(config, log_dir=str(tmp_path / "student"))
    try:
        while not learner.done():
            learner.step()
        metrics = learner.get_metrics()
        assert metrics["Algorithm/AddOnLoss/AttractionKL"] > 0
        learner.save_checkpoint()          # add-ons are objects: they stay out of the checkpoint
    finally:
        learner.stop()


def test_a_checkpoint_of_another_network_is_refused_before_the_run_starts(tmp_path):
    other = _save_model(tiny(actor={"hidden_sizes": [5]}), tmp_path / "other.state_dict")
    config = validate_config(_config([{"name": "RepulsionKL", "checkpoints": [other]}]))
    with pytest.raises(ConfigError, match=r"algorithm.policy_loss_addons.0.checkpoints.0: .*other.state_dict does "
                                          r"not match this OnPolicyActor"):
        build_learner(config, log_dir=str(tmp_path))
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a model")
    config = validate_config(_config([{"name": "RepulsionKL", "checkpoints": [str(garbage)]}]))
    with pytest.raises(ConfigError, match=r"algorithm.policy_loss_addons.0.checkpoints.0: .*garbage.pt"):
        build_learner(config, log_dir=str(tmp_path))


def test_keys_lists_the_entry_keys_under_the_algorithms_that_take_addons(capsys):
    assert cli.main(["keys"]) == 0
    out = capsys.readouterr().out
    assert out.count("    each entry of policy_loss_addons:") == 3    # PPO, A2C, RND_PPO
    assert out.count("    policy_loss_addons: a value, default [].") == 3
    for line in ("      name: one of 'AttractionKL', 'RepulsionKL', required.",
                 "      checkpoints: a list of strings, required.",
                 "      weights: a list of numbers or null, >= 0, default None.",
                 "      loss_term_weight: a number, >= 0, default 1.0.",
                 "      eps: a number, in (0, 0.5], default 1e-08."):
        assert line in out, line
    ppo = out.index("  with name: PPO")
    assert ppo < out.index("each entry of policy_loss_addons") < out.index("  with name: A2C")


def test_the_example_configuration_runs_with_a_saved_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="algorithm.policy_loss_addons.0.checkpoints.0: no such file "
                                          "'runs/cartpole-teacher/model.state_dict'"):
        load_config(EXAMPLE)
    example = load_config(EXAMPLE, ["algorithm.policy_loss_addons=[]"])
    os.makedirs("runs/cartpole-teacher")
    _save_model(tiny(actor=example["actor"]), "runs/cartpole-teacher/model.state_dict")
    config = load_config(EXAMPLE, ["learner.target_steps=256", "env.test_env=false", "learner.tensorboard=false",
                                   "env.monitor=false"])
    learner = build_learner(config, log_dir=str(tmp_path / "run"))
    try:
        learner.step()
        assert learner.get_metrics()["Algorithm/AddOnLoss/AttractionKL"] >= 0
    finally:
        learner.stop()
