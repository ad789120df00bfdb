"""Our zoo table: every algorithm we ship trained on rl-baselines3-zoo's tasks with its
hyperparameters and several seeds, beside the zoo's published figures.

Each row is a configuration file (``examples/configs/zoo/<row>.yaml``, see rows.py) that
``pytorchrl train`` runs once per seed; the final model is evaluated deterministically, and
the row reports the mean and the interquartile mean of the seeds' final returns with a 95%
bootstrap confidence interval (as the rliable package computes them), env steps/s, wall
time, and a PNG of the learning curve with the published figure marked.

The table is resumable: every finished seed leaves ``result.json`` in its run directory
(``benchmarks/results/zoo/<row>/seed<S>/``), which later invocations reuse; an interrupted
seed starts over. The code under test is a snapshot of the working tree's ``pytorchrl/``
taken when the command starts (``--clean-head``: HEAD exported), so edits made while it
runs do not mix into a run; each result records its commit.

    python benchmarks/zoo/run.py                      # every row (hours on 2 cores; resumable)
    python benchmarks/zoo/run.py ppo_cartpole a2c_cartpole --jobs 2
    python benchmarks/zoo/run.py --report             # the table of what has run, and the curves
    python benchmarks/zoo/run.py --quick ppo_cartpole # smoke run: 1 seed, 2,000 steps, own folder
    python benchmarks/zoo/run.py --system rl-zoo3 dqn_cartpole   # the zoo itself, same seeds (peers' venv)

``--system rl-zoo3`` trains a row with rl-baselines3-zoo itself (``python -m rl_zoo3.train``
with its hyperparameters, Stable-Baselines3, in the venv of benchmarks/setup_peers.sh with
``pip install rl_zoo3 box2d``) on the same seeds, evaluated the same way: the table then
shows the zoo's own IQM on this machine beside ours, which the published figure (one run)
cannot give.
"""

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
for path in (BENCH, HERE):
    if path not in sys.path:
        sys.path.insert(0, path)

from harness.paths import DEFAULT_PEERS_PYTHON, REPO, RESULTS_DIR  # noqa: E402
from harness.provenance import export_head, snapshot_tree  # noqa: E402
from harness.report import md_table  # noqa: E402

import curves as zoo_curves  # noqa: E402
from rows import BY_NAME, EXTRA_OF, ROWS  # noqa: E402
from stats import summarize  # noqa: E402

DEFAULT_OUT = os.path.join(RESULTS_DIR, "zoo")
CURVES_DIR = os.path.join(HERE, "curves")


def missing_modules(row):
    """The modules of ``row.needs`` that this interpreter cannot import."""
    return [m for m in row.needs if importlib.util.find_spec(m) is None]


#: The systems a row can be trained with: ours, or rl-baselines3-zoo itself.
SYSTEMS = ("pytorchrl", "rl-zoo3")
#: Algorithms of rl-zoo3 (the first word of a row's name) that ``--system rl-zoo3`` runs.
RLZOO_ALGOS = ("ppo", "a2c", "dqn", "sac", "td3", "ddpg")


def seed_dir(out, row, seed, system="pytorchrl"):
    """The run directory of one seed of a row (trained by ``system``)."""
    return os.path.join(out, row.name, f"seed{seed}" if system == "pytorchrl" else f"rlzoo3_seed{seed}")


def rlzoo_task(row):
    """``(algorithm, env id)`` of a row for rl-zoo3, or None for a row it cannot run (our
    own agents, a budget other than the zoo's)."""
    import yaml
    algo = row.name.split("_")[0]
    if (algo not in RLZOO_ALGOS or not row.rlzoo or row.published is None or row.measure
            or "of the zoo's" in row.note):
        return None
    with open(os.path.join(REPO, row.config_path)) as f:
        return algo, yaml.safe_load(f)["env"]["id"]


def read_result(out, row, seed, system="pytorchrl"):
    """The ``result.json`` of a finished seed, or None."""
    path = os.path.join(seed_dir(out, row, seed, system), "result.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def run_seed(row, seed, out, code_dir, code, quick, system="pytorchrl", peers_python=DEFAULT_PEERS_PYTHON):
    """Train and evaluate one seed of ``row`` in a fresh process (the code in ``code_dir``
    first on its path, one OpenMP thread; with ``system`` rl-zoo3, rl-baselines3-zoo in
    ``peers_python``'s venv); returns its result (``error`` set on failure)."""
    run_dir = seed_dir(out, row, seed, system)
    shutil.rmtree(run_dir, ignore_errors=True)      # an interrupted seed starts over
    os.makedirs(os.path.dirname(run_dir), exist_ok=True)
    overrides = list(row.overrides)
    episodes = row.episodes
    if quick:
        overrides.append("learner.target_steps=2000")
        episodes = 2
    env = dict(os.environ, PYTHONPATH=code_dir, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               RAY_USAGE_STATS_ENABLED="0")
    worker = os.path.join(HERE, "worker.py")
    if system == "rl-zoo3":
        algo, env_id = rlzoo_task(row)
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        cmd = [peers_python, os.path.join(HERE, "worker_rlzoo.py"), algo, env_id, str(seed), run_dir, str(episodes)]
        if quick:
            cmd.append("2000")
    elif row.measure:
        cmd = [sys.executable, worker, "--measure", row.measure, str(seed), run_dir] + (["--quick"] if quick else [])
    else:
        prepare = ["--prepare", row.prepare] if row.prepare else []
        score = "games" if row.score == "games" else str(episodes)
        cmd = [sys.executable, worker, os.path.join(REPO, row.config_path), str(seed), run_dir, score,
               *prepare, *overrides]
    start = time.time()
    log_path = run_dir + ".log"
    with open(log_path, "w") as log:
        proc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    result = read_result(out, row, seed, system)
    if proc.returncode != 0 or result is None:
        with open(log_path) as f:
            tail = f.read()[-1500:]
        return {"seed": seed, "error": f"exit {proc.returncode}: {tail}"}
    result["code"] = code if system == "pytorchrl" else result.get("system", system)
    result["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    result["process_wall_seconds"] = round(time.time() - start, 1)
    with open(os.path.join(run_dir, "result.json"), "w") as f:
        json.dump(result, f)
    return result


def plan(rows, out, seeds_override, system="pytorchrl"):
    """The (row, seed) pairs still to run, cheapest rows first."""
    todo = []
    for row in sorted(rows, key=lambda r: r.minutes):
        for seed in range(seeds_override or row.seeds):
            if read_result(out, row, seed, system) is None:
                todo.append((row, seed))
    return todo


def code_under_test(clean_head):
    """``(directory holding pytorchrl/, description)`` of the code the runs import."""
    if clean_head:
        directory, commit = export_head()
        return directory, commit
    directory, facts = snapshot_tree()
    commit = facts.get("git_commit") or "?"
    return directory, commit + (f"+{facts['pytorchrl_diff_sha256']}" if facts.get("git_dirty") else "")


def verdict(row, stats, by_name_stats, zoo_stats=None):
    """What the row's IQM says against its published figure, baseline or goal, and, where
    the zoo itself ran here (``zoo_stats``: rl-zoo3's ``summarize`` on the same seeds),
    against that: a published figure is one trained agent, and the zoo's own seeds show
    how far a second one lands from it."""
    sign = 1.0 if row.higher_is_better else -1.0
    words = []
    if row.goal is not None:
        reached = sign * stats["iqm"] >= sign * row.goal
        words.append(f"goal {'>=' if row.higher_is_better else '<='} {row.goal:g} "
                     f"{'reached' if reached else 'NOT reached'}")
    if row.baseline:
        base = by_name_stats.get(row.baseline)
        if base is None:
            words.append(f"baseline {row.baseline} not run")
        else:
            better = sign * stats["iqm"] > sign * base["iqm"]
            words.append(f"{'better' if better else 'NOT better'} than {row.baseline} ({fmt_score(base['iqm'])})")
    pub = row.published
    if pub is not None:
        budget = stats.get("steps")
        if budget is not None and budget < 0.99 * pub.steps:
            words.append(f"budget {budget:,.0f} < published {pub.steps:,}: see note")
        elif stats["iqm"] >= pub.mean:
            words.append("above the published mean")
        elif stats["iqm"] >= pub.mean - pub.std:
            words.append("within the published spread")
        else:
            words.append(f"BELOW the published spread ({pub.mean - pub.std:.1f})")
    if zoo_stats is not None:
        if sign * stats["iqm"] >= sign * zoo_stats["iqm"]:
            words.append(f"at or above rl-zoo3 here ({fmt_score(zoo_stats['iqm'])})")
        elif zoo_stats["ci"][0] <= stats["iqm"] <= zoo_stats["ci"][1]:
            words.append(f"within rl-zoo3's interval here ({fmt_score(zoo_stats['iqm'])})")
        else:
            words.append(f"BELOW rl-zoo3 here ({fmt_score(zoo_stats['iqm'])})")
    return "; ".join(words)


def fmt_score(value):
    """A score for the table: one decimal, or three significant digits below 1 (the KL
    ratios of the add-on rows)."""
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.1f}"


def rlzoo_cell(results, st):
    """The table's cell of rl-zoo3's runs of a row: its seeds' scores, IQM and interval
    (``st``: ``summarize`` of their scores, which the verdict uses too), and its median env
    steps/s (empty without runs)."""
    if not results:
        return ""
    scores = " ".join(f"{r['final']:.1f}" for r in sorted(results, key=lambda r: r["seed"]))
    speed = statistics.median(r["steps_per_s"] for r in results)
    return f"{scores}; {st['iqm']:.1f} [{st['ci'][0]:.1f}, {st['ci'][1]:.1f}]; {speed:,.0f}"


def report(rows, out, curves_dir=None):
    """The markdown table of every row with finished seeds, and the curves (PNG) when
    ``curves_dir`` is given. Returns the markdown."""
    stats_by_name, lines = {}, []
    results = {row.name: [r for s in range(max(row.seeds, 10)) if (r := read_result(out, row, s))] for row in rows}
    zoo_results = {row.name: [r for s in range(max(row.seeds, 10)) if (r := read_result(out, row, s, "rl-zoo3"))]
                   for row in rows}
    for row in rows:
        if results[row.name]:
            st = summarize([r["final"] for r in results[row.name]])
            st["steps"] = statistics.median(r["env_steps"] for r in results[row.name])
            stats_by_name[row.name] = st
    table = []
    for row in rows:
        res = results[row.name]
        if not res:
            continue
        st = stats_by_name[row.name]
        pub = row.published
        published = (f"{pub.mean:g} ± {pub.std:g} @ {pub.steps / 1000:g}k" + (f" ({pub.note})" if pub.note else "")
                     if pub else "")
        finals = " ".join(fmt_score(r["final"]) for r in sorted(res, key=lambda r: r["seed"]))
        speeds = [r["steps_per_s"] for r in res if r.get("steps_per_s")]
        speed = f"{statistics.median(speeds):,.0f}" if speeds else ""
        wall = statistics.median(r["train_seconds"] for r in res)
        codes = sorted({r.get("code", "?") for r in res})
        zoo_stats = summarize([r["final"] for r in zoo_results[row.name]]) if zoo_results[row.name] else None
        table.append([row.name, f"{int(st['steps']):,}", str(st["n"]), finals, fmt_score(st["mean"]),
                      f"{fmt_score(st['iqm'])} [{fmt_score(st['ci'][0])}, {fmt_score(st['ci'][1])}]", published,
                      verdict(row, st, stats_by_name, zoo_stats), rlzoo_cell(zoo_results[row.name], zoo_stats), speed,
                      f"{wall:,.0f}",
                      ", ".join(codes)])
        if curves_dir and not row.measure:
            os.makedirs(curves_dir, exist_ok=True)
            seeds_curves = [zoo_curves.training_curve(seed_dir(out, row, r["seed"])) for r in res]
            reference = None
            if zoo_results[row.name]:
                reference = ("rl-zoo3 (SB3) here", [zoo_curves.training_curve(seed_dir(out, row, r["seed"], "rl-zoo3"))
                                                    for r in zoo_results[row.name]])
            elif row.baseline and row.baseline in BY_NAME:
                base = BY_NAME[row.baseline]
                reference = (row.baseline, [zoo_curves.training_curve(seed_dir(out, base, s))
                                            for s in range(base.seeds) if read_result(out, base, s)])
            published_dict = {"mean": pub.mean, "std": pub.std, "steps": pub.steps, "source": pub.source} \
                if pub else None
            zoo_curves.plot_row(os.path.join(curves_dir, f"{row.name}.png"),
                                f"{row.name}: {row.config_path}", seeds_curves, published_dict, reference)
    lines.append(md_table(["row", "env steps", "seeds", "score per seed (final deterministic return)", "mean",
                           "IQM [95% CI]", "published", "IQM against it",
                           "rl-zoo3 here: per seed; IQM [95% CI]; env steps/s", "env steps/s", "train s/seed", "code"],
                          table))
    notes = [f"- `{row.name}`: {row.note}" for row in rows if row.note and results[row.name]]
    if notes:
        lines.append("\n" + "\n".join(notes))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", nargs="*", help=f"rows to run (default: all): {', '.join(r.name for r in ROWS)}")
    ap.add_argument("--seeds", type=int, default=None, help="seeds per row (default: each row's own, 3-5)")
    ap.add_argument("--jobs", type=int, default=2, help="seeds trained at the same time (each on one thread)")
    ap.add_argument("--out", default=DEFAULT_OUT, help="where the runs go (default benchmarks/results/zoo)")
    ap.add_argument("--report", action="store_true", help="only print the table of what has run and draw the curves")
    ap.add_argument("--curves", default=CURVES_DIR, help="folder of the PNG curves (default benchmarks/zoo/curves)")
    ap.add_argument("--clean-head", action="store_true", help="run HEAD's pytorchrl/ (git archive), not the tree")
    ap.add_argument("--max-minutes", type=float, default=None, help="skip rows estimated above this per seed")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 seed of 2,000 steps, in OUT/quick")
    ap.add_argument("--system", choices=SYSTEMS, default="pytorchrl",
                    help="train the rows with pytorchrl (default) or with rl-baselines3-zoo itself")
    ap.add_argument("--peers-python", default=DEFAULT_PEERS_PYTHON,
                    help="interpreter of the venv with rl_zoo3 (default benchmarks/.venv-peers/bin/python)")
    args = ap.parse_args(argv)
    unknown = [n for n in args.rows if n not in BY_NAME]
    if unknown:
        ap.error(f"unknown row(s) {unknown}; rows: {', '.join(r.name for r in ROWS)}")
    rows = [BY_NAME[n] for n in args.rows] if args.rows else list(ROWS)
    if args.max_minutes is not None:
        rows = [r for r in rows if r.minutes <= args.max_minutes]
    out = os.path.join(args.out, "quick") if args.quick else args.out
    runnable = []
    for row in rows:
        if args.system == "rl-zoo3" and rlzoo_task(row) is None:
            print(f"skipping {row.name}: rl-zoo3 has no such row (our own agent, or another budget)", file=sys.stderr)
            continue
        missing = missing_modules(row)
        if missing:
            extras = sorted({EXTRA_OF.get(m, m) for m in missing})
            print(f"skipping {row.name}: needs {', '.join(missing)} (pip install -e \".[{','.join(extras)}]\")",
                  file=sys.stderr)
        else:
            runnable.append(row)
    if not args.report:
        todo = plan(runnable, out, 1 if args.quick else args.seeds, args.system)
        if todo:
            code_dir, code = code_under_test(args.clean_head)
            if args.system == "rl-zoo3" and not os.path.exists(args.peers_python):
                ap.error(f"no interpreter {args.peers_python}: run benchmarks/setup_peers.sh, then its pip install "
                         f"rl_zoo3 box2d")
            print(f"{len(todo)} runs to do ({code}), {args.jobs} at a time; results in {out}", file=sys.stderr)
            try:
                with ThreadPoolExecutor(args.jobs) as pool:
                    futures = {pool.submit(run_seed, row, seed, out, code_dir, code, args.quick, args.system,
                                           args.peers_python): (row, seed)
                               for row, seed in todo}
                    for future, (row, seed) in futures.items():
                        result = future.result()
                        if "error" in result:
                            print(f"{row.name} seed {seed}: FAILED {result['error']}", file=sys.stderr)
                        else:
                            print(f"{row.name} seed {seed}: final {fmt_score(result['final'])} after "
                                  f"{result['env_steps']:,} steps in {result['train_seconds']:.0f} s", file=sys.stderr)
            finally:
                shutil.rmtree(code_dir, ignore_errors=True)
    print(report(rows, out, None if args.quick else args.curves))


if __name__ == "__main__":
    main()
