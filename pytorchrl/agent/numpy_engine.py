"""The numpy fast path of small MLP actor-critics on the CPU: acting and updates.

For the networks typical of control tasks (two hidden layers of 64 units) torch costs more
in per-operator dispatch than in arithmetic: acting on one observation per environment
(8 rows, say) and updating on mini-batches of a few hundred samples. The same arithmetic
written out in numpy is several times cheaper (benchmarks/RESULTS.md).

- ``NumpyPolicy`` computes ``OnPolicyActor.act`` (action, log-probability, value);
- ``NumpyActorCriticUpdate`` computes what ``OnPolicyAlgorithm.compute_loss``,
  ``loss.backward()`` and gradient clipping compute, for a categorical policy and the PPO
  or A2C loss; ``NumpyAdam`` is ``torch.optim.Adam``'s step.

The arrays they read and write are views of the actor's torch parameters and gradients,
so the actor is always current (updates by the optimizer or ``load_state_dict`` are in
place) and nothing is copied back. Each is chosen once per actor, algorithm and device
(``build`` returns the reason when it does not apply: a custom network or loss, another
device), and tests/test_numpy_update.py and tests/test_actor.py check them against torch.
"""

import math

import numpy as np
import torch
import torch.nn as nn

import pytorchrl as prl
from pytorchrl import ACT, LOGP, VAL
from pytorchrl.agent.actors.base import overrides
from pytorchrl.agent.actors.distributions import CategoricalHead, DiagGaussianHead
from pytorchrl.agent.actors.feature_extractors.mlp import MLP, Tanh

_ACTIVATIONS = {Tanh: "tanh", nn.Tanh: "tanh", nn.ReLU: "relu"}

# ------------------------------------------------------------------------- acting
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
    """``OnPolicyActor.act`` in numpy: callable ``(obs, state, deterministic) -> (env_action,
    {ACT, LOGP, VAL}, state)``, drawing its randomness from the actor's ``np_rng``."""

    def __init__(self, actor, features):
        self.features = features
        self.rng = actor.np_rng
        self.discrete = isinstance(actor.dist, CategoricalHead)
        self.w_pi, self.b_pi = _view(actor.dist.linear.weight).T, _view(actor.dist.linear.bias)
        self.w_v, self.b_v = _view(actor.value_head.weight).T, _view(actor.value_head.bias)
        if not self.discrete:
            self.log_std = _view(actor.dist.log_std)
            self.low = actor._low.cpu().numpy()
            self.high = actor._high.cpu().numpy()

    @classmethod
    def build(cls, actor):
        """``(NumpyPolicy, None)`` for ``actor``, or ``(None, reason)`` when numpy cannot
        compute what its torch path computes."""
        from pytorchrl.agent.actors.on_policy_actor import OnPolicyActor
        if actor.device.type != "cpu":
            return None, f"device {actor.device}"
        if getattr(actor, "memory", None) is not None:
            return None, "recurrent actor (numpy acts with feed-forward networks)"
        changed = overrides(actor, OnPolicyActor, "act_torch", "get_action", "get_value", "_features")
        if changed:
            return None, f"{type(actor).__name__} overrides {', '.join(changed)}"
        if not isinstance(actor.dist, (CategoricalHead, DiagGaussianHead)) or \
                type(actor.dist) not in (CategoricalHead, DiagGaussianHead):
            return None, f"policy head {type(actor.dist).__name__}"
        if actor.twin_net is not None:
            features = cls._twin_features(actor.twin_net)
        elif type(actor.policy_net) is MLP and (actor.value_net is None or type(actor.value_net) is MLP):
            pi = _mlp_program(actor.policy_net)
            v = pi if actor.value_net is None else _mlp_program(actor.value_net)
            if pi is None or v is None:
                return None, "an MLP layer or activation numpy does not have"
            features = cls._separate_features(pi, v, shared=actor.value_net is None)
        else:
            return None, f"feature extractor {type(actor.policy_net).__name__} (numpy runs MLPs)"
        if features is None:
            return None, "an activation numpy does not have"
        return cls(actor, features), None

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

    def value(self, obs):
        """Value estimates (N, 1) of a numpy batch of observations."""
        x = np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
        return self.features(x)[1] @ self.w_v + self.b_v

    def __call__(self, obs, state=None, deterministic=False):
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
                u = self.rng.random((len(x), 1), dtype=np.float32) * cdf[:, -1:]
                action = np.minimum((cdf < u).sum(axis=1), out.shape[1] - 1)
            action = action.astype(np.int64)[:, None]
            logp = np.take_along_axis(log_probs, action, axis=1)
            return action, {ACT: action, LOGP: logp, VAL: value}, state
        std = np.exp(self.log_std)
        action = out if deterministic else out + std * self.rng.standard_normal(out.shape, dtype=np.float32)
        zs = (action - out) / std
        logp = (-0.5 * zs * zs - self.log_std - _HALF_LOG_2PI).sum(axis=1, keepdims=True)
        env_action = np.clip(action, self.low, self.high)
        return env_action, {ACT: action, LOGP: logp.astype(np.float32), VAL: value}, state


# ------------------------------------------------------------------------ updates

def clipped_value_error(value, ret, old_value=None, value_clip=None):
    """(d loss / d value x N, loss) of the value loss 0.5 mean((v - R)^2), or of PPO's
    clipped form when ``value_clip`` is given (see the module docstring). Works on torch
    tensors and numpy arrays alike.

    Parameters
    ----------
    value, ret : tensor or array (N, 1)
        Value estimates and return targets.
    old_value : tensor or array (N, 1) or None
        Values when the data was collected (needed with ``value_clip``).
    value_clip : float or None
        Range of the value change; None: no clipping.
    """
    diff = value - ret
    if value_clip is None:
        return diff, 0.5 * (diff * diff).mean()
    delta = value - old_value
    clipped = old_value + delta.clip(-value_clip, value_clip)
    diff_c = clipped - ret
    use_unclipped = diff * diff >= diff_c * diff_c
    inside = (delta >= -value_clip) & (delta <= value_clip)
    grad = diff * use_unclipped + diff_c * (~use_unclipped & inside)
    return grad, 0.5 * (diff * diff * use_unclipped + diff_c * diff_c * ~use_unclipped).mean()




def limit_blas_threads():
    """Make numpy's BLAS single-threaded in this process.

    Workers are one process per core: BLAS threads would only contend with the other
    workers (with other processes busy, multithreaded OpenBLAS is 3x slower than one thread).
    """
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(1, user_api="blas")
    except ImportError:  # optional: without it numpy keeps its default
        pass


def _act(x, kind):
    return np.tanh(x, out=x) if kind == "tanh" else np.maximum(x, 0.0, out=x)


def _act_grad(grad, h, kind):
    """Gradient through the activation, given its output ``h`` (in place on ``grad``)."""
    if kind == "tanh":
        grad *= 1.0 - h * h
    else:
        grad *= h > 0
    return grad


class NumpyAdam:
    """Adam with torch.optim.Adam's arithmetic, on numpy views of torch parameters.

    ``state_dict`` and ``load_state_dict`` use torch.optim.Adam's format, so checkpoints
    move between this optimizer and torch's.

    Parameters
    ----------
    params : list of torch.nn.Parameter
        Parameters, in the actor's order.
    algo : Algorithm
        Source of the learning rate (attribute ``lr_attr``) and of Adam's ``eps`` (its
        ``eps``, 1e-8 when it has none), read at every step, so hot-swaps apply at once.
    betas : tuple of float
        Adam's decay rates.
    lr_attr : str
        The algorithm's hyperparameter holding this optimizer's learning rate (``lr_q``,
        ``lr_pi``, ... for algorithms with several parameter groups).
    """

    def __init__(self, params, algo, betas=(0.9, 0.999), lr_attr="lr"):
        self.params = list(params)
        self.algo = algo
        self.betas = betas
        self.lr_attr = lr_attr
        self.step_count = 0
        self.exp_avg = [np.zeros_like(p.detach().numpy()) for p in self.params]
        self.exp_avg_sq = [np.zeros_like(p.detach().numpy()) for p in self.params]
        self._views_of_params()

    def _views_of_params(self):
        self.views = [p.detach().numpy() for p in self.params]
        self._scratch = None
        # torch's fused Adam kernel on tensors sharing the arrays' memory: one pass over
        # the parameters (numpy needs thirteen); the arithmetic is torch.optim.Adam(fused=True)'s.
        self._fused = getattr(torch, "_fused_adam_", None) is not None and \
            all(v.dtype == np.float32 for v in self.views)
        if self._fused:
            self._tensors = ([p.detach() for p in self.params], [torch.from_numpy(m) for m in self.exp_avg],
                             [torch.from_numpy(v) for v in self.exp_avg_sq])
            self._step_t = torch.zeros((), dtype=torch.float32)

    def __getstate__(self):
        # Views of the parameters are not copied (a copy would no longer be a view):
        # a copy (deepcopy, pickle) takes them again from its own parameters.
        return {k: v for k, v in self.__dict__.items() if k not in ("views", "_scratch", "_tensors", "_step_t")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._views_of_params()

    @property
    def lr(self):
        """The learning rate (the algorithm's ``lr_attr``)."""
        return float(getattr(self.algo, self.lr_attr))

    @property
    def eps(self):
        """Adam's epsilon (the algorithm's ``eps``)."""
        return float(getattr(self.algo, "eps", 1e-8))

    @property
    def param_groups(self):
        """torch.optim-style view of the hyper-parameters (they live in the algorithm: a
        hot-swap changes them there, and writes into this view are not needed)."""
        return [{"lr": self.lr, "betas": self.betas, "eps": self.eps}]

    def step(self, grads=None):
        """One Adam step with ``grads`` (numpy arrays, parameter order; None: the
        parameters' ``.grad``)."""
        self.step_count += 1
        b1, b2 = self.betas
        if self._fused:
            if grads is None:
                grads = [p.grad for p in self.params]
            else:
                grads = [torch.as_tensor(g) for g in grads]
            if all(g.dtype == torch.float32 and g.device.type == "cpu" for g in grads):
                params, exp_avg, exp_avg_sq = self._tensors
                self._step_t.fill_(float(self.step_count))
                torch._fused_adam_(params, [g.detach() for g in grads], exp_avg, exp_avg_sq, [],
                                   [self._step_t] * len(params), lr=self.lr, beta1=b1, beta2=b2,
                                   weight_decay=0.0, eps=self.eps, amsgrad=False, maximize=False)
                return
            grads = [g.detach().cpu().numpy() for g in grads]
        elif grads is None:
            grads = [p.grad.detach().numpy() for p in self.params]
        eps = self.eps
        bc1 = 1.0 - b1 ** self.step_count
        bc2_sqrt = math.sqrt(1.0 - b2 ** self.step_count)
        step_size = self.lr / bc1
        if self._scratch is None:
            self._scratch = [np.zeros_like(v) for v in self.views]
        for p, g, m, v, t in zip(self.views, grads, self.exp_avg, self.exp_avg_sq, self._scratch):
            # Same operations as torch.optim.Adam's single-tensor step, without temporaries.
            np.multiply(g, 1.0 - b1, out=t)
            m *= b1
            m += t
            np.multiply(g, g, out=t)
            t *= 1.0 - b2
            v *= b2
            v += t
            np.sqrt(v, out=t)
            t /= bc2_sqrt
            t += eps
            np.divide(m, t, out=t)
            t *= step_size
            p -= t

    def zero_grad(self, set_to_none=True):
        """Drop the parameters' gradients."""
        for p in self.params:
            p.grad = None

    def state_dict(self):
        """State in torch.optim.Adam's format."""
        state = {i: {"step": torch.tensor(float(self.step_count)), "exp_avg": torch.from_numpy(m.copy()),
                     "exp_avg_sq": torch.from_numpy(v.copy())}
                 for i, (m, v) in enumerate(zip(self.exp_avg, self.exp_avg_sq))}
        group = {"lr": self.lr, "betas": self.betas, "eps": self.eps, "weight_decay": 0,
                 "amsgrad": False, "params": list(range(len(self.params)))}
        return {"state": state, "param_groups": [group]}

    def load_state_dict(self, state_dict):
        """Restore a state in torch.optim.Adam's format (from this class or from torch)."""
        state = state_dict["state"]
        if not state:
            self.step_count = 0
            for m, v in zip(self.exp_avg, self.exp_avg_sq):
                m[...] = 0.0
                v[...] = 0.0
            return
        self.step_count = int(float(state[0]["step"]))
        for i, (m, v) in enumerate(zip(self.exp_avg, self.exp_avg_sq)):
            m[...] = state[i]["exp_avg"].numpy()
            v[...] = state[i]["exp_avg_sq"].numpy()


class NumpyActorCriticUpdate:
    """Loss and gradients of a categorical MLP actor-critic, in numpy.

    Built by ``build``; calling it with a mini-batch fills the parameters' ``.grad`` (numpy
    arrays viewed as tensors) and returns the loss statistics, like ``compute_loss`` followed
    by ``backward``.
    """

    def __init__(self, algo, trunk, shared):
        actor = algo.actor
        self.algo = algo
        self.trunk = trunk          # see build()
        self.shared = shared
        self.w_pi = actor.dist.linear.weight.detach().numpy()
        self.b_pi = actor.dist.linear.bias.detach().numpy()
        self.w_v = actor.value_head.weight.detach().numpy()
        self.b_v = actor.value_head.bias.detach().numpy()
        self.params = list(actor.parameters())

    @classmethod
    def build(cls, algo):
        """``(engine, None)`` for ``algo``, or ``(None, reason)`` when numpy cannot compute
        exactly what its torch path computes."""
        from pytorchrl.agent.actors.on_policy_actor import OnPolicyActor
        from pytorchrl.agent.algorithms.on_policy import OnPolicyAlgorithm
        actor = algo.actor
        if algo.device.type != "cpu":
            return None, f"device {algo.device}"
        if getattr(actor, "memory", None) is not None:
            return None, "recurrent actor (numpy updates feed-forward networks)"
        if not algo.fused_loss_applies():
            return None, f"{type(algo).__name__} defines its own loss"
        changed = overrides(algo, OnPolicyAlgorithm, "compute_loss") + \
            overrides(actor, OnPolicyActor, "logits_and_value", "evaluate_actions", "_features")
        if changed:
            return None, f"{', '.join(changed)} overridden"
        if type(getattr(actor, "dist", None)) is not CategoricalHead:
            return None, "not a categorical policy"
        if getattr(actor, "twin_net", None) is not None:
            net = actor.twin_net
            kind = _ACTIVATIONS.get(type(net.act))
            if kind is None:
                return None, f"activation {type(net.act).__name__}"
            trunk = ("twin", kind, net)
            covered = [net.first.weight, net.first.bias, *net.weights, *net.biases]
            shared = False
        elif type(actor.policy_net) is MLP and actor.value_net is None:
            layers = [m for m in actor.policy_net.net if not isinstance(m, nn.Flatten)]
            pairs = list(zip(layers[0::2], layers[1::2]))
            kinds = [_ACTIVATIONS.get(type(a)) for _, a in pairs]
            if None in kinds or not all(isinstance(lin, nn.Linear) for lin, _ in pairs):
                return None, "an MLP layer or activation numpy does not have"
            trunk = ("chain", [(lin, kind) for (lin, _), kind in zip(pairs, kinds)])
            covered = [t for lin, _ in pairs for t in (lin.weight, lin.bias)]
            shared = True
        else:
            return None, "feature extractor is not an MLP"
        heads = [actor.dist.linear.weight, actor.dist.linear.bias, actor.value_head.weight, actor.value_head.bias]
        if {id(p) for p in covered + heads} != {id(p) for p in actor.parameters()}:
            return None, "the actor has parameters this update would not train"
        return cls(algo, trunk, shared), None

    # ---------------------------------------------------------------- forward
    def _forward(self, x):
        if self.trunk[0] == "twin":
            _, kind, net = self.trunk
            w1 = net.first.weight.detach().numpy()
            h0 = _act(x @ w1.T + net.first.bias.detach().numpy(), kind)
            size = net.hidden_sizes[0]
            outs = [h0[:, :size], h0[:, size:]]
            cache = [[o] for o in outs]
            for w, b in zip(net.weights, net.biases):
                w, b = w.detach().numpy(), b.detach().numpy()
                for k in range(2):
                    outs[k] = _act(outs[k] @ w[k] + b[k], kind)
                    cache[k].append(outs[k])
            return outs[0], outs[1], (h0, cache)
        h, cache = x, [x]
        for lin, kind in self.trunk[1]:
            h = _act(h @ lin.weight.detach().numpy().T + lin.bias.detach().numpy(), kind)
            cache.append(h)
        return h, h, cache

    # --------------------------------------------------------------- backward
    def _backward(self, x, d_pf, d_vf, cache, grads):
        if self.trunk[0] == "twin":
            _, kind, net = self.trunk
            h0, per_copy = cache
            ds = [d_pf, d_vf]
            g_ws = [np.empty_like(w.detach().numpy()) for w in net.weights]
            g_bs = [np.empty_like(b.detach().numpy()) for b in net.biases]
            for k in range(2):
                d = ds[k]
                for layer in range(len(net.weights) - 1, -1, -1):
                    h_out, h_in = per_copy[k][layer + 1], per_copy[k][layer]
                    dz = _act_grad(d, h_out, kind)
                    g_ws[layer][k] = h_in.T @ dz
                    g_bs[layer][k, 0] = dz.sum(0)
                    d = dz @ net.weights[layer].detach().numpy()[k].T
                ds[k] = d
            dz0 = _act_grad(np.concatenate(ds, axis=1), h0, kind)
            grads[id(net.first.weight)] = dz0.T @ x
            grads[id(net.first.bias)] = dz0.sum(0)
            for w, b, gw, gb in zip(net.weights, net.biases, g_ws, g_bs):
                grads[id(w)] = gw
                grads[id(b)] = gb
            return
        d = d_pf + d_vf
        layers = self.trunk[1]
        for i in range(len(layers) - 1, -1, -1):
            lin, kind = layers[i]
            dz = _act_grad(d, cache[i + 1], kind)
            grads[id(lin.weight)] = dz.T @ cache[i]
            grads[id(lin.bias)] = dz.sum(0)
            d = dz @ lin.weight.detach().numpy()

    # ------------------------------------------------------------------- call
    def __call__(self, batch):
        """Fill every parameter's ``.grad`` with the loss gradient of ``batch``; return the statistics."""
        algo = self.algo
        x = batch[prl.OBS].numpy().reshape(batch[prl.OBS].shape[0], -1).astype(np.float32, copy=False)
        act = batch[prl.ACT].numpy().astype(np.int64, copy=False)
        old_logp, ret = batch[prl.LOGP].numpy(), batch[prl.RET].numpy()
        adv = batch[prl.ADV].numpy()
        n = x.shape[0]
        if algo.normalize_advantages and n > 1:
            adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
        pf, vf, cache = self._forward(x)
        logits = pf @ self.w_pi.T + self.b_pi
        value = vf @ self.w_v.T + self.b_v

        z = logits - logits.max(axis=1, keepdims=True)
        lp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        p = np.exp(lp)
        logp = np.take_along_axis(lp, act, axis=1)
        ent = -(p * lp).sum(axis=1, keepdims=True)
        clip = algo.fused_clip
        stats = {}
        if clip is None:
            pi_loss = -float((logp * adv).mean())
            g_logp = adv / -n
        else:
            log_ratio = logp - old_logp
            ratio = np.exp(log_ratio)
            surr1 = ratio * adv
            clipped = np.clip(ratio, 1.0 - clip, 1.0 + clip)
            surr2 = clipped * adv
            pi_loss = -float(np.minimum(surr1, surr2).mean())
            active = (surr1 <= surr2) | (clipped == ratio)
            g_logp = np.where(active, surr1, 0.0).astype(np.float32) / -n
            stats["ApproxKL"] = float(((ratio - 1) - log_ratio).mean())
            stats["ClipFraction"] = float((np.abs(ratio - 1) > clip).mean())
        vclip = algo.value_clip
        diff, value_loss = clipped_value_error(value, ret, batch[prl.VAL].numpy() if vclip is not None else None,
                                               vclip)
        value_loss = float(value_loss)
        entropy = float(ent.mean())
        loss = pi_loss + algo.value_loss_coef * value_loss - algo.entropy_coef * entropy

        g_logits = p * -g_logp
        g_logits[np.arange(n), act[:, 0]] += g_logp[:, 0]
        if algo.entropy_coef != 0.0:
            g_logits += p * (lp + ent) * (algo.entropy_coef / n)
        g_value = diff * (algo.value_loss_coef / n)

        actor = algo.actor
        grads = {id(actor.dist.linear.weight): g_logits.T @ pf, id(actor.dist.linear.bias): g_logits.sum(0),
                 id(actor.value_head.weight): g_value.T @ vf, id(actor.value_head.bias): g_value.sum(0)}
        self._backward(x, g_logits @ self.w_pi, g_value @ self.w_v, cache, grads)
        for param in self.params:
            param.grad = torch.from_numpy(np.ascontiguousarray(grads[id(param)], dtype=np.float32)
                                          .reshape(param.shape))
        return {"PolicyLoss": pi_loss, "ValueLoss": value_loss, "Entropy": entropy, "Loss": loss, **stats}
