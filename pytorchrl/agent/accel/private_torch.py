"""The private torch operators the fast paths call, each behind one function with a public
fallback.

Private operators save time where the public API would cost a pass or a dispatch more
(Adam in one kernel, a ReLU's backward on a numpy buffer, a finiteness check of many
tensors at once), but they may change or vanish with a torch release. Each function here
tries the private operator once and, when it is missing or refuses its arguments, uses the
public way for good (``private_in_use`` says which runs); ``private=False`` always takes the
public way (tests/unit/test_accel.py checks that both give the same numbers).
"""

import functools

import torch

_OPS = {}


def _op(name, lookup):
    """The private operator ``name`` (found by ``lookup()`` on first use), or None when
    this torch lacks it or refused it once (``_drop``)."""
    if name not in _OPS:
        try:
            _OPS[name] = lookup()
        except (AttributeError, RuntimeError):
            _OPS[name] = None
    return _OPS[name]


def _drop(name):
    """Use the public way for ``name`` from now on (the private operator refused a call)."""
    _OPS[name] = None


def private_in_use(name):
    """Whether the private operator ``name`` serves the calls ("fused_adam",
    "threshold_backward", "tanh_backward", "non_finite_check")."""
    return _OPS.get(name) is not None


def adam_step_(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, private=True):
    """One Adam step (torch.optim.Adam's arithmetic, no weight decay) in place on float32
    CPU tensors.

    Private: ``torch._fused_adam_``, one pass over every tensor. Public: the same
    arithmetic with one torch operator per term and tensor.

    Parameters
    ----------
    params, grads, exp_avgs, exp_avg_sqs : list of torch.Tensor
        Parameters, their gradients and Adam's two moments (same shapes, in order).
    step : int
        Number of this step (1 for the first).
    lr, beta1, beta2, eps : float
        Adam's hyperparameters.
    private : bool
        False: always the public arithmetic.
    """
    op = _op("fused_adam", lambda: torch._fused_adam_) if private else None
    if op is not None:
        step_t = torch.full((), float(step), dtype=torch.float32)
        try:
            op(params, grads, exp_avgs, exp_avg_sqs, [], [step_t] * len(params), lr=lr, beta1=beta1,
               beta2=beta2, weight_decay=0.0, eps=eps, amsgrad=False, maximize=False)
            return
        except (RuntimeError, TypeError):   # a signature this torch does not take
            _drop("fused_adam")
    bc1 = 1.0 - beta1 ** step
    bc2_sqrt = (1.0 - beta2 ** step) ** 0.5
    step_size = lr / bc1
    for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
        m.lerp_(g, 1.0 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
        denom = v.sqrt().div_(bc2_sqrt).add_(eps)
        p.addcdiv_(m, denom, value=-step_size)


def relu_backward(d, h, private=True):
    """``d * (h > 0)`` for numpy float32 arrays (the gradient through a ReLU whose output is
    ``h``), as a new array.

    Private: ``aten.threshold_backward`` on the arrays' memory (one pass, 2-4x faster than
    numpy on activations of thousands of elements). Public: numpy's product with the mask.

    Parameters
    ----------
    d : np.ndarray
        Gradient with respect to the ReLU's output.
    h : np.ndarray
        The ReLU's output.
    private : bool
        False: always numpy.
    """
    op = _op("threshold_backward", lambda: torch.ops.aten.threshold_backward) if private else None
    if op is not None:
        return op(torch.from_numpy(d), torch.from_numpy(h), 0).numpy()
    return d * (h > 0)


def tanh_backward(grad, y, private=True):
    """``grad * (1 - y * y)`` for tensors: the gradient through a tanh whose output is ``y``.

    Private: ``aten.tanh_backward`` (one kernel). Public: three torch operators.

    Parameters
    ----------
    grad : torch.Tensor
        Gradient with respect to the tanh's output.
    y : torch.Tensor
        The tanh's output.
    private : bool
        False: always the public operators.
    """
    op = _op("tanh_backward", lambda: torch.ops.aten.tanh_backward) if private else None
    if op is not None:
        return op(grad, y)
    return grad * (1.0 - y * y)


_FLAGS = {}


def all_finite(tensors, private=True):
    """True when no tensor of ``tensors`` (one device) holds a NaN or an infinity.

    Private: the check of torch's gradient scaler with a scale of 1
    (``_amp_foreach_non_finite_check_and_unscale_``), one fused pass over all of them.
    Public: ``torch.isfinite`` tensor by tensor.

    Parameters
    ----------
    tensors : list of torch.Tensor
        The tensors (an empty list is finite).
    private : bool
        False: always the public check.
    """
    if not tensors:
        return True
    op = _op("non_finite_check", lambda: torch._amp_foreach_non_finite_check_and_unscale_) if private else None
    if op is not None:
        device = tensors[0].device
        flags = _FLAGS.get(device)
        if flags is None:
            flags = _FLAGS[device] = (torch.zeros(1, device=device), torch.ones(1, device=device))
        found, one = flags
        found.zero_()
        try:
            op(tensors, found, one)
            return not bool(found.item())
        except (RuntimeError, TypeError):   # a dtype or device the fused check does not take
            pass
    return all(bool(torch.isfinite(t).all()) for t in tensors)


def _cpu_flags():
    """The instruction-set flags of this machine's CPU (Linux's /proc/cpuinfo), or None."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


@functools.lru_cache(maxsize=None)
def cpu_has_native_bf16(private=True):
    """True when this CPU computes bfloat16 products natively (AVX512-BF16 or AMX): below
    that, oneDNN emulates bfloat16, slower than float32.

    Private: torch's own CPU checks (``torch.cpu._is_avx512_bf16_supported``,
    ``_is_amx_tile_supported``; ``mkldnn._is_mkldnn_bf16_supported`` on an older torch).
    Public: the flags the kernel lists in /proc/cpuinfo (``avx512_bf16``, ``amx_bf16``);
    False where neither answers.

    Parameters
    ----------
    private : bool
        False: always the public check.
    """
    if private:
        cpu = getattr(torch, "cpu", None)
        checks = [getattr(cpu, n, None) for n in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
        checks = [c for c in checks if c is not None]
        if checks:
            return any(bool(c()) for c in checks)
        op = _op("mkldnn_bf16", lambda: torch.ops.mkldnn._is_mkldnn_bf16_supported)
        if op is not None:
            return bool(op())
    flags = _cpu_flags()
    if flags is None:
        return False
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def _foreach(name, args, public, private):
    """``torch.<name>(*args)`` (one launch for many tensors, underscored: not public API),
    or ``public()`` where torch lacks it, refuses these arguments, or ``private`` is False."""
    op = _op(name, lambda: getattr(torch, name)) if private else None
    if op is not None:
        try:
            return op(*args)
        except (RuntimeError, TypeError):   # e.g. tensors of several devices
            pass
    return public()


def foreach_norms(tensors, private=True):
    """The L2 norm of each tensor (a list of 0-d tensors): ``torch._foreach_norm``, else one
    ``torch.linalg.vector_norm`` per tensor."""
    return _foreach("_foreach_norm", (tensors,), lambda: [torch.linalg.vector_norm(t) for t in tensors], private)


def foreach_mul_(tensors, scalar, private=True):
    """Multiply every tensor in place by ``scalar``: ``torch._foreach_mul_``, else one by one."""
    _foreach("_foreach_mul_", (tensors, scalar), lambda: [t.mul_(scalar) for t in tensors], private)


def foreach_lerp_(targets, sources, weight, private=True):
    """``target += weight * (source - target)`` in place for each pair (polyak averaging):
    ``torch._foreach_lerp_``, else one ``lerp_`` per pair."""
    _foreach("_foreach_lerp_", (targets, sources, weight),
             lambda: [t.lerp_(s, weight) for t, s in zip(targets, sources)], private)


def foreach_copy_(targets, sources, private=True):
    """Copy each source into its target in place: ``torch._foreach_copy_``, else one by one."""
    _foreach("_foreach_copy_", (targets, sources), lambda: [t.copy_(s) for t, s in zip(targets, sources)], private)


__all__ = ["adam_step_", "relu_backward", "tanh_backward", "all_finite", "cpu_has_native_bf16",
           "foreach_norms", "foreach_mul_", "foreach_lerp_", "foreach_copy_", "private_in_use"]
