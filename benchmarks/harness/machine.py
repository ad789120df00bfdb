"""The machine and its load: CPU time of the machine (``/proc/stat``) and of a process tree,
the share of the CPU other processes use, waiting for a quieter machine, and machine facts.

``others_share``/``LoadProbe`` count the CPU that processes *other* than ours used: machine
busy time minus the CPU time of our process tree (``TreeCPU``: this process and all its
descendants, Ray's daemons and actors included). Stdlib only (psutil is used when present),
so that every interpreter can import it.
"""

import os
import resource
import threading
import time

try:
    import psutil
except ImportError:  # pragma: no cover - depends on the environment
    psutil = None


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

    pid: the root of the tree (default: this process); interval: seconds between samples.
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
        """Take the baseline and start sampling; returns self."""
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

    pid: the root of the process tree that is ours (default: this process).
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
    """Share (0-1) of the machine's CPU used by other processes over the next ``window``
    seconds (None where /proc/stat is missing).

    exclude_own_tree: subtract the CPU of this process and its descendants (when psutil can
    follow them); False counts them as others too."""
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
    over a ``window``-second probe (``others_share``), for at most ``wait_max`` seconds.

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


def add_load_args(ap):
    """Add the --wait-idle / --wait-max options (see ``wait_idle``) to the parser ``ap``."""
    ap.add_argument("--wait-idle", type=float, default=None, metavar="SHARE",
                    help="before each timed run, wait until other processes use less than SHARE (0-1) of "
                         "the machine's CPU over a 3 s window (at most --wait-max seconds, then run anyway)")
    ap.add_argument("--wait-max", type=float, default=900.0)


def maybe_wait_idle(args):
    """Apply --wait-idle: wait as ``args.wait_idle`` and ``args.wait_max`` say (nothing when
    ``args`` has no ``wait_idle`` or it is None). Returns the fields to add to the run's
    record ({} without waiting)."""
    if getattr(args, "wait_idle", None) is None:
        return {}
    share, waited = wait_idle(args.wait_idle, args.wait_max)
    return {"others_cpu_share_before": None if share is None else round(share, 3),
            "waited_for_idle_s": round(waited, 1)}


def cpu_model():
    """The CPU's model name from /proc/cpuinfo (None where it is not there)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
    except OSError:
        return None


def mem_total_gib():
    """The machine's memory in GiB from /proc/meminfo (None where it is not there)."""
    try:
        with open("/proc/meminfo") as f:
            kb = int(next(ln.split()[1] for ln in f if ln.startswith("MemTotal")))
        return round(kb / 2 ** 20, 1)
    except (OSError, StopIteration, ValueError):
        return None
