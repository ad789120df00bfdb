"""Population-based training in place (issue 21): PBT with 4 members vs the 4 fixed-rate
runs it starts from, and the same PBT through Ray Tune in place vs with Tune's
checkpoint-restart.

What runs, in one process (the measured pytorchrl imported in a child, as the in-process
benchmarks do), from examples/configs/pbt_ppo_cartpole.yaml (PPO on CartPole-v1, rl-zoo's
hyperparameters, learning rates started from 1e-5, 3e-5, 1e-4 and 3e-2):

- ``fixed``: the 4 members as ordinary runs with their starting rate, no copy;
- ``pbt``: ``pytorchrl pbt``'s Population of the 4 (interleaved in this process, so that
  both use one core the same way), a decision every ``pbt.interval`` env steps;
- ``tune-inplace`` / ``tune-restart`` (``--tune``): Ray Tune's PopulationBasedTraining over
  ``pytorchrl.tune.Trainable`` with the same 4 starting rates, interval and mutations of lr,
  with ``reuse_actors=True`` (``reset_config`` hot-swaps in place) and with
  ``reset_config`` returning False and ``reuse_actors=False`` (Tune restarts the trial's
  actor from a checkpoint at each perturbation, as RLlib's users get).

Every configuration trains each member ``learner.target_steps`` env steps (the same total),
ranked at each interval by a deterministic evaluation of 10 episodes (``test_return``).
Reported: the best member's final evaluation and the first interval where one member
reached 500 (steps to solve, per member), the wall time, and for the PBT runs the copies
and the seconds per copy (ours: population.csv's copy_s; Tune: the difference in wall time
between the two Tune runs, per perturbation). The closing lines compare, in medians over the
seeds, PBT with the fixed rates and Tune restarting with Tune in place: wall time and the
best final return side by side (a cheaper run that ends with a worse population is no gain).

Usage:
    python benchmarks/pbt/run.py                      # fixed and pbt, 3 seeds (~6 min on a quiet core)
    python benchmarks/pbt/run.py --tune               # and the two Tune runs (~+8 min)
    python benchmarks/pbt/run.py --quick              # 1 seed, 20,000 env steps per member (~1 min)
"""

import os
import statistics
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if BENCH not in sys.path:   # the harness and workerlib packages
    sys.path.insert(0, BENCH)
from harness import inprocess  # noqa: E402
from harness.machine import LoadProbe, maybe_wait_idle  # noqa: E402
from harness.paths import REPO  # noqa: E402
from harness.report import closing_notes, fmt, fmt_share, md_table, return_verdict  # noqa: E402
from harness.stats import median  # noqa: E402
from harness.results import finish_results, start_results  # noqa: E402

CONFIG = os.path.join(REPO, "examples", "configs", "pbt_ppo_cartpole.yaml")
SOLVED = 500.0


def parse_args(argv=None):
    ap = inprocess.base_parser(__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100_000, help="env steps per member (default 100,000)")
    ap.add_argument("--interval", type=int, default=5000, help="env steps between decisions (default 5,000)")
    ap.add_argument("--tune", action="store_true", help="also run Ray Tune's PBT, in place and restarting")
    ap.add_argument("--configs", default=None,
                    help="comma-separated configurations to run (fixed, pbt, tune-inplace, tune-restart; default: "
                         "fixed and pbt, and the Tune ones with --tune)")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats, args.steps = 1, 20_000
    return args


def load(args, seed, run_dir):
    """The population's resolved configuration for one seed."""
    from pytorchrl.config import load_config
    config = load_config(CONFIG, [f"seed={seed}", f"learner.target_steps={args.steps}", "env.monitor=false",
                                  f"pbt.interval={args.interval}", "pbt.target_return=null",
                                  "pbt.execution=interleaved", "learner.tensorboard=false"])
    config["run_dir"] = run_dir
    return config


def solve_step(history):
    """First env step at which the ranking metric reached SOLVED, per member: {index: step}."""
    out = {}
    for step, metrics in history:
        for index, value in metrics.items():
            if value is not None and value >= SOLVED and index not in out:
                out[index] = step
    return out


def measure_fixed(args, seed, root):
    """The 4 members trained apart, each with its starting rate, evaluated at every interval."""
    from pytorchrl.pbt import member_config
    from pytorchrl.pbt.member import Member
    from pytorchrl.tools.session import write_config
    config = load(args, seed, root)
    history, finals = [], {}
    members = {}
    for index in range(config["pbt"]["population"]):
        member_dir = os.path.join(root, f"fixed-{index}")
        os.makedirs(member_dir)
        own = member_config(config, index)
        own["run_dir"] = member_dir
        write_config(member_dir, own, "(pbt benchmark: fixed rate)")
        members[index] = Member(index, own, member_dir)
    t0 = time.perf_counter()
    try:
        for member in members.values():
            member.start()
        step = 0
        while step < args.steps:
            step = min(step + args.interval, args.steps)
            metrics = {}
            for index, member in members.items():
                member.train_until(step)
                metrics[index] = member.evaluate()
            history.append((step, metrics))
        finals = history[-1][1]
    finally:
        for member in members.values():
            member.close()
    wall = time.perf_counter() - t0
    return {"history": history, "final": finals, "wall_s": wall, "copies": 0}


def measure_pbt(args, seed, root):
    """pytorchrl pbt's Population, interleaved in this process."""
    from pytorchrl.pbt import Population
    from pytorchrl.tools.metrics import _read_csv
    config = load(args, seed, root)
    os.makedirs(root, exist_ok=True)
    population = Population(config, root, stream=open(os.devnull, "w"), progress="quiet")
    t0 = time.perf_counter()
    try:
        population.start()
        population.train()
        final = {i: population.members.members[i].evaluate() for i in population.members.members}
    finally:
        population.close()
    wall = time.perf_counter() - t0
    _, rows = _read_csv(os.path.join(root, "population.csv"))
    copy_s = sorted({(r["step"], r["to"]): float(r["copy_s"]) for r in rows}.values())
    return {"history": population.history, "final": final, "wall_s": wall, "copies": population.decisions,
            "copy_s_median": statistics.median(copy_s) if copy_s else None}


def measure_tune(args, seed, root, in_place):
    """Ray Tune's PBT over pytorchrl.tune.Trainable: in place, or restarting from checkpoints."""
    import ray
    from ray import tune

    from pytorchrl.config import load_yaml
    from pytorchrl.tune import Trainable

    class Restarting(Trainable):
        """Tune's checkpoint-restart path: every new configuration needs a new actor."""

        def reset_config(self, new_config):
            return False

    raw = load_yaml(CONFIG)
    pbt = raw.pop("pbt")
    raw["seed"] = seed
    raw["env"]["monitor"] = False
    raw["learner"].update(target_steps=args.steps, tensorboard=False)
    raw["algorithm"]["lr"] = tune.grid_search(pbt["initial"]["lr"])
    raw["pbt"] = {"interval": args.interval, "metric": "test_return"}
    low, high = pbt["mutations"]["lr"]["log_uniform"]
    scheduler = tune.schedulers.PopulationBasedTraining(
        time_attr="env_steps", perturbation_interval=args.interval, quantile_fraction=pbt["quantile"],
        resample_probability=pbt["mutations"]["lr"]["resample_probability"], perturbation_factors=(2.0, 0.5),
        hyperparam_mutations={"algorithm": {"lr": tune.loguniform(low, high)}})
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=1, include_dashboard=False, configure_logging=False)
    t0 = time.perf_counter()
    try:
        tuner = tune.Tuner(tune.with_resources(Trainable if in_place else Restarting, {"cpu": 0.25}),
                           param_space=raw,
                           tune_config=tune.TuneConfig(scheduler=scheduler, metric="test_return", mode="max",
                                                       reuse_actors=in_place),
                           run_config=tune.RunConfig(storage_path=root, name="tune", verbose=0,
                                                     stop={"env_steps": args.steps},
                                                     sync_config=tune.SyncConfig(sync_artifacts=True)))
        results = tuner.fit()
        wall = time.perf_counter() - t0
    finally:
        if started:
            ray.shutdown()
    history = {}
    for index, result in enumerate(results):
        frame = result.metrics_dataframe
        for _, row in frame.iterrows():
            step = int(row["env_steps"]) // args.interval * args.interval
            history.setdefault(step, {})[index] = row.get("test_return")
    final = {i: r.metrics.get("test_return") for i, r in enumerate(results)}
    # Tune's count of its exploits (private, hence the fallback): each restores a trial from
    # another's checkpoint, which Trainable.load_checkpoint records in hot_swaps.csv.
    copies = getattr(scheduler, "_num_perturbations", None)
    if copies is None:
        copies = sum(len(_restores(r)) for r in results)
    return {"history": sorted(history.items()), "final": final, "wall_s": wall, "copies": copies,
            "errors": len(results.errors)}


def _restores(result):
    """The checkpoints a Tune trial was restored from (one per exploit of it)."""
    from pytorchrl.tools.metrics import _read_csv
    path = os.path.join(result.path, "run", "hot_swaps.csv")
    if not os.path.isfile(path):
        return []
    return [r for r in _read_csv(path)[1] if r["detail"].startswith("kept over the checkpoint")]


def measure(cfg, args):
    """One configuration and seed: its record."""
    name, seed = cfg
    with tempfile.TemporaryDirectory(prefix=f"pbt-bench-{name}-") as root, LoadProbe() as probe:
        if name == "fixed":
            out = measure_fixed(args, seed, root)
        elif name == "pbt":
            out = measure_pbt(args, seed, os.path.join(root, "population"))
        else:
            out = measure_tune(args, seed, root, in_place=name == "tune-inplace")
    solved = solve_step(out["history"])
    final = {int(k): v for k, v in out.pop("final").items()}
    best = max((v for v in final.values() if v is not None), default=None)
    return {"config": name, "seed": seed, "best_final": best, "finals": final,
            "first_solve_step": min(solved.values()) if solved else None,
            "members_solved_at_end": sum(1 for v in final.values() if v is not None and v >= SOLVED),
            "wall_s": round(out["wall_s"], 2), "copies": out["copies"],
            **{k: v for k, v in out.items() if k in ("copy_s_median", "errors")}, **probe.report()}


def config_medians(records):
    """{configuration: medians over its seeds of ``wall_s``, ``copies`` and ``best_final``}
    of the successful ``records``."""
    out = {}
    for name in dict.fromkeys(r["config"] for r in records if "error" not in r):
        rs = [r for r in records if r.get("config") == name and "error" not in r]
        out[name] = {k: median([r.get(k) for r in rs]) for k in ("wall_s", "copies", "best_final")}
        out[name]["seeds"] = len(rs)
    return out


def comparison_lines(records):
    """The lines that compare, in medians over the seeds of ``records``, pbt with fixed and
    Tune restarting with Tune in place: wall time beside the best final return."""
    m = config_medians(records)
    lines = []
    if "pbt" in m and "fixed" in m:
        returns = return_verdict(m["pbt"]["best_final"], m["fixed"]["best_final"], ref_name="fixed",
                                 label="best final return")
        lines += ["", f"pbt vs fixed ({m['pbt']['seeds']} seed(s), medians): wall {fmt(m['pbt']['wall_s'], 0)} s vs "
                      f"{fmt(m['fixed']['wall_s'], 0)} s; {returns}."]
    if "tune-restart" in m and "tune-inplace" in m and m["tune-restart"]["copies"]:
        restart, inplace = m["tune-restart"], m["tune-inplace"]
        extra = restart["wall_s"] - inplace["wall_s"]
        # In place is the cheaper path: its population must end as good as the restarting one's.
        returns = return_verdict(inplace["best_final"], restart["best_final"], ref_name="restarting",
                                 label="best final return in place")
        lines += ["", f"Tune restarting vs in place ({restart['seeds']} seed(s), medians): {extra:+.1f} s in all, "
                      f"{extra / restart['copies']:+.2f} s per perturbation ({fmt(restart['copies'])} perturbations); "
                      f"{returns}."]
    return lines


def render(records, meta):
    lines = [f"PPO on CartPole-v1, 4 members with lr 1e-5, 3e-5, 1e-4, 3e-2, {meta.get('steps'):,} env steps each "
             f"(the same total in every row), a deterministic 10-episode evaluation every "
             f"{meta.get('interval'):,} env steps; one row per seed.", ""]
    rows = []
    for r in records:
        if "error" in r:
            continue
        rows.append([r["config"], r["seed"], fmt(r["best_final"], 1), r["members_solved_at_end"],
                     "-" if r["first_solve_step"] is None else f"{r['first_solve_step']:,}", fmt(r["wall_s"], 0),
                     r["copies"], fmt(r.get("copy_s_median"), 3) if r.get("copy_s_median") is not None else "-",
                     fmt_share(r.get("others_cpu_share_during"))])
    lines.append(md_table(["configuration", "seed", "best final return", "members at 500 at the end",
                           "first evaluation at 500 (env steps)", "wall (s)", "copies", "s per copy (ours)",
                           "CPU used by others"], rows, align="lrrrrrrrr"))
    lines += comparison_lines(records)
    lines += closing_notes(records, lambda r: f"{r.get('config')} seed {r.get('seed')}")
    return "\n".join(lines)


def run(args):
    names = ["fixed", "pbt"] + (["tune-inplace", "tune-restart"] if args.tune else [])
    if args.configs:
        names = [n for n in args.configs.split(",") if n]
    seeds = [args.seed + i for i in range(args.repeats)]
    configs = [(name, seed) for seed in seeds for name in names]
    jsonl, meta = start_results("pbt", args, extra={
        "steps": args.steps, "interval": args.interval, "seeds": seeds, "versions": inprocess.torch_versions()},
        plan=f"{len(configs)} runs ({', '.join(names)} x {len(seeds)} seed(s))")
    maybe_wait_idle(args)
    records = inprocess.measure_passes(
        jsonl, configs, 1, measure=lambda cfg: measure(cfg, args),
        error_fields=lambda cfg: {"config": cfg[0], "seed": cfg[1]},
        label=lambda cfg: f"{cfg[0]:13s} seed {cfg[1]}",
        progress=lambda r: f"best {fmt(r['best_final'], 1)}, first 500 at {r['first_solve_step']}, "
                           f"{r['wall_s']:.0f} s, {r['copies']} copies")
    summary = {r["config"] + f" seed {r['seed']}": {k: v for k, v in r.items() if k != "finals"}
               for r in records if "error" not in r}
    return finish_results(jsonl, meta, records, summary, render(records, meta))


if __name__ == "__main__":
    sys.exit(inprocess.main(parse_args, run))
