"""YAML configuration: schema, validation errors, overrides, building a Scheme and Learner."""

import copy
import os

import pytest
import yaml

from pytorchrl.agent.algorithms import ALGORITHMS
from pytorchrl.agent.factory import documented_parameters
from pytorchrl.config import (ConfigError, apply_overrides, build_learner, dump_config, load_config,
                              parse_yaml, validate_config)
from pytorchrl.config.schema import SECTIONS, algorithm_keys, storage_keys
from pytorchrl.schedules import Schedule

from cli_helpers import REPO, with_sections

EXAMPLES = os.path.join(REPO, "examples", "configs")

#: Smallest useful configuration: every test mutates a copy of it.
MINIMAL = {
    "seed": 0,
    "env": {"id": "CartPole-v1", "vec_env_size": 2, "test_env": True, "test_vec_env_size": 2},
    "algorithm": {"name": "PPO", "num_epochs": 2, "num_mini_batch": 2, "num_test_episodes": 2},
    "storage": {"name": "GAEBuffer", "size": 16},
    "learner": {"target_steps": 500},
    "schedules": [{"name": "lr", "start": 3e-4, "end": 0.0}],
}


def minimal(**sections):
    """A copy of MINIMAL with some sections replaced or updated."""
    return with_sections(MINIMAL, **sections)


def error_of(raw):
    with pytest.raises(ConfigError) as info:
        validate_config(raw)
    return str(info.value)


# ------------------------------------------------------------------------------ schema
def test_resolved_config_has_every_key_with_defaults():
    config = validate_config(minimal())
    assert list(config) == ["preset", "seed", "run_dir", "env", "algorithm", "actor", "storage", "scheme",
                            "learner", "schedules"]
    assert set(config["scheme"]) == set(SECTIONS["scheme"])
    assert config["algorithm"]["clip_param"] == 0.2          # PPO's own default
    assert config["actor"]["hidden_sizes"] is None          # null: the algorithm family's default
    assert config["storage"]["gae_lambda"] == 0.95           # GAEBuffer's own default
    assert config["schedules"][0]["kind"] == "linear"
    # The resolved form is a valid configuration that resolves to itself.
    assert validate_config(parse_yaml(dump_config(config))) == config


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_algorithm_keys_are_the_hyperparameters_of_the_class(name):
    keys = algorithm_keys(name)
    assert list(keys) == ALGORITHMS[name].hyperparameter_names()
    assert all(key.doc for key in keys.values())   # read from the docstrings
    # on-policy: null means "num_mini_batch equal parts"; off-policy: always a number of samples
    assert keys["mini_batch_size"].kind == "int"
    assert keys["mini_batch_size"].nullable == ALGORITHMS[name].on_policy
    # one learning rate, or one per optimizer (SAC: lr_q, lr_pi, lr_alpha)
    assert all(keys[k].kind == "number" for k in keys if k == "lr" or k.startswith("lr_"))
    assert any(k == "lr" or k.startswith("lr_") for k in keys)


def test_storage_keys_depend_on_the_storage():
    assert list(storage_keys("GAEBuffer")) == ["size", "gae_lambda"]
    assert list(storage_keys("VanillaOnPolicyBuffer")) == ["size"]


def test_documented_parameters_reads_numpydoc():
    docs = documented_parameters(Schedule)
    assert docs["end_step"][0] == "int or None"
    assert docs["name"][1].startswith("Parameter name")


def test_numbers_are_normalised():
    config = validate_config(minimal(algorithm={"lr": 1, "gamma": 1}, learner={"target_steps": 1e3}))
    assert config["algorithm"]["lr"] == 1.0 and isinstance(config["algorithm"]["lr"], float)
    assert config["learner"]["target_steps"] == 1000 and isinstance(config["learner"]["target_steps"], int)


def test_exponent_floats_are_numbers():
    # PyYAML alone reads "1e-4" as a string.
    assert parse_yaml("lr: 1e-4\nn: 1E5\ns: 1e\n") == {"lr": 1e-4, "n": 1e5, "s": "1e"}


# ------------------------------------------------------------------------------ errors
ERRORS = [
    # (what, configuration, text expected in the message)
    ("unknown top-level key", minimal(envs={"id": "x"}), "envs: unknown key (did you mean 'env'?)"),
    ("unknown section key", minimal(env={"vec_env_sise": 2}), "env.vec_env_sise: unknown key (did you mean 'vec_env_size'?)"),
    ("unknown hyperparameter", minimal(algorithm={"clip_parm": 0.1}), "algorithm.clip_parm: unknown key of PPO (did you mean 'clip_param'?)"),
    ("hyperparameter of another algorithm", minimal(algorithm={"name": "A2C", "clip_param": 0.1}), "algorithm.clip_param: unknown key of A2C"),
    ("wrong type", minimal(algorithm={"lr": "fast"}), "algorithm.lr: expected a number, got 'fast'"),
    ("float for an integer", minimal(algorithm={"num_epochs": 2.5}), "algorithm.num_epochs: expected an integer, got 2.5"),
    ("bool for a number", minimal(algorithm={"lr": True}), "algorithm.lr: expected a number, got True"),
    ("null where not allowed", minimal(algorithm={"gamma": None}), "algorithm.gamma: expected a number, got null"),
    ("out of range", minimal(algorithm={"gamma": 1.5}), "algorithm.gamma: must be in [0, 1], got 1.5"),
    ("below minimum", minimal(env={"vec_env_size": 0}), "env.vec_env_size: must be >= 1, got 0"),
    ("open bound", minimal(scheme={"fraction_samples": 0.0}), "scheme.fraction_samples: must be in (0, 1], got 0.0"),
    ("unknown env id", minimal(env={"id": "CartPole-v9"}), "env.id: unknown gymnasium environment 'CartPole-v9' (did you mean 'CartPole-v1'?)"),
    ("env module", minimal(env={"id": "no_such_module:Foo-v0"}), "env.id: cannot import module 'no_such_module'"),
    ("unknown algorithm", minimal(algorithm={"name": "PPO2"}), "algorithm.name: expected one of 'PPO', 'A2C', 'DDQN', 'DDPG', 'TD3', 'SAC', 'MPO', 'RND_PPO', got 'PPO2' "
     "(did you mean 'PPO'?)"),
    ("unknown storage", minimal(storage={"name": "GAE"}), "storage.name: expected one of 'GAEBuffer', 'VanillaOnPolicyBuffer', 'VTraceBuffer', 'ReplayBuffer', "
     "'NStepReplayBuffer', 'PERBuffer', 'EREBuffer', 'RecurrentReplayBuffer', 'HERBuffer', 'PPODBuffer', 'ppod' or null, got 'GAE'"),
    ("bad choice", minimal(scheme={"col_workers_communication": "asynch"}), "scheme.col_workers_communication: expected one of 'sync', 'async', got 'asynch' (did you mean 'async'?)"),
    ("missing required", {**minimal(), "learner": {"log_every": 1}}, "learner.target_steps: missing required key"),
    ("section not a mapping", minimal(env=[1, 2]), "env: expected a mapping of keys, got [1, 2]"),
    ("bad list", minimal(actor={"hidden_sizes": [64, "x"]}), "actor.hidden_sizes.1: expected an integer, got 'x'"),
    ("bad resource", minimal(scheme={"col_workers_resources": {"num_cpu": 1}}), "scheme.col_workers_resources.num_cpu: unknown resource (did you mean 'num_cpus'?)"),
    ("inconsistent scheme", minimal(scheme={"decentralized_update_execution": True, "grad_workers_communication": "async"}), "scheme.decentralized_update_execution: true needs"),
    ("queued requests in sync collection", minimal(scheme={"col_requests_in_flight": 2}), "scheme.col_requests_in_flight: 2 needs scheme.col_workers_communication: async"),
    ("env_id in kwargs", minimal(env={"kwargs": {"env_id": "x"}}), "env.kwargs.env_id: the environment is set by env.id"),
    ("bad device", minimal(scheme={"local_device": "tpu"}), "scheme.local_device: not a device to train on: 'tpu'"),
    ("schedule of unknown parameter", minimal(schedules=[{"name": "learning_rate", "start": 1.0, "end": 0.0}]), "schedules.0.name: algorithm PPO has no parameter 'learning_rate'"),
    ("schedule value type", minimal(schedules=[{"name": "num_epochs", "start": 4, "end": "x"}]), "schedules.0.end: expected an integer, got 'x'"),
    ("linear schedule without end", minimal(schedules=[{"name": "lr", "start": 1.0}]), "schedules.0.end: missing: a linear schedule needs an end value"),
    ("schedule out of range", minimal(schedules=[{"name": "gamma", "start": 0.9, "end": 2.0}]), "schedules.0.end: must be in [0, 1], got 2.0"),
    ("storage schedule", minimal(schedules=[{"name": "gae_lambda", "target": "storage", "start": 0.9, "end": 0.9, "end_step": 10, "start_step": 20}]), "schedules.0.end_step: must be greater than start_step (20), got 10"),
    ("schedules not a list", minimal(schedules={"name": "lr"}), "schedules: expected a list of schedules"),
    ("top level not a mapping", [1, 2], "expected a mapping of sections at the top level"),
]


@pytest.mark.parametrize("what,raw,expected", ERRORS, ids=[e[0] for e in ERRORS])
def test_validation_errors_name_the_key_and_value_in_one_line(what, raw, expected):
    message = error_of(raw)
    assert message.startswith("config error: ")
    assert expected in message
    assert "\n" not in message


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


# --------------------------------------------------------------------------- overrides
def test_overrides_set_parse_and_create(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(MINIMAL))
    config = load_config(str(path), ["algorithm.gamma=0.9", "scheme.num_col_workers=2", "actor.hidden_sizes=[32, 16]",
                                     "schedules.0.end=1e-5", "env.kwargs={max_episode_steps: 100}", "seed=null"])
    assert config["algorithm"]["gamma"] == 0.9
    assert config["scheme"]["num_col_workers"] == 2      # section absent from the file
    assert config["actor"]["hidden_sizes"] == [32, 16]
    assert config["schedules"][0]["end"] == 1e-5
    assert config["env"]["kwargs"] == {"max_episode_steps": 100}
    assert config["seed"] is None


def test_apply_overrides_does_not_modify_its_input():
    raw = copy.deepcopy(MINIMAL)
    apply_overrides(raw, ["algorithm.lr=0.5"])
    assert raw == MINIMAL


@pytest.mark.parametrize("override,expected", [
    ("algorithm.lr=fast", "algorithm.lr: expected a number, got 'fast' (override algorithm.lr=fast)"),
    ("algorithm.lrr=0.1", "algorithm.lrr: unknown key of PPO (did you mean 'lr'?)"),
    ("algorithm.lr", "override 'algorithm.lr': expected KEY=VALUE"),
    ("algorithm..lr=1", "empty key"),
    ("algorithm.lr=[1", "invalid YAML"),
    ("schedules.3.end=0", "schedules.3: no element '3' in a list of 1"),
    ("seed.value=1", "seed: is not a section"),
])
def test_override_errors(tmp_path, override, expected):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(MINIMAL))
    with pytest.raises(ConfigError) as info:
        load_config(str(path), [override])
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_an_override_of_a_scheduled_parameter_drops_the_schedule_and_says_so(tmp_path):
    path = tmp_path / "c.yaml"
    gae = {"name": "gae_lambda", "target": "storage", "kind": "step", "start": 0.95, "end": 0.9, "start_step": 100}
    path.write_text(yaml.safe_dump(minimal(schedules=MINIMAL["schedules"] + [gae])))
    notes = []
    config = load_config(str(path), ["algorithm.lr=1e-4"], notes=notes)
    assert config["algorithm"]["lr"] == 1e-4 and [s["name"] for s in config["schedules"]] == ["gae_lambda"]
    assert notes == ["algorithm.lr=1e-4 replaces schedules.0 (linear schedule of algorithm.lr): the schedule is "
                     "dropped, algorithm.lr is 0.0001 for the whole run"]
    # A resumed run stops the schedule instead (its checkpoint holds the schedules' places).
    assert len(load_config(str(path), ["algorithm.lr=1e-4"], drop_overridden_schedules=False)["schedules"]) == 2
    # Another schedule edited: this one still goes; the same one edited too: one would be ignored.
    assert len(load_config(str(path), ["algorithm.lr=1e-4", "schedules.1.end=0.8"])["schedules"]) == 1
    for edit in ("schedules.0.end=1e-5", "schedules=[{name: lr, start: 1.0e-3, end: 0.0}]"):
        with pytest.raises(ConfigError) as info:
            load_config(str(path), ["algorithm.lr=1e-4", edit])
        assert str(info.value) == ("config error: algorithm.lr: is set by the override algorithm.lr=1e-4 and driven by "
                                   "schedules.0, which the overrides change too: give one of them (schedules.0.start "
                                   "sets where the schedule starts) (overrides)")


# ------------------------------------------------------------------------------- files
@pytest.mark.parametrize("text,expected", [
    ("env:\n  id: CartPole-v1\n  vec_env_size: [2\nlearner: {}\n", "c.yaml:4: invalid YAML"),
    ("env: {id: CartPole-v1}\nenv: {id: CartPole-v1}\n", "c.yaml:2: invalid YAML: duplicate key 'env'"),
    ("", "c.yaml: the file is empty"),
    ("- env\n", "c.yaml: expected a mapping of sections, got list"),
])
def test_file_errors_name_file_and_line(tmp_path, text, expected):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_config(str(tmp_path / "nope.yaml"))


def test_validation_errors_name_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(minimal(algorithm={"lr": "fast"})))
    with pytest.raises(ConfigError, match=r"algorithm.lr: expected a number, got 'fast' \(c.yaml\)"):
        load_config(str(path))


def test_shipped_example_configs_are_valid():
    for name in ("ppo_cartpole", "a2c_cartpole"):
        config = load_config(os.path.join(EXAMPLES, f"{name}.yaml"))
        assert config["env"]["id"] == "CartPole-v1"


# ---------------------------------------------------------------------------- building
def test_valid_config_builds_a_scheme_and_learner(tmp_path):
    config = validate_config(minimal(algorithm={"lr": 5e-4, "clip_param": 0.1}, storage={"gae_lambda": 0.9},
                                     actor={"hidden_sizes": [8]}))
    learner = build_learner(config, log_dir=str(tmp_path))
    try:
        worker = learner.update_worker.local_worker
        assert learner.scheme.num_col_workers == 1 and not learner.scheme.uses_ray
        assert worker.algo.name == "PPO" and worker.algo.clip_param == 0.1
        assert worker.storage.gae_lambda == 0.9
        assert worker.actor.value_head.in_features == 8      # features of the last hidden layer
        assert worker.algo.lr == 3e-4        # the schedule's start replaces lr from the first update
        assert len(learner.schedules) == 1
        while not learner.done():
            learner.step()
        assert learner.num_samples_collected >= 500
        assert worker.algo.lr < 3e-4                            # the schedule decayed it
        assert learner.evaluate(2) > 0
    finally:
        learner.stop()
    assert (tmp_path / "monitor").is_dir()
