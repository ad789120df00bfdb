"""What a training run logs: ``metrics.csv``, ``hot_swaps.csv``, TensorBoard event files and,
with ``learner.wandb``, a Weights & Biases run.

:class:`RunLog` is the one object the training loop talks to; it writes the two CSV files
and hands every row and hot-swap to its sinks (:class:`TensorBoardSink`,
:class:`pytorchrl.tools.tracking.WandbSink`), which share one interface: ``scalars``,
``hot_swap``, ``summary``, ``close``. On ``resume`` it continues the logs from the
checkpoint's step (rows written after the checkpoint, by a run that then crashed, are
dropped so that the curves do not fold back).
"""

import csv
import math
import os
import sys
import time
import warnings
from collections import defaultdict

from pytorchrl.gc_pause import gc_paused
from pytorchrl.tools import HOT_SWAPS, METRICS, TENSORBOARD, process_tmp_path

#: Column of metrics.csv holding the environment steps (the x axis of every curve).
STEP_COLUMN = "Scheme/EnvSteps"


def _read_csv(path):
    """(columns, rows) of a CSV file, rows as dicts of strings; ([], []) if it does not exist."""
    if not os.path.exists(path):
        return [], []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        # A row longer than the header (a file another writer appended to with more columns)
        # puts its extra values under the key None, which no writer accepts: they are dropped.
        rows = [{k: v for k, v in row.items() if k is not None} for row in reader]
        return list(reader.fieldnames or []), rows


def _write_csv(path, columns, rows):
    """Write a whole CSV file atomically (this process's temporary file, then rename)."""
    tmp = process_tmp_path(path)
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


def _step_of(row, column):
    try:
        return float(row.get(column) or "nan")
    except ValueError:
        return math.nan


class MetricsCSV:
    """``metrics.csv``: one row per log interval, one column per metric key.

    Metric keys can appear late (the first test reward, a loss after the first update);
    the file is then rewritten with the wider header, so every row stays aligned.

    Parameters
    ----------
    path : str
        File to write.
    continue_from_step : int or None
        None: start a new file. An env step: keep the rows of an existing file up to this
        step (the checkpoint a run resumes from) and append after them.
    """

    def __init__(self, path, continue_from_step=None):
        self.path = path
        self.columns, self.rows = [], []
        if continue_from_step is not None:
            columns, rows = _read_csv(path)
            kept = [r for r in rows if _step_of(r, STEP_COLUMN) <= continue_from_step]
            self.columns, self.rows = columns, kept
            if columns:
                _write_csv(path, columns, kept)

    def append(self, metrics):
        """Add one row (a dict ``key -> value``)."""
        self.rows.append(dict(metrics))
        new = [k for k in metrics if k not in self.columns]
        if new or len(self.rows) == 1:
            self.columns += new
            _write_csv(self.path, self.columns, self.rows)
        else:
            with open(self.path, "a", newline="") as f:
                csv.DictWriter(f, self.columns).writerow(metrics)


class HotSwapCSV:
    """``hot_swaps.csv``: one row per parameter change, applied or refused.

    Columns: ``step`` (env steps when it took effect), ``elapsed`` (seconds of training),
    ``kind`` (algorithm, storage, component), ``name``, ``value``, ``source`` (schedule,
    live, resume), ``status`` (applied or refused) and ``detail`` (the request id, or the
    reason of a refusal).

    Parameters
    ----------
    path : str
        File to write.
    continue_from_step : int or None
        As in ``MetricsCSV``.
    """

    COLUMNS = ["step", "elapsed", "kind", "name", "value", "source", "status", "detail"]

    def __init__(self, path, continue_from_step=None):
        self.path = path
        rows = []
        if continue_from_step is not None:
            rows = [r for r in _read_csv(path)[1] if _step_of(r, "step") <= continue_from_step]
        _write_csv(path, self.COLUMNS, rows)

    def append(self, **row):
        """Add one row; keys are the column names (missing ones are left empty)."""
        with open(self.path, "a", newline="") as f:
            csv.DictWriter(f, self.COLUMNS).writerow(row)


_warned_no_tensorboard = False


def tensorboard_writer(log_dir, purge_step=None, warn=None):
    """A ``torch.utils.tensorboard.SummaryWriter`` for ``log_dir``, or None (with one warning
    per process) when the tensorboard package is not installed.

    Parameters
    ----------
    log_dir : str
        Directory of the event files.
    purge_step : int or None
        When resuming: TensorBoard hides the events of earlier files at this step and later
        (written after the checkpoint by a run that did not finish).
    warn : callable or None
        ``warn(line)`` says that no event files are written: a run's own output (a
        population's member has no terminal of its own: its lines go to the population's).
        None: stderr.
    """
    global _warned_no_tensorboard
    try:
        # (tensorboard's import costs a third as much with the garbage collector paused: gc_pause.py)
        with warnings.catch_warnings(), gc_paused():
            warnings.simplefilter("ignore")   # tensorboard's own deprecation noise
            from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        if not _warned_no_tensorboard:
            _warned_no_tensorboard = True
            line = ("warning: tensorboard is not installed, so no TensorBoard event files are written "
                    "(pip install tensorboard); metrics.csv has every metric")
            if warn is None:
                print(line, file=sys.stderr, flush=True)
            else:
                warn(line)
        return None
    return SummaryWriter(log_dir=log_dir, purge_step=purge_step, flush_secs=30)


class TensorBoardSink:
    """Sends what a run logs to TensorBoard event files (a sink of :class:`RunLog`).

    Parameters
    ----------
    writer : torch.utils.tensorboard.SummaryWriter
        The open writer (``tensorboard_writer``).
    """

    def __init__(self, writer):
        self.writer = writer

    def scalars(self, metrics, step):
        """Add one row of metrics (``name -> finite number``) at env step ``step``."""
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def hot_swap(self, step, kind, name, value, text):
        """Add a hot-swap: ``value`` (a number, or None) as ``HotSwap/<kind>.<name>`` and
        ``text`` under ``HotSwaps``."""
        if value is not None:
            self.writer.add_scalar(f"HotSwap/{kind}.{name}", value, step)
        self.writer.add_text("HotSwaps", text, step)

    def summary(self, values):
        """Nothing: summary.yaml holds the end-of-run results."""

    def close(self, failed=False):
        """Flush and close the event files."""
        self.writer.close()


def _finite_scalars(metrics):
    """The entries of ``metrics`` that are finite numbers (what a chart can draw)."""
    return {k: v for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


class WorkerTimings:
    """Per-gradient-worker totals read from the infos that ``Learner.step`` returns.

    Every info of a gradient worker carries ``index_worker`` and ``grad_time``; the first
    of a collection round also ``col_time`` (its slowest collector), ``prepare_time`` and
    ``collected_samples``. The totals become ``Workers/g<i>/<Name>`` metrics once more than
    one gradient worker has reported (with one, they equal the ``Time/`` totals).
    """

    KEYS = {"grad_time": "GradTime", "col_time": "ColTime", "prepare_time": "PrepareTime",
            "collected_samples": "Samples"}

    def __init__(self):
        self.totals = defaultdict(lambda: defaultdict(float))
        self.recent_lags = []

    def observe(self, infos):
        """Add the infos of one ``Learner.step``."""
        for info in infos:
            worker = info.get("index_worker", 0)
            for key in self.KEYS:
                if key in info:
                    self.totals[worker][key] += info[key]
            if "policy_lag" in info:
                self.recent_lags.append(info["policy_lag"])

    def pop_recent_policy_lag(self):
        """Mean policy lag of the rounds since the last call (None if there were none)."""
        lags, self.recent_lags = self.recent_lags, []
        return sum(lags) / len(lags) if lags else None

    def metrics(self):
        """``Workers/g<i>/<Name>`` totals (empty with a single gradient worker)."""
        if len(self.totals) < 2:
            return {}
        return {f"Workers/g{w}/{name}": (int(t[key]) if key == "collected_samples" else float(t[key]))
                for w, t in sorted(self.totals.items()) for key, name in self.KEYS.items() if key in t}


class RunLog:
    """The logs of one run: metrics.csv, hot_swaps.csv, and its sinks (TensorBoard, W&B).

    Parameters
    ----------
    run_dir : str
        The run directory.
    learner : Learner
        Whose metrics and hot-swaps are logged.
    tensorboard : bool
        Write TensorBoard event files (when the package is installed).
    continue_from_step : int or float or None
        None for a new run; the checkpoint's env step when resuming; ``math.inf`` to keep
        every row and append (a run whose state is restored later, from elsewhere: a trial
        that Ray Tune restarted, see ``pytorchrl.tune``).
    sinks : sequence
        More sinks that receive every row and hot-swap (``WandbSink``); they are closed
        with the log.
    warn : callable or None
        Where a warning goes (no tensorboard package): ``warn(line)``; None: stderr.
    """

    def __init__(self, run_dir, learner, tensorboard=True, continue_from_step=None, sinks=(), warn=None):
        self.learner = learner
        self.csv = MetricsCSV(os.path.join(run_dir, METRICS), continue_from_step)
        self.hot_swaps = HotSwapCSV(os.path.join(run_dir, HOT_SWAPS), continue_from_step)
        self.timings = WorkerTimings()
        appending = continue_from_step == math.inf
        writer = tensorboard_writer(os.path.join(run_dir, TENSORBOARD), None if appending else continue_from_step,
                                    warn) if tensorboard else None
        self.sinks = ([TensorBoardSink(writer)] if writer is not None else []) + [s for s in sinks if s is not None]
        # Hot-swaps already in the learner's list are logged (a new run: the schedules'
        # first values) or were logged by the run being resumed (restored from the
        # checkpoint) or continued (appending).
        self._seen_swaps = len(learner.hot_swaps) if continue_from_step is not None else 0
        self.record_hot_swaps("schedule")

    def elapsed(self):
        """Seconds of training (continued across resumes)."""
        return time.time() - self.learner.start_time

    def write_metrics(self, metrics):
        """Append one row of ``metrics`` (plus per-worker timings) to metrics.csv and the sinks.

        Parameters
        ----------
        metrics : dict
            ``Learner.get_metrics`` output; updated in place with the worker timings.
        """
        metrics.update(self.timings.metrics())
        self.csv.append(metrics)
        if self.sinks:
            step, scalars = int(metrics[STEP_COLUMN]), _finite_scalars(metrics)
            for sink in self.sinks:
                sink.scalars(scalars, step)

    def write_summary(self, values):
        """Hand the end-of-run results (what summary.yaml holds) to the sinks."""
        for sink in self.sinks:
            sink.summary(values)

    def record_hot_swaps(self, source, detail=""):
        """Log the learner's hot-swaps made since the last call, attributing them to ``source``.

        Parameters
        ----------
        source : str
            What made them: "schedule", "live" (``pytorchrl set``), "resume" (an override),
            "pbt" (a population's copy and perturbation) or "tune" (Ray Tune's).
        detail : str
            The request id of a live change, the member copied, ...

        Returns
        -------
        list of tuple
            The new ``(step, kind, name, value)`` entries.
        """
        new = self.learner.hot_swaps[self._seen_swaps:]
        self._seen_swaps = len(self.learner.hot_swaps)
        for step, kind, name, value in new:
            self._log_swap(step, kind, name, value, source, "applied", detail)
        return new

    def skip_hot_swaps(self):
        """Count the learner's hot-swaps as logged: its list was replaced by a restored
        state's, whose changes were logged by the run that made them."""
        self._seen_swaps = len(self.learner.hot_swaps)

    def record_refusal(self, name, value, reason, detail=""):
        """Log a change that was asked for and refused (the run goes on unchanged).

        Parameters
        ----------
        name : str
            The key as requested ("lr", "algorithm.lr").
        value : object
            The requested value.
        reason : str
            Why it was refused.
        detail : str
            The request id.
        """
        self._log_swap(self.learner.num_samples_collected, "", name, value, "live", "refused",
                       f"{detail}: {reason}" if detail else reason)

    def _log_swap(self, step, kind, name, value, source, status, detail):
        self.hot_swaps.append(step=step, elapsed=round(self.elapsed(), 3), kind=kind, name=name, value=value,
                              source=source, status=status, detail=detail)
        number = status == "applied" and isinstance(value, (int, float)) and not isinstance(value, bool)
        text = (f"step {step}: {kind + '.' if kind else ''}{name} = {value!r} "
                f"({source}, {status}{'; ' + detail if detail else ''})")
        for sink in self.sinks:
            sink.hot_swap(step, kind, name, value if number else None, text)

    def close(self, failed=False):
        """Close every sink (idempotent): flush TensorBoard, finish the W&B run (marked failed
        when ``failed``: the job ends with an error)."""
        sinks, self.sinks = self.sinks, []
        for sink in sinks:
            sink.close(failed=failed)
