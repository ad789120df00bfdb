"""RateLimiter: the pace between the inserting side (collectors) and the sampling side
(gradient workers) of a replay server, as Reverb's ``SampleToInsertRatio``.

With ``I`` items inserted and ``S`` items sampled since the start (a mini-batch of ``b``
transitions counts ``b``), the limiter keeps the difference ``D = I * samples_per_insert - S``
inside ``[offset - error_buffer, offset + error_buffer]`` where ``offset =
samples_per_insert * min_size_to_sample``:

- an insert of ``n`` items is admitted while the buffer holds at most
  ``min_size_to_sample`` items after it (warm-up), or while ``(I + n) * spi - S`` stays at
  most ``offset + error_buffer``;
- a sample of ``n`` items is admitted once the buffer holds ``min_size_to_sample`` items
  and ``I * spi - S - n`` stays at least ``offset - error_buffer``.

Over a run the measured ratio ``S / (I - min_size_to_sample)`` therefore approaches
``samples_per_insert``, within ``error_buffer / (I - min_size_to_sample)``.

Inserts here come in rollouts of many transitions and samples in mini-batches, so a
chunk can be larger than the room the error buffer leaves: both sides could then be
refused at once. To make that impossible, a sample that was refused and still cannot be
served lets inserts through (only inserts can make it servable); the difference then
exceeds ``max(offset + error_buffer, offset - error_buffer + b)`` (b: the mini-batch) by
at most one insert's ``n * spi``, and never falls below ``offset - error_buffer`` once
sampling started. An ``error_buffer`` of at least half a mini-batch plus half an
insert's ``n * spi`` keeps it within ``offset +- error_buffer``.

The sampling side may be away for a while (``pause_sampling``/``resume_sampling``):
meanwhile inserts are admitted whatever the ratio. The learner pauses it while it waits for
its collectors to apply a change (a hot-swap queued behind a rollout whose insert waits
for samples would otherwise never run).

Neither side can wait forever on a side that is gone: ``close("insert")`` (collection
ended) ends every wait for a sample that no longer can be served, ``close("sample")``
(the learner stopped) ends every wait for an insert, ``stop()`` both; the waits return
``CLOSED``. A wait with a timeout returns ``TIMEOUT`` when it passes.

The limiter holds no data: the caller (``ReplayServer``) records what it inserted and
sampled. It needs no Ray; its waits use a ``threading.Condition``.
"""

import math
import threading
import time

#: Outcomes of ``wait_insert`` / ``wait_sample``.
OK, TIMEOUT, CLOSED = "ok", "timeout", "closed"

SIDES = ("insert", "sample")


class RateLimiter:
    """Samples-per-insert rate limiter (see the module docstring).

    Parameters
    ----------
    samples_per_insert : float
        Items sampled per item inserted, on average (> 0). With mini-batches of b and
        rollouts of n transitions, a gradient worker takes ``spi * n / b`` mini-batches per
        rollout.
    min_size_to_sample : int
        Items the buffer must hold before the first sample (>= 1).
    error_buffer : float
        How far (in sampled items) the difference may stray from its target on either side
        (>= 0): the larger, the less either side waits, and the looser the ratio.

    Attributes
    ----------
    inserts, samples, deletes : int
        Items inserted, sampled and evicted (overwritten) since the start.
    blocked_s : dict
        Seconds spent waiting, per side ("insert", "sample").
    """

    def __init__(self, samples_per_insert, min_size_to_sample, error_buffer):
        if isinstance(samples_per_insert, bool) or not isinstance(samples_per_insert, (int, float)) \
                or not samples_per_insert > 0 or math.isinf(samples_per_insert):
            raise ValueError(f"samples_per_insert must be a positive number, got {samples_per_insert!r}")
        if isinstance(min_size_to_sample, bool) or not isinstance(min_size_to_sample, int) or min_size_to_sample < 1:
            raise ValueError(f"min_size_to_sample must be a positive integer, got {min_size_to_sample!r}")
        if isinstance(error_buffer, bool) or not isinstance(error_buffer, (int, float)) or not error_buffer >= 0 \
                or math.isinf(error_buffer):
            raise ValueError(f"error_buffer must be a non-negative number, got {error_buffer!r}")
        self.samples_per_insert = float(samples_per_insert)
        self.min_size_to_sample = int(min_size_to_sample)
        self.error_buffer = float(error_buffer)
        offset = self.samples_per_insert * self.min_size_to_sample
        self.min_diff = offset - self.error_buffer
        self.max_diff = offset + self.error_buffer
        self.inserts = self.samples = self.deletes = 0
        self.blocked_s = {side: 0.0 for side in SIDES}
        self.closed = set()
        self.sampling_paused = 0   # nesting depth of pause_sampling
        self.cond = threading.Condition(threading.RLock())
        self._refused_sample = 0   # size of the last sample refused and not yet served

    # ---------------------------------------------------------------- decisions
    @property
    def size(self):
        """Items held: inserted minus evicted."""
        return self.inserts - self.deletes

    @property
    def diff(self):
        """``inserts * samples_per_insert - samples``."""
        return self.inserts * self.samples_per_insert - self.samples

    def can_insert(self, n):
        """Whether an insert of ``n`` items may happen now (see the module docstring)."""
        if self.size + n <= self.min_size_to_sample or self.sampling_paused:
            return True
        if (self.inserts + n) * self.samples_per_insert - self.samples <= self.max_diff:
            return True
        # A sampler starved by the ratio can only be served by inserts: let them through.
        return self._refused_sample > 0 and not self._sample_allowed(self._refused_sample)

    def can_sample(self, n):
        """Whether a sample of ``n`` items may happen now (see the module docstring)."""
        return self._sample_allowed(n)

    def _sample_allowed(self, n):
        return self.size >= self.min_size_to_sample and self.diff - n >= self.min_diff

    @property
    def measured_ratio(self):
        """Items sampled per item inserted past the warm-up, ``S / (I - min_size_to_sample)``
        (nan before the warm-up ends)."""
        past = self.inserts - self.min_size_to_sample
        return self.samples / past if past > 0 else math.nan

    # ------------------------------------------------------------------ records
    def record_insert(self, n, deleted=0):
        """Count an insert of ``n`` items that evicted ``deleted`` older ones."""
        with self.cond:
            self.inserts += int(n)
            self.deletes += int(deleted)
            self.cond.notify_all()

    def record_sample(self, n):
        """Count a sample of ``n`` items."""
        with self.cond:
            self.samples += int(n)
            self._refused_sample = 0
            self.cond.notify_all()

    # -------------------------------------------------------------------- waits
    def wait_insert(self, n, timeout=None):
        """Wait until an insert of ``n`` items is admitted; returns ``OK``, ``TIMEOUT`` or
        ``CLOSED`` (the sampling side is closed: nothing would ever admit it). The caller
        holds ``cond`` from the wait through its ``record_insert`` when several threads
        insert, so that what was admitted is what is recorded.

        Parameters
        ----------
        n : int
            Items to insert.
        timeout : float or None
            Seconds to wait at most (None: no limit; 0: do not wait).
        """
        return self._wait("insert", lambda: self.can_insert(n), timeout)

    def wait_sample(self, n, timeout=None):
        """Wait until a sample of ``n`` items is admitted; returns ``OK``, ``TIMEOUT`` or
        ``CLOSED`` (inserts are closed and it cannot be served now, so it never will be).
        A refused sample lets inserts through until it can be served (no deadlock);
        hold ``cond`` through ``record_sample`` as with ``wait_insert``.

        Parameters
        ----------
        n : int
            Items to sample (a mini-batch's size).
        timeout : float or None
            As in ``wait_insert``.
        """
        def allowed():
            if self._sample_allowed(n):
                return True
            if n > self._refused_sample:
                # Inserts refused by the ratio may now go through: wake them to re-check.
                self._refused_sample = n
                self.cond.notify_all()
            return False
        return self._wait("sample", allowed, timeout)

    def _wait(self, side, allowed, timeout):
        other = "sample" if side == "insert" else "insert"
        deadline = None if timeout is None else time.monotonic() + timeout
        t0 = time.perf_counter()
        with self.cond:
            try:
                while True:
                    if side in self.closed:
                        return CLOSED
                    if allowed():
                        return OK
                    if other in self.closed:
                        return CLOSED
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return TIMEOUT
                    self.cond.wait(remaining)
            finally:
                self.blocked_s[side] += time.perf_counter() - t0

    def pause_sampling(self):
        """The sampling side is away for a while (calls nest): every insert is admitted
        until the matching ``resume_sampling``."""
        with self.cond:
            self.sampling_paused += 1
            self.cond.notify_all()

    def resume_sampling(self):
        """End one ``pause_sampling``."""
        with self.cond:
            self.sampling_paused = max(0, self.sampling_paused - 1)
            self.cond.notify_all()

    def close(self, side):
        """Close one side for good: ``"insert"`` when collection has ended, ``"sample"`` when
        the learner has stopped. Waits of that side, and waits of the other side that only
        it could end, return ``CLOSED``."""
        if side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, got {side!r}")
        with self.cond:
            self.closed.add(side)
            self.cond.notify_all()

    def stop(self):
        """Close both sides: every wait returns ``CLOSED``."""
        for side in SIDES:
            self.close(side)

    def stats(self):
        """Counters as a dict: ``inserts``, ``samples``, ``size``, ``measured_ratio``,
        ``insert_blocked_s``, ``sample_blocked_s``."""
        with self.cond:
            return {"inserts": self.inserts, "samples": self.samples, "size": self.size,
                    "measured_ratio": self.measured_ratio, "insert_blocked_s": self.blocked_s["insert"],
                    "sample_blocked_s": self.blocked_s["sample"]}


__all__ = ["RateLimiter", "OK", "TIMEOUT", "CLOSED"]
