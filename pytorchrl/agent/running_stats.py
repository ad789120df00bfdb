"""Running mean and variance of a stream of arrays (Chan et al.'s parallel update).

Batches of any size combine exactly, in any grouping: the statistics of a rollout can be
computed where it was collected (``moments``) and merged where they are kept
(``combine``), giving the mean and variance of every observation seen so far. Used by
RND's observation statistics (``RunningMeanStd``) and by the actors' observation
normalisation (``pytorchrl.agent.actors.normalization``).
"""

import numpy as np


def moments(x):
    """``(count, mean, var)`` of the rows of ``x`` (n, *shape), in float64 (population
    variance, as ``numpy.var``).

    Parameters
    ----------
    x : array-like
        The rows.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.shape[0] == 0:
        return 0, np.zeros(x.shape[1:]), np.ones(x.shape[1:])
    return int(x.shape[0]), x.mean(axis=0), x.var(axis=0)


def combine(count, mean, var, batch_count, batch_mean, batch_var):
    """``(count, mean, var)`` of two sets of rows given by theirs (float64).

    Parameters
    ----------
    count, mean, var : int, array, array
        The statistics held so far (``count`` 0: none, ``mean`` and ``var`` ignored).
    batch_count, batch_mean, batch_var : int, array, array
        Those of the rows added (``batch_count`` 0: nothing is added).
    """
    if batch_count == 0:
        return count, mean, var
    if count == 0:
        return batch_count, np.array(batch_mean, dtype=np.float64), np.array(batch_var, dtype=np.float64)
    total = count + batch_count
    delta = batch_mean - mean
    m2 = var * count + batch_var * batch_count + delta ** 2 * count * batch_count / total
    return total, mean + delta * batch_count / total, m2 / total


class RunningMeanStd:
    """Mean and variance of a stream of arrays, element-wise over the leading axis
    (Chan et al.'s parallel update: batches of any size combine exactly).

    Parameters
    ----------
    shape : tuple
        Shape of one element.
    """

    def __init__(self, shape=()):
        self.mean = np.zeros(shape, dtype=np.float64)
        self.var = np.ones(shape, dtype=np.float64)
        self.count = 0

    def update(self, x):
        """Add the rows of ``x`` (n, *shape) to the statistics."""
        self.count, self.mean, self.var = combine(self.count, self.mean, self.var, *moments(x))

    @property
    def std(self):
        """Standard deviation (floored at 1e-8)."""
        return np.sqrt(np.maximum(self.var, 1e-16))

    def state_dict(self):
        """``mean``, ``var`` (copies) and ``count``, for checkpoints."""
        return {"mean": np.array(self.mean), "var": np.array(self.var), "count": int(self.count)}

    def load_state_dict(self, state, name="statistics"):
        """Restore a ``state_dict`` (its arrays may be tensors, as a checkpoint reads them).

        Parameters
        ----------
        state : dict
            ``mean``, ``var`` and ``count``.
        name : str
            What these statistics are, for the error message.

        Raises
        ------
        ValueError
            The saved arrays do not have this one's shape.
        """
        mean, var = np.array(state["mean"], dtype=np.float64), np.array(state["var"], dtype=np.float64)
        if mean.shape != self.mean.shape or var.shape != self.mean.shape:
            raise ValueError(f"the saved {name} have shape {mean.shape}, this run's {self.mean.shape}")
        self.mean, self.var, self.count = mean, var, int(state["count"])


__all__ = ["RunningMeanStd", "combine", "moments"]
