"""Parameter schedules: hot-swaps planned in advance, applied by the Learner between updates.

A schedule maps the number of environment steps collected so far to a value of one
algorithm or storage parameter. The Learner evaluates every schedule after each update and
sends a hot-swap when the value changed by more than ``min_relative_change`` (so a linear
schedule does not flood remote workers with one message per update).
"""

VALID_TARGETS = ("algorithm", "storage")
VALID_KINDS = ("linear", "step", "constant")


class Schedule:
    """A planned change of one parameter over environment steps.

    Parameters
    ----------
    name : str
        Parameter name (e.g. "lr", "clip_param", "gae_lambda").
    target : str
        "algorithm" or "storage": whose parameter it is.
    kind : str
        "linear": from ``start`` at ``start_step`` to ``end`` at ``end_step``, constant outside.
        "step": ``start`` before ``start_step``, ``end`` from ``start_step`` on.
        "constant": ``start`` from ``start_step`` on (nothing before).
    start : float
        Value at (or before) ``start_step``.
    end : float or None
        Value at (or after) ``end_step`` ("linear") or from ``start_step`` on ("step").
    start_step : int
        Environment step where the schedule starts.
    end_step : int or None
        Environment step where a linear schedule ends; None means the Learner's
        ``target_steps``.
    min_relative_change : float
        Smallest relative change of the value that is worth a hot-swap.
    """

    def __init__(self, name, target="algorithm", kind="linear", start=None, end=None, start_step=0,
                 end_step=None, min_relative_change=0.01):
        if target not in VALID_TARGETS:
            raise ValueError(f"schedule target must be one of {VALID_TARGETS}, got {target!r}")
        if kind not in VALID_KINDS:
            raise ValueError(f"schedule kind must be one of {VALID_KINDS}, got {kind!r}")
        if start is None:
            raise ValueError(f"schedule of {name!r} needs a start value")
        if kind in ("linear", "step") and end is None:
            raise ValueError(f"{kind} schedule of {name!r} needs an end value")
        if end_step is not None and end_step <= start_step and kind == "linear":
            raise ValueError(f"linear schedule of {name!r} needs end_step > start_step")
        self.name, self.target, self.kind = name, target, kind
        self.start, self.end = start, end
        self.start_step, self.end_step = int(start_step), end_step
        self.min_relative_change = float(min_relative_change)
        self.last_sent = None

    def value(self, step, total_steps):
        """Value of the parameter at environment step ``step`` (None: leave it as it is)."""
        if self.kind == "constant":
            return self.start if step >= self.start_step else None
        if self.kind == "step":
            return self.end if step >= self.start_step else self.start
        end_step = self.end_step if self.end_step is not None else total_steps
        frac = min(1.0, max(0.0, (step - self.start_step) / max(1, end_step - self.start_step)))
        # At the end exactly ``end``: start + (end - start) can miss it by a rounding, and
        # that value, within ``min_relative_change`` of the last one sent, was never sent.
        value = self.end if frac >= 1.0 else self.start + frac * (self.end - self.start)
        return int(round(value)) if isinstance(self.start, int) and isinstance(self.end, int) else float(value)

    def due(self, step, total_steps):
        """The value to send now, or None when the change since the last one is too small."""
        value = self.value(step, total_steps)
        if value is None:
            return None
        last = self.last_sent
        if last is not None:
            if value == last:
                return None
            if isinstance(value, float) and last != 0 and \
                    abs(value - last) / abs(last) < self.min_relative_change and value != self.end:
                return None
        self.last_sent = value
        return value

    def __repr__(self):
        return (f"Schedule({self.name!r}, target={self.target!r}, kind={self.kind!r}, start={self.start}, "
                f"end={self.end}, start_step={self.start_step}, end_step={self.end_step})")
