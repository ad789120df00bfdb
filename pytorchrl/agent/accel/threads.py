"""Threads of the numpy updates: BLAS held to one thread, and two lanes for the two
independent pieces an update is cut into.

An update is cut into pairs of independent pieces (two critics, a layer's weight gradient
and the gradient it passes down, ...) that ``Lanes`` runs on two threads when the process
may use two cores (``update_threads``: the single-process layout) and ``ThreadChoice``
finds, by timing the updates, that the second core is free; BLAS stays single-threaded.
The pieces are the same either way, so are the results.
"""

import os
import sys
import threading

import numpy as np


def limit_blas_threads():
    """Make numpy's BLAS single-threaded in this process.

    Workers are one process per core: BLAS threads would only contend with the other
    workers (with other processes busy, multithreaded OpenBLAS is 3x slower than one thread).
    """
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(1, user_api="blas")
    except ImportError:  # optional: without it numpy keeps its default
        pass


class _Helper:
    """A second thread that runs one of two independent pieces of an update.

    BLAS libraries parallelise a product between threads that wait for one another by
    spinning: on a machine whose other cores are busy (other workers, other users) a thread
    that lost its core stalls every product, and two threads come out several times slower
    than one. Here whole pieces of an update (a critic's forward pass, another critic's
    backward pass: matrix products and element-wise operators, which release the GIL) run
    on two threads, and a thread that has finished sleeps on a lock, leaving its core.
    """

    def __init__(self):
        self.pid = os.getpid()
        self._go = threading.Lock()
        self._go.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        self._job = None
        self._result = None
        self._error = None
        self.busy = threading.Lock()
        threading.Thread(target=self._loop, name="pytorchrl-update", daemon=True).start()

    def _loop(self):
        while True:
            self._go.acquire()
            try:
                self._result = self._job()
            except BaseException as exc:  # re-raised in the caller
                self._error = exc
            self._done.release()

    def run(self, first, second):
        """``(first(), second())``, ``second`` computed by this thread meanwhile."""
        self._error = None
        self._job = second
        self._go.release()
        try:
            result = first()
        finally:
            self._done.acquire()
            self._job = None
        second_result, self._result = self._result, None
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return result, second_result


_helper = None
_helper_lock = threading.Lock()


def _get_helper():
    global _helper
    helper = _helper
    if helper is None or helper.pid != os.getpid():   # none yet, or a forked child
        with _helper_lock:
            if _helper is None or _helper.pid != os.getpid():
                _helper = _Helper()
            helper = _helper
    return helper


def update_threads():
    """Threads (1 or 2) the numpy updates of this process may use.

    ``PYTORCHRL_UPDATE_THREADS`` decides when set. Otherwise two when the process has two
    cores or more and runs the whole scheme itself (no Ray: the single-process layout,
    where the learner and the collector take turns), one in distributed layouts, whose
    worker processes share the cores.
    """
    value = os.environ.get("PYTORCHRL_UPDATE_THREADS")
    if value:
        return max(1, min(2, int(value)))
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    if cores < 2:
        return 1
    ray = sys.modules.get("ray")
    if os.environ.get("RAY_RAYLET_PID") or (ray is not None and ray.is_initialized()):
        return 1
    return 2


class Lanes:
    """Runs the two independent pieces of work an update is cut into (``run``): on two
    threads when ``two`` is set, one after the other otherwise. The pieces compute the same
    thing either way, so the results do not depend on the threads (``ThreadChoice``
    switches ``two`` by timing).

    Parameters
    ----------
    threads : int
        1: always one thread; 2: ``two`` may be set.
    """

    def __init__(self, threads):
        self.parallel = threads >= 2
        self.two = self.parallel

    def run(self, first, second):
        """``(first(), second())``."""
        if self.two:
            helper = _get_helper()
            if helper.busy.acquire(blocking=False):   # else in use by another thread
                try:
                    return helper.run(first, second)
                finally:
                    helper.busy.release()
        return first(), second()


class ThreadChoice:
    """Turns the second lane of ``Lanes`` on or off from the measured duration of the updates.

    Whether a second thread pays depends on what else runs on the machine: on idle cores
    it nearly halves an update, next to a busy process it slows it down. Every
    ``interval`` updates the other setting is tried for ``PROBE`` updates and kept when
    their median duration beats that of the ``PROBE`` updates before; the interval doubles
    (up to ``MAX_INTERVAL``) each time the trial loses and falls back to ``MIN_INTERVAL``
    when it wins.
    """

    PROBE = 5
    MIN_INTERVAL = 50
    MAX_INTERVAL = 1600

    def __init__(self, lanes):
        self.lanes = lanes
        self.recent = []
        self.trial = None
        self.interval = self.MIN_INTERVAL
        self.countdown = 2 * self.PROBE

    def record(self, seconds):
        """Account one update that took ``seconds``."""
        if not self.lanes.parallel:
            return
        if self.trial is not None:
            self.trial.append(seconds)
            if len(self.trial) == self.PROBE:
                self._decide()
            return
        self.recent = self.recent[1 - self.PROBE:] + [seconds]
        self.countdown -= 1
        if self.countdown <= 0 and len(self.recent) == self.PROBE:
            self.trial = []
            self.lanes.two = not self.lanes.two

    def _decide(self):
        trial, self.trial = self.trial, None
        if np.median(trial) < 0.97 * np.median(self.recent):
            self.recent = trial                   # the setting tried is faster: keep it
            self.interval = self.MIN_INTERVAL
        else:
            self.lanes.two = not self.lanes.two
            self.interval = min(2 * self.interval, self.MAX_INTERVAL)
        self.countdown = self.interval


__all__ = ["Lanes", "ThreadChoice", "update_threads", "limit_blas_threads"]
