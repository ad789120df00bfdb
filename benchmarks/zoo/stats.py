"""Aggregates of the final returns of a row's seeds, as the rliable package computes them
(Agarwal et al., 2021): the interquartile mean (scipy's ``trim_mean`` with a quarter cut
at each end) and a percentile bootstrap confidence interval over the runs (rliable's
stratified bootstrap, which for one task resamples the runs with replacement).

numpy only: the benchmark runs where pytorchrl is installed, without rliable (its results
agree with rliable's ``get_interval_estimates`` to the bootstrap's noise:
tests/cli/test_benchmarks_smoke.py)."""

import numpy as np


def iqm(scores):
    """The interquartile mean of ``scores``: the mean of what is left once
    ``floor(0.25 n)`` scores are cut from each end of the sorted list (scipy's
    ``trim_mean(scores, 0.25)``, rliable's ``aggregate_iqm``).

    Parameters
    ----------
    scores : sequence of float
        One score per run (at least one).
    """
    values = np.sort(np.asarray(scores, dtype=np.float64))
    cut = int(0.25 * len(values))
    return float(values[cut:len(values) - cut].mean())


def bootstrap_ci(scores, statistic=iqm, reps=10_000, confidence=0.95, seed=0):
    """Percentile bootstrap interval of ``statistic`` over the runs ``scores``.

    Parameters
    ----------
    scores : sequence of float
        One score per run.
    statistic : callable
        ``statistic(sample) -> float`` (default: the interquartile mean).
    reps : int
        Bootstrap resamples.
    confidence : float
        Coverage of the interval.
    seed : int
        Seed of the resampling (the interval is reproducible).

    Returns
    -------
    (low, high) : tuple of float
    """
    values = np.asarray(scores, dtype=np.float64)
    rng = np.random.default_rng(seed)
    samples = values[rng.integers(0, len(values), size=(reps, len(values)))]
    stats = np.array([statistic(s) for s in samples])
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(stats, [tail, 100.0 - tail])
    return float(low), float(high)


def summarize(scores):
    """``mean``, ``iqm``, ``ci`` (the bootstrap interval of the IQM), ``min``, ``max`` and
    ``n`` of the scores of a row's runs."""
    values = [float(s) for s in scores]
    return {"n": len(values), "mean": float(np.mean(values)), "iqm": iqm(values), "ci": bootstrap_ci(values),
            "min": min(values), "max": max(values)}
