"""Smoke test of the benchmark harness (benchmarks/): our PPO worker runs end to end on a
tiny budget and prints the JSON record the orchestrator reads. Needs neither the peers'
venv nor Stable-Baselines3."""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import pytest

from _util import needs_extra
from cli_helpers import REPO

BENCH = os.path.join(REPO, "benchmarks")

FIELDS = {
    "system": str, "seed": int, "env_steps": int, "learn_wall_s": float, "total_wall_s": float,
    "env_steps_per_s": float, "learn_cpu_s": float, "env_steps_per_cpu_s": float, "eval_mean": float,
    "eval_returns": list, "peak_rss_tree_MB": float, "hyperparameters": dict,
}


def _load_bench(path):
    """The benchmark script ``benchmarks/<path>`` (e.g. ``"ppo_cartpole/run.py"``) as a fresh
    module, with benchmarks/ on ``sys.path`` as the scripts put it (the ``harness`` and
    ``workerlib`` packages)."""
    if BENCH not in sys.path:
        sys.path.insert(0, BENCH)
    spec = importlib.util.spec_from_file_location("bench_" + path[:-len(".py")].replace("/", "_"),
                                                  os.path.join(BENCH, path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _bench_module(name):
    """A module of the benchmarks' packages (e.g. ``"workerlib.envs"``), imported by name as the
    scripts import it."""
    if BENCH not in sys.path:
        sys.path.insert(0, BENCH)
    return importlib.import_module(name)


def worker_record(script, argv, cwd=REPO, **env):
    """Run our benchmark worker ``script`` with ``argv`` (one torch thread, ``env`` added to
    the environment) and return its JSON record, checked for the fields every worker prints."""
    r = subprocess.run([sys.executable, os.path.join(BENCH, script), *map(str, argv)], capture_output=True, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1", **env), cwd=str(cwd), timeout=280)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"no JSON line in the output:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    rec = json.loads(lines[-1])
    for key, kind in FIELDS.items():
        assert key in rec, f"missing field {key!r}"
        assert isinstance(rec[key], (int, float) if kind is float else kind), (key, rec[key])
    return rec


def assert_return_fields(rec, episodes=1):
    """The record ``rec`` of a benchmark that trains holds the return its training reached
    beside its speed (``harness.schemes.train_return_fields``): the mean return of the last
    100 training episodes, measured over at least ``episodes`` episodes that ended in the
    measured window, within CartPole-like bounds."""
    assert rec["train_episodes"] >= episodes, rec
    assert isinstance(rec["train_return_last100"], float) and -1000 < rec["train_return_last100"] <= 500, rec


def assert_rate_matches_wall(rec, wall_key):
    """The record's steps per second is its steps over its wall time. Both are rounded (the
    wall to 1 ms, the rate to 0.1), so on a run of a few tens of milliseconds the rounded wall
    alone can be several percent off: compare within the rounding, not a relative margin."""
    implied_wall = rec["env_steps"] / rec["env_steps_per_s"]
    assert abs(implied_wall - rec[wall_key]) <= 0.0005 + 1e-6 * (1 + rec[wall_key]) + implied_wall * 0.05 / rec["env_steps_per_s"], \
        (rec["env_steps"], rec["env_steps_per_s"], rec[wall_key])


@pytest.mark.timeout(300)
def test_ours_worker_prints_a_complete_record():
    rec = worker_record("ppo_cartpole/worker_ours.py", ["--steps", 3000, "--seed", 1, "--eval-episodes", 2])
    for key in ("solve_env_steps", "solve_wall_s"):   # None unless solved (not in 3000 steps)
        assert key in rec
    assert rec["system"] == "ours" and rec["seed"] == 1
    # One rollout is 8 envs x 32 steps: the budget is reached in whole rollouts.
    assert 3000 <= rec["env_steps"] < 3000 + 256
    assert rec["learn_wall_s"] > 0 and rec["total_wall_s"] >= rec["learn_wall_s"]
    assert_rate_matches_wall(rec, "learn_wall_s")
    assert len(rec["eval_returns"]) == 2 and all(1 <= x <= 500 for x in rec["eval_returns"])
    assert rec["peak_rss_tree_MB"] > 50
    assert rec["hyperparameters"]["n_steps"] == 32 and rec["hyperparameters"]["batch_size"] == 256
    # Same objective as SB3 (vf_coef 0.5 on the plain MSE), whatever our loss's form.
    assert rec["value_loss_coef_passed"] * rec["value_loss_form_scale"] == pytest.approx(0.5)


def test_sb3_worker_shares_the_hyperparameters():
    """Both workers train with the same hyperparameters (importing ppo_cartpole/worker_sb3.py
    needs no SB3: it imports the library in main())."""
    assert _load_bench("ppo_cartpole/worker_ours.py").HYPERPARAMETERS == \
        _load_bench("ppo_cartpole/worker_sb3.py").HYPERPARAMETERS


def test_report_from_synthetic_records():
    mod = _load_bench("ppo_cartpole/run.py")

    def rec(system, seed, fps, ev, solve):
        return {"system": system, "seed": seed, "env_steps": 100_096, "env_steps_per_s": fps,
                "env_steps_per_cpu_s": fps * 1.1, "learn_wall_s": 100_096 / fps, "total_wall_s": 100_096 / fps + 3,
                "solve_wall_s": solve, "solve_env_steps": None if solve is None else 50_000,
                "eval_mean": ev, "peak_rss_tree_MB": 300.0}

    records = [rec("ours", 0, 9000, 500, 5.0), rec("sb3", 0, 3000, 500, 15.0),
               rec("ours", 1, 10000, 480, None), rec("sb3", 1, 3300, 490, 14.0),
               rec("ours", 2, 9500, 500, 6.0), {"system": "sb3", "seed": 2, "error": "exit 1"}]
    summary = mod.summarize(records, ["ours", "sb3"])
    assert summary["ours"]["env_steps_per_s"] == 9500 and summary["ours"]["solved"] == 2
    assert summary["sb3"]["runs"] == 2
    assert mod.paired_ratios(records) == [pytest.approx(3.0), pytest.approx(10000 / 3300)]
    table = mod.render(summary, records, {"steps": 100_000, "seeds": 3})
    assert "| **env steps/s (median ours / median SB3)** |" in table
    assert "Failed runs: sb3 seed 2: exit 1" in table


def test_quick_flag():
    args = _load_bench("ppo_cartpole/run.py").parse_args(["--quick"])
    assert (args.seeds, args.steps, args.no_warmup) == (1, 10_000, True)


def test_machine_load_probe():
    mod = _bench_module("harness.machine")
    busy_total = mod.cpu_jiffies()
    if busy_total is None:
        pytest.skip("no /proc/stat")
    busy, total = busy_total
    assert 0 <= busy <= total
    share = mod.others_share(window=0.2)
    assert share is None or 0.0 <= share <= 1.0


# ------------------------------------------------ distributed benchmarks (issue 3)
# Our side only, on tiny budgets, in this process with the session's Ray instance (2 CPUs):
# the benchmark functions join an initialised Ray instead of starting one.
RAY_BY_VALUE = (lambda: _bench_module("workerlib.envs"),)     # env functions reach the Ray workers by value


def test_rllib_worker_shares_the_hyperparameters():
    """Both workers train with the same hyperparameters (importing
    distributed_cartpole/worker_rllib.py needs no RLlib)."""
    hp = _load_bench("distributed_cartpole/worker_ours.py").HYPERPARAMETERS
    assert hp == _load_bench("distributed_cartpole/worker_rllib.py").HYPERPARAMETERS
    assert (hp["train_batch_size"], hp["minibatch_size"], hp["num_epochs"], hp["lr"]) == (4000, 128, 6, 3e-4)


@pytest.mark.timeout(300)
def test_distributed_cartpole_ours_record(ray_for_module):
    import time
    mod = _load_bench("distributed_cartpole/worker_ours.py")
    args = mod.parse_args(["--steps", "4000", "--envs-per-collector", "8", "--cpus-per-collector", "0.25",
                           "--eval-episodes", "1", "--seed", "3"])
    t0 = time.time()
    rec = mod.run(args, t_start=t0)
    assert rec["system"] == "ours" and rec["collectors"] == 2 and rec["rollout_steps_per_env"] == 250
    assert rec["env_steps"] == 4000 and rec["rounds"] == 1
    # The first env step happened after the start and before training ended.
    assert 0 < rec["first_sample_s"] <= rec["total_wall_s"]
    assert_rate_matches_wall(rec, "train_wall_s")
    assert rec["bytes_sent"] > 0 and len(rec["eval_returns"]) == 1
    # RLlib's objective: vf coef 0.01 on the plain MSE, whatever the form of our loss.
    assert rec["value_loss_coef_passed"] * rec["value_loss_form_scale"] == pytest.approx(0.01)


def test_distributed_cartpole_report():
    mod = _load_bench("distributed_cartpole/run.py")

    def rec(system, seed, envs, fps, first, ev):
        return {"system": system, "seed": seed, "envs_per_collector": envs, "env_steps": 100_000,
                "env_steps_per_s": fps, "first_sample_from_launch_s": first, "first_sample_s": first - 0.1,
                "import_s": 1.0, "ray_init_s": 2.0, "build_s": 5.0, "workers_start_s": 3.0,
                "train_wall_s": 100_000 / fps, "total_wall_s": 100_000 / fps + first, "eval_mean": ev,
                "train_return_last100": 400.0, "peak_rss_tree_MB": 900.0}

    records = [rec("ours", 0, 8, 12000, 4.0, 500), rec("rllib", 0, 8, 2000, 11.0, 500),
               rec("ours", 1, 8, 11000, 4.5, 480), rec("rllib", 1, 8, 2400, 10.0, 500),
               {"system": "rllib", "seed": 2, "envs_per_collector": 8, "error": "exit 1"}]
    summary = mod.summarize(records)
    assert summary[("ours", 8)]["env_steps_per_s"] == 11500 and summary[("rllib", 8)]["runs"] == 2
    assert summary[("ours", 8)]["build_s"] == 3.0     # after ray.init, like RLlib's build_algo
    assert mod.paired(records, 8, "env_steps_per_s") == [pytest.approx(6.0), pytest.approx(11000 / 2400)]
    table = mod.render(summary, records, {"steps": 100_000, "seeds": 2, "collectors": 2})
    # 5.23x RLlib's env steps/s, but a lower median greedy return (490 vs 500): no speed-up.
    assert ("env steps/s 5.23x RLlib's, greedy return 490.0 vs 500.0: lower (goal >= 5x at an equal or better "
            "greedy return: NOT MET)") in table
    assert "time to first sample 0.40 of RLlib's (goal < 0.5: MET)" in table
    assert "Failed runs: rllib seed 2 envs 8: exit 1" in table
    # The returns stand beside the speed in the table.
    assert "| env steps/s (training) | greedy eval (10 ep), median [min] | train return (last 100 ep) |" in table
    records[2]["eval_mean"] = 500
    table = mod.render(mod.summarize(records), records, {"steps": 100_000, "seeds": 2, "collectors": 2})
    assert "greedy return 500.0 vs 500.0: ok (goal >= 5x at an equal or better greedy return: MET)" in table
    assert mod.parse_args(["--quick"]).envs == [8]


@pytest.mark.timeout(300)
def test_scaling_latency_measures_sync_and_async(ray_for_module):
    mod = _load_bench("scaling_latency/run.py")
    args = mod.parse_args(["--rounds", "2", "--warmup", "1", "--rollout", "16"])
    assert args.mode_list == ["sync", "async", "async-q2"]
    records = []
    for mode in args.mode_list:
        for n in (1, 2):
            r = mod.measure(n, mode, args)
            records.append(r)
            assert r["env_steps"] >= 2 * n * 16 and r["env_steps_per_s"] > 0
            assert r["remote"] == (n > 1)
            # A window of 32-64 CartPole steps may end no episode: the mean holds the warm-up's.
            assert_return_fields(r, episodes=0)
    sync2, async2, queued2 = records[1], records[3], records[5]
    assert sync2["policy_lag_max"] == 0                 # sync: always the current weights
    for r in (async2, queued2):                         # one rollout per step
        assert r["policy_lag_mean"] is not None and r["samples_per_round"] == 16
    summary = mod.summarize(records, step_latency=0.002)
    assert summary[("sync", 1)]["efficiency"] == pytest.approx(1.0)
    table = mod.render(summary, records, {"latency": 0.002, "rollout": 16, "cpus_per_collector": 0.25,
                                          "repeats": 1, "step_latency_s": 0.0021})
    assert "| sync | 2 |" in table and "| async-q2 | 2 |" in table and "Goal: sync at 2" in table
    assert "| env steps/s | train return (episodes) |" in table and mod.RETURN_NOTE in table
    assert f"{summary[('sync', 2)]['train_return']:.1f} (" in table


def test_replay_server_bench_reports_rates_and_ratio(ray_for_module):
    """benchmarks/replay_server/run.py on a tiny budget: rates, and a measured ratio held within
    the error buffer."""
    mod = _load_bench("replay_server/run.py")
    args = mod.parse_args(["--spi", "2", "--steps", "400", "--min-size", "100", "--rollout", "16", "--batch", "16"])
    r = mod.measure(2.0, args)
    assert r["env_steps"] >= 400 and r["updates"] > 0
    assert r["inserts_per_s"] > 0 and r["samples_per_s"] > 0
    assert abs(r["deviation"]) <= r["error_buffer"] + 16 * 2 + 16
    assert_return_fields(r, episodes=5)     # 400 steps of epsilon-greedy CartPole
    table = mod.render([r], load_share=0.5)
    assert "| 2 | 2 | " in table and "50%" in table
    assert f"| {r['train_return_last100']:.1f} ({r['train_episodes']} ep.) |" in table and mod.RETURN_NOTE in table


def test_seed_inference_bench_reports_batches_and_rates(ray_for_module):
    """benchmarks/seed_inference/run.py on a tiny budget: batch sizes and rates of the server."""
    mod = _load_bench("seed_inference/run.py")
    args = mod.parse_args(["--collectors", "2", "--envs", "2", "--steps", "600", "--rollout", "16",
                           "--cpus-per-collector", "0.25"])
    r = mod.measure(2, args)
    assert r["env_steps"] >= 600 and r["updates"] > 0
    assert 2.0 <= r["mean_batch"] <= 4.0 and r["max_batch_seen"] <= 4
    assert r["env_steps_per_s"] > 0 and r["calls_per_s"] > 0 and r["mean_wait_ms"] >= 0
    # The window starts after the first Learner step, which collects DDQN's 500 start steps:
    # ~100 steps are left, too few to require an episode in it (the mean holds earlier ones).
    assert_return_fields(r, episodes=0)
    table = mod.render([r], load_share=0.5)
    assert "| 2 x 2 | 64 / 10 | " in table and "50%" in table
    assert f"| {r['train_return_last100']:.1f} ({r['train_episodes']} ep.) |" in table and mod.RETURN_NOTE in table


@pytest.mark.timeout(300)
def test_straggler_is_cut_with_preemption(ray_for_module):
    mod = _load_bench("straggler/run.py")
    args = mod.parse_args(["--collectors", "2", "--rollout", "32", "--rounds", "2", "--warmup", "1",
                           "--cpus-per-collector", "0.25"])
    assert args.slow_worker == 2
    r = mod.measure("straggler, fraction_samples=0.75", True, 0.75, args)
    # The slow collector is cut every round: the round holds 75-100% of 2 x 32 samples.
    assert r["rounds"] >= 2 and r["cut_rollouts_per_round"] >= 1
    assert 48 <= r["samples_per_round"] < 64
    assert_return_fields(r, episodes=0)     # two rounds of ~50 steps per env: maybe no episode ends
    records = [dict(r, config="straggler, fraction_samples=0.75", **{"pass": 0}),
               dict(r, config="no straggler", round_s=r["round_s"] / 1.1,
                    train_return_last100=r["train_return_last100"] + 10, **{"pass": 0})]
    summary = mod.summarize(records)
    assert summary["straggler, fraction_samples=0.75"]["vs_no_straggler"] == pytest.approx(1.1)
    table = mod.render(summary, records, {"collectors": 2, "slow_worker": 2, "cpus_per_collector": 0.25,
                                          "latency": 0.002, "rollout": 32, "slow_factor": 5.0, "repeats": 1})
    # The goal line compares the returns too: here the preempted run's is 10 lower, more than chance.
    ret = r["train_return_last100"]
    assert "1.10x" in table and f": MET; train return {ret:.1f} vs {ret + 10:.1f} (no straggler): lower." in table
    assert "| env steps/s | train return (episodes) |" in table and mod.RETURN_NOTE in table


@pytest.mark.timeout(300)
def test_compression_images_counts_bytes(ray_for_module):
    mod = _load_bench("compression_images/run.py")
    # Games of 8 steps: some end in every round, and the return is measured.
    args = mod.parse_args(["--envs", "1", "--rollout", "8", "--rounds", "1", "--warmup", "1", "--hidden", "8",
                           "--cpus-per-collector", "0.25", "--episode-steps", "8"])
    assert mod.parse_args([]).episode_steps == 128
    records = [dict(mod.measure(mode, args), **{"pass": 0}) for mode in (False, "auto")]
    for r in records:   # 2 games of 8 steps per round, scores of -1, 0 or +1
        assert r["train_episodes"] >= 2 and -1 <= r["train_return_last100"] <= 1
    by = {r["compress"]: r for r in records}
    raw = by["False"]["bytes_sent_per_round"]
    assert raw >= 2 * 8 * 4 * 84 * 84 and by["False"]["compression_ratio"] == pytest.approx(1.0)
    # uint8 frames: lz4 pays off, and "auto" picks them.
    assert by['"auto"']["compression_ratio"] > 5 and by['"auto"']["bytes_sent_per_round"] < raw / 5
    summary = mod.summarize(records)
    table = mod.render(summary, records, {"collectors": 2, "envs": 1, "rollout": 8, "hidden": 8, "repeats": 1,
                                          "episode_steps": 8})
    assert '| "auto" |' in table and "| train return (games) |" in table
    auto, off = summary['"auto"'], summary["False"]
    assert f'"auto" vs False: {auto["bytes_vs_off"]:.1f}x fewer bytes per round' in table
    assert f"train return {auto['train_return']:.2f} vs {off['train_return']:.2f} (False): " in table


def test_harness_snapshot_and_load_probe():
    provenance, machine = _bench_module("harness.provenance"), _bench_module("harness.machine")
    dest, facts = provenance.snapshot_tree()
    try:
        assert os.path.isfile(os.path.join(dest, "pytorchrl", "__init__.py"))
        assert facts["git_commit"] and facts["git_dirty"] in (True, False)
    finally:
        import shutil
        shutil.rmtree(dest, ignore_errors=True)
    with machine.LoadProbe() as probe:
        sum(i * i for i in range(200_000))
    rep = probe.report()
    # The figures are measured CPU time: only their form is an invariant (a short workload
    # may round to 0 s of CPU at the kernel's clock-tick resolution).
    assert set(rep) == {"others_cpu_share_during", "ours_cpu_s", "loadavg_1min_before", "loadavg_1min_after"}
    assert rep["ours_cpu_s"] >= 0
    assert rep["others_cpu_share_during"] is None or 0 <= rep["others_cpu_share_during"] <= 1


# ---------------------------------------------------------------- soak (issue 11)
def run_soak(options, out, timeout):
    """Run benchmarks/soak/run.py with ``options`` (results into ``out``, a memory sample a
    second, the live tree) in its own process and Ray instance; returns its output, failing
    the test if it does not exit 0 within ``timeout`` seconds."""
    import signal
    cmd = [sys.executable, os.path.join(BENCH, "soak", "run.py"), *options, "--sample-every", "1", "--live-tree",
           "--out-dir", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"), cwd=REPO, start_new_session=True)
    try:
        stdout, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)   # the script stops its learner and Ray on SIGTERM
        stdout, _ = proc.communicate(timeout=30)
        pytest.fail(f"soak/run.py did not finish:\n{stdout[-3000:]}")
    assert proc.returncode == 0, stdout[-3000:]
    return stdout


def test_soak_memory_summary_and_report():
    mod = _load_bench("soak/run.py")
    args = mod.parse_args([])
    assert (args.duration_s, args.kill_every, args.calibrate, args.window, args.warmup) == (600, 120, 30, 60, 120)
    assert args.max_worker_restarts == 5        # 10 kills at most before the 1200 s deadline, in turn
    assert mod.classify("ray::IDLE") == "workers" and mod.classify("ray::CWorker.collect_data") == "workers"
    assert mod.classify("ray::DashboardAgent") == "daemons" and mod.classify("/x/raylet --a") == "daemons"
    assert mod.classify("/v/bin/python /v/ray/_private/workers/default_worker.py --node-ip-address=1") == "workers"
    assert mod.short_name("/v/ray/core/src/ray/gcs/gcs_server --log_dir=/tmp") == "gcs_server"
    assert mod.short_name("/v/bin/python -u /v/ray/_private/log_monitor.py --x") == "log_monitor.py"
    # 600 s of samples: workers grow 20% linearly after warm-up, the driver stays flat.
    samples = [{"t": float(t), "driver": 300.0, "workers": 500.0 * (1 + 0.2 * max(0, t - 120) / 480),
                "daemons": 400.0, "n_workers": 2, "train_return": None if t < 10 else float(t // 10)}
               for t in range(0, 601, 2)]
    for s in samples:
        s["job"] = s["driver"] + s["workers"]
        s["tree"] = s["job"] + s["daemons"]
    mem = mod.memory_summary(samples, warmup_end=125.0, window=60.0, t_end=600.0)
    g = mem["groups"]
    assert g["driver"]["growth"] == pytest.approx(0.0) and g["daemons"]["growth"] == pytest.approx(0.0)
    # medians at t = 155 s and 570 s
    assert g["workers"]["growth"] == pytest.approx((1.1875 - (1 + 0.2 * 35 / 480)) / (1 + 0.2 * 35 / 480))
    job = g["job"]
    assert job["growth"] == pytest.approx((job["final_MB"] - job["baseline_MB"]) / job["baseline_MB"])
    assert not mem["windows_overlap"]
    rows = mod.per_minute(samples, lambda t: int(1000 * t), 600.0)
    assert len(rows) == 10 and rows[0]["env_steps_per_s"] == 1000
    # The train return at each interval's end: the last sample before t = 60 s is at 58 s.
    assert rows[0]["train_return"] == 5.0 and rows[-1]["train_return"] == 60.0
    rec = {"target_steps": 6_000_000, "env_steps": 6_001_000, "target_reached": True, "error": None,
           "train_wall_s": 610.0, "planned_s": 600.0, "env_steps_per_s": 9838.0, "calibration_s": 30.0,
           "calibration_env_steps_per_s": 10000.0, "kills": 5, "kill_times_s": [120, 240, 360, 480, 600],
           "killed_collectors": [1, 2, 1, 2, 1], "replaced_after_s": [5.0] * 5, "worker_restarts": 5,
           "env_restarts": 0, "updates": 6000, "episodes": 20000, "train_return_last100": 500.0,
           "max_worker_restarts": 5, "n_samples": len(samples), "warmup_end_s": 125.0, "memory": mem,
           "per_minute": rows, "others_cpu_share_during": 0.05}
    rec["passed"] = False
    meta = {"collectors": 2, "cpus_per_collector": 1.0, "envs_per_collector": 8, "rollout": 128,
            "requests_in_flight": 1, "num_cpus": 2, "minutes": 10, "kill_every": 120, "sample_every": 2}
    table = mod.render(rec, meta)
    assert "target **reached**" in table and "| collectors killed (SIGKILL) | 5:" in table
    assert "| env steps/s (whole run) | 9,838 |\n| train return (last 100 episodes) | 500.0 |" in table
    assert "| t (s) | env steps/s | train return (last 100 ep.) |" in table and "| 0–60 | 1,000 | 5.0 |" in table
    assert "**NOT MET** (driver + workers RSS grew +" in table


# ----------------------------------------------- off-policy benchmark (offpolicy/run.py)
def mujoco_loads():
    try:
        import gymnasium
        gymnasium.make("HalfCheetah-v5").close()
    except Exception:   # no mujoco package, no build for this machine, ...
        return False
    return True


@pytest.mark.timeout(300)
@pytest.mark.parametrize("algo,steps,updates,precision", [("dqn", 1536, 3 * 128, "fp32"), ("sac", 300, 201, "bf16"),
                                                            ("sac-mujoco", 300, 201, "fp32")])
def test_offpolicy_ours_worker_prints_a_complete_record(algo, steps, updates, precision, tmp_path):
    """Our off-policy worker end to end on a tiny budget (no peers venv needed), with one
    update thread as the orchestrator's "ours-1t" system (Pendulum as "ours-bf16" too).
    HalfCheetah learns from step 100 (--learning-starts) to reach its updates."""
    if algo == "sac-mujoco" and not mujoco_loads():
        pytest.skip("MuJoCo's HalfCheetah-v5 cannot load here")
    extra = ["--learning-starts", 100] if algo == "sac-mujoco" else []
    rec = worker_record("offpolicy/worker_ours.py", ["--algo", algo, "--steps", steps, "--seed", 2, "--eval-episodes", 1,
                                               "--precision", precision, *extra], cwd=tmp_path,
                        PYTORCHRL_UPDATE_THREADS="1")
    assert rec["system"] == "ours" and rec["algo"] == algo and rec["seed"] == 2 and rec["precision"] == precision
    assert rec["env_steps"] == steps and rec["update_threads_env"] == "1"
    # DQN: stages of 128 updates at 1024, 1280 and 1536 env steps, as SB3 trains after each
    # rollout of 256 once past 1000 (the last stage included). SAC: one update per step from 100.
    assert rec["updates"] == updates
    assert rec["numpy_update"] and rec["update_threads"] == 1
    assert_rate_matches_wall(rec, "learn_wall_s")
    assert len(rec["eval_returns"]) == 1
    assert rec["hyperparameters"]["env_id"] == {"dqn": "CartPole-v1", "sac": "Pendulum-v1",
                                                "sac-mujoco": "HalfCheetah-v5"}[algo]
    if algo == "dqn":
        assert rec["final_epsilon"] == pytest.approx(0.04) and 1 <= rec["eval_returns"][0] <= 500
        assert rec["double_q"] is False     # SB3's DQN targets on both sides
    elif algo == "sac":
        assert -2000 < rec["eval_returns"][0] <= 0
    else:   # 1,000 steps of a barely trained cheetah: control costs and some wobbling
        assert rec["hyperparameters"]["learning_starts"] == 100 and -1500 < rec["eval_returns"][0] < 1500


def test_offpolicy_workers_share_the_hyperparameters():
    """Both off-policy workers train with the same hyperparameters (importing
    offpolicy/worker_sb3.py needs no SB3: it imports the library in main())."""
    hp = _load_bench("offpolicy/worker_ours.py").HYPERPARAMETERS
    assert hp == _load_bench("offpolicy/worker_sb3.py").HYPERPARAMETERS
    assert (hp["dqn"]["train_freq"], hp["dqn"]["gradient_steps"], hp["dqn"]["target_update_interval_updates"]) == \
        (256, 128, 128)
    assert (hp["sac"]["lr"], hp["sac"]["batch_size"], hp["sac"]["learning_starts"]) == (1e-3, 256, 100)
    assert (hp["sac-mujoco"]["lr"], hp["sac-mujoco"]["learning_starts"], hp["sac-mujoco"]["n_timesteps"]) == \
        (3e-4, 10_000, 40_000)


def test_offpolicy_report_from_synthetic_records():
    mod = _load_bench("offpolicy/run.py")
    args = mod.parse_args(["--quick", "--systems", "ours,sb3"])
    assert (args.seeds, args.steps, args.systems, args.tasks) == (
        1, {"dqn": 5000, "sac": 1000, "sac-mujoco": 1500}, ["ours", "sb3"], ["dqn", "sac"])
    # A quick HalfCheetah run learns from 1,000 steps (the zoo's 10,000 would leave it none).
    assert mod.worker_cmd("sb3", args, "sac-mujoco", 0, 1500, 1)[-2:] == ["--learning-starts", "1000"]
    assert "--learning-starts" not in mod.worker_cmd("ours", args, "sac", 0, 1000, 1)
    assert mod.worker_cmd("ours-bf16", args, "sac", 0, 1000, 1)[-2:] == ["--precision", "bf16"]
    assert mod.worker_cmd("ours", args, "sac", 0, 1000, 1)[-2:] == ["--precision", "fp32"]
    assert "--precision" not in mod.worker_cmd("sb3", args, "sac", 0, 1000, 1)
    assert mod.worker_env("ours-1t", args)["PYTORCHRL_UPDATE_THREADS"] == "1"
    assert "PYTORCHRL_UPDATE_THREADS" not in mod.worker_env("ours", args)

    def rec(task, system, seed, fps, ev, solve):
        return {"task": task, "system": system, "seed": seed, "env_steps": 50_176, "updates": 24_704,
                "env_steps_per_s": fps, "env_steps_per_cpu_s": fps * 0.8, "learn_wall_s": 50_176 / fps,
                "total_wall_s": 50_176 / fps + 3, "solve_wall_s": solve,
                "solve_env_steps": None if solve is None else 20_000, "eval_mean": ev, "peak_rss_tree_MB": 250.0}

    records = [rec("dqn", "ours", 0, 1500, 500, 5.0), rec("dqn", "ours-1t", 0, 1200, 500, 6.0),
               rec("dqn", "sb3", 0, 500, 500, 15.0), rec("dqn", "ours", 1, 1600, 480, None),
               rec("dqn", "ours-1t", 1, 1300, 480, None), rec("dqn", "sb3", 1, 400, 490, 14.0),
               {"task": "sac", "system": "sb3", "seed": 0, "error": "exit 1"}]
    summary = mod.summarize(records)
    assert summary[("dqn", "ours")]["env_steps_per_s"] == 1550 and summary[("dqn", "ours")]["solved"] == 1
    assert mod.paired(records, "dqn", "ours-1t") == [pytest.approx(1200 / 500), pytest.approx(1300 / 400)]
    table = mod.render(summary, records, {"steps": {"dqn": 50_000, "sac": 20_000}, "seeds": 2,
                                          "tasks": ["dqn", "sac"]})
    assert "| ours | **3.44x** |" in table and "| ours-1t | **2.78x** |" in table
    assert "ours: MET (speed 3.44x: ok; return 490.0 vs 495.0" not in table   # lower return: not met
    assert "ours: NOT MET (speed 3.44x: ok; return 490.0 vs 495.0: lower)" in table
    assert "Failed runs: sac sb3 seed 0: exit 1" in table


def test_offpolicy_report_of_a_partial_run(tmp_path):
    """--report renders the runs recorded so far (a run stopped before its summary)."""
    mod = _load_bench("offpolicy/run.py")
    meta = {"record": "meta", "command": "offpolicy.py", "date_utc": "2026-01-01T00:00:00+00:00",
            "steps": {"dqn": 50_000, "sac": 20_000}, "seeds": 3, "tasks": ["dqn", "sac"]}
    runs = [{"task": "dqn", "system": system, "seed": 0, "env_steps": 50_176, "updates": 24_704,
             "env_steps_per_s": fps, "env_steps_per_cpu_s": fps, "learn_wall_s": 50_176 / fps, "total_wall_s": 60.0,
             "solve_wall_s": None, "solve_env_steps": None, "eval_mean": 500.0, "peak_rss_tree_MB": 250.0}
            for system, fps in (("ours", 1500.0), ("sb3", 500.0))]
    path = tmp_path / "offpolicy_x.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [meta] + runs) + "\n")
    text = mod.report_from(str(path))
    assert "| ours | **3.00x** |" in text and "ours: MET" in text
    assert "SAC on Pendulum" not in text and "1 seed(s) per system" in text


# ------------------------------------------------- Atari PPO (atari_ppo/run.py, issue 9)
@pytest.mark.timeout(300)
def test_atari_ours_worker_prints_a_complete_record(tmp_path):
    """Our Atari PPO worker (bf16 actor) end to end on two rollouts of Breakout: the record
    the orchestrator reads, the same objective as SB3, the last rollout trained on in full,
    the real games' scores read from the episode log (a random Breakout game lasts some 170
    steps: about ten end in 8 x 256 steps)."""
    needs_extra("ale_py", "atari")
    rec = worker_record("atari_ppo/worker_ours.py", ["--steps", 2048, "--seed", 1, "--precision", "bf16",
                                               "--eval-episodes", 1, "--eval-max-steps", 60], cwd=tmp_path)
    assert rec["system"] == "ours-bf16" and rec["precision"] == "bf16" and rec["game"] == "BreakoutNoFrameskip-v4"
    # Two rollouts (8 envs x 128 steps), each trained on in full: 4 epochs x 4 mini-batches of 256.
    assert rec["env_steps"] == 2048 and rec["updates"] == 32
    assert rec["frames"] == 4 * 2048 and rec["frames_per_s"] == pytest.approx(4 * rec["env_steps_per_s"], rel=0.01)
    assert_rate_matches_wall(rec, "learn_wall_s")
    # Real games (all lives, unclipped score) finished in training; a greedy game cut at 60 steps.
    assert rec["train_games"] >= 2 and rec["train_return_last100"] >= 0
    assert len(rec["eval_returns"]) == 1 and 0 <= rec["eval_returns"][0] <= 60
    assert rec["hyperparameters"]["n_steps"] == 128 and rec["hyperparameters"]["batch_size"] == 256
    assert rec["value_loss_coef_passed"] * rec["value_loss_form_scale"] == pytest.approx(0.5)
    assert rec["torch_threads"] == 1 and rec["peak_rss_tree_MB"] > 50


def test_atari_workers_share_the_hyperparameters():
    """Both Atari workers train with the same hyperparameters (importing
    atari_ppo/worker_sb3.py needs no SB3) and the same command line."""
    hp = _load_bench("atari_ppo/worker_ours.py").HYPERPARAMETERS
    sb3 = _load_bench("atari_ppo/worker_sb3.py")
    assert hp == sb3.HYPERPARAMETERS
    assert (hp["n_envs"], hp["n_steps"], hp["n_epochs"], hp["batch_size"], hp["lr"], hp["clip"]) == \
        (8, 128, 4, 256, 2.5e-4, 0.1)
    # SB3's AtariWrapper settings: life loss ends training episodes, rewards clipped; whole
    # games with unclipped rewards for the greedy evaluation.
    assert sb3.wrapper_kwargs()["terminal_on_life_loss"] and sb3.wrapper_kwargs()["clip_reward"]
    assert not sb3.wrapper_kwargs(training=False)["terminal_on_life_loss"]
    assert not sb3.wrapper_kwargs(training=False)["clip_reward"]
    ours = _load_bench("atari_ppo/worker_ours.py").env_kwargs("PongNoFrameskip-v4", 3)
    assert ours == {"env_id": "PongNoFrameskip-v4", "seed": 3, "frame_stack": 4, "episodic_life": True,
                    "clip_rewards": True, "max_episode_steps": None}
    mod = _load_bench("atari_ppo/run.py")
    args = mod.parse_args(["--quick"])
    assert (args.steps, args.seeds, args.eval_episodes, args.systems) == (4096, 1, 1, ["ours", "ours-bf16", "sb3"])
    assert mod.worker_cmd("ours-bf16", args, 0, 4096, 1)[-2:] == ["--precision", "bf16"]
    assert "--precision" not in mod.worker_cmd("sb3", args, 0, 4096, 1)


def _atari_records():
    def rec(system, seed, fps, ret, ev):
        return {"system": system, "seed": seed, "game": "BreakoutNoFrameskip-v4", "env_steps": 250_880,
                "updates": 3920, "env_steps_per_s": fps, "env_steps_per_cpu_s": fps * 0.9, "frames_per_s": 4 * fps,
                "frames_per_cpu_s": 3.6 * fps, "learn_wall_s": 250_880 / fps, "total_wall_s": 250_880 / fps + 10,
                "train_return_last20": ret + 1, "train_return_last100": ret, "train_games": 900, "eval_mean": ev,
                "peak_rss_tree_MB": 600.0, "torch_threads": 1, "others_cpu_share_during": 0.05}

    return [rec("ours", 0, 240, 14.0, 10.0), rec("ours-bf16", 0, 480, 15.0, 12.0), rec("sb3", 0, 200, 13.0, 9.0),
            rec("ours", 1, 260, 12.0, 8.0), rec("ours-bf16", 1, 440, 11.0, 7.0), rec("sb3", 1, 220, 14.0, 11.0),
            {"system": "sb3", "seed": 2, "error": "exit 1"}]


def test_atari_report_from_synthetic_records():
    mod = _load_bench("atari_ppo/run.py")
    records = _atari_records()
    summary = mod.summarize(records)
    assert summary["ours-bf16"]["env_steps_per_s"] == 460 and summary["sb3"]["runs"] == 2
    assert summary["sb3"]["train_return_last100"] == 13.5 and summary["ours"]["return_min"] == 12.0
    table = mod.render(summary, records, {"game": "BreakoutNoFrameskip-v4", "steps": 250_000, "seeds": 2,
                                          "torch_threads_env": 1, "eval_max_steps": 4500})
    assert "1,000,000 frames" in table
    assert "| ours | **1.19x** | 1.20x, 1.18x |" in table and "| ours-bf16 | **2.19x** | 2.40x, 2.00x |" in table
    # 2.19x but a median return of 13.0 against SB3's 13.5: not met.
    assert "ours-bf16: NOT MET (speed 2.19x: ok; return 13.00 vs 13.50: lower)" in table
    assert "ours: NOT MET (speed 1.19x: short; return 13.00 vs 13.50: lower)" in table
    assert "Failed runs: sb3 seed 2: exit 1" in table


def test_atari_report_of_a_partial_run(tmp_path):
    """--report renders the runs recorded so far (a run stopped before its summary)."""
    mod = _load_bench("atari_ppo/run.py")
    meta = {"record": "meta", "command": "atari_ppo.py", "date_utc": "2026-01-01T00:00:00+00:00",
            "game": "BreakoutNoFrameskip-v4", "steps": 250_000, "seeds": 2, "torch_threads_env": 1,
            "eval_max_steps": 4500}
    path = tmp_path / "atari_ppo_x.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [meta] + _atari_records()[:3]) + "\n")
    text = mod.report_from(str(path))
    assert "1 seed(s) per system" in text and "| ours-bf16 | **2.40x** |" in text and "ours-bf16: MET" in text


def test_atari_report_of_runs_in_two_files(tmp_path):
    """More seeds for an earlier run (--first-seed) are reported with it (--report A B);
    a run found in both files is refused, not counted twice."""
    mod = _load_bench("atari_ppo/run.py")
    assert mod.parse_args(["--seeds", "2", "--first-seed", "2"]).first_seed == 2
    records = _atari_records()[:6]
    paths = []
    for i, (command, recs) in enumerate([("atari_ppo.py --seeds 1", records[:3]),
                                         ("atari_ppo.py --seeds 1 --first-seed 1", records[3:])]):
        meta = {"record": "meta", "command": command, "date_utc": f"2026-01-0{i + 1}T00:00:00+00:00",
                "game": "BreakoutNoFrameskip-v4", "steps": 250_000, "seeds": 1, "torch_threads_env": 1,
                "eval_max_steps": 4500}
        paths.append(tmp_path / f"atari_ppo_{i}.jsonl")
        paths[-1].write_text("\n".join(json.dumps(r) for r in [meta] + recs) + "\n")
    text = mod.report_from([str(p) for p in paths])
    assert "2 seed(s) per system" in text and "| ours-bf16 | **2.19x** | 2.40x, 2.00x |" in text
    assert "with the runs of `atari_ppo.py --seeds 1 --first-seed 1`" in text
    with pytest.raises(ValueError, match="is in both"):
        mod.report_from([str(paths[0]), str(paths[0])])


def test_cnn_update_bench_measures_each_configuration():
    """cnn_update/run.py's measuring function on one update and two acting steps per
    configuration, and its table."""
    mod = _load_bench("cnn_update/run.py")
    args = mod.parse_args(["--quick"])
    args.updates, args.acts = 1, 2
    records = [dict(mod.measure((cfg, 1), args), **{"pass": 0}) for cfg in mod.CONFIGS]
    assert [r["config"] for r in records] == [c[0] for c in mod.CONFIGS]
    for r in records:
        assert r["threads"] == 1 and r["update_ms"] > 0 and r["act_ms"] > 0 and r["update_cpu_ms"] > 0
    assert records[0]["computes_in"] == records[1]["computes_in"] == "torch.float32"
    summary = mod.summarize(records)
    table = mod.render(summary, records, {"repeats": 1, "cpu_model": "x", "native_bf16": True})
    assert "| fp32, channels first | 1 | float32 |" in table and "| bf16, automatic layout | 1 |" in table


def test_gpu_update_bench_builds_every_case_and_reports_the_engine(tmp_path, capsys):
    """gpu_update/run.py on the CPU (where the graph update is never built: its column says
    so), two updates per case: every case builds, trains and is reported."""
    mod = _load_bench("gpu_update/run.py")
    out = tmp_path / "gpu.json"
    assert mod.main(["--device", "cpu", "--updates", "2", "--repeats", "1", "--warmup", "1", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["case"] for r in rows] == list(mod.CASES)
    for r in rows:
        assert r["eager_ms"] > 0 and r["graph_ms"] > 0 and r["off"] == "not built"
    assert "| ppo-cnn |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        mod.parse_args(["--cases", "sac,nope"])


# -------------------------------------------------- EXARL workflows side by side (issue 10)
def test_workflows_benchmark_discovers_every_exarl_config_and_reports_them():
    mod = _load_bench("workflows/run.py")
    configs = mod.discover()
    exarl = os.path.join(REPO, "examples", "configs", "exarl")
    assert sorted(configs) == sorted(f[:-5] for f in os.listdir(exarl) if f.endswith(".yaml"))
    assert "exarl-nonblocking-async" in configs and "exarl-sync" in configs
    args = mod.parse_args(["--quick", "--only", "exarl-sync,exarl-random"])
    assert args.steps == 5000 and list(args.configs) == ["exarl-sync", "exarl-random"]
    with pytest.raises(SystemExit):
        mod.parse_args(["--only", "exarl-nope"])
    rows = [{"Episodes/TrainReward": 20.0, "Time/Elapsed": 1.0, "Scheme/EnvSteps": 100.0},
            {"Episodes/TrainReward": 160.0, "Time/Elapsed": 4.5, "Scheme/EnvSteps": 900.0,
             "Scheme/BytesFromCollectors": 2.0 ** 20}]
    assert mod.time_to_threshold(rows, 150) == (4.5, 900.0) and mod.time_to_threshold(rows, 200) == (None, None)
    record = {"workflow": "exarl-sync", "env_steps_per_s": 1000.0, "updates_per_s": 400.0, "threshold_s": 4.5,
              "threshold_env_steps": 900.0, "train_return": 160.0, "test_return": None,
              "bytes_from_collectors": mod.last(rows, "Scheme/BytesFromCollectors"), "bytes_to_collectors": None,
              "max_policy_lag": 0.0, "weight_pulls": None, "loadavg_before": [3.0], "loadavg_after": [3.5]}
    table = mod.render([record, {"workflow": "exarl-random", "error": "exit 2"}], args)
    assert "| exarl-sync | 1,000 | 400 | 4.5 (900 steps) | 160.0 | – | 1.00 | – | 0 | – | 3.0 / 3.5 |" in table
    assert "| exarl-random | failed: exit 2 |" in table


# --------------------------- the return beside the speed (a2c, work stealing, pbt, spaces)
def test_harness_return_verdicts():
    report = _bench_module("harness.report")
    assert report.return_verdict(480.0, 500.0, ref_name="base", label="greedy return") == \
        "greedy return 480.0 vs 500.0 (base): lower"
    assert report.return_verdict(495.0, 500.0, tolerance=10) == "return 495.0 vs 500.0: ok (within 10.0)"
    assert report.return_verdict(505.0, 500.0) == "return 505.0 vs 500.0: ok"
    assert report.return_verdict(None, 500.0) == "return – vs 500.0: not measured"
    assert report.fmt_return(21.43, 7) == "21.4 (7 ep.)" and report.fmt_return(None, 0) == "– (no episode ended)"
    schemes = _bench_module("harness.schemes")
    assert schemes.finite(float("nan")) is None and schemes.finite(float("-inf")) is None and schemes.finite(3) == 3.0


def _a2c_records(tree_eval):
    def rec(version, seed, fps, ev, train):
        return {"version": version, "seed": seed, "steps_per_s": fps, "env_steps": 40_000,
                "train_return_last100": train, "train_episodes": 300, "eval_mean": ev, "eval_returns": [ev]}

    return [rec("base", 0, 1000.0, 500.0, 300.0), rec("tree", 0, 1100.0, tree_eval[0], 310.0),
            rec("tree", 1, 1050.0, tree_eval[1], 290.0), rec("base", 1, 1000.0, 400.0, 280.0)]


def test_a2c_cartpole_report_says_when_the_tree_returns_less():
    mod = _load_bench("a2c_cartpole/run.py")
    summary = mod.summarize(_a2c_records((500.0, 420.0)))
    assert summary["tree"]["steps_per_s"] == 1075.0 and summary["base"]["eval_mean"] == 450.0
    table = mod.render(summary, "e8efbda")
    assert "| e8efbda (base) | 1,000 | 450.0 | 290.0 | 1,000 1,000 | 500.0 400.0 | 300.0 280.0 |" in table
    assert "median greedy return 460.0 vs 450.0 (base): ok (lower on 0 of 2 paired seeds)" in table
    assert "Verdict: the working tree learns as well as the base and runs at 1.07x its env steps/s." in table
    # Faster, but a lower median greedy return: not a speed-up.
    table = mod.render(mod.summarize(_a2c_records((400.0, 300.0))), "e8efbda")
    assert "(lower on 2 of 2 paired seeds)" in table
    assert ("Verdict: the working tree LEARNS WORSE than the base (median greedy return 350.0 vs 450.0): its 1.07x "
            "env steps/s is not a speed-up.") in table
    # Within the tolerance a lower median is not counted as learning worse.
    assert "learns as well" in mod.render(mod.summarize(_a2c_records((440.0, 440.0))), "x", tolerance=20)
    assert (mod.parse_args(["--quick"]).steps, mod.parse_args([]).base) == (4000, "HEAD")


@pytest.mark.timeout(300)
def test_a2c_cartpole_run_reports_speed_and_returns():
    """The child run of a2c_cartpole/run.py on the working tree, 800 steps: its speed and,
    beside it, the training and greedy returns."""
    mod = _load_bench("a2c_cartpole/run.py")
    argv, env = mod.child_command(REPO, 800, seed=1, eval_episodes=2)
    r = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=280)
    assert r.returncode == 0, r.stderr[-3000:]
    rec = mod.read_result(r.stdout, REPO)
    assert rec["steps_per_s"] > 0 and rec["env_steps"] >= 800
    assert_return_fields(rec)
    assert len(rec["eval_returns"]) == 2 and 1 <= rec["eval_mean"] <= 500


def test_work_stealing_report_compares_run_time_and_return():
    mod = _load_bench("work_stealing/run.py")

    def rec(steal, seed, time_s, ret):
        return {"steal": steal, "seed": seed, "time_s": time_s, "train_return_last100": ret, "train_episodes": 120,
                "stolen_pops": 3 if steal else 0, "stolen_rollouts": 5 if steal else 0, "puts": 140,
                "popped": 140, "held": 0, "updates": 2900, "env_steps": 3000,
                "steps_by_group": {1: 1900, 2: 1100}}

    records = [rec(True, 0, 10.0, 20.0), rec(False, 0, 15.0, 24.0), rec(False, 1, 14.0, 22.0), rec(True, 1, 9.0, 26.0)]
    table = mod.render(mod.summarize(records))
    assert "| steal true | 9.5 | 10.0 9.0 | 23.0 (120 ep.) | 20.0 26.0 | 1900/1100 1900/1100 | 3 3 | 5 5 | 140/140 140/140 | 2900 2900 |" \
        in table
    assert ("steal true vs false: median run time 9.5 s vs 14.5 s (1.53x as fast); median train return 23.0 vs 23.0 "
            "(steal false): ok.") in table and mod.RETURN_NOTE in table
    assert (mod.parse_args(["--quick"]).steps, mod.parse_args(["--quick"]).repeats) == (600, 1)


def test_pbt_report_compares_wall_time_and_return():
    mod = _load_bench("pbt/run.py")

    def rec(config, seed, best, wall, copies=0):
        return {"config": config, "seed": seed, "best_final": best, "finals": {0: best}, "first_solve_step": None,
                "members_solved_at_end": 0, "wall_s": wall, "copies": copies}

    records = [rec("fixed", 0, 480.0, 100.0), rec("pbt", 0, 500.0, 105.0, 12), rec("fixed", 1, 420.0, 98.0),
               rec("pbt", 1, 440.0, 101.0, 10), rec("tune-inplace", 0, 400.0, 120.0, 6),
               rec("tune-restart", 0, 450.0, 150.0, 6)]
    text = "\n".join(mod.comparison_lines(records))
    assert "pbt vs fixed (2 seed(s), medians): wall 103 s vs 99 s; best final return 470.0 vs 450.0 (fixed): ok." in text
    assert ("Tune restarting vs in place (1 seed(s), medians): +30.0 s in all, +5.00 s per perturbation "
            "(6 perturbations); best final return in place 400.0 vs 450.0 (restarting): lower.") in text


@pytest.mark.timeout(300)
def test_spaces_cartpole_quick_writes_records_with_returns(tmp_path, capsys):
    mod = _load_bench("spaces_cartpole/run.py")
    mod.main(["--quick", "--envs", "CartPole-v1", "--out-dir", str(tmp_path)])
    lines = [json.loads(ln) for f in tmp_path.glob("spaces_cartpole_*.jsonl") for ln in f.read_text().splitlines()]
    assert lines[0]["record"] == "meta" and len(lines) == 2
    run = lines[1]
    assert run["env_id"] == "CartPole-v1" and run["steps"] == 4096 and run["seconds"] > 0
    assert 8 <= run["best_train_return"] <= 500 and 8 <= run["final_train_return"] <= run["best_train_return"]
    assert "| env | seed | steps to 195 | best train return | best greedy return | s |" in capsys.readouterr().out


@pytest.mark.timeout(300)
def test_server_startup_measures_servers_that_do_without_torch(ray_for_module):
    mod = _load_bench("server_startup/run.py")
    args = mod.parse_args(["--quick"])
    assert (args.repeats, args.servers) == (1, 1)
    weights = mod._board_weights()
    records = [dict(mod.measure(kind, args, weights), **{"pass": 0}) for kind in mod.KINDS]
    for rec in records:
        # A process of its own that started and answered (Ray's worker start alone is most
        # of a CPU-second's half), without loading torch.
        assert 0.1 < rec["cpu_s"] < 60 and rec["rss_mb"] > 10 and rec["torch_loaded"] is False, rec
    summary = mod.summarize(records)
    table = mod.render(summary, records, {"servers": 1, "repeats": 1})
    assert "| queue server | 1 |" in table and "| weight board | 1 |" in table and "| yes |" not in table


# ------------------------------------------------------------------ zoo table
def _zoo_module(name):
    path = os.path.join(REPO, "benchmarks", "zoo", f"{name}.py")
    sys.path.insert(0, os.path.dirname(path))
    try:
        spec = importlib.util.spec_from_file_location(f"zoo_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(os.path.dirname(path))


def test_zoo_iqm_and_interval_are_rliables():
    stats = _zoo_module("stats")
    # scipy's trim_mean(x, 0.25): floor(n / 4) values cut from each end.
    assert stats.iqm([1, 2, 3, 4, 100]) == 3.0
    assert stats.iqm([5, 1, 2, 3, 4, 100, -50, 6]) == 3.5          # (2 + 3 + 4 + 5) / 4
    assert stats.iqm([7.0]) == 7.0
    low, high = stats.bootstrap_ci([1, 2, 3, 4, 100])
    assert 1 <= low <= 3.0 <= high <= 100
    assert stats.bootstrap_ci([1, 2, 3, 4, 100]) == (low, high)     # reproducible
    assert stats.bootstrap_ci([5.0] * 4) == (5.0, 5.0)
    summary = stats.summarize([500, 500, 480, 500, 100])
    assert summary["iqm"] == pytest.approx(1480 / 3) and summary["mean"] == 416.0 and summary["n"] == 5


def test_zoo_every_row_has_its_configuration_and_it_is_valid():
    from pytorchrl.config import load_config
    rows = _zoo_module("rows")
    for row in rows.ROWS:
        if row.prepare or row.measure:     # demonstrations recorded first, or not a configuration run
            continue
        if any(importlib.util.find_spec(m) is None for m in row.needs):    # an extra this venv lacks
            continue
        config = load_config(os.path.join(REPO, row.config_path), list(row.overrides))
        if row.published is not None and config["learner"]["target_steps"] != row.published.steps:
            # A row trains for the published budget, or its note says why not.
            assert "of the zoo's" in row.note, row.name
    for path in os.listdir(os.path.join(REPO, "examples", "configs", "zoo")):
        assert path[:-5] in rows.BY_NAME or any(r.config_path.endswith(path) for r in rows.ROWS), path


def test_zoo_quick_run_writes_results_the_table_and_resumes(tmp_path):
    cmd = [sys.executable, os.path.join(REPO, "benchmarks", "zoo", "run.py"), "--quick", "--out", str(tmp_path),
           "ppo_cartpole"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    result = json.load(open(tmp_path / "quick" / "ppo_cartpole" / "seed0" / "result.json"))
    assert result["env_steps"] >= 2000 and result["eval_episodes"] == 2 and result["final"] > 0
    line = [ln for ln in first.stdout.splitlines() if ln.startswith("| ppo_cartpole |")][0]
    assert f"{result['final']:.1f}" in line and "500 ± 0 @ 100k" in line
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "runs to do" not in again.stderr       # resumed: nothing left to run
