"""``pytorchrl plot``: learning curves of one or more runs, as a PNG (or PDF, SVG) for a paper.

Two panels: the return against environment steps, and against wall-clock time. Runs are
grouped: runs given the same ``--label``, or (without labels) runs whose configurations
are equal but for the seed, the run directory and the ``learner`` section (the seeds of
one experiment). A group of several runs is drawn as the mean curve with a band (min to
max, or one standard deviation) on the steps where all its runs have data; a group of
one run as its curve.

A population's run directory (``pytorchrl pbt``) stands for its members, each a curve of
its own labelled by its name, and every copy recorded in its ``population.csv`` is marked
on the curve of the member replaced (a triangle), joined by a dashed line to the value of
the member it copied at that step.
"""

import json
import math
import os
import re

import numpy as np

from pytorchrl.tools import CONFIG, METRICS
from pytorchrl.tools.metrics import STEP_COLUMN, _read_csv

#: Column of metrics.csv with the seconds of training.
TIME_COLUMN = "Time/Elapsed"
#: Words of the y axis for well-known metrics.
METRIC_LABELS = {"Episodes/TrainReward": "training return (mean of last 100 episodes)",
                 "Episodes/TestReward": "test return (deterministic)"}
#: Points of the common grid a group's runs are interpolated on.
GRID_POINTS = 200
BANDS = ("minmax", "std", "none")
#: Longest label made from configuration differences; longer ones use the run names.
MAX_LABEL = 40
#: A population's record of its copies (``pytorchrl.pbt``), read to mark them.
POPULATION_CSV = "population.csv"


class PlotError(Exception):
    """A problem the user can fix (no run, no such metric), in one line."""


def find_runs(paths):
    """Run directories among ``paths``: a directory holding ``metrics.csv`` is a run, any
    other directory stands for the runs directly inside it (``pytorchrl plot runs/``).

    Parameters
    ----------
    paths : list of str
        Directories given on the command line.
    """
    runs = []
    for path in paths:
        if os.path.isfile(os.path.join(path, METRICS)):
            runs.append(path)
        elif os.path.isdir(path):
            inside = sorted(os.path.join(path, d) for d in os.listdir(path)
                            if os.path.isfile(os.path.join(path, d, METRICS)))
            if not inside:
                raise PlotError(f"{path} holds no run ({METRICS} not found in it or in its subdirectories)")
            runs += inside
        else:
            raise PlotError(f"no such directory: {path}")
    return runs


def population_copies(path):
    """The copies a population made, from its ``population.csv``: a list of
    ``(step, member replaced, member copied)``, one per copy; None when ``path`` is not a
    population's run directory."""
    columns, rows = _read_csv(os.path.join(path, POPULATION_CSV))
    if not columns:
        return None
    copies = []
    for row in rows:
        try:
            copy = (float(row["step"]), int(row["to"]), int(row["from"]))
        except (KeyError, ValueError):
            continue
        if copy not in copies:   # one row per perturbed parameter of a copy
            copies.append(copy)
    return copies


def _labels_with_populations(paths, runs):
    """One label per run when ``paths`` name a population: its members by their names
    (with the population's name before them when several paths are given), every other run
    by its own name; None when no path is a population."""
    populations = [p for p in paths if population_copies(p) is not None]
    if not populations:
        return None
    labels = []
    for run in runs:
        parent = os.path.dirname(os.path.normpath(run))
        name = _run_name(run)
        owner = next((p for p in populations if os.path.normpath(p) == parent), None)
        labels.append(f"{_run_name(owner)}/{name}" if owner is not None and len(paths) > 1 else name)
    return labels


def resolve_metric(columns, metric):
    """The column of ``metric`` ("Episodes/TestReward", or just "TestReward")."""
    if metric in columns:
        return metric
    matches = [c for c in columns if c.split("/")[-1] == metric]
    if len(matches) == 1:
        return matches[0]
    return None


def load_curve(run_dir, metric):
    """``(steps, seconds, values)`` arrays of ``metric`` in a run's metrics.csv (rows
    without a value, e.g. before the first finished episode, are left out).

    Parameters
    ----------
    run_dir : str
        Run directory.
    metric : str
        Column name (or its last part).
    """
    columns, rows = _read_csv(os.path.join(run_dir, METRICS))
    column = resolve_metric(columns, metric)
    if column is None:
        choices = [c for c in columns if c.startswith(("Episodes/", "Algorithm/"))]
        raise PlotError(f"no metric {metric!r} in {os.path.join(run_dir, METRICS)}; "
                        f"some that are: {', '.join(choices) or ', '.join(columns[:8])}")
    steps, seconds, values = [], [], []
    for row in rows:
        try:
            x, t, y = float(row[STEP_COLUMN]), float(row.get(TIME_COLUMN) or "nan"), float(row[column] or "nan")
        except (KeyError, ValueError):
            continue
        if math.isfinite(x) and math.isfinite(y):
            steps.append(x)
            seconds.append(t)
            values.append(y)
    return np.array(steps), np.array(seconds), np.array(values)


def _run_config(run_dir):
    """The run's configuration as a flat dict ``dotted.key -> value``, without the keys
    that differ between seeds of one experiment; None if it cannot be read."""
    from pytorchrl.config import parse_yaml
    try:
        with open(os.path.join(run_dir, CONFIG)) as f:
            config = parse_yaml(f.read())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    for key in ("seed", "run_dir", "learner"):
        config.pop(key, None)
    if isinstance(config.get("env"), dict):
        config["env"].pop("seed", None)
    flat = {}

    def walk(node, prefix):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}.{k}" if prefix else str(k))
        elif isinstance(node, list) and node and all(isinstance(v, dict) for v in node):
            for i, v in enumerate(node):
                walk(v, f"{prefix}.{i}")
        else:
            flat[prefix] = node
    walk(config, "")
    return flat


def _run_name(run_dir):
    """A run directory's name without its timestamp suffix (``ppo_cartpole-20250101-120000-2``)."""
    name = os.path.basename(os.path.normpath(run_dir))
    return re.sub(r"-\d{8}-\d{6}(-\d+)?$", "", name) or name


def group_runs(runs, labels=None):
    """Group runs into labelled curves.

    Parameters
    ----------
    runs : list of str
        Run directories.
    labels : list of str or None
        One label per run (runs sharing a label form a group); None: group by
        configuration and label each group by what distinguishes it.

    Returns
    -------
    list of (str, list of str)
        ``(label, run directories)`` in the order of first appearance.
    """
    if labels:
        if len(labels) != len(runs):
            raise PlotError(f"{len(labels)} labels given for {len(runs)} runs: give one --label per run, "
                            f"in the order of the runs")
        groups = {}
        for run, label in zip(runs, labels):
            groups.setdefault(label, []).append(run)
        return list(groups.items())
    keyed, configs = {}, {}
    for run in runs:
        flat = _run_config(run)
        key = json.dumps(flat, sort_keys=True, default=str) if flat is not None else f"run:{run}"
        keyed.setdefault(key, []).append(run)
        configs[key] = flat
    keys = list(keyed)
    if len(keys) == 1:
        return [(_common_name(keyed[keys[0]]), keyed[keys[0]])]
    flats = [configs[k] for k in keys]
    if all(f is not None for f in flats):
        every = sorted(set().union(*flats))
        differing = [k for k in every if len({json.dumps(f.get(k), default=str) for f in flats}) > 1]
        if 0 < len(differing) <= 3:
            labels = [", ".join(f"{k}={configs[key].get(k)}" for k in differing) for key in keys]
            if max(len(label) for label in labels) <= MAX_LABEL:
                return list(zip(labels, (keyed[key] for key in keys)))
    return [(_common_name(keyed[key]), keyed[key]) for key in keys]


def _common_name(runs):
    """What the names of a group's runs share (``ppo-s0``, ``ppo-s1`` -> ``ppo``)."""
    names = sorted({_run_name(r) for r in runs})
    if len(names) == 1:
        return names[0]
    common = os.path.commonprefix(names).rstrip("-_ .")
    if common.lower().endswith(("seed", "-s", "_s")):
        common = re.sub(r"[-_ .]*(seed|s)$", "", common, flags=re.IGNORECASE)
    return common or " / ".join(names[:3])


def aggregate(curves, x_index, band):
    """Mean and band of several curves on a common grid over the x range they share.

    Parameters
    ----------
    curves : list of (steps, seconds, values)
        One per run.
    x_index : int
        0: against steps, 1: against seconds.
    band : str
        "minmax", "std" or "none".

    Returns
    -------
    (x, mean, low, high)
        ``low``/``high`` are None without a band (or with a single curve).
    """
    if len(curves) == 1:
        x, y = curves[0][x_index], curves[0][2]
        return x, y, None, None
    lo = max(c[x_index][0] for c in curves)
    hi = min(c[x_index][-1] for c in curves)
    if hi <= lo:
        hi = lo
    grid = np.linspace(lo, hi, GRID_POINTS) if hi > lo else np.array([lo])
    ys = np.stack([np.interp(grid, c[x_index], c[2]) for c in curves])
    mean = ys.mean(0)
    if band == "minmax":
        return grid, mean, ys.min(0), ys.max(0)
    if band == "std":
        std = ys.std(0)
        return grid, mean, mean - std, mean + std
    return grid, mean, None, None


def _time_unit(seconds):
    if seconds > 2 * 3600:
        return 3600.0, "h"
    if seconds > 120:
        return 60.0, "min"
    return 1.0, "s"


def plot_runs(paths, output, metric="Episodes/TrainReward", labels=None, band="minmax", size=(10.0, 4.0),
              dpi=150, title=None):
    """Draw the curves of the runs in ``paths`` into ``output``.

    Parameters
    ----------
    paths : list of str
        Run directories, or directories of runs.
    output : str
        Image file; its extension picks the format (.png, .pdf, .svg).
    metric : str
        Column of metrics.csv to draw (default: the training return).
    labels : list of str or None
        One label per run (see ``group_runs``).
    band : str
        Spread of a group of runs: "minmax", "std" or "none".
    size : (float, float)
        Width and height in inches; a PNG is ``size * dpi`` pixels.
    dpi : int
        Pixels per inch of a PNG.
    title : str or None
        Title above the panels.

    Returns
    -------
    list of (str, int)
        ``(label, number of runs)`` of each curve drawn.
    """
    if band not in BANDS:
        raise PlotError(f"band must be one of {', '.join(BANDS)}, got {band!r}")
    runs = find_runs(paths)
    groups = group_runs(runs, labels or _labels_with_populations(paths, runs))
    curves = {}
    for _, members in groups:
        for run in members:
            curve = load_curve(run, metric)
            if len(curve[0]) == 0:
                raise PlotError(f"{run} has no value of {metric} yet (no finished episode logged)")
            curves[run] = curve
    column = resolve_metric(_read_csv(os.path.join(runs[0], METRICS))[0], metric)

    import matplotlib
    matplotlib.use("Agg")   # files only: no display needed, none opened
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter

    longest = max(c[1][-1] for c in curves.values() if len(c[1]) and math.isfinite(c[1][-1])) \
        if any(len(c[1]) and math.isfinite(c[1][-1]) for c in curves.values()) else 0.0
    scale, unit = _time_unit(longest)
    with plt.rc_context({"font.size": 9, "axes.spines.top": False, "axes.spines.right": False,
                         "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.6, "lines.linewidth": 1.6,
                         "legend.frameon": False, "savefig.facecolor": "white"}):
        fig, axes = plt.subplots(1, 2, figsize=size, dpi=dpi, sharey=True, layout="constrained")
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        drawn = []
        color_of = {}
        for i, (label, members) in enumerate(groups):
            color = colors[i % len(colors)]
            color_of.update({os.path.normpath(r): color for r in members})
            group = [curves[r] for r in members]
            name = label if len(members) == 1 else f"{label} ({len(members)} runs)"
            for ax, x_index in ((axes[0], 0), (axes[1], 1)):
                usable = [c for c in group if np.all(np.isfinite(c[x_index]))]
                if not usable:
                    continue
                x, mean, low, high = aggregate(usable, x_index, band)
                if x_index == 1:
                    x = x / scale
                ax.plot(x, mean, color=color, label=name if x_index == 0 else None)
                if low is not None:
                    ax.fill_between(x, low, high, color=color, alpha=0.2, linewidth=0)
            drawn.append((label, len(members)))
        _mark_copies(axes, paths, curves, color_of, scale)
        axes[0].set_xlabel("environment steps")
        axes[0].xaxis.set_major_formatter(EngFormatter(sep=""))
        axes[1].set_xlabel(f"wall-clock time ({unit})")
        axes[0].set_ylabel(METRIC_LABELS.get(column, column))
        spread = {"minmax": "band: min to max over runs", "std": "band: mean ± 1 std over runs"}.get(band)
        if any(len(m) > 1 for _, m in groups) and spread:
            axes[1].set_title(spread, fontsize=8, loc="right", color="0.4")
        axes[0].legend(loc="best", fontsize=8)
        if title:
            fig.suptitle(title)
        try:
            fig.savefig(output, dpi=dpi)
        except (OSError, ValueError) as exc:
            raise PlotError(f"cannot write {output}: {exc}") from None
        finally:
            plt.close(fig)
    return drawn


def _mark_copies(axes, paths, curves, color_of, scale):
    """Mark the copies of the populations among ``paths`` on their members' curves (see
    the module documentation); returns how many were marked."""
    marked = 0
    for path in paths:
        for step, to, source in population_copies(path) or ():
            loser = os.path.normpath(os.path.join(path, f"member-{to}"))
            giver = os.path.normpath(os.path.join(path, f"member-{source}"))
            mine = next((c for r, c in curves.items() if os.path.normpath(r) == loser), None)
            theirs = next((c for r, c in curves.items() if os.path.normpath(r) == giver), None)
            if mine is None or theirs is None or len(mine[0]) == 0:
                continue
            color = color_of.get(loser, "0.3")
            y_to, y_from = np.interp(step, mine[0], mine[2]), np.interp(step, theirs[0], theirs[2])
            for ax, x in ((axes[0], step), (axes[1], np.interp(step, mine[0], mine[1]) / scale)):
                if not math.isfinite(x):
                    continue
                ax.plot([x, x], [y_from, y_to], color=color, linestyle=":", linewidth=0.9)
                ax.plot([x], [y_to], marker="v", color=color, markersize=5, linestyle="none")
            marked += 1
    if marked:
        # Drawn empty, for the legend's entry.
        axes[0].plot([], [], color="0.3", marker="v", linestyle=":", linewidth=0.9, markersize=5,
                     label="copy (from the source's value)")
    return marked


__all__ = ["PlotError", "find_runs", "load_curve", "group_runs", "aggregate", "plot_runs", "population_copies"]
