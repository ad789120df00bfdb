"""What a data server's process costs to start: CPU time and resident memory of a queue
server's and a weight board's Ray actor once it has answered its first calls.

Every run of a queue layout (the EXARL RMA workflows) starts a queue server, and a run whose
collectors pull their weights starts a weight board: each is a Ray worker process of its
own. Measured per server, started one after the other on a local Ray instance:

    queue server   ``make_queue_server`` (remote), then one put of a packed rollout
                   (64 CartPole steps, as a collector sends it) and one pop
    weight board   ``start_remote_board``, then one publication of a PPO CartPole actor's
                   weights (``BoardPublisher``) and one read

Reported per kind: median CPU-s of the server's process (user + system, from ``psutil`` on
its pid) and its resident memory, and whether it loaded torch (``libtorch`` in
``/proc/<pid>/maps``). ``--ours-src`` measures another checkout (the code before a change).

Exempt from reporting a return: it measures a server process's CPU time and memory, no training.

Usage:
    python benchmarks/server_startup/run.py             # 3 passes, 4 servers of each kind
    python benchmarks/server_startup/run.py --quick     # 1 pass, 1 server of each kind
"""

import os
import sys

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if BENCH not in sys.path:   # the harness and workerlib packages
    sys.path.insert(0, BENCH)
from harness import inprocess  # noqa: E402
from harness.report import closing_notes, fmt, md_table  # noqa: E402
from harness.results import finish_results, start_results  # noqa: E402
from harness.stats import median  # noqa: E402

KINDS = ("queue server", "weight board")


def parse_args(argv=None):
    ap = inprocess.base_parser("CPU time and memory of a queue server's and a weight board's process.")
    ap.add_argument("--servers", type=int, default=4,
                    help="servers of each kind started one after the other in a pass (default 4)")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats, args.servers = 1, 1
    if args.servers < 1:
        ap.error("--servers must be >= 1")
    return args


def _rollout():
    """A CartPole rollout of 64 steps as a collector puts it into its queue (packed)."""
    import numpy as np
    from pytorchrl.scheme.transport import pack
    return pack({"obs": np.zeros((64, 1, 4), np.float32), "act": np.zeros((64, 1, 1), np.int64),
                 "rew": np.ones((64, 1, 1), np.float32), "done": np.zeros((64, 1, 1), np.float32)})


def _board_weights():
    """The acting weights of a PPO CartPole actor (64x64 MLPs), as the learner holds them."""
    import gymnasium as gym
    from pytorchrl.agent.actors import OnPolicyActor
    env = gym.make("CartPole-v1")
    actor = OnPolicyActor.create_factory(env.observation_space, env.action_space, "PPO")("cpu")
    return actor.state_dict()


def _start(kind, weights):
    """Start one server of ``kind`` and make its first calls; returns (handle, pid)."""
    import ray
    if kind == "queue server":
        from pytorchrl.scheme.servers.queues import make_queue_server, queue_options
        server = make_queue_server({0: [1]}, queue_options({"num_cpus": 0}), remote=True)
        ray.get(server.put.remote((0, 1), _rollout(), 0))
        ray.get(server.pop.remote(0, False, 1.0))
    else:
        from pytorchrl.scheme.servers.weight_board import BoardPublisher, start_remote_board
        server = start_remote_board()
        BoardPublisher(server, lambda: weights).publish(1)
        while ray.get(server.latest.remote()) is None:   # the publication is not waited for
            pass
    _, pid = ray.get(server.process_info.remote())
    return server, pid


def measure(kind, args, weights):
    import psutil
    import ray
    cpu, rss, torch_loaded = [], [], []
    for _ in range(args.servers):
        server, pid = _start(kind, weights)
        try:
            proc = psutil.Process(pid)
            times = proc.cpu_times()
            cpu.append(times.user + times.system)
            rss.append(proc.memory_info().rss / 2 ** 20)
            with open(f"/proc/{pid}/maps") as maps:
                torch_loaded.append("libtorch" in maps.read())
        finally:
            ray.kill(server)
    return {"kind": kind, "cpu_s": median(cpu), "cpu_s_all": cpu, "rss_mb": median(rss),
            "torch_loaded": any(torch_loaded), "servers": args.servers}


def summarize(records):
    out = {}
    for kind in KINDS:
        rs = [r for r in records if r.get("kind") == kind and "error" not in r]
        if rs:
            out[kind] = {"cpu_s": median([r["cpu_s"] for r in rs]),
                         "range": (min(v for r in rs for v in r["cpu_s_all"]), max(v for r in rs for v in r["cpu_s_all"])),
                         "rss_mb": median([r["rss_mb"] for r in rs]),
                         "torch_loaded": any(r["torch_loaded"] for r in rs), "servers": sum(r["servers"] for r in rs)}
    return out


def render(summary, records, meta):
    lines = [f"Servers started one after the other on a local Ray instance, {meta['servers']} of each kind per "
             f"pass, {meta['repeats']} interleaved pass(es); the process's CPU time and resident memory once it "
             "answered its first calls; medians.", ""]
    rows = [[kind, str(s["servers"]), fmt(s["cpu_s"], 2), f"{s['range'][0]:.2f}-{s['range'][1]:.2f}",
             fmt(s["rss_mb"]), "yes" if s["torch_loaded"] else "no"] for kind, s in summary.items()]
    lines.append(md_table(["server", "servers", "CPU-s (median)", "CPU-s (range)", "resident MB", "torch loaded"],
                          rows))
    lines += closing_notes(records, lambda r: r["kind"])
    return "\n".join(lines)


def run(args):
    with inprocess.OwnedRay():
        weights = _board_weights()
        jsonl, meta = start_results("server_startup", args, extra={
            "servers": args.servers, "repeats": args.repeats, "versions": inprocess.torch_versions()},
            plan=f"{args.repeats} pass(es) x {len(KINDS)} kinds x {args.servers} servers")
        records = inprocess.measure_passes(
            jsonl, list(KINDS), args.repeats, measure=lambda kind: measure(kind, args, weights),
            error_fields=lambda kind: {"kind": kind}, label=lambda kind: f"{kind:14s}",
            progress=lambda rec: f"{rec['cpu_s']:.2f} CPU-s  {rec['rss_mb']:.0f} MB  "
                                 f"torch {'loaded' if rec['torch_loaded'] else 'not loaded'}")
    summary = summarize(records)
    return finish_results(jsonl, meta, records, summary, render(summary, records, meta))


if __name__ == "__main__":
    sys.exit(inprocess.main(parse_args, run))
