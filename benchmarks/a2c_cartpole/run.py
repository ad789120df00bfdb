"""A2C CartPole speed and return, two versions of pytorchrl side by side: whether A2C's two
optimizers (policy and value, pytorchrl's ``lr_pi``/``lr_v``) cost env steps/s against the
single one before them, and whether the newer version learns as well.

Each run trains the A2C agent preset (examples/configs/a2c_cartpole.yaml: 8 envs x 5 steps
per rollout, one numpy update per rollout) in one process for ``--steps`` env steps and
reports the env steps/s of the training loop (start-up excluded) and, beside it, the return
the training reached: the mean return of the last 100 training episodes
(``train_return_last100``) and, after the timed loop, the deterministic (greedy) return of
``--eval-episodes`` episodes on a fresh CartPole-v1 seeded 1000, 1001, ...
(``eval_mean``, ``eval_returns``: ``workerlib.common.greedy_returns``, the same loop for
both versions). The two versions are ``pytorchrl/`` exported from ``--base`` (a commit) and
a snapshot of the working tree, each put first on the run's ``PYTHONPATH``; their runs are
interleaved so that the machine's load falls on both alike, and run i of both trains with
seed i (paired runs).

The last lines compare the working tree with the base: env steps/s, and the median greedy
return, which says whether the working tree **learns worse** (lower by more than
``--return-tolerance``): a faster version that learns worse is not a speed-up.

Outputs: the table on stdout and in ``results/a2c_cartpole_<stamp>.md``, the runs' records
in ``results/a2c_cartpole_<stamp>.jsonl`` (a meta line, one line per run).

    python benchmarks/a2c_cartpole/run.py --base e8efbda --steps 40000 --repeats 5
    python benchmarks/a2c_cartpole/run.py --quick         # HEAD against the working tree, 4000 steps, 1 run each
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)

from harness.paths import REPO, RESULTS_DIR  # noqa: E402
from harness.provenance import snapshot_tree  # noqa: E402
from harness.report import fmt, md_table, return_ok, return_verdict  # noqa: E402
from harness.results import append_jsonl, open_results, write_markdown  # noqa: E402
from harness.stats import median  # noqa: E402

VERSIONS = ("base", "tree")
# The child: the measured pytorchrl comes first on PYTHONPATH; benchmarks/ is appended for the
# harness's return fields and workerlib's greedy loop (both import the standard library only
# at the top), so that the two versions are measured by the same code.
_RUN = """
import json, time, sys
sys.path.append({bench!r})
import pytorchrl
from pytorchrl.config import build_learner, load_config
from harness.schemes import train_return_fields
from workerlib.ours import greedy_returns_of
learner = build_learner(load_config({config!r}, ["learner.target_steps={steps}", "learner.tensorboard=false",
                                                 "env.test_env=false", "schedules=[]", "seed={seed}"]))
try:
    learner.step()   # first update: optimizers and fast paths built
    t0, s0 = time.perf_counter(), learner.num_samples_collected
    while not learner.done():
        learner.step()
    dt = time.perf_counter() - t0
    returns = train_return_fields(learner)
    eval_returns = greedy_returns_of(learner.update_worker.local_worker.actor, {episodes})
finally:
    learner.stop()
print("RESULT " + json.dumps({{"steps_per_s": (learner.num_samples_collected - s0) / dt,
                              "env_steps": int(learner.num_samples_collected), **returns,
                              "eval_mean": sum(eval_returns) / len(eval_returns), "eval_returns": eval_returns,
                              "file": pytorchrl.__file__}}))
"""


def export(commit):
    """``pytorchrl/`` of ``commit`` in a new temporary directory."""
    dest = tempfile.mkdtemp(prefix=f"pytorchrl-{commit}-")
    archive = subprocess.run(["git", "archive", "--format=tar", commit, "pytorchrl"], cwd=REPO,
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    return dest


def child_command(src, steps, seed, eval_episodes):
    """(argv, environment) of one run: train the preset with the pytorchrl found in ``src``
    for ``steps`` env steps with ``seed``, in a fresh process, then evaluate it greedily on
    ``eval_episodes`` episodes. Its output is read by ``read_result``."""
    config = os.path.join(REPO, "examples", "configs", "a2c_cartpole.yaml")
    code = _RUN.format(bench=BENCH, config=config, steps=steps, seed=seed, episodes=eval_episodes)
    return [sys.executable, "-c", code], dict(os.environ, PYTHONPATH=src, OMP_NUM_THREADS="1")


def read_result(stdout, src):
    """The record a run printed on ``stdout`` (``steps_per_s``, ``env_steps``,
    ``train_return_last100``, ``train_episodes``, ``eval_mean``, ``eval_returns``), checked
    to come from the pytorchrl of ``src``."""
    result = json.loads([ln for ln in stdout.splitlines() if ln.startswith("RESULT ")][0][7:])
    assert result.pop("file").startswith(src), "the child imported another pytorchrl"
    return result


def run_once(src, steps, seed, eval_episodes):
    """One run (``child_command``'s arguments): its record (``read_result``)."""
    argv, env = child_command(src, steps, seed, eval_episodes)
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())
    return read_result(out.stdout, src)


def summarize(records):
    """{version: medians of env steps/s, greedy and train return, and the runs} of ``records``
    (``run_once``'s, each with its ``version``), base first."""
    out = {}
    for version in VERSIONS:
        rs = [r for r in records if r["version"] == version]
        if rs:
            out[version] = {"runs": rs, "steps_per_s": median([r["steps_per_s"] for r in rs]),
                            "eval_mean": median([r.get("eval_mean") for r in rs]),
                            "train_return": median([r.get("train_return_last100") for r in rs])}
    return out


def verdict(summary, tolerance=0.0):
    """The lines comparing the working tree with the base in ``summary`` (``summarize``'s):
    env steps/s, the median greedy and train returns, and whether the working tree learns
    worse: its median greedy return lower than the base's by more than ``tolerance`` (in
    return units; also the margin of the train return's comparison and of the count of
    paired seeds on which the tree's greedy return is lower)."""
    base, tree = summary["base"], summary["tree"]
    speed = tree["steps_per_s"] / base["steps_per_s"]
    lower = sum(1 for b, t in zip(base["runs"], tree["runs"])     # paired: the same seed
                if not return_ok(t.get("eval_mean"), b.get("eval_mean"), tolerance))
    greedy = return_verdict(tree["eval_mean"], base["eval_mean"], tolerance=tolerance, ref_name="base",
                            label="median greedy return")
    train = return_verdict(tree["train_return"], base["train_return"], tolerance=tolerance, ref_name="base",
                           label="median train return")
    lines = [f"working tree / base: env steps/s {speed:.3f}x; {greedy} (lower on {lower} of "
             f"{len(tree['runs'])} paired seeds); {train}."]
    if return_ok(tree["eval_mean"], base["eval_mean"], tolerance):
        lines.append(f"Verdict: the working tree learns as well as the base and runs at {speed:.2f}x its env steps/s.")
    else:
        lines.append(f"Verdict: the working tree LEARNS WORSE than the base (median greedy return "
                     f"{fmt(tree['eval_mean'], 1)} vs {fmt(base['eval_mean'], 1)}): its {speed:.2f}x env steps/s "
                     f"is not a speed-up.")
    return lines


def render(summary, base_commit, tolerance=0.0):
    """The report: one row per version of ``summary`` (``summarize``'s; ``base_commit`` names
    the base) with the runs in order, then the comparison (``verdict``)."""
    names = {"base": f"{base_commit} (base)", "tree": "working tree"}
    rows = []
    for version, s in summary.items():
        rs = s["runs"]
        rows.append([names[version], fmt(s["steps_per_s"]), fmt(s["eval_mean"], 1), fmt(s["train_return"], 1),
                     " ".join(fmt(r["steps_per_s"]) for r in rs), " ".join(fmt(r.get("eval_mean"), 1) for r in rs),
                     " ".join(fmt(r.get("train_return_last100"), 1) for r in rs)])
    lines = [md_table(["pytorchrl", "median env steps/s", "median greedy return", "median train return (last 100 ep.)",
                       "runs: env steps/s", "greedy returns", "train returns"], rows)]
    if len(summary) == 2:
        lines += [""] + verdict(summary, tolerance)
    return "\n".join(lines)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="HEAD", help="commit whose pytorchrl/ is the baseline (default HEAD)")
    ap.add_argument("--steps", type=int, default=40_000, help="env steps per run")
    ap.add_argument("--repeats", type=int, default=5, help="runs per version, interleaved (run i: seed i)")
    ap.add_argument("--eval-episodes", type=int, default=10, help="greedy episodes after each run (default 10)")
    ap.add_argument("--return-tolerance", type=float, default=25.0,
                    help="the working tree learns worse when its median greedy return is lower than the base's by "
                         "more than this (default 25: 5%% of CartPole's 500, less than seeds differ by)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 4000 steps, 1 run each, 2 greedy episodes")
    ap.add_argument("--out-dir", default=RESULTS_DIR, help="where the .jsonl and .md results go")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.repeats, args.eval_episodes = 4000, 1, 2
    return args


def main(argv=None):
    args = parse_args(argv)
    base = export(args.base)
    tree, source = snapshot_tree()
    try:
        jsonl, meta = open_results("a2c_cartpole", args,
                                   source={"kind": "snapshot of the working tree at start", **source},
                                   extra={k: getattr(args, k) for k in ("base", "steps", "repeats", "eval_episodes")})
        records = []
        for i in range(args.repeats):
            for name, src in (("base", base), ("tree", tree)) if i % 2 == 0 else (("tree", tree), ("base", base)):
                rec = {"version": name, "seed": i, **run_once(src, args.steps, i, args.eval_episodes)}
                records.append(rec)
                append_jsonl(jsonl, rec)
                print(f"run {i + 1} {name}: {rec['steps_per_s']:,.0f} env steps/s, greedy return "
                      f"{rec['eval_mean']:.1f}, train return {fmt(rec['train_return_last100'], 1)}", file=sys.stderr)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(tree, ignore_errors=True)
    table = render(summarize(records), args.base, args.return_tolerance)
    write_markdown(jsonl, meta, table)
    print(table)


if __name__ == "__main__":
    main()
