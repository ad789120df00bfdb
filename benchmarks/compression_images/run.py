"""Image observations with and without compression: bytes moved and throughput.

The environment is ``workerlib.envs.CatchFrames``: a synthetic Atari-like game with uint8 frames
(4 stacked 84x84 frames per observation, 28 KB: the shape of preprocessed Atari
observations; Atari ROMs are not installable here). A pytorchrl ``Scheme`` with
``--collectors`` (2) remote collectors of one CPU each, ``--envs`` (4) games each,
synchronous collection, and a cheap PPO learner (a shared 32-unit MLP over the flattened
frames, one pass of 4 mini-batches per round) runs with ``col_compress_data`` False, True
and "auto" (lz4 per array; "auto" compresses only uint8 arrays of 64 KB or more),
interleaved over ``--repeats`` passes.

Reported per mode: bytes the collectors sent per round and per env step
(``Scheme/BytesSent`` of ``Learner.get_metrics(add_scheme_metrics=True)``), the compression
ratio (``Scheme/CompressionRatio``: raw bytes / bytes sent), env steps/s and beside it the
return the training reached (mean of the last 100 training episodes, the games of
``--episode-steps`` steps that ended in the timed rounds), round time and the time the
learner waited for the round; a verdict per compressed mode against False (bytes, speed,
return); and, computed from the bytes, the time the rollouts
would take on a 1 Gbit/s and a 10 Gbit/s link (on this single machine they move through
Ray's shared-memory object store, so the wire time is not part of the measured throughput).
Weight broadcasts (``ray.put`` once per version) are not counted in the bytes.

The learner cannot learn the game in a dozen updates of a 32-unit layer over raw frames: the
return shows that training runs on the frames each mode delivers (compression is lossless,
so a mode whose return falls apart from False's delivered something else), not that the
agent learns.

Usage:
    python benchmarks/compression_images/run.py            # 3 passes x {False, True, auto}
    python benchmarks/compression_images/run.py --quick    # 1 pass, 3 rounds
"""

import os
import sys

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if BENCH not in sys.path:   # the harness and workerlib packages
    sys.path.insert(0, BENCH)
from harness import inprocess, schemes  # noqa: E402
from harness.report import closing_notes, fmt, fmt_return, fmt_share, md_table, return_verdict  # noqa: E402
from harness.results import finish_results, start_results  # noqa: E402
from harness.stats import median  # noqa: E402

MODES = [False, True, "auto"]
LINKS = {"1 Gbit/s": 1e9 / 8, "10 Gbit/s": 10e9 / 8}
#: How far below False's a compressed mode's train return may fall by chance: a game of 4 balls
#: scores -4..4 (about -2 +- 1.7 for an untrained paddle), and the means of the 16-40 games of a
#: window differ by up to about 1 between two runs of the same frames.
RETURN_TOLERANCE = 1.0
#: What the return column can and cannot show (the table's caption).
RETURN_NOTE = ("The train return (mean of the last 100 training games at the end of the timed rounds; in brackets the "
               "games that ended in them) shows that training runs on the frames each mode delivers, not that the "
               "agent learns: a dozen updates of a {hidden}-unit layer over raw frames cannot learn the game. "
               "Compression is lossless: a compressed mode whose return falls more than {tolerance:g} below False's "
               "(the chance difference of two such windows; verdicts below) delivered something else.")


def parse_args(argv=None):
    ap = inprocess.base_parser("Image observations (uint8 84x84x4) with col_compress_data False / True / auto.")
    ap.add_argument("--collectors", type=int, default=2, help="remote collectors (default 2)")
    ap.add_argument("--envs", type=int, default=4, help="games per collector (default 4)")
    ap.add_argument("--rollout", type=int, default=64, help="steps per env per rollout (default 64)")
    ap.add_argument("--rounds", type=int, default=8, help="timed rounds per configuration (default 8)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")
    ap.add_argument("--cpus-per-collector", type=float, default=1.0)
    ap.add_argument("--hidden", type=int, default=32, help="units of the shared MLP layer (default 32)")
    ap.add_argument("--episode-steps", type=int, default=128,
                    help="steps of a game (CatchFrames' max_steps; default 128: 4 balls, so that games end, and "
                         "are counted in the return, within the timed rounds)")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats, args.rounds = 1, 3
    if args.collectors < 2:
        ap.error("--collectors must be >= 2 (one collector runs in-process: nothing is sent)")
    return args


def label(mode):
    return {False: "False", True: "True", "auto": '"auto"'}[mode]


def measure(mode, args):
    import pytorchrl as prl
    from workerlib import envs
    factories = schemes.ppo_factories(envs.catch_frames, {"max_steps": args.episode_steps}, vec_env_size=args.envs,
                                      rollout=args.rollout, hidden=(args.hidden,), shared=True, num_epochs=1,
                                      num_mini_batch=4, seed=args.seed)
    scheme_kwargs = dict(num_col_workers=args.collectors, col_workers_communication=prl.SYNC,
                         col_workers_resources={"num_cpus": args.cpus_per_collector}, col_compress_data=mode)
    rec = schemes.measure_scheme(factories, scheme_kwargs, args.warmup, args=args, seed=args.seed,
                                 min_rounds=args.rounds)
    rec.update(compress=label(mode))
    if rec.get("bytes_sent") and rec["env_steps"]:
        rec["bytes_per_env_step"] = rec["bytes_sent"] / rec["env_steps"]
        rec["raw_bytes"] = rec["bytes_sent"] * (rec.get("compression_ratio") or 1.0)
    return rec


def summarize(records):
    out = {}
    for mode in MODES:
        rs = [r for r in records if r.get("compress") == label(mode) and "error" not in r]
        if not rs:
            continue
        m = median
        s = {"runs": len(rs), "env_steps_per_s": m([r["env_steps_per_s"] for r in rs]),
             "round_s": m([r["round_s"] for r in rs]), "collect_wait_s": m([r["collect_wait_s"] for r in rs]),
             "bytes_per_round": m([r.get("bytes_sent_per_round") for r in rs]),
             "bytes_per_env_step": m([r.get("bytes_per_env_step") for r in rs]),
             "ratio": m([r.get("compression_ratio") for r in rs]),
             "train_return": m([r.get("train_return_last100") for r in rs]),
             "train_episodes": m([r.get("train_episodes") for r in rs]),
             "others": m([r.get("others_cpu_share_during") for r in rs]),
             "per_pass": [r["env_steps_per_s"] for r in rs]}
        if s["bytes_per_round"]:
            s["wire_s"] = {k: s["bytes_per_round"] / bw for k, bw in LINKS.items()}
        out[label(mode)] = s
    base = out.get("False")
    for s in out.values():
        s["speed_vs_off"] = s["env_steps_per_s"] / base["env_steps_per_s"] if base else None
        s["bytes_vs_off"] = (base["bytes_per_round"] / s["bytes_per_round"]) if base and s["bytes_per_round"] else None
    return out


def verdict_lines(summary):
    """One line per compressed mode of ``summary`` (``summarize``'s) against False: bytes,
    env steps/s and the train return; none without False to compare with."""
    base = summary.get("False")
    if not base:
        return []
    lines = []
    for name, s in summary.items():
        if name != "False":
            returns = return_verdict(s["train_return"], base["train_return"], 2, RETURN_TOLERANCE, ref_name="False",
                                     label="train return")
            lines.append(f"{name} vs False: {fmt(s['bytes_vs_off'], 1)}x fewer bytes per round, "
                         f"{fmt(s['speed_vs_off'], 2)}x the env steps/s; {returns}.")
    return lines


def render(summary, records, meta):
    lines = [f"CatchFrames (uint8 4x84x84 observations, 28,224 bytes each), {meta['collectors']} remote collectors x "
             f"{meta['envs']} games, rollouts of {meta['rollout']} steps ({meta['collectors'] * meta['envs'] * meta['rollout']:,} "
             f"samples per round), sync collection, PPO learner with a shared {meta['hidden']}-unit MLP over the "
             f"flattened frames; games of {meta.get('episode_steps', 1000):,} steps; {meta['repeats']} interleaved "
             f"pass(es), medians.", "", RETURN_NOTE.format(hidden=meta["hidden"], tolerance=RETURN_TOLERANCE), ""]
    headers = ["col_compress_data", "MB sent per round", "bytes per env step", "compression ratio",
               "bytes vs False", "env steps/s", "vs False", "train return (games)", "per pass", "round time (s)",
               "learner waited (s)", "wire time per round at 1 / 10 Gbit/s (ms, computed)", "CPU used by others"]
    rows = []
    for name, s in summary.items():
        wire = s.get("wire_s") or {}
        rows.append([name, fmt(s["bytes_per_round"] / 1e6 if s["bytes_per_round"] else None, 2),
                     fmt(s["bytes_per_env_step"]), f"{s['ratio']:.1f}x" if s["ratio"] else "–",
                     f"{s['bytes_vs_off']:.1f}x less" if s["bytes_vs_off"] and name != "False" else "–",
                     fmt(s["env_steps_per_s"]), f"{s['speed_vs_off']:.2f}x" if s["speed_vs_off"] else "–",
                     fmt_return(s["train_return"], s["train_episodes"], digits=2),
                     ", ".join(fmt(v) for v in s["per_pass"]), fmt(s["round_s"], 3), fmt(s["collect_wait_s"], 3),
                     " / ".join(fmt(1000 * v, 1) for v in wire.values()) or "–", fmt_share(s["others"])])
    lines.append(md_table(headers, rows))
    verdicts = verdict_lines(summary)
    if verdicts:
        lines += [""] + verdicts
    lines += closing_notes(records, lambda r: f"compress={r['compress']}")
    return "\n".join(lines)


def run(args):
    with inprocess.OwnedRay():
        jsonl, meta = start_results("compression_images", args, extra={
            "collectors": args.collectors, "envs": args.envs, "rollout": args.rollout, "rounds": args.rounds,
            "repeats": args.repeats, "cpus_per_collector": args.cpus_per_collector, "hidden": args.hidden,
            "episode_steps": args.episode_steps,
            "versions": inprocess.torch_versions()},
            plan=f"{args.repeats} pass(es) x col_compress_data {MODES}")
        records = inprocess.measure_passes(
            jsonl, MODES, args.repeats, measure=lambda mode: measure(mode, args),
            error_fields=lambda mode: {"compress": label(mode)}, label=lambda mode: f"compress={label(mode):7s}",
            progress=lambda rec: f"{rec['env_steps_per_s']:7,.0f} steps/s  "
                                 f"{fmt((rec.get('bytes_sent_per_round') or 0) / 1e6, 2)} MB/round  ratio "
                                 f"{fmt(rec.get('compression_ratio'), 1)}  round {rec['round_s']:.3f} s  return "
                                 f"{fmt_return(rec['train_return_last100'], rec['train_episodes'], digits=2)}")
    summary = summarize(records)
    return finish_results(jsonl, meta, records, summary, render(summary, records, meta))


if __name__ == "__main__":
    sys.exit(inprocess.main(parse_args, run))
