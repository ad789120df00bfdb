"""Peak resident memory of this process and all its descendants, sampled by a background
thread with psutil (after shared/peer-bench/memsampler.py).

Summing RSS double-counts pages shared between processes (torch libraries, Ray's object
store), so ``peak_rss_tree_MB`` is an upper bound of the real use; ``peak_rss_driver_MB`` is
the main process alone. Used by both sides of a comparison, so the bias is the same.
``peak_rss_maxrss_MB`` is the kernel's exact high-water mark of the main process
(getrusage). Without psutil only that one is reported (the smoke test needs no psutil).
"""

import os
import resource
import threading
import time

try:
    import psutil
except ImportError:  # pragma: no cover - depends on the environment
    psutil = None


class PeakRSS:
    """Context manager: ``with PeakRSS() as mem: ...`` then ``mem.report()``, the peaks while it
    was open, sampled every ``interval`` seconds."""

    def __init__(self, interval=0.1):
        self.interval = interval
        self.peak_tree = 0
        self.peak_self = 0
        self.peak_nproc = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self, me):
        try:
            procs = [me] + me.children(recursive=True)
            total = 0
            for p in procs:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            self.peak_tree = max(self.peak_tree, total)
            self.peak_self = max(self.peak_self, me.memory_info().rss)
            self.peak_nproc = max(self.peak_nproc, len(procs))
        except psutil.Error:
            pass

    def _run(self):
        me = psutil.Process(os.getpid())
        while not self._stop.is_set():
            self._sample(me)
            self._stop.wait(self.interval)
        self._sample(me)  # one last sample at the end

    def __enter__(self):
        if psutil is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return False

    def report(self):
        maxrss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
        if psutil is None:
            return {"peak_rss_tree_MB": round(maxrss_mb, 1), "peak_rss_driver_MB": round(maxrss_mb, 1),
                    "peak_nprocs": None, "peak_rss_maxrss_MB": round(maxrss_mb, 1),
                    "rss_method": "getrusage (no psutil)"}
        return {"peak_rss_tree_MB": round(self.peak_tree / 2**20, 1),
                "peak_rss_driver_MB": round(self.peak_self / 2**20, 1),
                "peak_nprocs": self.peak_nproc, "peak_rss_maxrss_MB": round(maxrss_mb, 1),
                "rss_method": f"psutil sampled every {self.interval} s"}
