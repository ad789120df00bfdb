"""Gradient kernels of every update: global norms, finiteness checks and clipping of the
``.grad`` tensors of one device and dtype, with less per-call overhead than torch's
``clip_grad_norm_`` (they run after every mini-batch)."""

import math

import numpy as np
import torch

from pytorchrl.agent.accel.private_torch import all_finite, foreach_mul_, foreach_norms


def grad_norm(grads):
    """Global L2 norm of ``grads`` (tensors of one device and dtype), as a float: inf or
    NaN when a gradient holds an infinity or a NaN.

    On the CPU the norm is taken in numpy on views of the gradients (a few hundred
    nanoseconds per array, where each torch operator costs microseconds of dispatch): it
    runs after every mini-batch.

    Parameters
    ----------
    grads : list of tensors
        The gradients (at least one).
    """
    if grads[0].device.type == "cpu":
        arrays = [g.detach().numpy() for g in grads]
        total = float(np.sqrt(sum(float(np.vdot(a, a)) for a in arrays)))
        if not math.isfinite(total) and all(np.isfinite(a).all() for a in arrays):
            # Finite gradients whose squares overflow float32 (above ~1e19): the norm in
            # float64, so that they are clipped, not mistaken for a numerical fault.
            total = float(np.sqrt(sum(float(np.vdot(a, a)) for a in (x.astype(np.float64) for x in arrays))))
        return total
    # One synchronisation with the device per update, which clipping needed anyway.
    total = float(torch.linalg.vector_norm(torch.stack(foreach_norms(grads))))
    if not math.isfinite(total) and all(bool(torch.isfinite(g).all()) for g in grads):
        total = float(torch.linalg.vector_norm(torch.stack([g.double().norm() for g in grads])))
    return total


def grads_finite(grads):
    """True when no tensor of ``grads`` holds a NaN or an infinity (one fused pass over all
    of them where torch offers it: ``private_torch.all_finite``).

    Parameters
    ----------
    grads : list of tensors
        Gradients of one device (an empty list is finite).
    """
    return all_finite(grads)


def scale_grads(grads, coef):
    """Multiply ``grads`` in place by ``min(coef, 1)`` (nothing when ``coef >= 1``).

    Parameters
    ----------
    grads : list of tensors
        Gradients of one device and dtype.
    coef : float
        Scale factor.
    """
    if coef >= 1.0:
        return
    if grads[0].device.type == "cpu":
        for g in grads:
            a = g.detach().numpy()
            a *= coef
    else:
        foreach_mul_(grads, coef)


def clip_grad_norm(parameters, max_norm):
    """Scale gradients in place so that their global L2 norm is at most ``max_norm``.

    Same result as ``torch.nn.utils.clip_grad_norm_`` for the gradients of one device and
    dtype, with less overhead (see ``grad_norm``).

    Parameters
    ----------
    parameters : iterable of torch.nn.Parameter
        Parameters whose ``.grad`` is clipped (those without a gradient are skipped).
    max_norm : float
        Largest global norm allowed.

    Returns
    -------
    float
        The global norm before clipping.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return 0.0
    total = grad_norm(grads)
    scale_grads(grads, max_norm / (total + 1e-6))
    return total


def clip_norms(groups, clip, together=False):
    """The norm each group of gradients is to be clipped by, or None when some gradient
    holds a NaN or an infinity (the update must then be skipped).

    With clipping, the norms it needs anyway are the finiteness check; without, one
    fused pass checks every gradient (``grads_finite``).

    Parameters
    ----------
    groups : dict
        Group name -> list of gradient tensors (each list non-empty).
    clip : bool
        Whether the gradients are clipped (False: every norm is None).
    together : bool
        One norm over every group taken together (each group then gets that norm)
        instead of each group's own.

    Returns
    -------
    dict or None
        Group name -> norm (a float; None without ``clip``), or None.
    """
    if not clip:
        if not grads_finite([g for grads in groups.values() for g in grads]):
            return None
        return dict.fromkeys(groups)
    norms = {name: grad_norm(grads) for name, grads in groups.items()}
    if not all(math.isfinite(total) for total in norms.values()):
        return None
    if together and norms:
        total = math.sqrt(sum(norm * norm for norm in norms.values()))
        norms = dict.fromkeys(norms, total)
    return norms


__all__ = ["grad_norm", "grads_finite", "scale_grads", "clip_grad_norm", "clip_norms"]
