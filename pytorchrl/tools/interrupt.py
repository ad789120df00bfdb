"""Ctrl-C and SIGTERM during a training job or a population: a request to stop between two
updates, so that what is saved on the way out is consistent."""

import signal
import threading


class StopOnInterrupt:
    """Context manager turning the first Ctrl-C (or SIGTERM) into a request to stop between updates.

    Stopping at an update boundary leaves the weights and optimizer consistent for the
    model and checkpoint saved on the way out; a second signal raises KeyboardInterrupt at
    once. SIGTERM is what cluster schedulers and ``kill`` send: the run is saved and can be
    resumed.

    It takes over a signal whose handler is Python's default or the one ``ray.init``
    installs (``_replaceable``), in every layout, whether Ray was started before or after
    it is entered (``ray_runtime.ensure_ray`` keeps a handler set before it). Outside the
    main thread, or where a signal is ignored (SIGINT of a background shell job) or handled
    by the embedding program, nothing is changed for it.

    The handler only sets ``requested``: printing from it could re-enter a write to the
    same stream that the signal interrupted.
    """

    SIGNALS = ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL))

    def __init__(self):
        self.requested = False
        self._previous = {}

    def _handler(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum, default in self.SIGNALS:
                current = signal.getsignal(signum)
                if _replaceable(current, default):
                    self._previous[signum] = signal.signal(signum, self._handler)
        return self

    def __exit__(self, *exc):
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}
        return False


def _replaceable(handler, default):
    """Whether StopOnInterrupt may take over a signal whose handler is ``handler``: Python's
    ``default`` one, or one that Ray installed. ``ray.init`` sets a SIGTERM handler that
    exits at once (``sys.exit``), and its core worker a native one that prints a stack
    trace and ends the process with the signal: either would lose the run."""
    if handler is default:
        return True
    module = getattr(handler, "__module__", None) or ""
    return module == "ray" or module.startswith("ray.")
