"""Named scheme layouts: `scheme.preset` in a configuration, `pytorchrl presets`, and every
listed preset building its layout and training (Ray ones on the session's shared local Ray
instance): a tiny budget here, or, for a preset whose example configuration another test
trains to a target, checked there (``LAYOUT_CHECKED_BY``): the layout is built once and
checked where it is built anyway."""

import re

import pytest

from pytorchrl import cli
from pytorchrl.config import ConfigError, build_learner, validate_config
from pytorchrl.scheme.presets import PRESETS, get_preset

from cli_helpers import source_of_test, tiny, with_sections
from distributed_fixtures import LayoutProbe

#: The algorithm and storage of an off-policy preset's tiny run (its data path is a replay server).
TINY_OFF_POLICY = {"algorithm": {"name": "DDQN", "mini_batch_size": 32, "update_every": 16, "test_every": 5,
                                 "num_test_episodes": 2},
                   "storage": {"name": "ReplayBuffer", "size": 10_000}}


def preset_config(name, **sections):
    """TINY with ``scheme.preset: name`` (DDQN for an off-policy preset, with the algorithm
    values the preset is meant for), sections updated."""
    config = tiny(scheme={"preset": name})
    if PRESETS[name].off_policy:
        config.update(TINY_OFF_POLICY)
    if PRESETS[name].algorithm:     # the algorithm values the layout is meant for (exarl-async)
        config = with_sections(config, algorithm=dict(PRESETS[name].algorithm))
    return with_sections(config, **sections)


#: Presets whose layout a test that trains their example configuration (a learning test,
#: or a run that must reach its target) checks with a LayoutProbe (test file, and the test).
LAYOUT_CHECKED_BY = {
    **{name: ("test_learning_queues", "test_rma_workflow_learns")
       for name in ("exarl-rma", "exarl-rma-window-random", "exarl-rma-window-binned", "exarl-rma-queue-pop-all",
                    "exarl-ml-rma-queue", "exarl-ml-rma-queue-short")},
    "exarl-seed": ("test_learning_inference_server", "test_seed_dqn_learns_cartpole_and_batches_across_collectors"),
    "exarl-seed-a2c": ("test_learning_inference_server", "test_seed_a2c_learns_cartpole_from_whole_episodes"),
    "exarl-nonblocking-async": ("test_learning_weight_pull", "test_exarl_nonblocking_async_learns_cartpole"),
    "exarl-async": ("test_learning_collector_targets", "test_exarl_async_learns_cartpole"),
    "exarl-sync": ("test_learning_exarl_workflows", "test_exarl_workflow_learns_cartpole"),
    "exarl-a2c-async": ("test_learning_exarl_workflows", "test_exarl_workflow_learns_cartpole"),
    "exarl-multi-learner-async": ("test_learning_exarl_workflows", "test_exarl_workflow_learns_cartpole"),
    # (Not learning tests: the replay server killed mid-run, the run reaching its target; the
    # tiny runs of the agent presets whose example configurations name these scheme presets.)
    "drl-actor-model": ("test_server_faults", "test_killed_server_is_replaced_and_the_run_reaches_its_target"),
    **{name: ("test_agent_presets_ray", "test_agent_preset_trains_on_ray")
       for name in ("a3c", "dd-ppo", "async-collectors")},
}
LOCAL = [name for name, p in PRESETS.items() if not p.uses_ray]
REMOTE = [name for name, p in PRESETS.items() if p.uses_ray and name not in LAYOUT_CHECKED_BY]


def test_every_preset_is_a_valid_scheme_section():
    for name, preset in PRESETS.items():
        config = validate_config(preset_config(name))
        assert config["scheme"]["preset"] == name
        for key, value in preset.scheme.items():
            assert config["scheme"][key] == value, (name, key)
        assert preset.description and "\n" not in preset.description


def test_explicit_keys_win_over_the_preset():
    config = validate_config(tiny(scheme={"preset": "dd-ppo", "num_grad_workers": 4}))
    assert config["scheme"]["num_grad_workers"] == 4 and config["scheme"]["decentralized_update_execution"]
    # The resolved section is stable: validating it again gives the same values.
    assert validate_config(config)["scheme"] == config["scheme"]


def test_an_unknown_preset_names_the_valid_ones():
    with pytest.raises(ConfigError) as info:
        validate_config(tiny(scheme={"preset": "ddppo"}))
    message = str(info.value)
    assert message.startswith("config error: scheme.preset: expected one of 'single-process', ")
    assert "(did you mean 'dd-ppo'?)" in message and all(name in message for name in PRESETS)
    with pytest.raises(KeyError, match="unknown preset 'x'; valid: single-process, "):
        get_preset("x")


def test_presets_command_lists_names_descriptions_and_values(capsys):
    assert cli.main(["presets"]) == 0
    out = capsys.readouterr().out
    for name, preset in PRESETS.items():
        assert f"{name}  (" in out and preset.description in out
    assert "decentralized_update_execution: true" in out and "scheme: {preset: NAME}" in out
    assert cli.main(["presets", "a3c"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("a3c  (Ray)") and "grad_workers_communication: async" in out
    assert cli.main(["presets", "nope"]) == 2
    assert "unknown preset 'nope'" in capsys.readouterr().err


def _train(name, steps):
    """Train the preset's layout for ``steps`` (and until each of several gradient workers
    has reported a round); returns the metrics (checks the layout)."""
    config = validate_config(preset_config(name, learner={"target_steps": steps}, env={"test_env": False}))
    learner = build_learner(config)
    try:
        probe = LayoutProbe(learner)
        probe.train()
        metrics = learner.get_metrics(add_episodes_metrics=True, add_scheme_metrics=True)
        probe.check(name, metrics)
        return metrics, probe.processes
    finally:
        learner.stop()


@pytest.mark.parametrize("name", LOCAL)
def test_local_preset_trains(name):
    metrics, processes = _train(name, 300)
    assert metrics["Scheme/EnvSteps"] >= 300 and processes == []


@pytest.mark.parametrize("name", REMOTE)
def test_ray_preset_trains(name, ray_session):
    metrics, _ = _train(name, 300)
    assert metrics["Scheme/EnvSteps"] >= 300


def _with_helpers(source):
    """``source`` (of a test file) followed by the sources of the helper modules of tests/
    (``*_helpers.py``) it imports from: a helper shared by a test file and the file of its
    Ray tests lives there."""
    helpers = re.findall(r"^from (\w+_helpers) import", source, re.M)
    return "\n".join([source] + [source_of_test(name) for name in helpers])


def test_every_ray_preset_layout_is_checked():
    assert set(LAYOUT_CHECKED_BY) <= {name for name, p in PRESETS.items() if p.uses_ray}
    for name, (module, test) in LAYOUT_CHECKED_BY.items():
        # The test exists, its file checks layouts (in the test or a helper of the file),
        # and names the preset.
        assert source_of_test(module, test), (module, test)
        source = _with_helpers(source_of_test(module))
        assert "LayoutProbe(" in source and ".check(" in source, module
        assert f'"{name}' in source_of_test(module), (name, module)
