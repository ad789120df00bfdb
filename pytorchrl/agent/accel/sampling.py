"""The policies' sampling formulas, written once: a diagonal Gaussian's log-density and a
categorical draw by the inverse of its cumulative distribution.

Callers: the policy heads (``actors.distributions``), SAC's squashed Gaussian
(``losses.sac``) and the numpy acting paths (``on_policy.NumpyPolicy``,
``off_policy.NumpyOffPolicyActing``).
"""

import math

import numpy as np

#: log(2 pi) / 2, the Gaussian's normalizing constant per dimension.
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def gaussian_log_density(z, log_std):
    """Log-density (N, 1) of a diagonal Gaussian at the standardized deviations ``z =
    (x - mean) / std`` (N, D): ``sum_d -z^2 / 2 - log std - log(2 pi) / 2``. Numpy arrays
    or torch tensors (differentiable)."""
    return (-0.5 * z * z - log_std - HALF_LOG_2PI).sum(axis=-1, keepdims=True)


def gaussian_entropy(log_std):
    """Entropy of a diagonal Gaussian with log standard deviations ``log_std`` (D,):
    ``sum_d 1/2 + log(2 pi) / 2 + log std``. Numpy arrays or torch tensors."""
    return (0.5 + HALF_LOG_2PI + log_std).sum()


def categorical_sample(weights, uniform):
    """One draw per row of the categorical distributions proportional to ``weights`` (N, K)
    (non-negative, not necessarily normalized: e.g. ``exp(logits - max)``), by the inverse
    of the cumulative distribution: action ``k`` where ``cdf[k-1] <= u < cdf[k]`` for ``u =
    uniform * cdf[K-1]``; ``uniform`` (N, 1) in [0, 1).

    An action of zero weight spans an empty interval and is never drawn (with ``<``
    instead of ``<=``, a draw of exactly 0 would pick a leading zero-weight action). The
    last index is only a guard against rounding: ``u < cdf[K-1]`` for ``uniform < 1``.

    Returns
    -------
    np.ndarray
        (N, 1) int64 actions.
    """
    cdf = weights.cumsum(axis=1)
    u = uniform * cdf[:, -1:]
    return np.minimum((cdf <= u).sum(axis=1), weights.shape[1] - 1)[:, None].astype(np.int64)


__all__ = ["HALF_LOG_2PI", "gaussian_log_density", "gaussian_entropy", "categorical_sample"]
