"""The Atari CNN learner on the CPU: milliseconds per PPO update and per acting step, in
float32 (channels first, and the automatic channels-last layout) and in bf16 mixed precision.

What runs, in one process (the measured pytorchrl imported in a child, as the scheme
benchmarks do): our ``OnPolicyActor`` with the Nature ``CNN`` (4x84x84 uint8 frames, 4
actions, policy and value sharing the extractor) and ``PPO`` with the Atari settings of
atari_ppo/run.py (mini-batches of 256, clip 0.1, entropy 0.01, gradient clipping 0.5, Adam):

- update: ``compute_gradients`` + ``apply_gradients`` on a mini-batch of 256 frames (what the
  learner does 16 times per 1,024 env steps with rl-zoo's settings);
- acting: ``Actor.act`` on 8 frames (one vectorized step of 8 environments: what the
  collector does every env step).

Configurations (``CNN(precision=..., channels_last=...)``): fp32 channels first (the layout
before the automatic choice), fp32 automatic (channels last for training batches), bf16
automatic (channels first, bfloat16 autocast); each at every ``--threads`` count, measured
in ``--repeats`` interleaved passes; the table gives medians over passes of the per-pass
median times, wall and CPU.

Exempt from reporting a return: it times a kernel (updates, acting steps) on random frames, no training.

Usage:
    python benchmarks/cnn_update/run.py                  # 1 and 2 threads, 3 passes (~3-5 min on 2 cores)
    python benchmarks/cnn_update/run.py --quick          # 1 thread, 1 pass, few repetitions (~30 s)
"""

import os
import statistics
import sys
import time

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if BENCH not in sys.path:   # the harness and workerlib packages
    sys.path.insert(0, BENCH)
from harness import inprocess  # noqa: E402
from harness.machine import LoadProbe, maybe_wait_idle  # noqa: E402
from harness.report import closing_notes, fmt, fmt_share, md_table  # noqa: E402
from harness.results import finish_results, start_results  # noqa: E402
from harness.stats import median  # noqa: E402

#: (name, precision, channels_last) of each configuration.
CONFIGS = (("fp32, channels first", "fp32", False), ("fp32, automatic layout", "fp32", None),
           ("bf16, automatic layout", "bf16", None))
BATCH, ACT_BATCH, FRAMES, ACTIONS = 256, 8, (4, 84, 84), 4


def parse_args(argv=None):
    ap = inprocess.base_parser(__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2", help="comma-separated torch thread counts (default 1,2)")
    ap.add_argument("--updates", type=int, default=8, help="timed updates per configuration and pass (default 8)")
    ap.add_argument("--acts", type=int, default=100, help="timed acting steps per configuration and pass (default 100)")
    args = ap.parse_args(argv)
    if args.quick:
        args.threads, args.repeats, args.updates, args.acts = "1", 1, 3, 20
    args.thread_counts = [int(t) for t in args.threads.split(",") if t]
    return args


def build(precision, channels_last):
    """Our PPO learner's actor and algorithm for 4x84x84 frames, and a fixed mini-batch."""
    import gymnasium as gym
    import numpy as np
    import torch

    import pytorchrl as prl
    from pytorchrl.agent.actors import OnPolicyActor
    from pytorchrl.agent.actors.feature_extractors import CNN
    from pytorchrl.agent.algorithms import PPO

    torch.manual_seed(0)
    obs_space = gym.spaces.Box(0, 255, FRAMES, np.uint8)
    actor = OnPolicyActor("cpu", obs_space, gym.spaces.Discrete(ACTIONS), "PPO", feature_extractor_network=CNN,
                          feature_extractor_kwargs={"precision": precision, "channels_last": channels_last})
    algo = PPO("cpu", actor, lr=2.5e-4, num_epochs=4, mini_batch_size=BATCH, clip_param=0.1, entropy_coef=0.01,
               value_loss_coef=1.0, max_grad_norm=0.5, use_clipped_value_loss=False)
    g = torch.Generator().manual_seed(0)
    batch = {prl.OBS: torch.randint(0, 256, (BATCH, *FRAMES), dtype=torch.uint8, generator=g),
             prl.ACT: torch.randint(0, ACTIONS, (BATCH, 1), generator=g), prl.ADV: torch.randn(BATCH, 1, generator=g),
             prl.LOGP: torch.full((BATCH, 1), -float(np.log(ACTIONS))), prl.RET: torch.randn(BATCH, 1, generator=g),
             prl.VAL: torch.randn(BATCH, 1, generator=g)}
    return actor, algo, batch


def timed(fn, n):
    """(median wall ms, median CPU ms) of ``n`` calls of ``fn``."""
    wall, cpu = [], []
    for _ in range(n):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(1000 * (time.perf_counter() - t))
        cpu.append(1000 * (time.process_time() - c))
    return statistics.median(wall), statistics.median(cpu)


def measure(cfg, args):
    """One configuration at one thread count: its record."""
    import torch
    from pytorchrl.agent.actors.feature_extractors.precision import compute_dtype

    (name, precision, channels_last), threads = cfg
    torch.set_num_threads(threads)
    actor, algo, batch = build(precision, channels_last)
    obs = batch["obs"][:ACT_BATCH].numpy()

    def update():
        algo.compute_gradients(batch, return_grads=False)
        algo.apply_gradients()

    for _ in range(2):   # oneDNN builds its kernels, the optimizer its state
        update()
        actor.act(obs)
    with LoadProbe() as probe:
        update_ms, update_cpu_ms = timed(update, args.updates)
        act_ms, act_cpu_ms = timed(lambda: actor.act(obs), args.acts)
    return {"config": name, "precision": precision, "channels_last": channels_last, "threads": threads,
            "computes_in": str(compute_dtype(precision, torch.device("cpu")) or torch.float32),
            "update_ms": round(update_ms, 2), "update_cpu_ms": round(update_cpu_ms, 2),
            "act_ms": round(act_ms, 3), "act_cpu_ms": round(act_cpu_ms, 3), **probe.report()}


def summarize(records):
    """{(config name, threads): medians over passes}."""
    out = {}
    for rec in records:
        if "error" not in rec:
            out.setdefault((rec["config"], rec["threads"]), []).append(rec)
    return {key: {k: median([r[k] for r in rs]) for k in ("update_ms", "update_cpu_ms", "act_ms", "act_cpu_ms")}
            | {"passes": len(rs), "computes_in": rs[0]["computes_in"],
               "others": median([r.get("others_cpu_share_during") for r in rs])}
            for key, rs in out.items()}


def render(summary, records, meta):
    lines = [f"Nature CNN PPO learner on the CPU ({meta.get('cpu_model')}; native bfloat16: "
             f"{meta.get('native_bf16')}): one update = gradients and Adam step on a mini-batch of {BATCH} "
             f"4x84x84 frames; acting = Actor.act on {ACT_BATCH} frames. Medians over {meta.get('repeats')} "
             "interleaved pass(es).", ""]
    rows = []
    for (name, threads), s in summary.items():
        base = summary.get((CONFIGS[0][0], threads))

        def gain(key):   # wall / CPU speed-up over fp32 channels first at this thread count
            return " / ".join(f"{base[k] / s[k]:.2f}x" for k in (key, key.replace("_ms", "_cpu_ms"))) if base else "–"

        rows.append([name, threads, s["computes_in"].replace("torch.", ""), fmt(s["update_ms"], 1),
                     fmt(s["update_cpu_ms"], 1), gain("update_ms"), fmt(s["act_ms"], 2), fmt(s["act_cpu_ms"], 2),
                     gain("act_ms"), fmt_share(s["others"])])
    lines.append(md_table(["configuration", "threads", "computes in", "update (ms)", "update CPU (ms)",
                           "update speed-up, wall / CPU", "acting (ms)", "acting CPU (ms)",
                           "acting speed-up, wall / CPU", "CPU used by others"], rows, align="lrlrrrrrrr"))
    lines += closing_notes(records, lambda r: f"{r.get('config')} {r.get('threads')} thread(s)")
    return "\n".join(lines)


def run(args):
    from pytorchrl.agent.actors.feature_extractors.precision import native_bf16

    configs = [(c, t) for t in args.thread_counts for c in CONFIGS]
    jsonl, meta = start_results("cnn_update", args, extra={
        "repeats": args.repeats, "updates": args.updates, "acts": args.acts, "threads": args.thread_counts,
        "native_bf16": native_bf16("cpu"), "versions": inprocess.torch_versions()},
        plan=f"{args.repeats} pass(es) x {len(configs)} configurations")
    maybe_wait_idle(args)
    records = inprocess.measure_passes(
        jsonl, configs, args.repeats, measure=lambda cfg: measure(cfg, args),
        error_fields=lambda cfg: {"config": cfg[0][0], "threads": cfg[1]},
        label=lambda cfg: f"{cfg[0][0]:24s} {cfg[1]} thread(s)",
        progress=lambda r: f"update {r['update_ms']:7.1f} ms (CPU {r['update_cpu_ms']:7.1f})  act {r['act_ms']:6.2f} ms")
    summary = summarize(records)
    return finish_results(jsonl, meta, records, {f"{k[0]} / {k[1]}": v for k, v in summary.items()},
                          render(summary, records, meta))


if __name__ == "__main__":
    sys.exit(inprocess.main(parse_args, run))
