"""EXARL's ``ExaData`` (seed 001), apart from the other base classes: the queue server's
process builds a user's memory pool with it and imports neither torch nor gymnasium
(``pytorchrl.agent.exarl`` re-exports it with ``ExaAgent`` and ``ExaEnv``)."""

import abc

import numpy as np


class ExaData(abc.ABC):
    """EXARL's memory pool between actors and learners: one window per rank (an actor),
    written by ``push`` and read by ``pop`` (seed 001). A subclass is the memory pool of
    the RMA workflows (the queue data path's ``queues.kind``): the queue server builds it as
    ``cls(dataType, size, comm_size=..., max_model_lag=..., name=...)``, pushes each
    rollout of collector ``rank`` and pops the windows its selection rule picks.

    Parameters
    ----------
    dataType : type
        What a window holds (the queue server passes ``object``: a rollout item).
    size : int
        Capacity of a window, in items (the queue server passes ``queues.size``).
    comm_size : int
        Number of windows (ranks): the collectors, or the gradient workers with
        ``queues.route: learner``.
    max_model_lag : int or None
        ``get_data`` drops an item whose version is more than this behind the learner's
        (None: any lag).
    name : str or None
        A name for messages.
    """

    def __init__(self, dataType, size, comm_size=1, max_model_lag=None, name=None):  # noqa: N803 (EXARL's name)
        self.dataType = dataType
        self.dataSize = size
        self.comm_size = int(comm_size)
        self.max_model_lag = None if max_model_lag in (None, "none") else int(max_model_lag)
        self.name = name

    @abc.abstractmethod
    def pop(self, rank, count=1):
        """Take the next item of window ``rank`` (``count``: how many the caller wants; one is
        enough); None when the window is empty."""

    @abc.abstractmethod
    def push(self, data, rank=None):
        """Write ``data`` into window ``rank``. Returns EXARL's ``(capacity, lost)``: how many
        items the window holds, and 1 when an item was lost for it (the oldest overwritten,
        or this one refused by a full window), else 0."""

    def get_data(self, learner_counter, low, high):
        """EXARL's read of a learner: pop the window of a random rank in ``[low, high)``; an
        item is ``(data, version)``. Returns ``(data, rank, version)``, or ``(None, -1, -1)``
        when that window was empty or its item more than ``max_model_lag`` versions behind
        ``learner_counter``."""
        rank = int(np.random.randint(low, high))
        item = self.pop(rank)
        if item:
            data, version = item[0], item[1]
            if self.max_model_lag is None or learner_counter - version <= self.max_model_lag:
                return data, rank, version
        return None, -1, -1


__all__ = ["ExaData"]
