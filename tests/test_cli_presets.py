"""Named scheme layouts: `scheme.preset` in a configuration, `pytorchrl presets`, and every
listed preset building its layout and training a tiny budget (Ray ones on the session's
shared local Ray instance)."""

import pytest

import pytorchrl as prl
from pytorchrl import cli
from pytorchrl.config import ConfigError, build_learner, validate_config
from pytorchrl.scheme.workflows.presets import PRESETS, get_preset
from pytorchrl.tools.metrics import WorkerTimings

from cli_helpers import tiny, with_sections

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


LOCAL = [name for name, p in PRESETS.items() if not p.uses_ray]
REMOTE = [name for name, p in PRESETS.items() if p.uses_ray]


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
    """Train the preset's layout for ``steps``; returns (learner, metrics, remote processes)."""
    config = validate_config(preset_config(name, learner={"target_steps": steps}, env={"test_env": False}))
    learner = build_learner(config)
    timings = WorkerTimings()    # what the command line adds to each row of metrics.csv
    try:
        processes = learner.scheme.process_info()
        while not learner.done():
            timings.observe(learner.step())
        metrics = learner.get_metrics(add_episodes_metrics=True, add_scheme_metrics=True)
        metrics.update(timings.metrics())
        return learner, metrics, processes
    finally:
        learner.stop()


def _check_layout(learner, preset):
    s = preset.scheme
    scheme = learner.scheme
    assert scheme.num_col_workers == s["num_col_workers"] and scheme.num_grad_workers == s["num_grad_workers"]
    assert scheme.uses_ray == preset.uses_ray
    uw = learner.update_worker
    assert uw.grad_communication == (prl.ASYNC if s["grad_workers_communication"] == "async" else prl.SYNC)
    assert bool(uw.decentralized) == bool(s.get("decentralized_update_execution", False))


@pytest.mark.parametrize("name", LOCAL)
def test_local_preset_trains(name):
    learner, metrics, processes = _train(name, 300)
    _check_layout(learner, PRESETS[name])
    assert metrics["Scheme/EnvSteps"] >= 300 and processes == []


@pytest.mark.parametrize("name", REMOTE)
def test_ray_preset_trains(name, ray_session):
    learner, metrics, processes = _train(name, 300)
    preset = PRESETS[name]
    _check_layout(learner, preset)
    assert metrics["Scheme/EnvSteps"] >= 300
    # One process per remote worker: collectors run in processes of their own when a
    # gradient worker has several, gradient workers when there are several.
    cols, grads = preset.scheme["num_col_workers"], preset.scheme["num_grad_workers"]
    # (A collection-only scheme, 0 gradient workers, has the collectors of one.)
    assert len(processes) == (grads if grads > 1 else 0) + (cols * max(grads, 1) if cols > 1 else 0)
    per_worker = sorted(k for k in metrics if k.startswith("Workers/"))
    if grads > 1:     # per-gradient-worker timings and samples
        assert len(per_worker) == 4 * grads and all(metrics[k] > 0 for k in per_worker), per_worker
    else:
        assert per_worker == []
    if preset.scheme["col_workers_communication"] == "sync" and preset.scheme["num_col_workers"] > 1:
        assert metrics["Scheme/MaxPolicyLag"] == 0
