"""Notices said once per process: a fast path that does not apply, a setting without effect.

A user who expects a fast path learns why it stepped aside, once, and the training log is
not flooded by a message repeated at every update.
"""

import logging

logger = logging.getLogger("pytorchrl")
_said = set()


def say_once(key, message, level=logging.WARNING):
    """Log ``message`` the first time ``key`` is seen in this process.

    Parameters
    ----------
    key : hashable
        Identity of the notice (e.g. ``("numpy acting", "MyActor")``).
    message : str
        What to say.
    level : int
        Logging level: a warning by default; ``logging.INFO`` for what is the normal case
        (a CUDA fast path on a CPU), kept out of a default log.
    """
    if key not in _said:
        _said.add(key)
        logger.log(level, message)


def forget_notices():
    """Forget every notice said so far, so that each is said again (tests that check a
    notice appears start from here)."""
    _said.clear()
