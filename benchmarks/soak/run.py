"""Soak benchmark (issues 11 and 22): a scheme trained for ``--minutes`` while one of its
processes is SIGKILLed every ``--kill-every`` seconds; the run must reach its target steps,
and the resident memory of its processes must not grow by more than 10% after warm-up.

Layouts (``--layout``):

- ``ppo-async`` (default, issue 11): PPO on CartPole-v1 through the public API,
  ``Scheme(num_col_workers=2, col_workers_communication=prl.ASYNC)`` (2 remote collectors
  of 1 CPU, 8 CartPoles x 128 steps per rollout), the learner in this process; the
  collectors are killed in turn (1, 2, 1, ...).
- ``drl-actor-model``, ``exarl-seed`` (issue 22): the example configuration of that preset
  (``examples/configs/exarl/<layout>.yaml``: DDQN on CartPole-v1 through a replay server, or
  through a central inference server); every kill picks a process at random among all the
  remote ones: collectors, gradient workers (``--grad-workers 2`` makes drl-actor-model's
  gradient workers remote: with one, it is the learner's own process) and the data server.
  The figures add the kills and restarts by kind and what the deaths lost (the metrics
  ``Replay/Lost*``, ``Inference/ResentActs``, ``Scheme/DroppedRollouts``).

Every layout runs in a local Ray instance started here with ``ray.init(num_cpus=2)``.

Run:
1. Calibration: once the Learner has applied its first update (on the replay-server
   path, after the server's warm-up, which collects without training and is several times
   faster than training), it steps for ``--calibrate`` seconds (default 30, at most 15% of
   the run); the target is then set to the env steps so far plus (env steps/s over those
   seconds) x the rest of the planned duration, so the run lasts about ``--minutes``
   (``learner.target_steps``), plus the time the kills cost.
   If it has not reached the target after ``--max-overrun`` (2) x the planned duration, it
   stops and reports the target missed.
2. Kills: at every multiple of ``--kill-every`` seconds after the start of training, the
   process of one collector (its Ray actor's pid, from ``scheme.process_info()``) gets
   SIGKILL; the collectors are killed in turn (1, 2, 1, ...), or, with a preset layout, a
   process drawn at random (``--seed``) among the collectors, gradient workers and data
   server (``scheme.server_processes()``). The library replaces dead workers and servers
   (``pytorchrl.scheme.base.faults``, ``pytorchrl.scheme.base.servers``); its per-process
   limit (``max_worker_restarts``) is raised to the kills any one process can get before
   the deadline, so the limit is never what is measured (10 minutes, a kill every 2 minutes:
   5 kills planned, at most 10 before the deadline, 5 per collector in turn, 10 for a
   process drawn every time; the library default is 3).
3. Metrics are read every 10 s (``learner.get_metrics``), as a training loop that logs does.
4. Memory: a background thread samples the resident set size (RSS) of this process's whole
   tree every ``--sample-every`` seconds (psutil, else /proc), split into the driver (this
   process: the learner), the Ray workers (processes titled ``ray::...``: the collectors
   and Ray's idle workers) and Ray's daemons (gcs_server, raylet, dashboard, agents, log
   monitor). The headline is driver + workers: the processes of this job; the daemons are
   reported apart.

Warm-up: the first ``--warmup`` seconds (default: until the first kill) and the first
replacement after it. Growth of a group = (median RSS over the last ``--window`` seconds
(60) - median RSS over the ``--window`` seconds after warm-up) / the latter.

Outputs: the markdown report (stdout and ``results/soak_<stamp>.md``), the run's records
(``results/soak_<stamp>.jsonl``: meta, one line per kill, the summary) and the samples
(``results/soak_<stamp>.csv``). Exit status 0 when the run reached its target, else 1 (the
memory verdict is in the report and the summary, not the status).

Usage:
    python benchmarks/soak/run.py                                  # 10 minutes, a kill every 120 s
    python benchmarks/soak/run.py --minutes 0.5 --kill-every 15    # smoke run (~1 min)
    python benchmarks/soak/run.py --layout drl-actor-model --grad-workers 2 --kill-every 60
    python benchmarks/soak/run.py --layout exarl-seed --kill-every 60
"""

import argparse
import csv
import math
import os
import random
import signal
import statistics
import sys
import threading
import time

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if BENCH not in sys.path:   # the harness and workerlib packages
    sys.path.insert(0, BENCH)
from harness import inprocess  # noqa: E402
from harness.machine import LoadProbe, add_load_args, maybe_wait_idle  # noqa: E402
from harness.paths import RESULTS_DIR  # noqa: E402
from harness.provenance import add_source_args  # noqa: E402
from harness.report import fmt, fmt_share, load_warning, md_table  # noqa: E402
from harness.results import append_jsonl, start_results, write_markdown  # noqa: E402
from harness.schemes import TRAIN_RETURN, finite  # noqa: E402

try:
    import psutil
except ImportError:  # pragma: no cover - depends on the environment
    psutil = None

GROWTH_LIMIT = 0.10
#: Processes titled ``ray::<name>`` that are Ray's own agents, not workers of the job.
RAY_AGENTS = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")
GROUPS = ("job", "driver", "workers", "daemons", "tree")
GROUP_NAMES = {"job": "driver + workers (this job)", "driver": "driver (learner)",
               "workers": "Ray workers (collectors, idle)", "daemons": "Ray daemons (gcs, raylet, agents)",
               "tree": "whole tree"}
METRICS_EVERY_S = 10.0
PROGRESS_EVERY_S = 1.0
#: Layouts (see the module docstring): the default kills collectors in turn; the presets'
#: example configurations kill any remote process.
LAYOUTS = ("ppo-async", "drl-actor-model", "exarl-seed")
EXAMPLES = os.path.join(os.path.dirname(BENCH), "examples", "configs", "exarl")
#: Metrics of what deaths lost, reported when the run has them.
LOSS_METRICS = ("Scheme/DroppedRollouts", "Replay/LostInserts", "Replay/LostTransitions", "Replay/LostSamples",
                "Replay/DroppedPriorities", "Inference/ResentActs", "Queues/LostRollouts", "Queues/LostEpisodes")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="Soak: a scheme whose processes are killed, memory growth.")
    ap.add_argument("--layout", choices=LAYOUTS, default="ppo-async",
                    help="ppo-async (default): collectors killed in turn; drl-actor-model, exarl-seed: any remote "
                         "process (collector, gradient worker, data server) drawn at random")
    ap.add_argument("--grad-workers", type=int, default=None,
                    help="scheme.num_grad_workers of a preset layout (default: the preset's; 2 makes "
                         "drl-actor-model's gradient workers remote, so that they are killed too)")
    ap.add_argument("--minutes", type=float, default=10.0, help="planned duration of training (default 10)")
    ap.add_argument("--kill-every", type=float, default=120.0, help="seconds between kills (default 120)")
    ap.add_argument("--calibrate", type=float, default=30.0,
                    help="seconds of training that size the target (default 30; at most 15%% of the run)")
    ap.add_argument("--warmup", type=float, default=None,
                    help="seconds of warm-up before the memory baseline (default: --kill-every, i.e. the first kill); "
                         "the first replacement after it also belongs to the warm-up")
    ap.add_argument("--window", type=float, default=60.0,
                    help="seconds of each memory window (default 60; at most 1/6 of the run)")
    ap.add_argument("--sample-every", type=float, default=2.0, help="seconds between memory samples (default 2)")
    ap.add_argument("--max-overrun", type=float, default=2.0,
                    help="stop (target missed) after this multiple of the planned duration (default 2)")
    ap.add_argument("--max-worker-restarts", type=int, default=None,
                    help="scheme.max_worker_restarts (default: the most kills one collector can get, at least 3)")
    ap.add_argument("--collectors", type=int, default=2, help="remote collection workers (default 2)")
    ap.add_argument("--envs-per-collector", type=int, default=8)
    ap.add_argument("--rollout", type=int, default=128, help="steps per env per rollout (default 128)")
    ap.add_argument("--cpus-per-collector", type=float, default=1.0)
    ap.add_argument("--requests-in-flight", type=int, default=1, help="col_requests_in_flight (default 1)")
    ap.add_argument("--num-cpus", type=int, default=2, help="ray.init(num_cpus=...) (default 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--torch-threads", type=int, default=1, help="OMP_NUM_THREADS (default 1)")
    ap.add_argument("--out-dir", default=RESULTS_DIR)
    ap.add_argument(inprocess.IN_SOURCE_FLAG, dest="in_source", action="store_true", help=argparse.SUPPRESS)
    add_source_args(ap)
    add_load_args(ap)
    args = ap.parse_args(argv)
    if args.collectors < 2:
        ap.error("--collectors must be >= 2 (one collector runs in the learner's process)")
    args.any_process = args.layout != "ppo-async"
    if args.grad_workers is not None and not args.any_process:
        ap.error("--grad-workers sets a preset layout's gradient workers (--layout drl-actor-model)")
    if args.grad_workers is not None and args.grad_workers < 1:
        ap.error("--grad-workers must be >= 1")
    if args.minutes <= 0 or args.kill_every <= 0 or args.sample_every <= 0:
        ap.error("--minutes, --kill-every and --sample-every must be positive")
    args.duration_s = 60.0 * args.minutes
    args.calibrate = min(args.calibrate, 0.15 * args.duration_s)
    args.window = min(args.window, args.duration_s / 6)
    if args.warmup is None:
        args.warmup = min(args.kill_every, args.duration_s / 3)
    args.deadline_s = args.max_overrun * args.duration_s
    args.max_kills = int(args.deadline_s // args.kill_every)
    if args.max_worker_restarts is None:
        # A process drawn at random may be drawn every time.
        args.max_worker_restarts = max(3, args.max_kills if args.any_process
                                       else math.ceil(args.max_kills / args.collectors))
    return args


# ------------------------------------------------------------------------ memory
def _proc_tree_fallback(root):
    """[(pid, rss bytes, title)] of ``root``'s descendants from /proc (no psutil)."""
    parent, out = {}, []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    todo, seen = [root], set()
    while todo:
        p = todo.pop()
        for c, pp in parent.items():
            if pp == p and c not in seen:
                seen.add(c)
                todo.append(c)
    for pid in [root] + sorted(seen):
        try:
            with open(f"/proc/{pid}/statm") as f:
                rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                title = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, ValueError, IndexError):
            continue
        out.append((pid, rss, title))
    return out


def _proc_tree(root):
    if psutil is None:
        return _proc_tree_fallback(root)
    try:
        me = psutil.Process(root)
        procs = [me] + me.children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for p in procs:
        try:
            out.append((p.pid, p.memory_info().rss, " ".join(p.cmdline())))
        except psutil.Error:
            pass   # ended between the listing and the read (a killed collector)
    return out


def short_name(title):
    """A daemon's name: the executable (gcs_server, raylet), the Python script (dashboard.py,
    log_monitor.py) or the Ray title (ray::DashboardAgent)."""
    parts = title.split()
    if not parts:
        return "?"
    if parts[0].startswith("ray::"):
        return parts[0]
    first = os.path.basename(parts[0])
    if first.startswith("python"):
        return next((os.path.basename(p) for p in parts[1:] if p.endswith(".py")), first)
    return first


def classify(title):
    """'workers' for a Ray worker process (``ray::IDLE``, ``ray::CWorker...``, or one still
    starting: ``python .../default_worker.py``, not titled yet), else 'daemons'."""
    if (title.startswith("ray::") and not title.startswith(RAY_AGENTS)) or "default_worker.py" in title:
        return "workers"
    return "daemons"


class TreeRSS:
    """Background sampler of the RSS of this process's tree, by group (MB)."""

    def __init__(self, interval, t0, progress=lambda: {}):
        self.interval = interval
        self.t0 = t0
        self.progress = progress
        self.samples = []
        self.daemons = []   # per sample: {daemon name: MB}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="soak-rss")

    def sample(self):
        root = os.getpid()
        mb = dict.fromkeys(("driver", "workers", "daemons"), 0.0)
        n_workers = 0
        daemons = {}
        procs = _proc_tree(root)
        for pid, rss, title in procs:
            if pid == root:
                mb["driver"] += rss / 2 ** 20
            else:
                group = classify(title)
                mb[group] += rss / 2 ** 20
                n_workers += group == "workers"
                if group == "daemons":
                    name = short_name(title)
                    daemons[name] = daemons.get(name, 0.0) + rss / 2 ** 20
        s = {"t": round(time.perf_counter() - self.t0, 2), **{k: round(v, 1) for k, v in mb.items()},
             "job": round(mb["driver"] + mb["workers"], 1), "tree": round(sum(mb.values()), 1),
             "n_workers": n_workers, "n_procs": len(procs)}
        s.update(self.progress())
        self.samples.append(s)
        self.daemons.append({"t": s["t"], **{k: round(v, 1) for k, v in daemons.items()}})
        return s

    def _run(self):
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self):
        self.sample()
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join()
        self.sample()
        return self.samples


def window_median(samples, key, t_from, t_to):
    vals = [s[key] for s in samples if t_from <= s["t"] <= t_to]
    return (statistics.median(vals), len(vals)) if vals else (None, 0)


def memory_summary(samples, warmup_end, window, t_end, daemons=None):
    """Median RSS of each group over the window after warm-up and the last window; growth.
    With ``daemons`` (TreeRSS.daemons), the same per Ray daemon (``by_daemon``)."""
    base = (warmup_end, warmup_end + window)
    last = (t_end - window, t_end)
    out = {"baseline_window_s": [round(x, 1) for x in base], "final_window_s": [round(x, 1) for x in last],
           "windows_overlap": base[1] > last[0], "groups": {}}
    after = [s for s in samples if s["t"] >= warmup_end]
    for g in GROUPS:
        b, nb = window_median(samples, g, *base)
        f, nf = window_median(samples, g, *last)
        vals = [s[g] for s in after]
        out["groups"][g] = {
            "baseline_MB": b, "final_MB": f, "samples": [nb, nf],
            "growth": (f - b) / b if b and f is not None else None,
            "min_after_warmup_MB": min(vals) if vals else None, "max_after_warmup_MB": max(vals) if vals else None,
            "peak_MB": max(s[g] for s in samples) if samples else None}
    if daemons:
        out["by_daemon"] = {}
        for name in sorted({k for d in daemons for k in d if k != "t"}):
            rows = [{"t": d["t"], name: d.get(name, 0.0)} for d in daemons]
            b, _ = window_median(rows, name, *base)
            f, _ = window_median(rows, name, *last)
            out["by_daemon"][name] = {"baseline_MB": b, "final_MB": f,
                                      "growth": (f - b) / b if b and f is not None else None}
    return out


def per_minute(samples, steps_at, t_end, span=60.0):
    """Rows of the RSS series: per ``span`` seconds, the median of each group, the env steps/s
    and the train return at the interval's end (``train_return``: the last one its samples
    hold, None when none does).

    samples: ``TreeRSS.samples``; steps_at(t): the env steps at ``t`` s; t_end: the end of
    the run (s)."""
    rows, t = [], 0.0
    while t < t_end - 1e-9:
        hi = min(t + span, t_end)
        sel = [s for s in samples if t <= s["t"] < hi or (hi == t_end and s["t"] == t_end)]
        if sel:
            s0, s1 = steps_at(t), steps_at(hi)
            row = {"from_s": round(t), "to_s": round(hi),
                   "env_steps_per_s": round((s1 - s0) / (hi - t), 1) if hi > t else None,
                   "train_return": next((s["train_return"] for s in reversed(sel)
                                         if s.get("train_return") is not None), None),
                   "n_workers": f'{min(s["n_workers"] for s in sel)}–{max(s["n_workers"] for s in sel)}'}
            row.update({g: round(statistics.median(s[g] for s in sel), 1) for g in GROUPS})
            rows.append(row)
        t = hi
    return rows


# -------------------------------------------------------------------------- run
def build_scheme(args):
    import pytorchrl as prl
    from pytorchrl.agent.actors import OnPolicyActor
    from pytorchrl.agent.actors.feature_extractors.mlp import MLP
    from pytorchrl.agent.algorithms import PPO
    from pytorchrl.agent.env import VecEnv
    from pytorchrl.agent.storages import GAEBuffer
    from pytorchrl.envs import make_gym_env
    from pytorchrl.scheme import Scheme
    train, action_space, obs_space = VecEnv.create_factory(
        env_fn=make_gym_env, env_kwargs={"env_id": "CartPole-v1"}, vec_env_size=args.envs_per_collector,
        seed=args.seed)
    algo, name = PPO.create_factory(lr=3e-4, eps=1e-5, num_epochs=4, mini_batch_size=256, gamma=0.99, clip_param=0.2,
                                    entropy_coef=0.0, value_loss_coef=0.5, max_grad_norm=0.5)
    actor = OnPolicyActor.create_factory(obs_space, action_space, name, feature_extractor_network=MLP,
                                         feature_extractor_kwargs={"hidden_sizes": [64, 64], "activation": "tanh"})
    storage = GAEBuffer.create_factory(size=args.rollout, gae_lambda=0.95)
    return Scheme(algo_factory=algo, actor_factory=actor, storage_factory=storage, train_envs_factory=train,
                  num_col_workers=args.collectors, col_workers_communication=prl.ASYNC,
                  col_workers_resources={"num_cpus": args.cpus_per_collector},
                  col_requests_in_flight=args.requests_in_flight, max_worker_restarts=args.max_worker_restarts)


def build_preset_learner(args):
    """The Learner of ``examples/configs/exarl/<args.layout>.yaml`` (its target set later by
    the calibration), with the restart limit of ``args`` and ``--grad-workers``."""
    from pytorchrl.config import load_config, validate_config
    from pytorchrl.config.build import build_learner
    overrides = ["learner.target_steps=1000000000000", "learner.tensorboard=false", f"seed={args.seed}",
                 f"scheme.max_worker_restarts={args.max_worker_restarts}"]
    if args.grad_workers is not None:
        overrides += [f"scheme.num_grad_workers={args.grad_workers}", "scheme.grad_workers_resources={num_cpus: 0.25}"]
    config = validate_config(load_config(os.path.join(EXAMPLES, f"{args.layout}.yaml"), overrides))
    return build_learner(config)


def remote_processes(scheme):
    """[(kind, pid)] of every remote process of ``scheme`` that a kill may hit: ``collector``,
    ``gradient worker``, or the data server's title (``replay server``)."""
    import ray
    from pytorchrl.scheme.base.servers import server_title
    grads = {ray.get(w.process_info.remote())[1] for w in scheme.update_worker.grad_workers.remote_workers()}
    out = [("gradient worker" if pid in grads else "collector", pid) for _, pid in scheme.process_info()]
    return out + [(server_title(kind), pid) for kind, (_, pid) in sorted(scheme.server_processes().items())]


def kind_of(line):
    """The kind of process a restart line names ("collection worker 2 died ..." ->
    "collector"), or None for an environment rebuilt."""
    if "environments rebuilt" in line:
        return None
    if line.startswith("collection worker"):
        return "collector"
    if line.startswith("gradient worker"):
        return "gradient worker"
    return line.split(" died", 1)[0]


def soak(args, log=print):
    """Build the scheme, train with kills and memory sampling; return (record, samples, kills).

    Joins an initialised Ray instance if there is one, else the scheme starts its own."""
    import torch
    from pytorchrl.learner import Learner
    torch.manual_seed(args.seed)
    t_build = time.perf_counter()
    if args.any_process:
        learner = build_preset_learner(args)
        scheme = learner.scheme
    else:
        scheme = build_scheme(args)
        learner = Learner(scheme, target_steps=10 ** 12)   # set from the calibration
    build_s = time.perf_counter() - t_build
    draw = random.Random(args.seed)
    # Restart lines; kills; (t, env steps) at most every PROGRESS_EVERY_S: the benchmark's own
    # bookkeeping must not grow with the number of updates (one tuple per update would add
    # ~12 MB to the driver over 10 minutes, more than the library under test).
    events, kills, progress = [], [], [(0.0, 0)]
    learner.on_worker_event = events.append
    metrics, restarts_seen = {}, 0
    target, calib = None, {}
    trained_from = None   # (seconds, env steps) at the first update: calibration starts
    t0 = time.perf_counter()
    # Each memory sample also holds the env steps and the train return of the latest metrics
    # read (every METRICS_EVERY_S): the series shows the return beside the speed.
    sampler = TreeRSS(args.sample_every, t0, progress=lambda: {
        "steps": int(learner.num_samples_collected), "train_return": finite(metrics.get(TRAIN_RETURN))})
    next_kill, next_metrics, next_print, error = args.kill_every, METRICS_EVERY_S, 30.0, None
    probe = LoadProbe()
    try:
        with probe:
            sampler.start()
            while True:
                now = time.perf_counter() - t0
                if target is None and trained_from is not None and now >= trained_from[0] + args.calibrate:
                    steps_now = int(learner.num_samples_collected)
                    rate = (steps_now - trained_from[1]) / (now - trained_from[0])
                    target = max(steps_now + 1, int(round(steps_now + rate * max(0.0, args.duration_s - now))))
                    learner.target_steps = target
                    calib = {"calibration_from_s": round(trained_from[0], 2), "calibration_s": round(now, 2),
                             "calibration_steps": steps_now, "calibration_env_steps_per_s": round(rate, 1)}
                    log(f"  t={now:6.1f} s  calibrated: {rate:,.0f} env steps/s -> target {target:,} steps")
                if learner.done() or now >= args.deadline_s:
                    break
                if now >= next_kill:
                    k = len(kills)
                    victim = k % args.collectors          # collector 1, 2, 1, ...
                    try:
                        if args.any_process:
                            kind, pid = draw.choice(remote_processes(scheme))
                            victim = None
                        else:
                            kind, pid = "collector", scheme.process_info()[victim][1]
                    except Exception as exc:  # the previous victim not replaced yet: try again shortly
                        log(f"  t={now:6.1f} s  kill postponed ({type(exc).__name__}: {exc})")
                        next_kill = now + 1.0
                    else:
                        os.kill(pid, signal.SIGKILL)
                        name = kind if victim is None else f"collector {victim + 1}"
                        kills.append({"record": "kill", "n": k + 1, "t_s": round(now, 2), "kind": kind,
                                      "collector": None if victim is None else victim + 1, "pid": pid,
                                      "steps": int(learner.num_samples_collected)})
                        log(f"  t={now:6.1f} s  SIGKILL {name} (pid {pid}) "
                            f"at {int(learner.num_samples_collected):,} steps")
                        next_kill = args.kill_every * (math.floor(now / args.kill_every) + 1)
                learner.step()
                t = time.perf_counter() - t0
                if trained_from is None and learner.num_updates > 0:
                    trained_from = (t, int(learner.num_samples_collected))
                if t - progress[-1][0] >= PROGRESS_EVERY_S:
                    progress.append((t, int(learner.num_samples_collected)))
                restarts = learner.worker_restarts + learner.server_restarts
                if restarts > restarts_seen:
                    # The learner counts a restart with the next round of its gradient worker.
                    waiting = [k for k in kills if "replaced_after_s" not in k]
                    for kill in waiting[:restarts - restarts_seen]:
                        kill["replaced_after_s"] = round(t - kill["t_s"], 2)
                    restarts_seen = restarts
                    log(f"  t={t:6.1f} s  {events[-1] if events else 'restart counted'}")
                if t >= next_metrics:
                    metrics = learner.get_metrics(add_episodes_metrics=True, add_scheme_metrics=True,
                                                  add_time_metrics=True)
                    next_metrics += METRICS_EVERY_S
                if t >= next_print:
                    s = sampler.samples[-1]
                    log(f"  t={t:6.1f} s  {int(learner.num_samples_collected):>9,} steps  "
                        f"{learner.fps:7,.0f} steps/s  RSS driver {s['driver']:.0f} MB  workers {s['workers']:.0f} MB "
                        f"({s['n_workers']})  daemons {s['daemons']:.0f} MB  return "
                        f"{metrics.get('Episodes/TrainReward', float('nan')):.1f}")
                    next_print += 30.0
            t_end = time.perf_counter() - t0
            progress.append((t_end, int(learner.num_samples_collected)))
            samples = sampler.stop()
        metrics = learner.get_metrics(add_episodes_metrics=True, add_scheme_metrics=True, add_time_metrics=True)
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"[:2000]
        if not isinstance(exc, Exception):
            raise
        t_end = time.perf_counter() - t0
        samples = sampler.stop() if sampler._thread.is_alive() else sampler.samples
    finally:
        t_stop = time.perf_counter()
        learner.stop()
        stop_s = time.perf_counter() - t_stop

    steps = int(learner.num_samples_collected)
    first_restart = next((k["t_s"] + k["replaced_after_s"] for k in kills if "replaced_after_s" in k), None)
    warmup_end = max(args.warmup, first_restart or 0.0) if kills else args.warmup
    mem = memory_summary(samples, warmup_end, args.window, t_end, sampler.daemons)
    job_growth = mem["groups"]["job"]["growth"]

    def steps_at(t):
        s = 0
        for tp, sp in progress:
            if tp > t:
                break
            s = sp
        return s

    reached = target is not None and steps >= target
    rec = {
        "target_steps": target, "env_steps": steps, "target_reached": reached, "error": error,
        "train_wall_s": round(t_end, 2), "planned_s": args.duration_s, "deadline_s": args.deadline_s,
        "env_steps_per_s": round(steps / t_end, 1) if t_end > 0 else None, **calib,
        "kills": len(kills), "kill_times_s": [k["t_s"] for k in kills],
        "killed_collectors": [k["collector"] for k in kills], "killed_kinds": [k["kind"] for k in kills],
        "replaced_after_s": [k.get("replaced_after_s") for k in kills],
        "worker_restarts": metrics.get("Scheme/WorkerRestarts", learner.worker_restarts),
        "server_restarts": metrics.get("Scheme/ServerRestarts", learner.server_restarts),
        "restarts_by_kind": count_kinds(kind_of(line) for line in events),
        "losses": {key: metrics[key] for key in LOSS_METRICS if key in metrics},
        "env_restarts": metrics.get("Scheme/EnvRestarts", learner.env_restarts), "restart_lines": events,
        "dropped_rollouts": metrics.get("Scheme/DroppedRollouts"),
        "max_worker_restarts": args.max_worker_restarts, "updates": learner.num_updates,
        "train_return_last100": metrics.get("Episodes/TrainReward"), "episodes": metrics.get("Episodes/Episodes"),
        "build_s": round(build_s, 2), "stop_s": round(stop_s, 2), "warmup_end_s": round(warmup_end, 1),
        "memory": mem, "growth_limit": GROWTH_LIMIT,
        "memory_ok": job_growth is not None and job_growth < GROWTH_LIMIT and not mem["windows_overlap"],
        "per_minute": per_minute(samples, steps_at, t_end,
                                 span=60.0 if args.duration_s >= 180 else args.duration_s / 6),
        "n_samples": len(samples), "rss_method": "psutil" if psutil is not None else "/proc",
        **probe.report(),
    }
    rec["passed"] = bool(reached and rec["memory_ok"] and not error)
    return rec, samples, kills


def count_kinds(kinds):
    """{kind: how many} of ``kinds`` (None left out), in the order first met."""
    out = {}
    for kind in kinds:
        if kind is not None:
            out[kind] = out.get(kind, 0) + 1
    return out


# ------------------------------------------------------------------------ report
def pct(v):
    return "–" if v is None else f"{100 * v:+.1f}%"


def render(rec, meta):
    mem = rec["memory"]
    layout = meta.get("layout", "ppo-async")
    if layout == "ppo-async":
        lines = [f"Async scheme: {meta['collectors']} remote collectors (num_cpus {meta['cpus_per_collector']:g}, "
                 f"{meta['envs_per_collector']} CartPole-v1 x {meta['rollout']} steps per rollout, "
                 f"col_requests_in_flight {meta['requests_in_flight']}), PPO learner in the driver, "
                 f"ray.init(num_cpus={meta['num_cpus']}); planned {meta['minutes']:g} min, SIGKILL of one collector "
                 f"(in turn) every {meta['kill_every']:g} s; max_worker_restarts {rec['max_worker_restarts']}.", ""]
        kills = ", ".join(f"{k:g} s (collector {c})" for k, c in zip(rec["kill_times_s"], rec["killed_collectors"]))
    else:
        grads = meta.get("grad_workers")
        lines = [f"Preset {layout} (examples/configs/exarl/{layout}.yaml, DDQN on CartPole-v1"
                 f"{f', {grads} gradient workers' if grads else ''}), ray.init(num_cpus={meta['num_cpus']}); planned "
                 f"{meta['minutes']:g} min, SIGKILL of a remote process drawn at random (collector, gradient worker, "
                 f"data server; seed {meta['seed']}) every {meta['kill_every']:g} s; max_worker_restarts "
                 f"{rec['max_worker_restarts']}.", ""]
        kills = ", ".join(f"{k:g} s ({kind})" for k, kind in zip(rec["kill_times_s"], rec["killed_kinds"]))
    replaced = [r for r in rec["replaced_after_s"] if r is not None]
    rows = [
        ["target steps", f"{fmt(rec['target_steps'])} (calibrated from "
                         f"{fmt(rec.get('calibration_from_s', 0.0), 1)} s to {fmt(rec.get('calibration_s'), 1)} s "
                         f"at {fmt(rec.get('calibration_env_steps_per_s'))} env steps/s)"],
        ["env steps reached",
         f"{fmt(rec['env_steps'])}: target {'**reached**' if rec['target_reached'] else '**MISSED**'}"],
        ["training wall time", f"{fmt(rec['train_wall_s'], 1)} s (planned {rec['planned_s']:g} s)"],
        ["env steps/s (whole run)", fmt(rec["env_steps_per_s"])],
        ["train return (last 100 episodes)", fmt(rec["train_return_last100"], 1)],
        ["collectors killed (SIGKILL)" if layout == "ppo-async" else "processes killed (SIGKILL)",
         f"{rec['kills']}: {kills or '–'}"],
        ["restarts counted (Scheme/WorkerRestarts)", f"{rec['worker_restarts']} (env restarts {rec['env_restarts']})"],
        ["replacement counted by the learner after (s)",
         ", ".join(fmt(r, 1) for r in replaced) if replaced else "–"],
        ["updates / episodes", f"{fmt(rec['updates'])} / {fmt(rec['episodes'])}"],
        ["CPU used by other processes", fmt_share(rec.get("others_cpu_share_during"))],
    ]
    if layout != "ppo-async":
        rows[7:7] = [   # after the restarts counted
            ["kills by kind", _by_kind(count_kinds(rec["killed_kinds"]))],
            ["restarts by kind (restart lines)", _by_kind(rec.get("restarts_by_kind", {}))],
            ["server restarts (Scheme/ServerRestarts)", fmt(rec.get("server_restarts"))],
            ["data lost", ", ".join(f"{k} {fmt(v)}" for k, v in rec.get("losses", {}).items()) or "–"]]
    if rec.get("error"):
        rows.append(["error", rec["error"]])
    lines.append(md_table(["figure", "value"], rows, align="lr"))
    b0, b1 = mem["baseline_window_s"]
    f0, f1 = mem["final_window_s"]
    lines += ["", f"Resident memory (RSS, sampled every {meta['sample_every']:g} s, {rec['n_samples']} samples; "
                  f"warm-up until {rec['warmup_end_s']:g} s; medians over t = {b0:g}–{b1:g} s and "
                  f"t = {f0:g}–{f1:g} s):",
              ""]
    rows = []
    for g in GROUPS:
        s = mem["groups"][g]
        name = f"**{GROUP_NAMES[g]}**" if g == "job" else GROUP_NAMES[g]
        growth = pct(s["growth"])
        rows.append([name, fmt(s["baseline_MB"], 1), fmt(s["final_MB"], 1),
                     f"**{growth}**" if g == "job" else growth,
                     f"{fmt(s['min_after_warmup_MB'], 1)}–{fmt(s['max_after_warmup_MB'], 1)}",
                     fmt(s["peak_MB"], 1)])
    lines.append(md_table(["processes", "after warm-up (MB)", "last window (MB)", "growth",
                           "range after warm-up (MB)", "peak (MB)"], rows))
    if mem.get("by_daemon"):
        lines += ["", "Ray daemons, one by one (same windows): " + "; ".join(
            f"{name} {fmt(d['baseline_MB'], 1)} → {fmt(d['final_MB'], 1)} MB ({pct(d['growth'])})"
            for name, d in sorted(mem["by_daemon"].items(), key=lambda kv: -(kv[1]["final_MB"] or 0)))]
    if rec["per_minute"]:
        lines += ["", "RSS series (medians per interval, MB; env steps/s over the interval and the train return at "
                      "its end beside them):", ""]
        lines.append(md_table(
            ["t (s)", "env steps/s", "train return (last 100 ep.)", "driver", "workers", "worker procs",
             "driver + workers", "daemons", "whole tree"],
            [[f"{r['from_s']}–{r['to_s']}", fmt(r["env_steps_per_s"]), fmt(r.get("train_return"), 1),
              fmt(r["driver"], 1), fmt(r["workers"], 1), r["n_workers"], fmt(r["job"], 1), fmt(r["daemons"], 1),
              fmt(r["tree"], 1)]
             for r in rec["per_minute"]]))
    g = mem["groups"]["job"]["growth"]
    verdict = ("MET" if rec["passed"] else "NOT MET")
    why = []
    if not rec["target_reached"]:
        why.append("target missed")
    if mem["windows_overlap"]:
        why.append("the run is too short for two separate memory windows")
    elif g is None or g >= GROWTH_LIMIT:
        why.append(f"driver + workers RSS grew {pct(g)}")
    lines += ["", f"Goal (reaches its target steps; driver + workers RSS growth under {100 * GROWTH_LIMIT:.0f}% "
                  f"after warm-up): **{verdict}**" + (f" ({'; '.join(why)})" if why else
                                                     f" (target reached, growth {pct(g)})") + "."]
    warning = load_warning([rec.get("others_cpu_share_during")])
    if warning:
        lines += ["", warning]
    return "\n".join(lines)


def _by_kind(counts):
    return ", ".join(f"{kind} {n}" for kind, n in counts.items()) or "–"


def write_csv(path, samples):
    if not samples:
        return None
    keys = list(samples[0].keys())
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(samples)
    return path


def run(args):
    settings = {k: getattr(args, k) for k in (
        "layout", "grad_workers", "minutes", "kill_every", "calibrate", "warmup", "window", "sample_every",
        "max_overrun", "collectors", "envs_per_collector", "rollout", "cpus_per_collector", "requests_in_flight",
        "num_cpus", "seed", "max_worker_restarts")}
    with inprocess.OwnedRay(args.num_cpus):
        jsonl, meta = start_results("soak", args, extra={**settings, "versions": inprocess.torch_versions()},
                                    plan=f"{args.layout}, {args.minutes:g} min, "
                                         f"{'any remote process' if args.any_process else 'a collector'} killed "
                                         f"every {args.kill_every:g} s")
        maybe_wait_idle(args)
        rec, samples, kills = soak(args, log=lambda line: print(line, flush=True))
    for k in kills:
        append_jsonl(jsonl, k)
    csv_path = write_csv(jsonl[:-len(".jsonl")] + ".csv", samples)
    rec["samples_csv"] = csv_path
    append_jsonl(jsonl, {"record": "summary", **rec})
    table = render(rec, meta)
    write_markdown(jsonl, meta, table)
    print()
    print(table)
    print(f"\nsamples: {os.path.relpath(csv_path) if csv_path else '–'}", flush=True)
    return 0 if rec["target_reached"] and not rec["error"] else 1


def main(argv=None):
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))   # finally blocks stop Ray
    return inprocess.main(parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
