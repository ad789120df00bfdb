"""Smoke test of the benchmark harness (benchmarks/): our PPO worker runs end to end on a
tiny budget and prints the JSON record the orchestrator reads. Needs neither the peers'
venv nor Stable-Baselines3."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(REPO, "benchmarks")

FIELDS = {
    "system": str, "seed": int, "env_steps": int, "learn_wall_s": float, "total_wall_s": float,
    "env_steps_per_s": float, "learn_cpu_s": float, "env_steps_per_cpu_s": float, "eval_mean": float,
    "eval_returns": list, "peak_rss_tree_MB": float, "hyperparameters": dict,
}


def _load_orchestrator():
    spec = importlib.util.spec_from_file_location("ppo_cartpole_bench", os.path.join(BENCH, "ppo_cartpole.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.timeout(300)
def test_ours_worker_prints_a_complete_record():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, os.path.join(BENCH, "_ours_ppo.py"), "--steps", "3000", "--seed", "1",
                        "--eval-episodes", "2"], capture_output=True, text=True, env=env, cwd=REPO, timeout=280)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"no JSON line in the output:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    rec = json.loads(lines[-1])
    for key, kind in FIELDS.items():
        assert key in rec, f"missing field {key!r}"
        assert isinstance(rec[key], (int, float) if kind is float else kind), (key, rec[key])
    for key in ("solve_env_steps", "solve_wall_s"):   # None unless solved (not in 3000 steps)
        assert key in rec
    assert rec["system"] == "ours" and rec["seed"] == 1
    # One rollout is 8 envs x 32 steps: the budget is reached in whole rollouts.
    assert 3000 <= rec["env_steps"] < 3000 + 256
    assert rec["learn_wall_s"] > 0 and rec["total_wall_s"] >= rec["learn_wall_s"]
    assert rec["env_steps_per_s"] == pytest.approx(rec["env_steps"] / rec["learn_wall_s"], rel=0.01)
    assert len(rec["eval_returns"]) == 2 and all(1 <= x <= 500 for x in rec["eval_returns"])
    assert rec["peak_rss_tree_MB"] > 50
    assert rec["hyperparameters"]["n_steps"] == 32 and rec["hyperparameters"]["batch_size"] == 256
    # Same objective as SB3 (vf_coef 0.5 on the plain MSE), whatever our loss's form.
    assert rec["value_loss_coef_passed"] * rec["value_loss_form_scale"] == pytest.approx(0.5)


def test_sb3_worker_shares_the_hyperparameters():
    """Both workers declare identical hyperparameters (read from the source: no SB3 needed)."""
    import ast

    def declared(name):
        tree = ast.parse(open(os.path.join(BENCH, name)).read())
        for node in tree.body:
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "HYPERPARAMETERS":
                return ast.literal_eval(node.value.args[0]) if node.value.args else \
                    {kw.arg: ast.literal_eval(kw.value) for kw in node.value.keywords}
        raise AssertionError(f"no HYPERPARAMETERS in {name}")

    assert declared("_ours_ppo.py") == declared("_sb3_ppo.py")


def test_report_from_synthetic_records():
    mod = _load_orchestrator()

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
    args = _load_orchestrator().parse_args(["--quick"])
    assert (args.seeds, args.steps, args.no_warmup) == (1, 10_000, True)


def test_machine_load_probe():
    mod = _load_orchestrator()
    busy_total = mod.cpu_jiffies()
    if busy_total is None:
        pytest.skip("no /proc/stat")
    busy, total = busy_total
    assert 0 <= busy <= total
    share = mod.others_share(window=0.2)
    assert share is None or 0.0 <= share <= 1.0
