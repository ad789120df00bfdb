"""Experiment tracking with Weights & Biases (``learner.wandb``): a real offline W&B run of a
short CartPole PPO training, read back from the files wandb writes; refused keys; the line
said when the package is missing."""

import glob
import json
import os
import struct
import subprocess
import sys
import time

import pytest
import yaml

from pytorchrl import cli

from _util import needs_extra
from cli_helpers import assert_one_line_error, env, pytorchrl_in_process, read_csv, tiny, write_config

#: Layout of a ``.wandb`` file: a 7-byte header (":W&B", magic 0xBEE1, version 0), then
#: LevelDB log records in 32 KiB blocks (the header counts in the first block): a record is
#: CRC-32 (4 bytes), length (2), type (1: whole, 2: first, 3: middle, 4: last piece), data.
#: wandb 0.31 ships no Python reader of its own (its service, in Go, writes the file).
_HEADER, _BLOCK, _RECORD_HEADER = b":W&B", 32768, 7


def read_wandb_records(path):
    """The ``Record`` protobufs of a ``.wandb`` file, in order; a record the service has not
    finished writing ends the list (``read_offline_run`` reads the file again)."""
    from wandb.proto import wandb_internal_pb2
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == _HEADER, data[:7]
    records, pieces, offset = [], b"", 7
    while offset + _RECORD_HEADER <= len(data):
        room = _BLOCK - offset % _BLOCK
        if room < _RECORD_HEADER:   # the rest of a block too small for a header is padding
            offset += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[offset:offset + _RECORD_HEADER])
        if kind == 0 and length == 0:   # zero padding at the end of the last block
            break
        if offset + _RECORD_HEADER + length > len(data):
            break   # the service is still writing this record: read what is whole so far
        piece = data[offset + _RECORD_HEADER:offset + _RECORD_HEADER + length]
        offset += _RECORD_HEADER + length
        pieces = piece if kind in (1, 2) else pieces + piece
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pieces)
            records.append(record)
            pieces = b""
    return records


def read_offline_run(root, timeout=15.0):
    """(config, history rows, summary, exit code) of the one offline W&B run under ``root``.

    ``run.finish()`` returns once wandb's service process has the run's data; the service
    writes the file on its own a moment later. The file is read again until it holds the
    run's exit record (or ``timeout`` seconds passed)."""
    runs = glob.glob(os.path.join(str(root), "wandb", "offline-run-*", "run-*.wandb"))
    assert len(runs) == 1, runs
    deadline = time.monotonic() + timeout
    while True:
        result = _parse_run(read_wandb_records(runs[0]))
        if result[3] is not None or time.monotonic() > deadline:
            return result
        time.sleep(0.1)


def _parse_run(records):
    config, history, summary, exit_code = {}, [], {}, None
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind in ("run", "config"):   # the run's first record holds the config given to wandb.init
            updates = record.run.config.update if kind == "run" else record.config.update
            config.update({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in updates})
        elif kind == "history":
            history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in record.history.item})
        elif kind == "summary":
            summary.update({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in record.summary.update})
        elif kind == "exit":
            exit_code = record.exit.exit_code
    return config, history, summary, exit_code


@pytest.fixture
def wandb_env(tmp_path, monkeypatch):
    """wandb quiet and writing nowhere but under the test's directory."""
    needs_extra("wandb", "wandb")   # (the tests without it check what is said when it is missing)
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-default"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    return tmp_path


def test_offline_run_holds_the_metrics_config_and_agent_components(wandb_env, capsys):
    tmp_path = wandb_env
    conf = write_config(tmp_path, tiny(learner={"target_steps": 640, "log_every": 0.1,
                                                "wandb": {"project": "tests", "mode": "offline",
                                                          "tags": ["ppo", "cartpole"]}}))
    run_dir = tmp_path / "run"
    assert cli.main(["train", conf, "--run-dir", str(run_dir), "--progress", "quiet"]) == 0
    config, history, summary, exit_code = read_offline_run(run_dir)

    # The whole resolved configuration, as written to config.yaml, and the agent components.
    with open(run_dir / "config.yaml") as f:
        resolved = yaml.safe_load(f)
    for section in ("env", "algorithm", "storage", "scheme", "learner"):
        assert config[section] == resolved[section], section
    assert config["learner"]["wandb"]["mode"] == "offline"
    components = config["agent_components"]
    assert components["algorithm"] == "PPO" and components["storage"] == "GAEBuffer"
    assert components["num_col_workers"] == 1 and "actor" in components

    # Every row of metrics.csv is a point of the W&B history, with the same values.
    rows = read_csv(run_dir / "metrics.csv")
    points = [h for h in history if "HotSwaps" not in h]
    assert len(points) == len(rows) >= 3
    for row, point in zip(rows, points):
        assert point["Scheme/EnvSteps"] == int(row["Scheme/EnvSteps"])
        for key, value in row.items():
            if value not in ("", "nan") and key != "Scheme/EnvSteps":
                assert point[key] == pytest.approx(float(value)), key
    assert rows[-1]["Scheme/EnvSteps"] == "640"
    assert any("Episodes/TestReward" in p for p in points)
    with open(run_dir / "summary.yaml") as f:
        results = yaml.safe_load(f)
    assert summary["test_return"] == pytest.approx(results["test_return"])
    assert summary["env_steps"] == 640
    assert exit_code == 0


def test_hot_swaps_and_a_resumed_run_continue_the_same_wandb_run(wandb_env):
    tmp_path = wandb_env
    schedule = [{"name": "lr", "target": "algorithm", "kind": "step", "start": 1.0e-3, "end": 1.0e-4,
                 "start_step": 320}]
    conf = write_config(tmp_path, tiny(learner={"target_steps": 640, "log_every": 0.1,
                                                "wandb": {"mode": "offline"}}, schedules=schedule))
    run_dir = tmp_path / "run"
    assert cli.main(["train", conf, "--run-dir", str(run_dir), "--progress", "quiet"]) == 0
    _, history, _, _ = read_offline_run(run_dir)
    swaps = [h for h in history if "HotSwap/algorithm.lr" in h]
    assert [s["HotSwap/algorithm.lr"] for s in swaps] == pytest.approx([1.0e-3, 1.0e-4])
    assert swaps[1]["Scheme/EnvSteps"] >= 320
    run_id = (run_dir / "wandb-run-id.txt").read_text().strip()
    assert cli.main(["resume", str(run_dir), "learner.target_steps=960", "--progress", "quiet"]) == 0
    runs = glob.glob(os.path.join(str(run_dir), "wandb", "offline-run-*", f"run-{run_id}.wandb"))
    assert len(runs) == 2, runs   # the resumed job writes the same W&B run id again


@pytest.mark.parametrize("override,expected", [
    ("learner.wandb.projct=x", "learner.wandb.projct: unknown key (did you mean 'project'?); valid: project"),
    ("learner.wandb.mode=later", "learner.wandb.mode: expected one of 'online', 'offline', 'disabled'"),
    ("learner.wandb=offline", "learner.wandb: expected a mapping or null, got 'offline'"),
    ("learner.wandb.tags=[]", "learner.wandb.tags: expected a non-empty list of strings"),
])
def test_bad_wandb_keys_are_refused_in_one_line(tmp_path, override, expected):
    result = pytorchrl_in_process("train", write_config(tmp_path), override, "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert_one_line_error(result, expected)
    assert not (tmp_path / "run").exists()


def test_keys_lists_the_wandb_keys(capsys):
    assert cli.main(["keys"]) == 0
    out = capsys.readouterr().out
    assert "  wandb: a mapping or null" in out and "  each key of wandb:" in out
    for key in ("project", "entity", "name", "group", "tags", "notes", "mode", "dir"):
        assert f"\n    {key}: " in out, key


def _without_wandb(*args, cwd):
    """Run the CLI in a process where ``import wandb`` fails, as without the package."""
    code = "import sys; sys.modules['wandb'] = None; from pytorchrl.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=str(cwd), capture_output=True,
                          text=True, timeout=120, env=env())


def test_missing_package_is_one_line_naming_the_extra(tmp_path):
    conf = write_config(tmp_path, tiny(learner={"wandb": {"mode": "offline"}}))
    result = _without_wandb("train", conf, "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert_one_line_error(result, 'learner.wandb: needs the wandb package: pip install "pytorchrl[wandb]"')
    assert not (tmp_path / "run").exists()


def test_mode_disabled_trains_without_the_package(tmp_path):
    conf = write_config(tmp_path, tiny(learner={"target_steps": 64, "wandb": {"mode": "disabled"}}), name="off.yaml")
    result = _without_wandb("train", conf, "--run-dir", tmp_path / "off", "--progress", "quiet", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "off" / "wandb").exists()


def test_a_run_that_fails_finishes_its_wandb_run_as_failed(wandb_env):
    tmp_path = wandb_env
    # A non-finite learning rate makes every update non-finite: the run stops with status 2.
    conf = write_config(tmp_path, tiny(learner={"target_steps": 640, "max_nonfinite_updates": 2,
                                                "wandb": {"mode": "offline"}},
                                       algorithm={"name": "PPO", "lr": 1.0e30, "num_epochs": 2,
                                                  "num_mini_batch": 2, "max_grad_norm": 0.0}))
    run_dir = tmp_path / "run"
    code = cli.main(["train", conf, "--run-dir", str(run_dir), "--progress", "quiet"])
    assert code == 2
    _, history, _, exit_code = read_offline_run(run_dir)
    assert exit_code == 1 and history


def test_online_run_without_a_login_is_one_line(tmp_path):
    needs_extra("wandb", "wandb")
    # No API key anywhere (HOME without a .netrc): W&B refuses to start an online run.
    variables = dict(env(), HOME=str(tmp_path), WANDB_CONFIG_DIR=str(tmp_path / "wandb-config"), WANDB_SILENT="true")
    for name in ("WANDB_API_KEY", "WANDB_MODE", "NETRC"):
        variables.pop(name, None)
    conf = write_config(tmp_path, tiny(learner={"wandb": {"mode": "online"}}))
    result = subprocess.run([sys.executable, "-m", "pytorchrl.cli", "train", conf, "--run-dir", str(tmp_path / "run"),
                             "--progress", "quiet"], cwd=str(tmp_path), capture_output=True, text=True, timeout=120,
                            env=variables)
    assert_one_line_error(result, "learner.wandb: the W&B run could not start (online mode): ")
    assert "wandb login" in result.stderr
