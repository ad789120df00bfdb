"""The progress display of a training run.

On a terminal one status line is redrawn in place (``\\r``): env steps / target, steps per
second, recent return, policy lag, elapsed and remaining time. When the output is not a
terminal (CI logs, files, pipes) a plain line is printed every ``learner.log_every``
seconds instead, so that logs stay readable. Messages (a live change applied, a
checkpoint) are printed as lines of their own in both modes.
"""

import math
import shutil
import sys

#: Progress modes: "auto" picks "live" on a terminal and "plain" elsewhere.
MODES = ("auto", "live", "plain", "quiet")


def format_duration(seconds):
    """``1:02:03`` / ``2:03`` for a number of seconds; ``--:--`` when unknown."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "--:--"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _finite(value):
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def remaining_seconds(steps, target_steps, fps):
    """Seconds left at ``fps`` steps per second (None when the speed is not known yet)."""
    if fps is None or fps <= 0:
        return None
    return max(0, target_steps - steps) / fps


def format_progress(metrics, target_steps):
    """One plain progress line from a ``Learner.get_metrics`` dict.

    Parameters
    ----------
    metrics : dict
        ``"Group/Name" -> value`` (with episode, scheme and time metrics).
    target_steps : int
        Steps of the whole run, for the percentage and the remaining time.
    """
    steps = metrics["Scheme/EnvSteps"]
    parts = [f"[{metrics.get('Time/Elapsed', 0):6.0f}s] steps {steps:,}/{target_steps:,} "
             f"({100 * steps / target_steps:.0f}%)"]
    if "Time/FPS" in metrics:
        parts.append(f"{metrics['Time/FPS']:,.0f} steps/s")
    for key, label in (("Episodes/TrainReward", "train return"), ("Episodes/TestReward", "test return"),
                       ("Algorithm/Loss", "loss"), ("Algorithm/Entropy", "entropy"),
                       ("Scheme/PolicyLag", "policy lag")):
        value = metrics.get(key)
        if _finite(value):
            parts.append(f"{label} {value:.4g}")
    if "Time/FPS" in metrics:
        parts.append(f"{format_duration(remaining_seconds(steps, target_steps, metrics['Time/FPS']))} left")
    return " | ".join(parts)


def format_status(steps, target_steps, fps, elapsed, train_return=None, test_return=None, policy_lag=None,
                  width=None):
    """The live status line.

    Parameters
    ----------
    steps, target_steps : int
        Env steps so far and of the whole run.
    fps : float
        Recent env steps per second.
    elapsed : float
        Seconds of training so far.
    train_return, test_return, policy_lag : float or None
        Recent mean training return, latest test return, recent mean policy lag.
    width : int or None
        Columns available: the least useful parts (test return, then policy lag, then
        steps per second) are left out until the line fits.
    """
    # (text, rank): parts with the highest rank go first when the line is too long.
    parts = [(f"{100 * steps / target_steps:3.0f}% {steps:,}/{target_steps:,} steps", 0),
             (f"{fps:,.0f} steps/s", 3)]
    if _finite(train_return):
        parts.append((f"return {train_return:.1f}", 1))
    if _finite(test_return):
        parts.append((f"test {test_return:.1f}", 5))
    if _finite(policy_lag):
        parts.append((f"lag {policy_lag:.1f}", 4))
    parts.append((f"{format_duration(elapsed)} elapsed, "
                  f"{format_duration(remaining_seconds(steps, target_steps, fps))} left", 2))
    line = " | ".join(text for text, _ in parts)
    while width is not None and len(line) > width and len(parts) > 3:
        parts.remove(max(parts, key=lambda p: p[1]))
        line = " | ".join(text for text, _ in parts)
    return line


class ProgressDisplay:
    """Shows the progress of a run on ``stream``.

    Parameters
    ----------
    target_steps : int
        Env steps of the whole run.
    stream : file or None
        Where to write (default: stdout).
    mode : str
        One of ``MODES``: "live" (one line redrawn), "plain" (a line per log interval),
        "quiet" (messages only), "auto" ("live" when ``stream`` is a terminal).
    """

    def __init__(self, target_steps, stream=None, mode="auto"):
        if mode not in MODES:
            raise ValueError(f"progress mode must be one of {MODES}, got {mode!r}")
        self.stream = stream or sys.stdout
        if mode == "auto":
            isatty = getattr(self.stream, "isatty", None)
            mode = "live" if isatty is not None and isatty() else "plain"
        self.mode = mode
        self.target_steps = target_steps
        self._line = ""   # the status line on screen (live mode)

    @property
    def live(self):
        """True when a status line is redrawn in place."""
        return self.mode == "live"

    def _write(self, text):
        if self.stream is None:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except BrokenPipeError:
            # Whoever read the output is gone (`pytorchrl train ... | head`): training goes
            # on, silently; the run directory still gets everything.
            self.stream, self.mode = None, "quiet"

    @property
    def width(self):
        """Columns a status line may use (one less than the terminal's)."""
        return max(10, shutil.get_terminal_size((100, 24)).columns - 1)

    def status(self, line):
        """Redraw the status line (live mode only)."""
        if not self.live:
            return
        # Longer than the terminal, the line would wrap and \r would redraw only its end.
        self._line = line[:self.width]
        self._write("\r" + self._line + "\x1b[K")

    def log(self, metrics, live_line=None):
        """One log interval: a plain line, or (live) the status line ``live_line``.

        Parameters
        ----------
        metrics : dict
            Metrics of the interval (``Learner.get_metrics``).
        live_line : str or None
            Status line to draw in live mode.
        """
        if self.mode == "plain":
            self._write(format_progress(metrics, self.target_steps) + "\n")
        elif self.live and live_line is not None:
            self.status(live_line)

    def message(self, text):
        """Print ``text`` on a line of its own (above the status line in live mode)."""
        if self.live and self._line:
            self._write("\r\x1b[K" + text + "\n" + "\r" + self._line + "\x1b[K")
        else:
            self._write(text + "\n")

    def close(self):
        """End the status line, so that what follows starts on a new line."""
        if self.live and self._line:
            self._write("\n")
            self._line = ""
