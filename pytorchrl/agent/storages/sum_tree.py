"""Sum tree for prioritized experience replay (Schaul et al., 2016).

A :class:`SumTree` stores one non-negative priority per replay slot and serves, in
O(log n) per item and vectorised over a batch, the three queries proportional
prioritization needs: the sum of all priorities, the smallest positive priority (for the
importance-sampling normalisation) and the slot at a given prefix sum (to sample slot
``i`` with probability ``p_i / sum_j p_j``). :func:`importance_weights` turns the sampled
priorities into the paper's normalised importance-sampling weights.

Everything is numpy; the only Python loops run over the ``log2(capacity)`` tree levels.
"""

import numbers

import numpy as np

__all__ = ["SumTree", "importance_weights"]


def _check_int(name, value, minimum):
    # bool is an Integral too, but True as a capacity or a batch size is always a mistake.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


class SumTree:
    """Binary tree of priorities; the root holds their sum.

    Leaves are replay slots ``0 .. capacity - 1``; each inner node holds the sum of its two
    children, so the root holds the total priority and a prefix-sum search is one descent.
    A second tree over the same leaves holds minima instead of sums (zero priorities count
    as ``+inf`` there), which keeps :meth:`min` O(1).

    Parameters
    ----------
    capacity : int
        Number of leaves (replay slots), at least 1. Any value is accepted: the tree is
        padded internally to the next power of two with leaves of priority 0, which are
        never found nor sampled.

    Attributes
    ----------
    capacity : int
        The number of leaves asked for; valid indices are ``0 .. capacity - 1``.

    Notes
    -----
    Sums are kept in float64. Inner nodes are recomputed from their children on every
    update rather than adjusted by the change in priority, so rounding errors never
    accumulate over the life of the buffer.
    """

    def __init__(self, capacity):
        self.capacity = _check_int("capacity", capacity, 1)
        # Leaves are nodes _size .. 2 * _size - 1 and node k's children are 2k and 2k + 1;
        # node 0 is unused so that this arithmetic needs no offsets.
        self._depth = (self.capacity - 1).bit_length()
        self._size = 1 << self._depth
        self._sum = np.zeros(2 * self._size, dtype=np.float64)
        self._min = np.full(2 * self._size, np.inf, dtype=np.float64)

    # ------------------------------------------------------------------ queries
    def total(self):
        """Sum of all priorities.

        Returns
        -------
        float
            The root of the sum tree (0.0 while every priority is 0).
        """
        return float(self._sum[1])

    def min(self):
        """Smallest positive priority.

        Returns
        -------
        float
            The smallest priority among leaves whose priority is > 0, or ``np.inf`` when
            there is none.
        """
        return float(self._min[1])

    def get(self, indices):
        """Priorities of some leaves.

        Parameters
        ----------
        indices : array_like of int
            Leaf indices in ``[0, capacity)``, any shape.

        Returns
        -------
        np.ndarray
            float64 priorities, same shape as ``indices`` (a copy, not a view).
        """
        indices = self._check_indices(indices)
        return self._sum[indices + self._size]

    # ------------------------------------------------------------------ updates
    def update(self, indices, priorities):
        """Set the priorities of some leaves and refresh their ancestors.

        Parameters
        ----------
        indices : array_like of int
            Leaf indices in ``[0, capacity)``, any shape. An index may repeat: the value
            given last (in C order) is the one kept.
        priorities : array_like of float
            New priorities, finite and >= 0, broadcastable to the shape of ``indices``
            (a scalar sets every listed leaf to the same value).

        Raises
        ------
        ValueError
            If an index is not an integer or is out of range, if a priority is negative,
            NaN or infinite, or if the shapes do not broadcast. The tree is left unchanged.
        """
        indices = self._check_indices(indices)
        priorities = np.asarray(priorities, dtype=np.float64)
        try:
            priorities = np.broadcast_to(priorities, indices.shape)
        except ValueError:
            raise ValueError(
                f"priorities of shape {priorities.shape} do not match indices of shape "
                f"{indices.shape}"
            ) from None
        if not np.all(np.isfinite(priorities)):
            raise ValueError("priorities must be finite (no NaN or inf)")
        if np.any(priorities < 0):
            raise ValueError("priorities must be >= 0")
        indices = indices.ravel()
        if indices.size == 0:
            return
        # numpy leaves unspecified which write wins for repeated indices in a fancy
        # assignment, so make "last wins" explicit: the first occurrence in the reversed
        # array is the last one. np.unique also sorts, which the level loop relies on.
        nodes, first = np.unique(indices[::-1], return_index=True)
        values = priorities.ravel()[::-1][first]
        nodes = nodes + self._size
        self._sum[nodes] = values
        self._min[nodes] = np.where(values > 0, values, np.inf)
        for _ in range(self._depth):
            parents = nodes >> 1
            # nodes are sorted, so siblings are adjacent and one comparison dedups them.
            keep = np.ones(parents.size, dtype=bool)
            keep[1:] = parents[1:] != parents[:-1]
            nodes = parents[keep]
            left = 2 * nodes
            self._sum[nodes] = self._sum[left] + self._sum[left + 1]
            self._min[nodes] = np.minimum(self._min[left], self._min[left + 1])

    # ------------------------------------------------------------------ search
    def find(self, values):
        """Leaves at given prefix sums.

        For each ``v`` in ``[0, total)`` this returns the leaf ``i`` with
        ``cumsum[i - 1] <= v < cumsum[i]`` (``cumsum`` the running sum of the priorities,
        ``cumsum[-1] = 0``), i.e. the leaf a uniform ``v`` lands in with probability
        ``p_i / total``. Leaves of priority 0 are never returned.

        Parameters
        ----------
        values : array_like of float
            Prefix sums, any shape, finite and >= 0. Values >= ``total`` (which floating
            point rounding can produce from draws meant to be below it) give the last leaf
            whose priority is > 0.

        Returns
        -------
        np.ndarray
            int64 leaf indices, same shape as ``values``.

        Raises
        ------
        ValueError
            If the total priority is 0 or a value is negative, NaN or infinite.
        """
        values = np.array(values, dtype=np.float64)  # a copy: the descent edits it
        if not self._sum[1] > 0:
            raise ValueError("cannot search a tree whose total priority is 0")
        if not np.all(np.isfinite(values)):
            raise ValueError("values must be finite (no NaN or inf)")
        if np.any(values < 0):
            raise ValueError("values must be >= 0")
        shape = values.shape
        values = values.ravel()
        nodes = np.ones(values.size, dtype=np.int64)
        for _ in range(self._depth):
            left = 2 * nodes
            left_sum = self._sum[left]
            # Going right only into a subtree of positive sum is the right-edge guard: a
            # value at or past the total (rounding) then ends on the last positive leaf
            # instead of a zero (or padding) leaf; and since every node visited has a
            # positive sum, one of its children does too, so no descent reaches a zero.
            right = (values >= left_sum) & (self._sum[left + 1] > 0)
            values -= np.where(right, left_sum, 0.0)
            nodes = left + right
        return (nodes - self._size).reshape(shape)

    def sample(self, batch_size, rng):
        """Stratified proportional sampling.

        ``[0, total)`` is split into ``batch_size`` equal segments and one value is drawn
        uniformly in each, so the batch covers the whole distribution (lower variance than
        independent draws) while each draw still has marginal probability ``p_i / total``
        averaged over segments. The returned indices are sorted (non-decreasing).

        Parameters
        ----------
        batch_size : int
            Number of leaves to draw, at least 1. Leaves may repeat.
        rng : np.random.Generator
            Source of the uniform draws.

        Returns
        -------
        indices : np.ndarray
            int64 leaf indices, shape ``(batch_size,)``.
        priorities : np.ndarray
            float64 priorities of those leaves, shape ``(batch_size,)``.

        Raises
        ------
        ValueError
            If ``batch_size`` is not a positive integer or the total priority is 0.
        """
        batch_size = _check_int("batch_size", batch_size, 1)
        total = self._sum[1]
        if not total > 0:
            raise ValueError("cannot sample from a tree whose total priority is 0")
        segment = total / batch_size
        values = (np.arange(batch_size) + rng.random(batch_size)) * segment
        indices = self.find(values)
        return indices, self._sum[indices + self._size]

    # ------------------------------------------------------------------ helpers
    def _check_indices(self, indices):
        indices = np.asarray(indices)
        if indices.size == 0:
            # np.asarray([]) is float64; an empty selection is still a valid one.
            return indices.astype(np.int64)
        if indices.dtype.kind not in "iu":
            raise ValueError(f"indices must be integers, got dtype {indices.dtype}")
        if np.any(indices < 0) or np.any(indices >= self.capacity):
            raise ValueError(f"indices must be in [0, {self.capacity})")
        return indices.astype(np.int64, copy=False)


def importance_weights(priorities, total, min_priority, num_items, beta):
    """Normalised importance-sampling weights of prioritized replay.

    With ``P(i) = p_i / total`` the probability of sampling item ``i``, the weight is
    ``w_i = (N * P(i)) ** -beta`` divided by the largest weight any stored item can have,
    ``(N * P_min) ** -beta``, as in Schaul et al. (2016), so every weight is in ``(0, 1]``.

    Parameters
    ----------
    priorities : array_like of float
        Priorities ``p_i`` of the sampled items, any shape, each > 0 (an item of priority
        0 cannot have been sampled).
    total : float
        Sum of all priorities (:meth:`SumTree.total`), > 0.
    min_priority : float
        Smallest positive priority stored (:meth:`SumTree.min`), > 0 and not above any
        entry of ``priorities``.
    num_items : int
        Number ``N`` of items stored, at least 1.
    beta : float
        Exponent in ``[0, 1]``: 0 gives weights of 1 (no correction), 1 fully
        compensates the non-uniform sampling.

    Returns
    -------
    np.ndarray
        float32 weights, same shape as ``priorities``.

    Raises
    ------
    ValueError
        If an argument is outside the ranges above.

    Notes
    -----
    ``N`` and ``total`` cancel in the ratio: ``w_i = (p_min / p_i) ** beta``. That form is
    what is computed, because it cannot overflow or underflow for large ``N`` or tiny
    probabilities where the two separate powers could. ``total`` and ``num_items`` are
    still validated, so a caller passing the wrong quantities hears about it.
    """
    priorities = np.asarray(priorities, dtype=np.float64)
    total = float(total)
    min_priority = float(min_priority)
    beta = float(beta)
    _check_int("num_items", num_items, 1)
    if not (np.isfinite(total) and total > 0):
        raise ValueError(f"total must be finite and > 0, got {total}")
    if not (np.isfinite(min_priority) and min_priority > 0):
        raise ValueError(f"min_priority must be finite and > 0, got {min_priority}")
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must be in [0, 1], got {beta}")
    if not np.all(np.isfinite(priorities)):
        raise ValueError("priorities must be finite (no NaN or inf)")
    # A priority below the stored minimum would get a weight above 1; it means the minimum
    # is stale (read before an update) or comes from another tree.
    if np.any(priorities < min_priority):
        raise ValueError("every priority must be >= min_priority (and so > 0)")
    if np.any(priorities > total):
        raise ValueError("no priority can exceed the total")
    return ((min_priority / priorities) ** beta).astype(np.float32)
