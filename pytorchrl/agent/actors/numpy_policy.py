"""Numpy forward pass of an OnPolicyActor, for acting on small batches.

A collector acts on one observation per environment (8 rows, say). At that size every
torch operator costs more in dispatch than in arithmetic; the same network in numpy costs
a fraction (see benchmarks/RESULTS.md). The arrays here are views of the actor's torch
parameters, so updates made by the optimizer or by ``load_state_dict`` (both in place)
are seen at once.
"""

import numpy as np
import torch
import torch.nn as nn

from pytorchrl.agent.actors.distributions import CategoricalHead, DiagGaussianHead
from pytorchrl.agent.actors.feature_extractors.mlp import MLP, ParallelMLP, Tanh

_NUMPY_ACTIVATIONS = {Tanh: np.tanh, nn.Tanh: np.tanh, nn.ReLU: lambda x: np.maximum(x, 0.0)}
_HALF_LOG_2PI = 0.5 * np.log(2 * np.pi)


def _view(param):
    return param.detach().numpy()


def _mlp_program(net):
    """[(W^T, b, activation)] of an MLP, or None if a layer is not supported."""
    layers = [m for m in net.net if not isinstance(m, nn.Flatten)]
    program = []
    for linear, act in zip(layers[0::2], layers[1::2]):
        fn = _NUMPY_ACTIVATIONS.get(type(act))
        if not isinstance(linear, nn.Linear) or fn is None:
            return None
        program.append((_view(linear.weight).T, _view(linear.bias), fn))
    return program


class NumpyPolicy:
    """Callable ``(obs, deterministic, rng) -> (action, env_action, logp, value)`` in numpy."""

    def __init__(self, actor, features):
        self.features = features
        self.discrete = isinstance(actor.dist, CategoricalHead)
        self.w_pi, self.b_pi = _view(actor.dist.linear.weight).T, _view(actor.dist.linear.bias)
        self.w_v, self.b_v = _view(actor.value_head.weight).T, _view(actor.value_head.bias)
        if not self.discrete:
            self.log_std = _view(actor.dist.log_std)
            self.low = actor._low.cpu().numpy()
            self.high = actor._high.cpu().numpy()

    @classmethod
    def build(cls, actor):
        """A NumpyPolicy for ``actor``, or None when its networks are not supported."""
        if actor.device.type != "cpu" or not isinstance(actor.dist, (CategoricalHead, DiagGaussianHead)):
            return None
        if actor.twin_net is not None:
            features = cls._twin_features(actor.twin_net)
        elif isinstance(actor.policy_net, MLP) and (actor.value_net is None or isinstance(actor.value_net, MLP)):
            pi = _mlp_program(actor.policy_net)
            v = pi if actor.value_net is None else _mlp_program(actor.value_net)
            if pi is None or v is None:
                return None
            features = cls._separate_features(pi, v, shared=actor.value_net is None)
        else:
            return None
        if features is None:
            return None
        return cls(actor, features)

    @staticmethod
    def _run(program, x):
        for w, b, fn in program:
            x = fn(x @ w + b)
        return x

    @classmethod
    def _separate_features(cls, pi, v, shared):
        def features(x):
            pf = cls._run(pi, x)
            return pf, (pf if shared else cls._run(v, x))
        return features

    @staticmethod
    def _twin_features(net):
        fn = _NUMPY_ACTIVATIONS.get(type(net.act))
        if fn is None:
            return None
        w1, b1 = _view(net.first.weight).T, _view(net.first.bias)
        hidden = [(_view(w), _view(b)) for w, b in zip(net.weights, net.biases)]
        h0 = net.hidden_sizes[0]

        def features(x):
            h = fn(x @ w1 + b1)
            pf, vf = h[:, :h0], h[:, h0:]
            for w, b in hidden:
                pf = fn(pf @ w[0] + b[0])
                vf = fn(vf @ w[1] + b[1])
            return pf, vf
        return features

    def __call__(self, obs, deterministic, rng):
        x = np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
        pf, vf = self.features(x)
        value = vf @ self.w_v + self.b_v
        out = pf @ self.w_pi + self.b_pi
        if self.discrete:
            z = out - out.max(axis=1, keepdims=True)
            log_probs = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
            if deterministic:
                action = log_probs.argmax(axis=1)
            else:
                # Inverse-CDF sampling: one uniform number per row.
                cdf = np.exp(log_probs).cumsum(axis=1)
                u = rng.random((len(x), 1), dtype=np.float32) * cdf[:, -1:]
                action = np.minimum((cdf < u).sum(axis=1), out.shape[1] - 1)
            action = action.astype(np.int64)[:, None]
            logp = np.take_along_axis(log_probs, action, axis=1)
            return action, action, logp, value
        std = np.exp(self.log_std)
        action = out if deterministic else out + std * rng.standard_normal(out.shape, dtype=np.float32)
        zs = (action - out) / std
        logp = (-0.5 * zs * zs - self.log_std - _HALF_LOG_2PI).sum(axis=1, keepdims=True)
        env_action = np.clip(action, self.low, self.high)
        return action, env_action, logp.astype(np.float32), value
