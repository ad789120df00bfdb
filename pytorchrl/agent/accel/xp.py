"""Array namespaces: the few operators the loss kernels use, for numpy arrays and torch tensors.

A loss kernel (``accel.losses``) is written once against ``xp`` and runs on numpy arrays
(the numpy engine, float32) or on torch tensors (the reference path under autograd, and
the fused torch loss). Operators both libraries spell alike (``+``, ``*``, ``.mean()``,
``.sum(axis=..., keepdims=...)``, ``.shape``) are used directly; the others are here.
"""

import numpy as np
import torch
import torch.nn.functional as F


class NumpyNamespace:
    """The operators on numpy arrays (float32 in, float32 out)."""

    name = "numpy"
    exp = staticmethod(np.exp)
    sqrt = staticmethod(np.sqrt)
    log = staticmethod(np.log)
    tanh = staticmethod(np.tanh)
    abs = staticmethod(np.abs)
    sign = staticmethod(np.sign)
    minimum = staticmethod(np.minimum)
    maximum = staticmethod(np.maximum)
    where = staticmethod(np.where)
    clip = staticmethod(np.clip)

    @staticmethod
    def size(x):
        """Number of elements."""
        return x.size

    @staticmethod
    def std(x):
        """Unbiased standard deviation of all elements (as torch's ``std``)."""
        return x.std(ddof=1)

    @staticmethod
    def amax(x, axis):
        """Maximum along ``axis``, the axis kept (size 1)."""
        return x.max(axis=axis, keepdims=True)

    @staticmethod
    def amin(x, axis):
        """Minimum along ``axis``, the axis removed."""
        return x.min(axis=axis)

    @staticmethod
    def argmax(x):
        """Index of each row's maximum, as an integer column (N, 1)."""
        return x.argmax(axis=1)[:, None]

    @staticmethod
    def log_softmax(x):
        """log softmax over the last axis."""
        z = x - x.max(axis=-1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))

    @staticmethod
    def softplus(x):
        """log(1 + exp(x)), stable for large |x|."""
        return np.logaddexp(np.float32(0.0), x)

    @staticmethod
    def take(x, index):
        """``x[i, index[i, 0]]`` as a column (N, 1): the entries of rows at ``index`` (N, 1)."""
        return np.take_along_axis(x, index, axis=1)

    @staticmethod
    def add_at(x, index, values):
        """``x[i, index[i, 0]] += values[i, 0]`` in place; returns ``x``."""
        x[np.arange(x.shape[0]), index[:, 0]] += values[:, 0]
        return x

    @staticmethod
    def concatenate(arrays):
        """Arrays joined along their last axis."""
        return np.concatenate(arrays, axis=-1)

    @staticmethod
    def as_float(x):
        """A boolean array as float32."""
        return x.astype(np.float32)

    @staticmethod
    def stop(x):
        """``x`` outside any gradient (numpy has none)."""
        return x

    @staticmethod
    def item(x):
        """A 0-d result as a Python float."""
        return float(x)


class TorchNamespace:
    """The operators on torch tensors (differentiable where torch's are)."""

    name = "torch"
    exp = staticmethod(torch.exp)
    sqrt = staticmethod(torch.sqrt)
    log = staticmethod(torch.log)
    tanh = staticmethod(torch.tanh)
    abs = staticmethod(torch.abs)
    sign = staticmethod(torch.sign)
    minimum = staticmethod(torch.minimum)
    maximum = staticmethod(torch.maximum)
    where = staticmethod(torch.where)
    clip = staticmethod(torch.clamp)

    @staticmethod
    def size(x):
        """Number of elements."""
        return x.numel()

    @staticmethod
    def std(x):
        """Unbiased standard deviation of all elements."""
        return x.std()

    @staticmethod
    def amax(x, axis):
        """Maximum along ``axis``, the axis kept (size 1); autograd routes the gradient
        to the first maximum, as numpy's ``argmax`` would pick it."""
        return x.max(dim=axis, keepdim=True).values

    @staticmethod
    def amin(x, axis):
        """Minimum along ``axis``, the axis removed; autograd routes the gradient to the
        first minimum, as numpy's ``argmin`` would pick it."""
        return x.min(dim=axis).values

    @staticmethod
    def argmax(x):
        """Index of each row's maximum, as an integer column (N, 1)."""
        return x.argmax(dim=1, keepdim=True)

    @staticmethod
    def log_softmax(x):
        """log softmax over the last axis."""
        return F.log_softmax(x, dim=-1)

    @staticmethod
    def softplus(x):
        """log(1 + exp(x)), stable for large |x|."""
        return F.softplus(x)

    @staticmethod
    def take(x, index):
        """``x[i, index[i, 0]]`` as a column (N, 1)."""
        return x.gather(1, index)

    @staticmethod
    def add_at(x, index, values):
        """``x[i, index[i, 0]] += values[i, 0]`` in place; returns ``x``."""
        return x.scatter_add_(1, index, values)

    @staticmethod
    def concatenate(arrays):
        """Tensors joined along their last dimension."""
        return torch.cat(arrays, dim=-1)

    @staticmethod
    def as_float(x):
        """A boolean tensor as float32."""
        return x.float()

    @staticmethod
    def stop(x):
        """``x`` outside the autograd graph."""
        return x.detach()

    @staticmethod
    def item(x):
        """A 0-d result as a Python float."""
        return float(x)


NUMPY = NumpyNamespace()
TORCH = TorchNamespace()


def namespace_of(x):
    """``TORCH`` for a torch tensor, ``NUMPY`` otherwise."""
    return TORCH if isinstance(x, torch.Tensor) else NUMPY


__all__ = ["NUMPY", "TORCH", "NumpyNamespace", "TorchNamespace", "namespace_of"]
