"""Smoke test of the soak benchmark (benchmarks/soak/run.py, issues 11 and 22) on a tiny
budget (9 s of training), in its own process and Ray instance: in the drl-actor-model
layout (2 gradient workers, a replay server), a remote process drawn at random among the
collectors, gradient workers and the data server is SIGKILLed every 5 s and the run still
reaches its calibrated target; every kill but possibly the last (the run may end before it
is noticed) is replaced and counted by kind, and memory is sampled and reported. Memory
growth and timing are not asserted (9 s is no soak). The other layouts' kills are
tests/distributed/test_server_faults.py's and test_worker_faults.py's; the report's figures
are checked on a fixed record."""

import json
import os

import pytest

from test_benchmarks_smoke import _load_bench, run_soak

KINDS = {"collector", "gradient worker", "replay server"}


@pytest.mark.timeout(400)
def test_soak_kills_any_process_and_reaches_its_target(tmp_path):
    out = tmp_path / "results"
    stdout = run_soak(["--layout", "drl-actor-model", "--grad-workers", "2", "--minutes", "0.15", "--kill-every", "5",
                       "--max-overrun", "6"], out, timeout=360)
    records = [json.loads(ln) for f in out.glob("soak_*.jsonl") for ln in f.read_text().splitlines()]
    summary = next(r for r in records if r.get("record") == "summary")
    kills = [r for r in records if r.get("record") == "kill"]
    assert summary["target_reached"] and summary["error"] is None
    assert summary["kills"] == len(kills) >= 1
    assert {k["kind"] for k in kills} <= KINDS
    restarts = summary["restarts_by_kind"]
    assert set(restarts) <= KINDS and sum(restarts.values()) >= len(kills) - 1
    assert summary["server_restarts"] == sum(n for kind, n in restarts.items() if kind.endswith("server"))
    assert "| processes killed (SIGKILL) |" in stdout and "| kills by kind |" in stdout
    assert summary["env_steps"] >= summary["target_steps"] > 0
    # Calibrated on training, after the replay server's warm-up (from the first update).
    assert 0 < summary["calibration_from_s"] < summary["calibration_s"]
    assert any("(restart 1 of" in line for line in summary["restart_lines"])
    groups = summary["memory"]["groups"]
    assert groups["driver"]["peak_MB"] > 50 and groups["workers"]["peak_MB"] > 50
    # Ray's daemons are sampled (which of them descend from the driver's process varies
    # between Ray's start-up paths, so no particular one is required).
    assert summary["memory"]["by_daemon"]
    assert os.path.isfile(summary["samples_csv"]) and list(out.glob("soak_*.md"))
    assert "| env steps reached |" in stdout and "driver + workers (this job)" in stdout


def test_soak_preset_report():
    mod = _load_bench("soak/run.py")
    args = mod.parse_args(["--layout", "exarl-seed", "--kill-every", "60"])
    assert args.any_process and args.max_kills == 20 and args.max_worker_restarts == 20
    with pytest.raises(SystemExit):
        mod.parse_args(["--grad-workers", "2"])       # the default layout has no preset to change
    assert mod.kind_of("collection worker 2 of gradient worker 1 died (x); replaced (restart 1 of 3)") == "collector"
    assert mod.kind_of("gradient worker 1 died (x); replaced (restart 1 of 3)") == "gradient worker"
    assert mod.kind_of("replay server died (x); replaced, empty (restart 1 of 3)") == "replay server"
    assert mod.kind_of("collection worker 1: environment ... failed; environments rebuilt (restart 1 of 3)") is None
    samples = [{"t": float(t), "driver": 300.0, "workers": 500.0, "daemons": 400.0, "n_workers": 3, "job": 800.0,
                "tree": 1200.0} for t in range(0, 601, 2)]
    mem = mod.memory_summary(samples, warmup_end=60.0, window=60.0, t_end=600.0)
    rec = {"target_steps": 100_000, "env_steps": 100_100, "target_reached": True, "error": None,
           "train_wall_s": 610.0, "planned_s": 600.0, "env_steps_per_s": 164.0, "calibration_from_s": 4.5, "calibration_s": 30.0,
           "calibration_env_steps_per_s": 170.0, "kills": 3, "kill_times_s": [60, 120, 180],
           "killed_collectors": [None] * 3, "killed_kinds": ["collector", "inference server", "collector"],
           "replaced_after_s": [4.0, 3.0, 5.0], "worker_restarts": 2, "server_restarts": 1,
           "restarts_by_kind": {"collector": 2, "inference server": 1},
           "losses": {"Scheme/DroppedRollouts": 0, "Inference/ResentActs": 1}, "env_restarts": 0, "updates": 50_000,
           "episodes": 900, "train_return_last100": 180.0, "max_worker_restarts": 20, "n_samples": len(samples),
           "warmup_end_s": 60.0, "memory": mem, "per_minute": [], "others_cpu_share_during": 0.05, "passed": True}
    meta = {"layout": "exarl-seed", "grad_workers": None, "num_cpus": 2, "minutes": 10, "kill_every": 60, "seed": 0,
            "sample_every": 2}
    table = mod.render(rec, meta)
    assert table.startswith("Preset exarl-seed (examples/configs/exarl/exarl-seed.yaml, DDQN on CartPole-v1)")
    assert "| processes killed (SIGKILL) | 3: 60 s (collector), 120 s (inference server), 180 s (collector) |" in table
    assert "| target steps | 100,000 (calibrated from 4.5 s to 30.0 s at 170 env steps/s) |" in table
    assert "| kills by kind | collector 2, inference server 1 |" in table
    assert "| restarts by kind (restart lines) | collector 2, inference server 1 |" in table
    assert "| data lost | Scheme/DroppedRollouts 0, Inference/ResentActs 1 |" in table
