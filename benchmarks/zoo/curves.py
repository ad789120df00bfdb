"""Learning curves of a zoo row: the training episodes of each seed's run (its
``monitor/train_*.csv`` files), and a PNG of their mean with the published figure marked."""

import csv
import glob
import os

import numpy as np


def training_curve(run_dir, window=20):
    """``(steps, returns)`` of a run's training episodes: for each finished episode (in the
    order they ended, every collector's file together) the env steps of the episodes
    finished so far and the mean return of the last ``window`` episodes.

    Parameters
    ----------
    run_dir : str
        A run directory written by ``pytorchrl train`` (with ``env.monitor`` on).
    window : int
        Episodes in the running mean.
    """
    episodes = []
    for path in glob.glob(os.path.join(run_dir, "monitor", "train_monitor_*.csv")):
        with open(path) as f:
            for row in csv.DictReader(f):
                episodes.append((float(row["t"]), float(row["r"]), int(row["l"])))
    if not episodes:
        return np.zeros(0), np.zeros(0)
    episodes.sort()
    returns = np.array([r for _, r, _ in episodes])
    steps = np.cumsum([length for _, _, length in episodes]).astype(np.float64)
    kernel = np.ones(min(window, len(returns)))
    running = np.convolve(returns, kernel, mode="full")[:len(returns)] / np.minimum(np.arange(1, len(returns) + 1),
                                                                                    len(kernel))
    return steps, running


def mean_curve(curves, points=200):
    """The curves of several seeds on one grid of env steps (up to the shortest run):
    ``(grid, mean, low, high)``, low and high the smallest and largest seed at each step."""
    curves = [(s, r) for s, r in curves if len(s)]
    if not curves:
        return None
    end = min(s[-1] for s, _ in curves)
    start = max(s[0] for s, _ in curves)
    grid = np.linspace(start, end, points)
    values = np.array([np.interp(grid, s, r) for s, r in curves])
    return grid, values.mean(axis=0), values.min(axis=0), values.max(axis=0)


def plot_row(path, title, curves, published=None, reference=None):
    """Write the PNG of a row: the mean training return of its seeds against env steps, with
    the band of the seeds (min-max), the published figure (a dashed line at its mean, its
    spread shaded, labelled with its source and budget) and a reference row's curve.

    Parameters
    ----------
    path : str
        The PNG to write.
    title : str
        Its title.
    curves : list of (steps, returns)
        One ``training_curve`` per seed.
    published : dict or None
        ``mean``, ``std``, ``steps``, ``source`` of the published figure.
    reference : (str, list of (steps, returns)) or None
        A label and the curves of another row (the baseline of our own agents' rows).
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    for label, row_curves, color in [("ours", curves, "tab:blue")] + \
            ([(reference[0], reference[1], "tab:gray")] if reference else []):
        mean = mean_curve(row_curves)
        if mean is None:
            continue
        grid, avg, low, high = mean
        n = len([c for c in row_curves if len(c[0])])
        ax.plot(grid, avg, color=color, label=f"{label} (mean of {n} seeds, min-max shaded)")
        ax.fill_between(grid, low, high, color=color, alpha=0.2)
    if published:
        lo, hi = published["mean"] - published["std"], published["mean"] + published["std"]
        ax.axhline(published["mean"], color="tab:red", linestyle="--",
                   label=f"{published['source']}: {published['mean']:g} ± {published['std']:g} "
                         f"at {published['steps']:,} steps")
        ax.axhspan(lo, hi, color="tab:red", alpha=0.08)
        if published["steps"] <= ax.get_xlim()[1]:
            ax.axvline(published["steps"], color="tab:red", linestyle=":", linewidth=0.8)
    ax.set_xlabel("env steps")
    ax.set_ylabel("training return (mean of the last 20 episodes)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
