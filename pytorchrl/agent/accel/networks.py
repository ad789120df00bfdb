"""Forward and backward passes of the library's MLP networks in numpy.

For the networks of control tasks (hidden layers of 64 to 256 units, batches of a few to
a few hundred rows) torch costs more in per-operator dispatch and autograd bookkeeping
than in arithmetic; the same products written out in numpy, with the gradients derived
by hand, run at the speed of the matrix products. Each program reads numpy views of the
torch parameters, so it is always current (optimizer steps, target updates and
``load_state_dict`` are in place) and nothing is copied back:

- ``NumpyChain``: ``MLP`` (linear layers and activations over the flattened input);
- ``NumpyTwin``: ``ParallelMLP`` with two copies (the separate policy and value MLPs of
  an actor-critic);
- ``NumpyPair``: two separate ``MLP`` (the policy and value networks of an actor whose
  algorithm trains them with one optimizer each: A2C);
- ``NumpyEnsemble``: ``EnsembleMLP`` (the critics and policies of the off-policy actors),
  with the bfloat16 products of its ``precision="bf16"`` layers.

``program_of(net)`` returns the program of a network, or why numpy has none for it.
"""

import numpy as np
import torch
import torch.nn as nn

from pytorchrl.agent.accel.private_torch import relu_backward
from pytorchrl.agent.actors.feature_extractors.dict_net import DictNet
from pytorchrl.agent.actors.feature_extractors.ensemble import EnsembleMLP
from pytorchrl.agent.actors.feature_extractors.mlp import MLP, ParallelMLP, Tanh

#: Activation modules numpy computes, by kind.
KINDS = {nn.ReLU: "relu", nn.Tanh: "tanh", Tanh: "tanh"}
_ZERO = np.float32(0.0)

#: Element-wise operators on arrays of at least this many elements run torch's kernels
#: on the same memory (numpy's maximum and mixed-type products are 2-4x slower on
#: activations of 256 units; below this size numpy's lower call overhead wins).
TORCH_MIN_SIZE = 1 << 15

#: Networks whose largest layer has fewer weights than this stay on one thread (handing
#: work to the other thread costs tens of microseconds).
LANE_MIN_WEIGHTS = 1 << 14


def view(param):
    """A numpy array sharing the memory of a CPU parameter or buffer."""
    return param.detach().numpy()


def matmul(a, b):
    """``a @ b``, avoiding two slow paths of numpy: a matrix times a stack of matrices is
    computed slice by slice (numpy's broadcasting loop does not call BLAS), and an outer
    product (inner size 1: the backward pass of a critic's single output) by broadcasting,
    4x faster than numpy's product."""
    if a.shape[-1] == 1 and b.shape[-2] == 1:
        return a * b
    if a.ndim + b.ndim == 5:
        copies = a.shape[0] if a.ndim == 3 else b.shape[0]
        out = np.empty((copies, a.shape[-2], b.shape[-1]), dtype=np.result_type(a, b))
        for k in range(copies):
            np.matmul(a if a.ndim == 2 else a[k], b if b.ndim == 2 else b[k], out=out[k])
        return out
    return np.matmul(a, b)


def bf16_matmul(a, b):
    """``a @ b`` (numpy, float32) computed as ``EnsembleMLP``'s bfloat16 layers compute it:
    bfloat16 copies of both operands, a product accumulated in float32 by oneDNN and
    rounded to bfloat16, returned as float32. On a CPU with AVX512-BF16 a 256x256x256
    product takes about 60% of the float32 time, conversions included."""
    return torch.matmul(torch.from_numpy(a).to(torch.bfloat16), torch.from_numpy(b).to(torch.bfloat16)).float().numpy()


def activate(x, kind):
    """The activation ``kind`` ("relu", "tanh") applied to ``x`` in place; returns ``x``."""
    if kind == "relu":
        if x.size >= TORCH_MIN_SIZE:
            torch.relu_(torch.from_numpy(x))
            return x
        return np.maximum(x, _ZERO, out=x)
    return np.tanh(x, out=x)


def add_bias(h, b):
    """``h += b`` (broadcast over the rows); returns ``h``."""
    if h.size >= TORCH_MIN_SIZE:
        torch.from_numpy(h).add_(torch.from_numpy(b))
    else:
        h += b
    return h


def activation_grad(d, h, kind):
    """``d`` (gradient w.r.t. an activation's output ``h``) times the activation's
    derivative: in place, or a new array (use the result)."""
    if kind == "relu":
        if d.size >= TORCH_MIN_SIZE:
            return relu_backward(d, h)
        return np.multiply(d, h > 0, out=d)
    d *= 1.0 - h * h
    return d


def _kind(module):
    return KINDS.get(type(module))


class NumpyChain:
    """An ``MLP`` (``nn.Linear`` layers, each followed by an activation) in numpy.

    Parameters
    ----------
    net : MLP
        The network (checked by ``program_of``).
    """

    def __init__(self, net):
        layers = [m for m in net.net if not isinstance(m, nn.Flatten)]
        self.layers = [(lin, _kind(act)) for lin, act in zip(layers[0::2], layers[1::2])]
        self.params = [p for lin, _ in self.layers for p in (lin.weight, lin.bias)]
        # Weights transposed (in, out) and biases, as numpy views.
        self.program = [(view(lin.weight).T, view(lin.bias), kind) for lin, kind in self.layers]

    @staticmethod
    def reason(net):
        """None when numpy computes ``net`` exactly, else why not."""
        layers = [m for m in net.net if not isinstance(m, nn.Flatten)]
        pairs = list(zip(layers[0::2], layers[1::2]))
        if len(layers) % 2 or not all(isinstance(lin, nn.Linear) and _kind(act) for lin, act in pairs):
            return "an MLP layer or activation numpy does not have"
        return None

    def forward(self, x, cache=None):
        """Features of ``x`` (B, in); the input of every layer and the output are appended
        to ``cache`` when given."""
        if cache is not None:
            cache.append(x)
        for w, b, kind in self.program:
            x = activate(x @ w + b, kind)
            if cache is not None:
                cache.append(x)
        return x

    def features(self, x, cache=None):
        """(policy features, value features): the same array, the network being shared."""
        h = self.forward(x, cache)
        return h, h

    def backward(self, cache, d_pf, d_vf):
        """Gradients of ``self.params`` (in order) from the gradients w.r.t. the policy and
        value features (both flow into the one network)."""
        return self.backward_output(cache, d_pf + d_vf)

    def backward_output(self, cache, d):
        """Gradients of ``self.params`` (in order) from ``d``, the gradient w.r.t. the
        network's output (``forward``'s ``cache``)."""
        grads = [None] * len(self.params)
        for i in range(len(self.program) - 1, -1, -1):
            w_t, _, kind = self.program[i]
            dz = activation_grad(d, cache[i + 1], kind)
            grads[2 * i] = dz.T @ cache[i]
            grads[2 * i + 1] = dz.sum(0)
            if i:
                d = dz @ w_t.T
        return grads


class NumpyPair:
    """Separate policy and value ``MLP`` networks (two ``NumpyChain``), each trained by
    its own optimizer (A2C's, whose groups need parameters of their own where the twin
    stacks both copies in one tensor).

    Parameters
    ----------
    policy_net, value_net : MLP
        The two networks (checked by ``pair_of``).
    """

    def __init__(self, policy_net, value_net):
        self.policy, self.value = NumpyChain(policy_net), NumpyChain(value_net)
        self.params = self.policy.params + self.value.params

    def features(self, x, cache=None):
        """(policy features, value features) of ``x``; with ``cache``, what ``backward`` needs."""
        if cache is None:
            return self.policy.forward(x), self.value.forward(x)
        cache.extend([[], []])
        return self.policy.forward(x, cache[-2]), self.value.forward(x, cache[-1])

    def backward(self, cache, d_pf, d_vf):
        """Gradients of ``self.params`` (in order) from the gradients w.r.t. the features."""
        return self.policy.backward_output(cache[-2], d_pf) + self.value.backward_output(cache[-1], d_vf)


def as_mlp(net):
    """The ``MLP`` that ``net`` computes: itself, or the MLP of a ``DictNet`` whose keys are
    all vectors (it reads the packed vector as it is); None for any other network."""
    if type(net) is MLP:
        return net
    if type(net) is DictNet and net.vector_only:
        return net.mlp
    return None


def pair_of(policy_net, value_net):
    """``(NumpyPair, None)`` for two separate networks that numpy computes exactly as
    ``MLP`` (``as_mlp``), else ``(None, reason)``."""
    nets = [as_mlp(net) for net in (policy_net, value_net)]
    if None in nets:
        return None, "separate policy and value extractors other than MLPs"
    for net in nets:
        reason = NumpyChain.reason(net)
        if reason:
            return None, reason
    return NumpyPair(*nets), None


class NumpyTwin:
    """A two-copy ``ParallelMLP`` (policy and value networks) in numpy: the first layer of
    both copies is one ``nn.Linear`` (its output split in halves), the next ones stacked
    weights (2, in, out).

    Parameters
    ----------
    net : ParallelMLP
        The network (two copies; checked by ``program_of``).
    """

    def __init__(self, net):
        self.kind = _kind(net.act)
        self.size = net.hidden_sizes[0]
        self.w1, self.b1 = view(net.first.weight).T, view(net.first.bias)
        self.hidden = [(view(w), view(b)) for w, b in zip(net.weights, net.biases)]
        self.params = [net.first.weight, net.first.bias, *net.weights, *net.biases]

    @staticmethod
    def reason(net):
        """None when numpy computes ``net`` exactly, else why not."""
        if net.copies != 2:
            return f"ParallelMLP of {net.copies} copies (numpy runs policy and value twins)"
        if _kind(net.act) is None:
            return f"activation {type(net.act).__name__}"
        return None

    def features(self, x, cache=None):
        """(policy features, value features) of ``x``; with ``cache``, what ``backward`` needs."""
        h0 = activate(x @ self.w1 + self.b1, self.kind)
        pf, vf = h0[:, :self.size], h0[:, self.size:]
        if cache is not None:
            cache.extend([x, h0, [pf], [vf]])
        for w, b in self.hidden:
            pf = activate(pf @ w[0] + b[0], self.kind)
            vf = activate(vf @ w[1] + b[1], self.kind)
            if cache is not None:
                cache[2].append(pf)
                cache[3].append(vf)
        return pf, vf

    def backward(self, cache, d_pf, d_vf):
        """Gradients of ``self.params`` (in order) from the gradients w.r.t. the features."""
        x, h0, *outs = cache
        n = len(self.hidden)
        g_w = [np.empty_like(w) for w, _ in self.hidden]
        g_b = [np.empty_like(b) for _, b in self.hidden]
        ds = [d_pf, d_vf]
        for k in range(2):
            d = ds[k]
            for layer in range(n - 1, -1, -1):
                dz = activation_grad(d, outs[k][layer + 1], self.kind)
                g_w[layer][k] = outs[k][layer].T @ dz
                g_b[layer][k, 0] = dz.sum(0)
                d = dz @ self.hidden[layer][0][k].T
            ds[k] = d
        dz0 = activation_grad(np.concatenate(ds, axis=1), h0, self.kind)
        return [dz0.T @ x, dz0.sum(0), *g_w, *g_b]


class NumpyEnsemble:
    """Numpy views of an ``EnsembleMLP``'s parameters, with its forward and backward passes.

    ``w[i]`` is layer i's weight (copies, in, out) and ``b[i]`` its bias (copies, 1, out),
    both views of the torch parameters. The products of the network's bfloat16 layers
    (``EnsembleMLP.low_precision_layers``) are computed as its torch forward computes
    them, forward and backward.

    Parameters
    ----------
    net : EnsembleMLP
        The network (checked by ``program_of``).
    """

    def __init__(self, net):
        self.module = net
        self.kind = _kind(net.act)
        self.low = frozenset(net.low_precision_layers(torch.device("cpu")))
        self.w = [view(p) for p in net.weights]
        self.b = [view(p) for p in net.biases]
        self.copies = net.copies
        # Single-copy views, for networks of one copy and for one copy of several.
        self._one = [([w[k] for w in self.w], [b[k] for b in self.b]) for k in range(self.copies)]

    @staticmethod
    def reason(net):
        """None when numpy computes ``net`` exactly, else why not."""
        if _kind(net.act) is None:
            return f"activation {type(net.act).__name__}"
        return None

    def product(self, a, b, layer):
        """``a @ b`` for layer ``layer``: in bfloat16 where the network computes it so."""
        return bf16_matmul(a, b) if layer in self.low else matmul(a, b)

    @property
    def largest_layer(self):
        """Weights of the largest layer of one copy."""
        return max(w.shape[-2] * w.shape[-1] for w in self.w)

    def layers(self, copy=0):
        """(weight, bias) views of each layer of copy ``copy``."""
        return list(zip(*self._one[copy]))

    def forward(self, x, copy=None, cache=None):
        """Output of ``x`` (B, in): (B, out) for copy ``copy``, (copies, B, out) for all
        (``copy`` None). The input of every layer is appended to ``cache`` when given."""
        ws, bs = (self.w, self.b) if copy is None else self._one[copy]
        last = len(ws) - 1
        h = x
        for i, (w, b) in enumerate(zip(ws, bs)):
            if cache is not None:
                cache.append(h)
            h = add_bias(self.product(h, w, i), b)
            if i < last:
                activate(h, self.kind)
        return h

    def backward(self, cache, d, copy=None, input_grad=False, param_grads=True, lanes=None):
        """Back-propagate ``d`` (gradient w.r.t. the output) through the layers whose
        inputs ``forward`` stored in ``cache``.

        Returns ``(weight grads, bias grads, input grad)``: lists shaped like ``w`` and
        ``b`` of the copy (or of all copies) or None (``param_grads`` False), and the
        gradient w.r.t. the input or None (``input_grad`` False). With ``lanes``, a large
        layer's weight gradient and the gradient it passes down are computed side by side.
        """
        ws = self.w if copy is None else self._one[copy][0]
        n = len(ws)
        gw, gb = [None] * n, [None] * n
        for i in range(n - 1, -1, -1):
            h_in, w = cache[i], ws[i]
            down = i > 0 or input_grad

            def weight_grad(i=i, h_in=h_in, d=d):
                return self.product(np.swapaxes(h_in, -1, -2), d, i)

            def input_grad_of(i=i, h_in=h_in, w=w, d=d):
                g = self.product(d, np.swapaxes(w, -1, -2), i)
                return activation_grad(g, h_in, self.kind) if i > 0 else g

            if param_grads:
                gb[i] = d.sum(axis=-2, keepdims=True)
                if down and lanes is not None and w.shape[-2] * w.shape[-1] >= LANE_MIN_WEIGHTS:
                    gw[i], d = lanes.run(weight_grad, input_grad_of)
                    continue
                gw[i] = weight_grad()
            if down:
                d = input_grad_of()
        return (gw, gb, d if input_grad else None) if param_grads else (None, None, d if input_grad else None)

    def parameters(self):
        """The torch parameters, weights then biases (the order of the gradients ``backward``
        returns, ``gw + gb``)."""
        return list(self.module.weights) + list(self.module.biases)


_PROGRAMS = {MLP: NumpyChain, ParallelMLP: NumpyTwin, EnsembleMLP: NumpyEnsemble}


def program_of(net):
    """``(program, None)`` for a network numpy computes exactly (an ``MLP``, a two-copy
    ``ParallelMLP`` or an ``EnsembleMLP`` of exactly those classes, with ReLU or tanh
    activations; a ``DictNet`` of vector keys only, as its MLP), else ``(None, reason)``."""
    net = as_mlp(net) or net
    cls = _PROGRAMS.get(type(net))
    if cls is None:
        return None, f"network {type(net).__name__} (numpy runs the library's MLPs)"
    reason = cls.reason(net)
    return (None, reason) if reason else (cls(net), None)


def float2d(t):
    """A batch tensor as a float32 (B, features) numpy array (a view when it already is)."""
    a = t.numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    return a.reshape(a.shape[0], -1).astype(np.float32, copy=False)


def column(t):
    """A (B, 1) batch tensor as a float32 numpy array."""
    return (t.numpy() if isinstance(t, torch.Tensor) else np.asarray(t)).astype(np.float32, copy=False)


def set_grads(params, arrays):
    """Give each parameter its gradient (float32, the parameter's shape)."""
    for p, g in zip(params, arrays):
        p.grad = torch.from_numpy(np.ascontiguousarray(g, dtype=np.float32).reshape(p.shape))


__all__ = ["NumpyChain", "NumpyPair", "NumpyTwin", "pair_of", "as_mlp", "NumpyEnsemble", "program_of", "matmul", "bf16_matmul", "activate",
           "activation_grad", "add_bias", "view", "float2d", "column", "set_grads", "KINDS", "LANE_MIN_WEIGHTS",
           "TORCH_MIN_SIZE"]
