"""The actors' observation normalisation, written once for numpy arrays and torch tensors.

``normalized`` is what ``ObservationNormalizer`` (pytorchrl.agent.actors.normalization)
computes in torch at the actor's input, and what every numpy engine (acting, updates)
computes on the observations it reads, so that a fast path never runs without it.
"""

import numpy as np

from pytorchrl.agent.accel.xp import NUMPY

#: Added to the variance before its square root (as stable-baselines3's VecNormalize).
EPSILON = 1e-8


def normalized(xp, x, mean, var, clip, mask=None):
    """``clip((x - mean) / sqrt(var + EPSILON), -clip, clip)`` in float32, where ``mask``
    is true (every entry when None); ``x`` elsewhere.

    Parameters
    ----------
    xp : NumpyNamespace or TorchNamespace
        The array namespace of ``x``.
    x : np.ndarray or torch.Tensor
        Observations (B, D), float32.
    mean, var : np.ndarray or torch.Tensor
        Statistics (D,) of one observation, float32.
    clip : float
        Normalised values are clipped to [-clip, clip].
    mask : np.ndarray, torch.Tensor or None
        (D,) bool: the entries normalised.
    """
    y = xp.clip((x - mean) / xp.sqrt(var + EPSILON), -clip, clip)
    return y if mask is None else xp.where(mask, y, x)


class NumpyNormalizer:
    """An actor's ``ObservationNormalizer`` in numpy: ``normalizer(obs (B, D) float32)``
    returns a new array (the observations read may be views of a storage). It reads the
    statistics through views of the actor's buffers, so the learner's updates and the
    weights loaded by a collector apply at once.

    Parameters
    ----------
    module : ObservationNormalizer
        The actor's ``obs_norm`` (on the CPU).
    """

    def __init__(self, module):
        self.mean = module.mean.detach().numpy()
        self.var = module.var.detach().numpy()
        self.clip = np.float32(module.clip)
        self.mask = None if module.mask is None else module.mask.numpy()

    def __call__(self, x):
        return normalized(NUMPY, x, self.mean.astype(np.float32), self.var.astype(np.float32), self.clip, self.mask)


def numpy_normalizer(actor):
    """The numpy program of ``actor``'s observation normalisation (``NumpyNormalizer``),
    or the identity for an actor that does not normalise its observations."""
    module = getattr(actor, "obs_norm", None)
    return _identity if module is None else NumpyNormalizer(module)


def _identity(x):
    return x


__all__ = ["EPSILON", "NumpyNormalizer", "normalized", "numpy_normalizer"]
