"""Helpers shared by the benchmark scripts: machine load, code under test, run records, tables.

- Load: ``cpu_jiffies``/``others_share``/``wait_idle`` read ``/proc/stat``; ``TreeCPU``
  follows the CPU time of a process and all its descendants (Ray's daemons and actors
  included), so that the share of the machine used by *other* processes during a run is
  ``machine busy - our tree``.
- Code under test: ``add_source_args``/``prepared_source`` pick which ``pytorchrl`` the
  workers import (a snapshot of the working tree taken at the start of the run, HEAD
  exported with ``git archive``, or a given directory) and describe it (commit, whether
  ``pytorchrl/`` differs from HEAD, a hash of that difference).
- Records: ``machine_meta`` (machine facts, versions, command), ``run_json_worker`` (a worker
  subprocess whose last stdout line is a JSON record, with the load during its run),
  ``start_results``/``finish_results`` (``results/<name>_<stamp>.jsonl`` and ``.md``), and
  formatting helpers (``closing_notes``: the load warning and failed runs ending a report).

Stdlib only (psutil is used when present), so that every interpreter can import it.
"""

import datetime
import hashlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

try:
    import psutil
except ImportError:  # pragma: no cover - depends on the environment
    psutil = None

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_PEERS_PYTHON = os.path.join(HERE, ".venv-peers", "bin", "python")
RESULTS_DIR = os.path.join(HERE, "results")


# ---------------------------------------------------------------------------- load
def cpu_jiffies():
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat (None elsewhere)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    hz = os.sysconf("SC_CLK_TCK")
    total = sum(fields[:8])          # user nice system idle iowait irq softirq steal
    idle = fields[3] + fields[4]
    return (total - idle) / hz, total / hz


def children_cpu_s():
    """CPU seconds of the children of this process that have ended and been waited for."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


class TreeCPU:
    """CPU seconds used by a process tree (default: this process and its descendants).

    A background thread samples every process of the tree every ``interval`` seconds and
    keeps the last value seen of each, so processes that end during the measurement (Ray
    actors of a stopped scheme, a worker subprocess) still count, up to one interval of
    their last activity. Without psutil it falls back to this process's own CPU time plus
    its waited-for children's.

    Use: ``t = TreeCPU().start(); ...; cpu_seconds = t.stop()``.
    """

    def __init__(self, pid=None, interval=0.25):
        self.pid = pid or os.getpid()
        self.interval = interval
        self._base = {}
        self._last = {}
        self._stop = threading.Event()
        self._thread = None
        self._fallback0 = None

    @staticmethod
    def _cpu(p):
        t = p.cpu_times()
        return t.user + t.system

    def _sample(self, into_base=False):
        try:
            root = psutil.Process(self.pid)
            procs = [root] + root.children(recursive=True)
        except psutil.Error:
            return
        for p in procs:
            try:
                key = (p.pid, p.create_time())
                cpu = self._cpu(p)
            except psutil.Error:
                continue
            if into_base:
                self._base[key] = cpu
            else:
                self._base.setdefault(key, 0.0)   # born during the measurement
            self._last[key] = cpu

    def _run(self):
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self):
        if psutil is None:
            self._fallback0 = time.process_time() + children_cpu_s()
            return self
        self._sample(into_base=True)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Stop sampling; return the CPU seconds the tree used since ``start``."""
        if psutil is None:
            return time.process_time() + children_cpu_s() - self._fallback0
        self._stop.set()
        self._thread.join()
        self._sample()
        return sum(max(0.0, self._last[k] - self._base.get(k, 0.0)) for k in self._last)


class LoadProbe:
    """Share of the machine's CPU used by other processes than our tree while it is open.

    ``with LoadProbe() as probe: ...`` then ``probe.report()``: ``others_cpu_share_during``
    (0-1 of all cores; above ~0.1 the run shared the cores and its wall-clock figures are
    inflated), ``ours_cpu_s``, and the 1-minute load average before and after.
    """

    def __init__(self, pid=None):
        self.tree = TreeCPU(pid)
        self.result = {}

    def __enter__(self):
        self.load_before = os.getloadavg()[0]
        self.j0 = cpu_jiffies()
        self.tree.start()
        return self

    def __exit__(self, *exc):
        ours = self.tree.stop()
        j1 = cpu_jiffies()
        share = None
        if self.j0 and j1 and j1[1] > self.j0[1]:
            other = (j1[0] - self.j0[0]) - ours
            share = round(min(1.0, max(0.0, other) / (j1[1] - self.j0[1])), 3)
        self.result = {"others_cpu_share_during": share, "ours_cpu_s": round(ours, 3),
                       "loadavg_1min_before": round(self.load_before, 2),
                       "loadavg_1min_after": round(os.getloadavg()[0], 2)}
        return False

    def report(self):
        return dict(self.result)


def others_share(window=3.0, exclude_own_tree=True):
    """Share of the machine's CPU used by other processes over the next ``window`` seconds
    (this process and its descendants excluded, when psutil can follow them)."""
    a = cpu_jiffies()
    tree = TreeCPU().start() if (exclude_own_tree and psutil is not None) else None
    time.sleep(window)
    ours = tree.stop() if tree else 0.0
    b = cpu_jiffies()
    if a is None or b is None or b[1] <= a[1]:
        return None
    return min(1.0, max(0.0, (b[0] - a[0] - ours) / (b[1] - a[1])))  # counters tick apart: clamp


def wait_idle(threshold, wait_max=900.0, window=3.0):
    """Wait until other processes use less than ``threshold`` (0-1) of the machine's CPU
    over a ``window``-second probe, for at most ``wait_max`` seconds.

    Returns
    -------
    (share, waited_s) : the last share measured (None where /proc/stat is missing) and the
    seconds spent waiting.
    """
    t = time.perf_counter()
    share = others_share(window)
    while share is not None and share >= threshold and time.perf_counter() - t < wait_max:
        share = others_share(window)
    return share, time.perf_counter() - t


def add_side_by_side_args(ap, timeout):
    """Options of the orchestrators that run our workers and the peers' side by side
    (offpolicy.py, atari_ppo.py): the two interpreters, the warm-up, the timeout of one run
    (``timeout`` seconds by default), the output directory, ``--report``, the code measured
    (``add_source_args``) and the machine's load (``add_load_args``)."""
    ap.add_argument("--ours-python", default=sys.executable, help="interpreter with pytorchrl (default: this one)")
    ap.add_argument("--peers-python", default=DEFAULT_PEERS_PYTHON,
                    help="interpreter of the peers' workers (default: benchmarks/.venv-peers, see setup_peers.sh)")
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed short run of each interpreter")
    ap.add_argument("--timeout", type=float, default=timeout, help="seconds allowed to one worker run")
    ap.add_argument("--out-dir", default=RESULTS_DIR)
    ap.add_argument("--report", metavar="JSONL", nargs="+", default=None,
                    help="run nothing: print the report of a results file of this script (also of a run that "
                         "was stopped part-way: the runs recorded so far); several files: their runs together "
                         "(e.g. a run of more seeds with --first-seed), each run counted once")
    add_source_args(ap)
    add_load_args(ap)


def add_load_args(ap):
    """--wait-idle / --wait-max options (see ``wait_idle``)."""
    ap.add_argument("--wait-idle", type=float, default=None, metavar="SHARE",
                    help="before each timed run, wait until other processes use less than SHARE (0-1) of "
                         "the machine's CPU over a 3 s window (at most --wait-max seconds, then run anyway)")
    ap.add_argument("--wait-max", type=float, default=900.0)


def maybe_wait_idle(args):
    """Apply --wait-idle; return the fields to add to the run's record ({} without it)."""
    if getattr(args, "wait_idle", None) is None:
        return {}
    share, waited = wait_idle(args.wait_idle, args.wait_max)
    return {"others_cpu_share_before": None if share is None else round(share, 3),
            "waited_for_idle_s": round(waited, 1)}


# ------------------------------------------------------------------- code under test
def _git(*argv, **kw):
    return subprocess.run(["git", *argv], cwd=REPO, capture_output=True, check=False, **kw)


def run_series_on_local_ray(args, values, measure, render):
    """Measure each value in turn on one local Ray instance (2 CPUs, started here unless one
    is running) and print the rendered table; returns the records.

    Parameters
    ----------
    args : argparse.Namespace
        The script's arguments (``add_load_args``'s options; ``json``: also print each
        record as a JSON line when it is measured).
    values : iterable
        What is varied between runs (one record each).
    measure : callable
        ``measure(value, args) -> dict``: one record.
    render : callable
        ``render(records, load_share) -> str``: the table, told the share of the CPU other
        processes used just before the runs.
    """
    maybe_wait_idle(args)
    share = others_share(window=2.0)
    import ray
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False)
    try:
        records = []
        for value in values:
            r = measure(value, args)
            records.append(r)
            if getattr(args, "json", False):
                print(json.dumps(r), flush=True)
    finally:
        if started:
            ray.shutdown()
    print(render(records, share))
    return records


def export_head(repo=REPO):
    """Copy HEAD's pytorchrl/ into a new temporary directory; return (directory, short hash)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True,
                            check=True).stdout.strip()
    dest = tempfile.mkdtemp(prefix=f"pytorchrl-{commit}-")
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD", "pytorchrl"], cwd=repo,
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    return dest, commit


def tree_files(repo=REPO, sub="pytorchrl"):
    """Files of ``sub`` in the working tree: tracked and untracked, minus ignored ones."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "--", sub], cwd=repo,
                         capture_output=True, text=True, check=True).stdout
    return sorted(p for p in out.splitlines() if p and os.path.isfile(os.path.join(repo, p)))


def snapshot_tree(repo=REPO):
    """Copy the working tree's pytorchrl/ (uncommitted edits and new files included) into a
    new temporary directory, so that a run imports one consistent version of the code even
    while someone edits the tree. Returns (directory, source facts: see ``source_facts``)."""
    dest = tempfile.mkdtemp(prefix="pytorchrl-tree-")
    for rel in tree_files(repo):
        target = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(repo, rel), target)
    return dest, source_facts(repo, dest)


def source_facts(repo=REPO, snapshot=None):
    """Commit, whether pytorchrl/ differs from it, and a hash of the difference.

    ``pytorchrl_diff_sha256`` hashes ``git diff HEAD -- pytorchrl`` plus the content of the
    untracked files in pytorchrl/ (of ``snapshot`` when given): two runs with the same hash
    measured the same code.
    """
    facts = {"git_commit": None, "git_dirty": None, "pytorchrl_diff_sha256": None, "untracked_files": []}
    try:
        facts["git_commit"] = _git("rev-parse", "--short", "HEAD", text=True).stdout.strip() or None
        diff = _git("diff", "HEAD", "--", "pytorchrl").stdout
        untracked = _git("ls-files", "-o", "--exclude-standard", "--", "pytorchrl", text=True).stdout.split()
    except OSError:
        return facts
    h = hashlib.sha256(diff)
    for rel in sorted(untracked):
        path = os.path.join(snapshot or repo, rel)
        if os.path.isfile(path):
            h.update(rel.encode())
            with open(path, "rb") as f:
                h.update(f.read())
    facts["git_dirty"] = bool(diff or untracked)
    facts["untracked_files"] = sorted(untracked)
    facts["pytorchrl_diff_sha256"] = h.hexdigest()[:16] if facts["git_dirty"] else None
    for rel in sorted(untracked):   # new files, as a diff against nothing (the index is left alone)
        path = os.path.join(snapshot or repo, rel)
        if os.path.isfile(path):
            diff += _git("diff", "--no-index", "--", "/dev/null", path).stdout
    facts["_diff_bytes"] = diff
    return facts


def add_source_args(ap):
    """Options choosing which pytorchrl is measured (default: a snapshot of the working tree)."""
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--clean-head", action="store_true",
                     help="measure the committed code: HEAD's pytorchrl/ exported (git archive) to a temporary "
                          "directory, first on the workers' PYTHONPATH")
    src.add_argument("--live-tree", action="store_true",
                     help="import pytorchrl from the working tree as installed (default: a snapshot of the "
                          "working tree copied at the start, so edits made during the run are not picked up)")
    src.add_argument("--ours-src", default=None,
                     help="directory holding the pytorchrl package to measure (put first on PYTHONPATH)")


class prepared_source:
    """Context manager: sets ``args.ours_src`` (None = installed package) and ``args.source``
    (facts about the measured code) from --clean-head/--live-tree/--ours-src; removes any
    temporary copy on exit (also on SIGTERM, which it turns into SystemExit)."""

    def __init__(self, args):
        self.args = args
        self.tmp = None

    def __enter__(self):
        import signal
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
        a = self.args
        if getattr(a, "clean_head", False):
            self.tmp, commit = export_head(REPO)
            a.ours_src = self.tmp
            a.source = {"kind": "HEAD exported (git archive)", "git_commit": commit, "git_dirty": False,
                        "pytorchrl_diff_sha256": None}
        elif getattr(a, "ours_src", None):
            a.source = {"kind": f"directory {a.ours_src}", "git_commit": None, "git_dirty": None,
                        "pytorchrl_diff_sha256": None}
        elif getattr(a, "live_tree", False):
            a.ours_src = None
            a.source = {"kind": "working tree (live)", **source_facts(REPO)}
        else:
            self.tmp, facts = snapshot_tree(REPO)
            a.ours_src = self.tmp
            a.source = {"kind": "snapshot of the working tree at start", **facts}
        return a

    def __exit__(self, *exc):
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return False


def source_line(source):
    """One line naming the measured code, e.g. 'commit abc1234 + uncommitted changes (diff 0123...)'."""
    commit = source.get("git_commit") or "unknown commit"
    if source.get("git_dirty"):
        return (f"{source['kind']}: commit {commit} + uncommitted changes in pytorchrl/ "
                f"(diff sha256 {source.get('pytorchrl_diff_sha256')})")
    if source.get("git_dirty") is False:
        return f"{source['kind']}: commit {commit} (clean)"
    return f"{source['kind']}"


def ours_env(args, threads=1, extra_path=()):
    """Environment of a worker that imports our pytorchrl (PYTHONPATH: the measured code
    first, then ``extra_path``); OMP/MKL threads and our workers' torch threads
    (``PYTORCHRL_TORCH_THREADS``) set to ``threads`` (0: the library's default, one torch
    thread per worker). Ray workers started by that process inherit it."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("PYTORCHRL_TORCH_THREADS", None)
    path = ([args.ours_src] if getattr(args, "ours_src", None) else []) + list(extra_path)
    if path:
        env["PYTHONPATH"] = os.pathsep.join(path)
    if threads and threads > 0:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = env["PYTORCHRL_TORCH_THREADS"] = str(threads)
    return env


def peers_env(threads=1):
    """Environment of a peer worker: no PYTHONPATH (only its own venv), OMP/MKL threads."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if threads and threads > 0:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def reexec_in_source(args, argv, flag="--_in-source"):
    """Run this script again in a child process that imports the measured pytorchrl
    (``args.ours_src`` first on PYTHONPATH, Ray workers included), passing ``flag`` so the
    child does not prepare the source again. Returns the child's exit status.

    Used by the benchmarks that measure in-process (one Ray instance for all configurations):
    the parent prepares the code (snapshot/HEAD), the child imports it.
    """
    env = ours_env(args, threads=args.torch_threads)
    env["PYTORCHRL_BENCH_SOURCE"] = json.dumps({k: v for k, v in args.source.items() if not k.startswith("_")})
    env["PYTORCHRL_BENCH_COMMAND"] = command_line()
    diff = args.source.get("_diff_bytes")
    if diff and getattr(args, "ours_src", None):
        path = os.path.join(args.ours_src, "measured-pytorchrl.diff")   # removed with the snapshot
        with open(path, "wb") as f:
            f.write(diff)
        env["PYTORCHRL_BENCH_DIFF"] = path
    cmd = [sys.executable, os.path.abspath(sys.argv[0]), flag, *argv]
    return subprocess.run(cmd, env=env, cwd=REPO).returncode


def source_from_env():
    """Source facts passed down by ``reexec_in_source`` (or those of the live tree)."""
    raw = os.environ.get("PYTORCHRL_BENCH_SOURCE")
    if raw:
        return json.loads(raw)
    return {"kind": "working tree (live)", **{k: v for k, v in source_facts(REPO).items() if not k.startswith("_")}}


# -------------------------------------------------------------------------- records
def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
    except OSError:
        return None


def mem_total_gib():
    try:
        with open("/proc/meminfo") as f:
            kb = int(next(ln.split()[1] for ln in f if ln.startswith("MemTotal")))
        return round(kb / 2 ** 20, 1)
    except (OSError, StopIteration, ValueError):
        return None


def command_line():
    """The command that started this run (in a child of ``reexec_in_source``: the parent's)."""
    if os.environ.get("PYTORCHRL_BENCH_COMMAND"):
        return os.environ["PYTORCHRL_BENCH_COMMAND"]
    exe = sys.executable
    return " ".join([os.path.relpath(exe, REPO) if exe.startswith(REPO) else exe] + sys.argv)


def machine_meta(name, args=None, source=None, extra=None):
    """The ``meta`` record of a run: what, when, where, with which code and versions."""
    meta = {"record": "meta", "benchmark": name,
            "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": command_line(), "nproc": os.cpu_count(), "cpu_model": cpu_model(),
            "mem_total_GiB": mem_total_gib(), "platform": platform.platform(), "python": platform.python_version(),
            "loadavg_at_start": [round(x, 2) for x in os.getloadavg()]}
    src = source if source is not None else getattr(args, "source", None)
    if src:
        meta["source"] = {k: v for k, v in src.items() if not k.startswith("_")}
        meta["git_commit"] = src.get("git_commit")
        meta["git_dirty"] = src.get("git_dirty")
    if extra:
        meta.update(extra)
    return meta


def versions(python, modules, env=None):
    """{module: version} of ``modules`` as imported by the interpreter ``python`` (None if missing)."""
    code = ("import importlib, json, sys\nout = {}\nfor m in sys.argv[1:]:\n    try:\n"
            "        out[m] = getattr(importlib.import_module(m), '__version__', '?')\n"
            "    except Exception:\n        out[m] = None\nprint(json.dumps(out))")
    r = subprocess.run([python, "-c", code, *modules], capture_output=True, text=True, env=env)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {m: None for m in modules}


def run_json_worker(cmd, env, timeout, args=None, tag=None):
    """Run a worker subprocess whose last stdout line starting with '{' is its JSON record.

    Adds what the orchestrator measured: ``launch_time`` (time.time() just before the
    process was started), ``process_wall_s``, the CPU load of other processes during the
    run (``LoadProbe``: the worker's whole process tree, Ray's processes included, is
    ours), and --wait-idle's fields. On failure returns ``{"error": ..., "stderr_tail": ...}``.
    """
    idle = maybe_wait_idle(args) if args is not None else {}
    rec = dict(tag or {})
    with LoadProbe() as probe:
        launch = time.time()
        t = time.perf_counter()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            return {**rec, "error": f"timed out after {timeout:.0f} s", "stderr_tail": (err or out)[-2000:]}
        wall = time.perf_counter() - t
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        return {**rec, "error": f"exit {r.returncode}", "stderr_tail": (r.stderr or r.stdout).strip()[-3000:]}
    rec.update(json.loads(lines[-1]))
    rec.update(launch_time=launch, process_wall_s=round(wall, 3), command=" ".join(cmd), **probe.report(), **idle)
    return rec


def new_results_file(name, out_dir=RESULTS_DIR):
    os.makedirs(out_dir, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join(out_dir, f"{name}_{stamp}.jsonl")


def append_jsonl(path, record):
    with open(path, "a") as f:
        f.write(json.dumps(record, default=str) + "\n")


def write_markdown(jsonl, meta, table):
    """Write the table next to the .jsonl as .md, headed by the command, date, code and machine."""
    md = jsonl[:-len(".jsonl")] + ".md"
    with open(md, "w") as f:
        f.write(header_lines(meta) + "\n\n" + table + "\n")
    return md


def header_lines(meta):
    def run_line(m):
        return f"`{m['command']}`  \n{m['date_utc']}; {source_line(m['source']) if m.get('source') else 'code: unknown'}"

    lines = (f"{run_line(meta)}  \n"
             f"machine: {meta.get('nproc')} CPUs ({meta.get('cpu_model')}), {meta.get('mem_total_GiB')} GiB, "
             f"Python {meta.get('python')}; load average at start {meta.get('loadavg_at_start')}")
    for other in meta.get("merged", ()):
        lines += f"  \nwith the runs of {run_line(other)}"
    return lines


def save_diff(jsonl, source):
    """Keep the measured uncommitted difference (``git diff HEAD -- pytorchrl``, new files
    included) next to the results; in a child of ``reexec_in_source``, the one its parent
    passed down."""
    diff = (source or {}).get("_diff_bytes")
    if not diff and os.environ.get("PYTORCHRL_BENCH_DIFF"):
        try:
            with open(os.environ["PYTORCHRL_BENCH_DIFF"], "rb") as f:
                diff = f.read()
        except OSError:
            diff = None
    if diff:
        path = jsonl[:-len(".jsonl")] + ".pytorchrl.diff"
        with open(path, "wb") as f:
            f.write(diff)
        return path
    return None



def start_results(name, args, extra, plan):
    """Open a run's results: ``<args.out_dir>/<name>_<stamp>.jsonl`` with the ``meta`` record
    (``machine_meta`` plus ``extra``, the benchmark's settings) as its first line, and the
    measured diff saved next to it. Prints ``plan`` (what will run), the code measured and
    where the results go. Returns (path of the .jsonl, meta)."""
    jsonl = new_results_file(name, args.out_dir)
    meta = machine_meta(name, args, extra=extra)
    append_jsonl(jsonl, meta)
    diff = save_diff(jsonl, args.source)
    print(f"{name}: {plan}; {source_line(args.source)}; raw results -> {os.path.relpath(jsonl)}"
          + (f" (measured diff: {os.path.relpath(diff)})" if diff else ""), flush=True)
    return jsonl, meta


def finish_results(jsonl, meta, records, summary, table):
    """Close a run's results: ``summary`` (a dict with string keys) as the last record, the
    report ``table`` written next to them (.md) and printed. Returns the exit status: 1 if
    any of ``records`` failed, else 0."""
    append_jsonl(jsonl, {"record": "summary", **summary})
    write_markdown(jsonl, meta, table)
    print()
    print(table)
    return 1 if any("error" in r for r in records) else 0

def check_interpreters(name, systems, python_of, env_of, is_ours, ours_imports="pytorchrl, gymnasium",
                       peers_imports="stable_baselines3, gymnasium"):
    """Exit early, with the fix, when an interpreter cannot run its worker.

    name: the benchmark (the messages' first word); systems: the systems to run;
    python_of(system), env_of(system): a system's interpreter and environment; is_ours(system):
    whether it is one of ours. ours_imports, peers_imports: what each side's workers import.
    """
    for system in systems:
        ours = is_ours(system)
        py = python_of(system)
        hint = " (pip install -e . in that env)" if ours else " (run benchmarks/setup_peers.sh first)"
        if not os.path.exists(py):
            sys.exit(f"{name}: interpreter for {system} not found: {py}{hint}")
        r = subprocess.run([py, "-c", f"import {ours_imports if ours else peers_imports}"], capture_output=True,
                           text=True, env=env_of(system))
        if r.returncode != 0:
            sys.exit(f"{name}: {py} cannot run the {system} worker{hint}:\n{r.stderr.strip()[-800:]}")


def report_or_run(args, report_from, run):
    """The ``main`` of a side-by-side orchestrator: with ``--report JSONL`` print
    ``report_from(JSONL)``, else ``run(args)`` on the measured code (``prepared_source``)."""
    if getattr(args, "report", None):
        print(report_from(args.report))
        return 0
    with prepared_source(args):
        return run(args)


def side_versions(args, systems, is_ours, env_of, modules):
    """``meta`` fields naming both sides' versions: ``ours_version``/``ours_versions`` (our
    interpreter: pytorchrl and ``modules``) and ``sb3_version``/``sb3_versions`` (the peers'
    interpreter: stable_baselines3 and ``modules``), for the sides among ``systems``.
    env_of(system): the environment of a system's worker."""
    extra = {}
    if any(is_ours(s) for s in systems):
        v = versions(args.ours_python, ["pytorchrl", *modules], env_of("ours"))
        extra.update(ours_version=v["pytorchrl"], ours_versions=v)
    if "sb3" in systems:
        v = versions(args.peers_python, ["stable_baselines3", *modules], env_of("sb3"))
        extra.update(sb3_version=v["stable_baselines3"], sb3_versions=v)
    return extra


def warm_up(name, systems, is_ours, run_one):
    """Untimed: one short run of each interpreter among ``systems`` (ours once), which brings
    its libraries into the file cache; exits with the worker's error if one fails.
    run_one(system): the short run's record."""
    for system in dict.fromkeys("ours" if is_ours(s) else s for s in systems):
        r = run_one(system)
        if "error" in r:
            sys.exit(f"{name}: warm-up of {system} failed: {r['error']}\n{r.get('stderr_tail', '')}")


def paired_ratios(records, system, peer, key, where=None):
    """``system``/``peer`` ratios of ``key`` for the runs of the same seed (run back to back),
    among the successful records for which ``where(record)`` holds (default: all)."""
    by = {(r["system"], r["seed"]): r for r in records
          if "error" not in r and r.get(key) is not None and (where is None or where(r))}
    return [by[(system, s)][key] / by[(peer, s)][key] for (sys_, s) in sorted(by)
            if sys_ == system and (peer, s) in by and by[(peer, s)][key]]


def speedup(ours, peer, key):
    """'N.NNx': how many times less ``key`` (a time) ``ours`` took than ``peer`` (dicts of
    medians); '–' when either is missing or infinite."""
    if ours.get(key) in (None, float("inf")) or peer.get(key) in (None, float("inf")):
        return "–"
    return f"{peer[key] / ours[key]:.2f}x"


def goal_verdict(system, ratio, target, ours_return, peer_return, digits=1):
    """'SYSTEM: MET (...)' or 'SYSTEM: NOT MET (...)': whether ``system`` reaches ``target``
    times the peer's throughput (``ratio``) at an equal or better return (``ours_return`` >=
    ``peer_return``; a missing return is not), with both reasons."""
    ok_speed = ratio >= target
    ok_return = ours_return is not None and peer_return is not None and ours_return >= peer_return
    return (f"{system}: {'MET' if ok_speed and ok_return else 'NOT MET'} (speed {ratio:.2f}x: "
            f"{'ok' if ok_speed else 'short'}; return {fmt(ours_return, digits)} vs {fmt(peer_return, digits)}: "
            f"{'ok' if ok_return else 'lower'})")


def read_results(paths):
    """(meta record, run records) of a results file (.jsonl), also of a run stopped part-way.

    ``paths``: one path, or several (a list): their runs together, under the first file's
    meta record, which lists the others' under ``merged``. A run (task, system, seed) found
    in two files raises ValueError: it would be counted twice."""
    paths = [paths] if isinstance(paths, str) else list(paths)
    meta, records, seen = None, [], {}
    for path in paths:
        with open(path) as f:
            lines = [json.loads(ln) for ln in f if ln.strip()]
        file_meta = next(r for r in lines if r.get("record") == "meta")
        if meta is None:
            meta = dict(file_meta, merged=[])
        else:
            meta["merged"].append(file_meta)
        for rec in (r for r in lines if "record" not in r):
            key = (rec.get("task"), rec.get("system"), rec.get("seed"))
            if key in seen:
                raise ValueError(f"run {key} is in both {seen[key]} and {path}")
            seen[key] = path
            records.append(rec)
    return meta, records


# ------------------------------------------------------------------------- format
def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, digits=0, suffix="", inf="∞"):
    """``v`` with thousands separators and ``digits`` decimals; "–" for None, ``inf`` for infinity."""
    if v is None:
        return "–"
    if v == float("inf"):
        return inf
    return f"{v:,.{digits}f}{suffix}"


def fmt_share(v):
    return "–" if v is None else f"{100 * v:.0f}%"


def md_table(headers, rows, align=None):
    """A markdown table; ``align`` is a string of 'l'/'r' per column (default: first left, rest right)."""
    align = align or ("l" + "r" * (len(headers) - 1))
    lines = ["| " + " | ".join(headers) + " |",
             "| " + " | ".join("---:" if a == "r" else "---" for a in align) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def load_warning(shares, limit=0.15):
    """A sentence warning that other processes used the CPU, or '' if they hardly did."""
    shares = [s for s in shares if s is not None]
    if shares and max(shares) > limit:
        spread = (f"{100 * min(shares):.0f}–{100 * max(shares):.0f}%" if len(shares) > 1 else f"{100 * shares[0]:.0f}%")
        return (f"Warning: other processes used {spread} of the machine's "
                f"CPU during these runs (median {100 * statistics.median(shares):.0f}%); wall-clock figures are "
                "inflated and noisier than on an idle machine (rerun with --wait-idle 0.1 for cleaner ones).")
    return ""


def closing_notes(records, run_name):
    """The lines that end a report (each after an empty line): ``load_warning`` if other
    processes used the CPU during the runs, then the failed runs, each named by
    ``run_name(record)``."""
    lines = []
    warning = load_warning([r.get("others_cpu_share_during") for r in records])
    if warning:
        lines += ["", warning]
    failed = [r for r in records if "error" in r]
    if failed:
        lines += ["", "Failed runs: " + "; ".join(f"{run_name(r)}: {r['error']}" for r in failed)]
    return lines
