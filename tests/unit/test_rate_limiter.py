"""RateLimiter (pytorchrl.scheme.servers.rate_limiter): Reverb's samples-per-insert
semantics, its tolerance over a long interleaving, and waits that end when the other side
is closed (bounded by events and timeouts, never by sleeps)."""

import math
import threading

import pytest

from pytorchrl.scheme.servers.rate_limiter import CLOSED, OK, TIMEOUT, RateLimiter


def test_parameters_are_checked():
    for bad in (dict(samples_per_insert=0), dict(samples_per_insert=-1.0), dict(samples_per_insert=True),
                dict(min_size_to_sample=0), dict(min_size_to_sample=1.5), dict(error_buffer=-1),
                dict(error_buffer=math.inf)):
        kw = {**dict(samples_per_insert=2.0, min_size_to_sample=10, error_buffer=5.0), **bad}
        with pytest.raises(ValueError, match=next(iter(bad))):
            RateLimiter(**kw)


def test_min_size_before_the_first_sample():
    lim = RateLimiter(samples_per_insert=1.0, min_size_to_sample=10, error_buffer=100.0)
    assert lim.can_insert(10) and not lim.can_sample(1)
    lim.record_insert(9)
    assert not lim.can_sample(1)
    lim.record_insert(1)
    assert lim.can_sample(1) and math.isnan(lim.measured_ratio)


def test_samples_per_insert_bounds():
    # offset = 2 * 4 = 8; the difference inserts*2 - samples stays in [8 - 4, 8 + 4].
    lim = RateLimiter(samples_per_insert=2.0, min_size_to_sample=4, error_buffer=4.0)
    lim.record_insert(4)                    # D = 8
    assert lim.can_insert(2)                # D would be 12: the upper bound
    assert not lim.can_insert(3)            # 14 > 12
    assert lim.can_sample(4) and not lim.can_sample(5)   # D - n >= 4
    lim.record_sample(4)                    # D = 4
    assert not lim.can_sample(1)
    assert lim.can_insert(4)                # D would be 12
    lim.record_insert(4)
    assert lim.measured_ratio == pytest.approx(4 / 4)


def test_evictions_count_against_the_size():
    lim = RateLimiter(samples_per_insert=1.0, min_size_to_sample=5, error_buffer=100.0)
    lim.record_insert(5, deleted=1)
    assert lim.size == 4 and not lim.can_sample(1)


def test_a_refused_sample_lets_a_large_insert_through():
    # A rollout of 50 transitions never fits the room of a tight error buffer: without the
    # starvation rule both sides would be refused for ever.
    lim = RateLimiter(samples_per_insert=1.0, min_size_to_sample=10, error_buffer=2.0)
    lim.record_insert(10)
    lim.record_sample(8)                    # D = 2 < min_diff + 8
    assert not lim.can_insert(50)
    assert lim.wait_sample(8, timeout=0) == TIMEOUT
    assert lim.can_insert(50)               # the starved sampler can only be served so
    lim.record_insert(50)
    assert not lim.can_insert(50)           # served now: the ratio applies again
    assert lim.wait_sample(8, timeout=0) == OK


@pytest.mark.parametrize("spi,chunk,batch,error_buffer", [(4.0, 50, 32, 100.0), (0.5, 8, 64, 10.0),
                                                          (8.0, 256, 64, 512.0)])
def test_ratio_stays_within_its_tolerance(spi, chunk, batch, error_buffer):
    """Whichever side goes when both may, the difference stays at least the lower bound
    and never passes the upper one (or what a mini-batch larger than the band needs) by
    more than one insert; the measured ratio converges. In one thread a refused sample
    stands for a sampler that waits: the insert refused just before it is tried again (a
    waiting inserter is woken by the refusal)."""
    lim = RateLimiter(samples_per_insert=spi, min_size_to_sample=100, error_buffer=error_buffer)
    turn = 0
    for _ in range(20_000):
        turn += 1
        prefer_insert = (turn * 7919) % 3 == 0          # a fixed irregular interleaving
        order = (("insert", chunk), ("sample", batch)) if prefer_insert else (("sample", batch), ("insert", chunk))
        for side, n in order + (("insert", chunk),):
            wait = lim.wait_insert if side == "insert" else lim.wait_sample
            if wait(n, timeout=0) == OK:
                (lim.record_insert if side == "insert" else lim.record_sample)(n)
                break
        else:
            pytest.fail("both sides refused: deadlock")
        if lim.samples:
            assert lim.min_diff <= lim.diff <= max(lim.max_diff, lim.min_diff + batch) + chunk * spi
    band = max(lim.max_diff, lim.min_diff + batch) + chunk * spi - lim.min_diff
    assert abs(lim.measured_ratio - spi) <= band / (lim.inserts - 100) + 1e-9
    assert abs(lim.measured_ratio - spi) / spi < 0.05


def test_waits_time_out():
    lim = RateLimiter(samples_per_insert=1.0, min_size_to_sample=10, error_buffer=0.0)
    assert lim.wait_sample(1, timeout=0.01) == TIMEOUT
    assert lim.blocked_s["sample"] > 0


def _in_thread(fn):
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("outcome", fn()), daemon=True)
    t.start()
    return t, box


def test_a_waiting_sampler_is_released_by_an_insert():
    lim = RateLimiter(samples_per_insert=1.0, min_size_to_sample=10, error_buffer=5.0)
    t, box = _in_thread(lambda: lim.wait_sample(5, timeout=60))
    lim.record_insert(10)
    t.join(60)
    assert box["outcome"] == OK


def test_collection_ending_releases_a_starved_sampler():
    lim = RateLimiter(samples_per_insert=1.0, min_size_to_sample=10, error_buffer=0.0)
    t, box = _in_thread(lambda: lim.wait_sample(5, timeout=60))
    lim.close("insert")
    t.join(60)
    assert not t.is_alive() and box["outcome"] == CLOSED
    # A sample that can still be served is, after inserts closed.
    lim2 = RateLimiter(samples_per_insert=1.0, min_size_to_sample=10, error_buffer=0.0)
    lim2.record_insert(20)
    lim2.close("insert")
    assert lim2.wait_sample(5, timeout=0) == OK


def test_learner_stopping_releases_a_blocked_inserter():
    lim = RateLimiter(samples_per_insert=1.0, min_size_to_sample=10, error_buffer=0.0)
    lim.record_insert(10)
    t, box = _in_thread(lambda: lim.wait_insert(5, timeout=60))
    lim.close("sample")
    t.join(60)
    assert not t.is_alive() and box["outcome"] == CLOSED
    assert lim.wait_insert(1, timeout=None) == CLOSED   # never waits once closed
    with pytest.raises(ValueError, match="side"):
        lim.close("both")


def test_stop_ends_every_wait():
    # Two samplers starved below the minimum size; an inserter beyond the ratio (no
    # sampler waits on that limiter, so nothing lets it through).
    starved = RateLimiter(samples_per_insert=1.0, min_size_to_sample=10, error_buffer=0.0)
    full = RateLimiter(samples_per_insert=1.0, min_size_to_sample=10, error_buffer=0.0)
    full.record_insert(10)
    waits = [_in_thread(lambda: starved.wait_sample(5)), _in_thread(lambda: starved.wait_sample(7)),
             _in_thread(lambda: full.wait_insert(5))]
    starved.stop()
    full.stop()
    for t, box in waits:
        t.join(60)
        assert box["outcome"] == CLOSED
    s = full.stats()
    assert s["inserts"] == 10 and s["size"] == 10 and s["samples"] == 0


def test_paused_sampling_admits_every_insert():
    """While the learner waits for its collectors (a hot-swap queued behind a rollout whose
    insert waits), inserts must not wait for samples."""
    lim = RateLimiter(samples_per_insert=1.0, min_size_to_sample=10, error_buffer=0.0)
    lim.record_insert(10)
    t, box = _in_thread(lambda: lim.wait_insert(5, timeout=60))
    lim.pause_sampling()
    t.join(60)
    assert box["outcome"] == OK
    lim.record_insert(5)
    lim.pause_sampling()              # nested
    lim.resume_sampling()
    assert lim.can_insert(5)
    lim.resume_sampling()
    assert not lim.can_insert(5)      # the ratio applies again
