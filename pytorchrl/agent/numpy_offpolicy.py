"""The numpy fast path of ``OffPolicyActor``'s default networks on the CPU: acting, and the
updates of DDQN, SAC (Box actions) and DDPG/TD3.

Off-policy control networks (two hidden layers of 256 units, mini-batches of 64 to 256)
are small enough that torch's per-operator dispatch and autograd bookkeeping cost as much
as the arithmetic: one DDQN update is a handful of matrix products and some fifty small
operators forward and backward. Written out in numpy, with the gradients derived by hand,
an update runs at the speed of its matrix products (about 1.7x faster than the torch path
for SAC's and 1.5x for DDQN's on one core; acting a single observation is 10x faster).

- ``NumpyOffPolicyActing`` computes ``OffPolicyActor.act`` for every algorithm: the
  uniform warm-up, DDQN's epsilon-greedy argmax, SAC's squashed Gaussian (or categorical)
  sample, DDPG/TD3's deterministic action with Gaussian or Ornstein-Uhlenbeck noise;
  its randomness comes from the actor's ``np_rng`` (the torch path draws its exploration
  from the same generator, SAC's policy sample from torch's).
- ``NumpyDDQNUpdate``, ``NumpySACUpdate`` and ``NumpyTD3Update`` compute what the
  algorithm's ``compute_loss`` followed by the backward passes computes, and fill every
  trainable parameter's ``.grad`` (float32, like torch); the optimizer steps are
  ``NumpyAdam``'s (numpy_engine). The noise the SAC and TD3 losses sample is drawn from
  torch's generator, in the torch path's order: a seed gives the same run on either path.
- An update is cut into pairs of independent pieces (two critics, a layer's weight
  gradient and the gradient it passes down, ...) that ``Lanes`` runs on two threads when
  the process may use two cores (``update_threads``: the single-process layout) and
  ``ThreadChoice`` finds, by timing the updates, that the second core is free; BLAS stays
  single-threaded. The pieces are the same either way, so are the results.

Everything reads and writes numpy views of the torch parameters (the online networks,
the target networks, SAC's log-alpha): optimizer steps, target updates and
``load_state_dict`` are in place, so nothing is ever copied back. Each path is chosen once
per actor or algorithm (``build`` returns the reason when it does not apply: another
device, a custom feature extractor, a subclass overriding a method the path reproduces),
and tests/test_numpy_offpolicy.py checks every one against torch.
"""

import math
import os
import sys
import threading
import time

import numpy as np
import torch
import torch.nn as nn

from pytorchrl import ACT, DISCOUNT, OBS, OBS2, REW, TD_ERROR, WEIGHT
from pytorchrl.agent.actors.base import overrides
from pytorchrl.agent.actors.feature_extractors.mlp import Tanh
from pytorchrl.agent.numpy_engine import limit_blas_threads

_KINDS = {nn.ReLU: "relu", nn.Tanh: "tanh", Tanh: "tanh"}
_ZERO = np.float32(0.0)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_LOG2 = math.log(2.0)


# ------------------------------------------------------------------ two threads
class _Helper:
    """A second thread that runs one of two independent pieces of an update.

    BLAS libraries parallelise a product between threads that wait for one another by
    spinning: on a machine whose other cores are busy (other workers, other users) a thread
    that lost its core stalls every product, and two threads come out several times slower
    than one. Here whole pieces of an update (a critic's forward pass, another critic's
    backward pass: matrix products and element-wise operators, which release the GIL) run
    on two threads, and a thread that has finished sleeps on a lock, leaving its core.
    """

    def __init__(self):
        self.pid = os.getpid()
        self._go = threading.Lock()
        self._go.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        self._job = None
        self._result = None
        self._error = None
        self.busy = threading.Lock()
        threading.Thread(target=self._loop, name="pytorchrl-update", daemon=True).start()

    def _loop(self):
        while True:
            self._go.acquire()
            try:
                self._result = self._job()
            except BaseException as exc:  # re-raised in the caller
                self._error = exc
            self._done.release()

    def run(self, first, second):
        """``(first(), second())``, ``second`` computed by this thread meanwhile."""
        self._error = None
        self._job = second
        self._go.release()
        try:
            result = first()
        finally:
            self._done.acquire()
            self._job = None
        second_result, self._result = self._result, None
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return result, second_result


_helper = None
_helper_lock = threading.Lock()


def _get_helper():
    global _helper
    helper = _helper
    if helper is None or helper.pid != os.getpid():   # none yet, or a forked child
        with _helper_lock:
            if _helper is None or _helper.pid != os.getpid():
                _helper = _Helper()
            helper = _helper
    return helper


def update_threads():
    """Threads (1 or 2) the numpy updates of this process may use.

    ``PYTORCHRL_UPDATE_THREADS`` decides when set. Otherwise two when the process has two
    cores or more and runs the whole scheme itself (no Ray: the single-process layout,
    where the learner and the collector take turns), one in distributed layouts, whose
    worker processes share the cores.
    """
    value = os.environ.get("PYTORCHRL_UPDATE_THREADS")
    if value:
        return max(1, min(2, int(value)))
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    if cores < 2:
        return 1
    ray = sys.modules.get("ray")
    if os.environ.get("RAY_RAYLET_PID") or (ray is not None and ray.is_initialized()):
        return 1
    return 2


class Lanes:
    """Runs the two independent pieces of work an update is cut into (``run``): on two
    threads when ``two`` is set, one after the other otherwise. The pieces compute the same
    thing either way, so the results do not depend on the threads (``ThreadChoice``
    switches ``two`` by timing).

    Parameters
    ----------
    threads : int
        1: always one thread; 2: ``two`` may be set.
    """

    def __init__(self, threads):
        self.parallel = threads >= 2
        self.two = self.parallel

    def run(self, first, second):
        """``(first(), second())``."""
        if self.two:
            helper = _get_helper()
            if helper.busy.acquire(blocking=False):   # else in use by another thread
                try:
                    return helper.run(first, second)
                finally:
                    helper.busy.release()
        return first(), second()


class ThreadChoice:
    """Turns the second lane of ``Lanes`` on or off from the measured duration of the updates.

    Whether a second thread pays depends on what else runs on the machine: on idle cores
    it nearly halves an update, next to a busy process it slows it down. Every
    ``interval`` updates the other setting is tried for ``PROBE`` updates and kept when
    their median duration beats that of the ``PROBE`` updates before; the interval doubles
    (up to ``MAX_INTERVAL``) each time the trial loses and falls back to ``MIN_INTERVAL``
    when it wins.
    """

    PROBE = 5
    MIN_INTERVAL = 50
    MAX_INTERVAL = 1600

    def __init__(self, lanes):
        self.lanes = lanes
        self.recent = []
        self.trial = None
        self.interval = self.MIN_INTERVAL
        self.countdown = 2 * self.PROBE

    def record(self, seconds):
        """Account one update that took ``seconds``."""
        if not self.lanes.parallel:
            return
        if self.trial is not None:
            self.trial.append(seconds)
            if len(self.trial) == self.PROBE:
                self._decide()
            return
        self.recent = self.recent[1 - self.PROBE:] + [seconds]
        self.countdown -= 1
        if self.countdown <= 0 and len(self.recent) == self.PROBE:
            self.trial = []
            self.lanes.two = not self.lanes.two

    def _decide(self):
        trial, self.trial = self.trial, None
        if np.median(trial) < 0.97 * np.median(self.recent):
            self.recent = trial                   # the setting tried is faster: keep it
            self.interval = self.MIN_INTERVAL
        else:
            self.lanes.two = not self.lanes.two
            self.interval = min(2 * self.interval, self.MAX_INTERVAL)
        self.countdown = self.interval


#: Networks whose largest layer has fewer weights than this stay on one thread (handing
#: work to the other thread costs tens of microseconds).
LANE_MIN_WEIGHTS = 1 << 14


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


# ----------------------------------------------------------------------- networks
#: Element-wise operators on arrays of at least this many elements run torch's kernels
#: on the same memory (numpy's maximum and mixed-type products are 2-4x slower on
#: activations of 256 units; below this size numpy's lower call overhead wins).
TORCH_MIN_SIZE = 1 << 15


def _activate(x, kind):
    """Activation in place."""
    if kind == "relu":
        if x.size >= TORCH_MIN_SIZE:
            torch.relu_(torch.from_numpy(x))
            return x
        return np.maximum(x, _ZERO, out=x)
    return np.tanh(x, out=x)


def _add_bias(h, b):
    """``h += b`` (broadcast over the rows)."""
    if h.size >= TORCH_MIN_SIZE:
        torch.from_numpy(h).add_(torch.from_numpy(b))
    else:
        h += b
    return h


def _activation_grad(d, h, kind):
    """``d`` (gradient w.r.t. an activation's output ``h``) times the activation's
    derivative (in place, or a new array: use the result)."""
    if kind == "relu":
        if d.size >= TORCH_MIN_SIZE:
            return torch.ops.aten.threshold_backward(torch.from_numpy(d), torch.from_numpy(h), 0).numpy()
        return np.multiply(d, h > 0, out=d)
    d *= 1.0 - h * h
    return d


def ensemble_reason(net):
    """None when ``net`` is a default ``EnsembleMLP`` numpy can compute, else why not."""
    from pytorchrl.agent.actors.off_policy_actor import EnsembleMLP
    if type(net) is not EnsembleMLP:
        return f"network {type(net).__name__} (numpy runs the default MLP)"
    if type(net.act) not in _KINDS:
        return f"activation {type(net.act).__name__}"
    return None


class NumpyEnsemble:
    """Numpy views of an ``EnsembleMLP``'s parameters, with its forward and backward passes.

    ``w[i]`` is layer i's weight (copies, in, out) and ``b[i]`` its bias (copies, 1, out),
    both views of the torch parameters (current whatever updates them in place). The
    products of the network's bfloat16 layers (``EnsembleMLP.low_precision_layers``) are
    computed as its torch forward computes them, forward and backward.
    """

    def __init__(self, net):
        self.module = net
        self.kind = _KINDS[type(net.act)]
        self.low = frozenset(net.low_precision_layers(torch.device("cpu")))
        self.w = [p.detach().numpy() for p in net.weights]
        self.b = [p.detach().numpy() for p in net.biases]
        self.copies = net.copies
        # Single-copy views, for networks of one copy and for one copy of several.
        self._one = [([w[k] for w in self.w], [b[k] for b in self.b]) for k in range(self.copies)]

    def product(self, a, b, layer):
        """``a @ b`` for layer ``layer``: in bfloat16 where the network computes it so."""
        return bf16_matmul(a, b) if layer in self.low else matmul(a, b)

    @property
    def largest_layer(self):
        """Weights of the largest layer of one copy."""
        return max(w.shape[-2] * w.shape[-1] for w in self.w)

    def forward(self, x, copy=None, cache=None):
        """Output of ``x`` (B, in): (B, out) for copy ``copy``, (copies, B, out) for all
        (``copy`` None). The input of every layer is appended to ``cache`` when given."""
        ws, bs = (self.w, self.b) if copy is None else self._one[copy]
        last = len(ws) - 1
        h = x
        for i, (w, b) in enumerate(zip(ws, bs)):
            if cache is not None:
                cache.append(h)
            h = _add_bias(self.product(h, w, i), b)
            if i < last:
                _activate(h, self.kind)
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
                return _activation_grad(g, h_in, self.kind) if i > 0 else g

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


def _float2d(t):
    """A batch tensor as a float32 (B, features) numpy array (a view when it already is)."""
    a = t.numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    return a.reshape(a.shape[0], -1).astype(np.float32, copy=False)


def _column(t):
    """A (B, 1) batch tensor as a float32 numpy array."""
    return (t.numpy() if isinstance(t, torch.Tensor) else np.asarray(t)).astype(np.float32, copy=False)


def _set_grads(params, arrays):
    """Give each parameter its gradient (float32, the parameter's shape)."""
    for p, g in zip(params, arrays):
        p.grad = torch.from_numpy(np.ascontiguousarray(g, dtype=np.float32).reshape(p.shape))


def _check_common(algo, cls, actor_methods, algo_methods):
    """Reason why a numpy update cannot reproduce ``algo``'s torch path, or None."""
    from pytorchrl.agent.actors.off_policy_actor import OffPolicyActor
    if algo.device.type != "cpu":
        return f"device {algo.device}"
    if not isinstance(algo.actor, OffPolicyActor):
        return f"actor {type(algo.actor).__name__}"
    if algo.actor.is_recurrent:
        return "recurrent actor (sequences with a memory)"
    changed = overrides(algo, cls, *algo_methods) + overrides(algo.actor, OffPolicyActor, *actor_methods, "q_head")
    if changed:
        return f"{', '.join(changed)} overridden"
    return None


def _same_params(groups, expected):
    """True when the algorithm's parameter groups are exactly ``expected`` (name -> list)."""
    return set(groups) == set(expected) and all(
        [id(p) for p in groups[g]] == [id(p) for p in expected[g]] for g in expected)


# ------------------------------------------------------------------------- acting
class NumpyOffPolicyActing:
    """``OffPolicyActor.act`` in numpy: callable ``(obs, state, deterministic) ->
    (env_action, {}, state)``."""

    def __init__(self, actor):
        self.actor = actor
        self.warmup = actor.warmup.detach().numpy()     # 0-d views of the exploration buffers
        self.epsilon = actor.epsilon.detach().numpy()
        self.discrete = actor.discrete
        self.kind = actor.policy_kind                    # None (DDQN), "stochastic", "deterministic"
        self.dueling = actor.dueling
        self.num_actions = actor.num_actions
        self.act_dim = actor.act_dim
        self.net = NumpyEnsemble(actor.critics if self.kind is None else actor.policy_net)
        self.layers = list(zip(*self.net._one[0]))     # (weight, bias) of the network's single copy
        self.low = self.net.low
        self.relu = self.net.kind == "relu"
        if not self.discrete:
            self.scale = actor.scaler.scale.detach().numpy()
            self.center = actor.scaler.center.detach().numpy()

    @classmethod
    def build(cls, actor):
        """``(acting, None)`` for ``actor``, or ``(None, reason)`` when numpy cannot
        compute what its torch path computes."""
        from pytorchrl.agent.actors.off_policy_actor import OffPolicyActor
        if actor.device.type != "cpu":
            return None, f"device {actor.device}"
        if actor.is_recurrent:
            return None, "recurrent actor (memory state)"
        changed = overrides(actor, OffPolicyActor, "act_torch", "q_values", "q_head", "policy_output", "sample_policy",
                            "deterministic_policy", "_obs_features", "_random_actions")
        if changed:
            return None, f"{type(actor).__name__} overrides {', '.join(changed)}"
        obs_net, net = ((actor.critic_obs_net, actor.critics) if actor.policy_kind is None
                        else (actor.policy_obs_net, actor.policy_net))
        if obs_net is not None:
            return None, f"observation feature extractor {type(obs_net).__name__}"
        reason = ensemble_reason(net)
        if reason is not None:
            return None, reason
        return cls(actor), None

    def _random_actions(self, n):
        rng = self.actor.np_rng
        if self.discrete:
            return rng.integers(0, self.num_actions, (n, 1))
        a = rng.uniform(-1.0, 1.0, (n, self.act_dim)).astype(np.float32)
        return a * self.scale + self.center

    def _forward(self, x):
        # NumpyEnsemble.forward for one copy, with as few numpy calls as possible: acting
        # runs it on a handful of rows at every environment step.
        last = len(self.layers) - 1
        for i, (w, b) in enumerate(self.layers):
            x = bf16_matmul(x, w) if i in self.low else x @ w
            x += b
            if i < last:
                if self.relu:
                    np.maximum(x, _ZERO, out=x)
                else:
                    np.tanh(x, out=x)
        return x

    def __call__(self, obs, state=None, deterministic=False):
        n = len(obs)
        if not deterministic and float(self.warmup) > 0:
            return self._random_actions(n), {}, state
        out = self._forward(np.asarray(obs, dtype=np.float32).reshape(n, -1))
        if self.kind is None:        # DDQN: epsilon-greedy on the Q-values
            if self.dueling:
                adv = out[:, 1:]
                out = out[:, :1] + adv - adv.mean(axis=1, keepdims=True)
            action = out.argmax(axis=1)[:, None]
            if not deterministic:
                explore = self.actor.np_rng.random(n) < float(self.epsilon)
                if np.count_nonzero(explore):
                    action = np.where(explore[:, None], self._random_actions(n), action)
            return action, {}, state
        if self.kind == "stochastic":
            if self.discrete:
                if deterministic:
                    return out.argmax(axis=1)[:, None], {}, state
                z = out - out.max(axis=1, keepdims=True)
                cdf = np.exp(z).cumsum(axis=1)
                u = self.actor.np_rng.random((n, 1)) * cdf[:, -1:]
                return np.minimum((cdf <= u).sum(axis=1), self.num_actions - 1)[:, None].astype(np.int64), {}, state
            d = self.act_dim
            mean = out[:, :d]
            if deterministic:
                a = np.tanh(mean)
            else:
                std = np.exp(np.clip(out[:, d:], -20.0, 2.0))
                a = np.tanh(mean + std * self.actor.np_rng.standard_normal((n, d), dtype=np.float32))
            return a * self.scale + self.center, {}, state
        a = np.tanh(out)             # DDPG / TD3
        if not deterministic and self.actor.noise != "NoNoise":
            noise, state = self.actor._noise(n, state)
            a = np.clip(a + noise, -1.0, 1.0)
        return a * self.scale + self.center, {}, state


# ---------------------------------------------------------------------- updates
class _NumpyUpdate:
    """What the numpy updates share: calling one with a mini-batch fills every trainable
    parameter's ``.grad`` and returns the statistics (``compute``), timed for the choice
    of threads."""

    def _setup_threads(self, *nets):
        # BLAS itself stays on one thread (its spinning threads are what ``Lanes`` avoids).
        limit_blas_threads()
        large = max(net.largest_layer for net in nets) >= LANE_MIN_WEIGHTS
        self.threads = update_threads() if large else 1
        self.lanes = Lanes(self.threads)
        self.choice = ThreadChoice(self.lanes)

    def _bind_actor_critic(self, actor, target_critics):
        """Numpy views of a Box-action actor-critic (SAC, DDPG, TD3): its policy, critics and
        the target critics, the action scaling, and the parameter lists of both optimizers."""
        self.policy = NumpyEnsemble(actor.policy_net)
        self.critics = NumpyEnsemble(actor.critics)
        self.target = NumpyEnsemble(target_critics)
        self._setup_threads(self.policy, self.critics)
        self.scale = actor.scaler.scale.detach().numpy()
        self.center = actor.scaler.center.detach().numpy()
        self.act_dim = actor.act_dim
        self.q_params = self.critics.parameters()
        self.pi_params = self.policy.parameters()

    def __call__(self, batch):
        """Fill the gradients from ``batch``; return the statistics."""
        start = time.perf_counter()
        info = self.compute(batch)
        self.choice.record(time.perf_counter() - start)
        return info


# ------------------------------------------------------------------------- DDQN
class NumpyDDQNUpdate(_NumpyUpdate):
    """``DDQN.compute_loss`` and its backward pass in numpy (see the module docstring).

    Forward passes of the online network over the observations and the next observations
    together (one lane; over the observations alone for DQN's targets, ``double_q=False``)
    and of the target network over the next observations (the other lane; where the
    collectors computed the targets, ``targets_on_collector``, the online pass over the
    observations alone), then the backward pass
    of the taken actions' values (Huber or squared TD error, optionally weighted by
    prioritized replay; dueling heads included), each large layer's weight gradient beside
    the gradient it passes down.
    """

    def __init__(self, algo):
        self.algo = algo
        self.net = NumpyEnsemble(algo.actor.critics)
        self.target = NumpyEnsemble(algo.target.critics)
        self._setup_threads(self.net)
        self.params = self.net.parameters()
        self.dueling = algo.actor.dueling

    @classmethod
    def build(cls, algo):
        """``(engine, None)`` for ``algo``, or ``(None, reason)`` when numpy cannot compute
        exactly what its torch path computes."""
        from pytorchrl.agent.algorithms.ddqn import DDQN
        reason = _check_common(algo, DDQN, ("q_values", "_obs_features"),
                               ("compute_loss", "unpack_batch", "weighted_mean", "report_td_errors",
                                "bellman_targets", "next_values", "stored_targets", "td_loss"))
        if reason is not None:
            return None, reason
        actor = algo.actor
        if actor.critic_obs_net is not None:
            return None, f"observation feature extractor {type(actor.critic_obs_net).__name__}"
        reason = ensemble_reason(actor.critics) or ensemble_reason(algo.target.critics)
        if reason is not None:
            return None, reason
        if not _same_params(algo.parameter_groups(), {"actor": list(actor.critics.parameters())}):
            return None, "parameter groups other than the Q-network"
        return cls(algo), None

    def _q(self, out):
        if not self.dueling:
            return out
        adv = out[..., 1:]
        return out[..., :1] + adv - adv.mean(axis=-1, keepdims=True)

    def compute(self, batch):
        """Fill the Q-network's ``.grad`` with the loss gradient of ``batch``; return the statistics."""
        algo = self.algo
        obs, obs2 = _float2d(batch[OBS]), _float2d(batch[OBS2])
        act = batch[ACT].numpy().reshape(-1).astype(np.int64, copy=False)
        rew, disc = _column(batch[REW]), _column(batch[DISCOUNT])
        weights = batch.get(WEIGHT)
        n = obs.shape[0]
        rows = np.arange(n)

        cache = []
        if algo.targets_on_collector:   # the collectors computed them (collector-side pre-processing)
            target = _column(algo.stored_targets(batch))
            q_all = self._q(self.net.forward(obs, copy=0, cache=cache))
        elif algo.double_q:
            # Double Q: the online network picks the next actions, the target network values
            # them. The online network's two passes (observations, next observations) are
            # one pass over both (half the operator calls), beside the target's pass.
            q_both, q_target = self.lanes.run(
                lambda: self._q(self.net.forward(np.concatenate([obs, obs2]), copy=0, cache=cache)),
                lambda: self._q(self.target.forward(obs2, copy=0)))
            q_all = q_both[:n]
            target = rew + disc * q_target[rows, q_both[n:].argmax(axis=1)][:, None]
            cache = [h[:n] for h in cache]      # the backward pass is the observations' only
        else:
            # DQN's targets: the target network's maximum (no online pass over obs2).
            q_all, q_target = self.lanes.run(
                lambda: self._q(self.net.forward(obs, copy=0, cache=cache)),
                lambda: self._q(self.target.forward(obs2, copy=0)))
            target = rew + disc * q_target.max(axis=1, keepdims=True)
        q = q_all[rows, act][:, None]
        td = q - target
        if algo.loss == "huber":
            abs_td = np.abs(td)
            small = abs_td < 1.0
            per_sample = np.where(small, 0.5 * td * td, abs_td - 0.5)
            g = np.where(small, td, np.sign(td))
        else:
            per_sample = td * td
            g = 2.0 * td
        if weights is not None:
            w = _column(weights)
            per_sample = per_sample * w
            g *= w
        loss = float(per_sample.mean())
        g *= 1.0 / n

        d_out = np.zeros((n, self.net.w[-1].shape[-1]), dtype=np.float32)
        if self.dueling:
            d_out[:, :1] = g
            d_out[:, 1:] = g * (-1.0 / self.num_actions)
            d_out[rows, act + 1] += g[:, 0]
        else:
            d_out[rows, act] = g[:, 0]
        gw, gb, _ = self.net.backward(cache, d_out, copy=0, lanes=self.lanes)
        _set_grads(self.params, gw + gb)
        info = {"Loss": loss, "QMean": float(q.mean()), "Epsilon": algo.epsilon}
        if weights is not None:
            info[TD_ERROR] = np.abs(td).reshape(-1)
        return info

    @property
    def num_actions(self):
        return self.algo.actor.num_actions


# -------------------------------------------------------------------------- SAC
def _squashed_gaussian(out, noise, act_dim):
    """SAC's reparametrized sample from the policy output (B, 2 act_dim): the action, its
    log-probability and what the backward pass needs."""
    mean, raw = out[:, :act_dim], out[:, act_dim:]
    log_std = np.clip(raw, -20.0, 2.0)
    std = np.exp(log_std)
    u = mean + std * noise
    a = np.tanh(u)
    z = (u - mean) / std
    logp = (-0.5 * z * z - log_std - _HALF_LOG_2PI).sum(axis=1, keepdims=True)
    logp -= (2.0 * (_LOG2 - u - np.logaddexp(0.0, -2.0 * u))).sum(axis=1, keepdims=True)
    return a, logp, (raw, std, noise)


class NumpySACUpdate(_NumpyUpdate):
    """``SAC.compute_loss`` (Box actions) and its three backward passes in numpy.

    In two lanes (see ``Lanes``): the policy over the observations | over the next
    observations (the target's actions); even | odd critics, each over (observation,
    stored action) and (observation, policy action) together, and its target copy over the
    next observations; then the losses; the backward pass of even | odd critics: their
    parameters from the TD errors, and the policy actions' gradient through the critic that
    gave each sample's minimum (``min`` routes a sample's gradient to that one critic, so
    each critic back-propagates its own samples only); the policy (through the actions and
    the log-probabilities), each large layer's weight gradient beside the gradient it
    passes down; log-alpha from the entropy.
    """

    def __init__(self, algo):
        self.algo = algo
        self._bind_actor_critic(algo.actor, algo.target.critics)
        self.log_alpha = algo.alpha_module.log_alpha
        self.log_alpha_view = self.log_alpha.detach().numpy()

    @classmethod
    def build(cls, algo):
        """``(engine, None)`` for ``algo``, or ``(None, reason)`` when numpy cannot compute
        exactly what its torch path computes."""
        from pytorchrl.agent.algorithms.sac import SAC
        reason = _check_common(algo, SAC, ("q_values", "policy_output", "sample_policy", "_obs_features"),
                               ("compute_loss", "unpack_batch", "weighted_mean", "report_td_errors",
                                "bellman_targets", "stored_targets"))
        if reason is not None:
            return None, reason
        actor = algo.actor
        if actor.discrete:
            return None, "Discrete actions (numpy runs SAC on Box actions)"
        for name in ("critic_obs_net", "critic_act_net", "policy_obs_net"):
            if getattr(actor, name) is not None:
                return None, f"{name} {type(getattr(actor, name)).__name__}"
        reason = ensemble_reason(actor.critics) or ensemble_reason(actor.policy_net) or \
            ensemble_reason(algo.target.critics)
        if reason is not None:
            return None, reason
        expected = {"q": list(actor.critics.parameters()), "pi": list(actor.policy_net.parameters()),
                    "alpha": [algo.alpha_module.log_alpha]}
        if not _same_params(algo.parameter_groups(), expected):
            return None, "parameter groups other than critics, policy and alpha"
        return cls(algo), None

    def compute(self, batch):
        """Fill every trainable parameter's ``.grad``; return the statistics."""
        algo = self.algo
        obs, obs2 = _float2d(batch[OBS]), _float2d(batch[OBS2])
        act = (_float2d(batch[ACT]) - self.center) / self.scale
        rew, disc = _column(batch[REW]), _column(batch[DISCOUNT])
        weights = batch.get(WEIGHT)
        w = None if weights is None else _column(weights)
        n, d = obs.shape[0], self.act_dim
        log_alpha = self.log_alpha_view
        alpha = np.exp(log_alpha)

        # Noise in the torch path's order: the next observations' sample first.
        noise2, noise = torch.randn(n, d).numpy(), torch.randn(n, d).numpy()
        p_cache = []
        (a_pi, logp_pi, sample), (a2, logp2, _) = self.lanes.run(
            lambda: _squashed_gaussian(self.policy.forward(obs, copy=0, cache=p_cache), noise, d),
            lambda: _squashed_gaussian(self.policy.forward(obs2, copy=0), noise2, d))

        x_on = np.concatenate([np.concatenate([obs, act], axis=1), np.concatenate([obs, a_pi], axis=1)])
        x_next = np.concatenate([obs2, a2], axis=1)
        copies = self.critics.copies
        caches = [[] for _ in range(copies)]
        q_on, q_next = [None] * copies, [None] * copies

        def critics_forward(ks):
            def run():
                for k in ks:
                    q_on[k] = self.critics.forward(x_on, copy=k, cache=caches[k])
                    q_next[k] = self.target.forward(x_next, copy=k)
            return run

        self.lanes.run(critics_forward(range(0, copies, 2)), critics_forward(range(1, copies, 2)))
        q_all = np.stack(q_on)                          # (copies, 2n, 1)
        q2 = np.stack(q_next).min(axis=0)
        y = rew + disc * (q2 - alpha * logp2)
        q, q_pi_all = q_all[:, :n], q_all[:, n:]
        best = q_pi_all.argmin(axis=0)[:, 0]            # critic giving each sample's minimum
        q_pi = q_pi_all.min(axis=0)

        td = q - y[None]
        per_critic = td * td if w is None else td * td * w
        q_loss = 0.5 * float(per_critic.mean(axis=(1, 2)).sum())
        pi_loss = float((alpha * logp_pi - q_pi).mean())
        entropy = -logp_pi
        entropy_gap = float((entropy - algo.target_entropy).mean())
        alpha_loss = float(log_alpha) * entropy_gap

        # Critics: d q_loss / d q_k = td_k w / n. Policy loss: d / d q_pi = -1/n, routed
        # to the critic of each sample's minimum.
        dq = td * (1.0 / n) if w is None else td * (w * (1.0 / n))
        gws = [np.empty_like(w_) for w_ in self.critics.w]
        gbs = [np.empty_like(b_) for b_ in self.critics.b]
        d_a_pi = np.empty((n, d), dtype=np.float32)

        def critics_backward(ks):
            def run():
                for k in ks:
                    self._critic_backward(k, caches[k], dq[k], best == k, n, gws, gbs, d_a_pi)
            return run

        self.lanes.run(critics_backward(range(0, copies, 2)), critics_backward(range(1, copies, 2)))

        # Policy: through the action (tanh) and the log-probability.
        raw, std, eps = sample
        a = a_pi
        g_logp = alpha * (1.0 / n)
        g_u = d_a_pi * (1.0 - a * a) + (2.0 * g_logp) * a
        g_log_std = g_u * eps * std - g_logp
        g_log_std *= (raw >= -20.0) & (raw <= 2.0)
        p_gw, p_gb, _ = self.policy.backward(p_cache, np.concatenate([g_u, g_log_std], axis=1), copy=0,
                                             lanes=self.lanes)

        _set_grads(self.q_params, gws + gbs)
        _set_grads(self.pi_params, p_gw + p_gb)
        self.log_alpha.grad = torch.tensor(entropy_gap, dtype=torch.float32)
        info = {"LossQ": q_loss, "LossPi": pi_loss, "LossAlpha": alpha_loss, "Alpha": float(alpha),
                "QMean": float(q.mean()), "Entropy": float(entropy.mean())}
        if w is not None:
            info[TD_ERROR] = np.abs(td).mean(axis=0).reshape(-1)
        return info

    def _critic_backward(self, k, cache, dq, mine, n, gws, gbs, d_a_pi):
        """Critic ``k``'s parameter gradients (TD rows, ``dq``) into ``gws``/``gbs``, and
        the gradient of the policy actions of the samples whose minimum it gave (``mine``;
        the gradient of its output there is -1/n) into ``d_a_pi``."""
        net = self.critics
        rows = np.flatnonzero(mine)
        # Inputs of each layer: the stored-action rows and this critic's policy rows.
        ins_q = [c[:n] for c in cache]
        ins_pi = [None] + [c[n:][rows] for c in cache[1:]]
        d_q = dq
        d_pi = np.full((len(rows), 1), -1.0 / n, dtype=np.float32)
        for i in range(len(net.w) - 1, -1, -1):
            w = net.w[i][k]
            gws[i][k] = net.product(ins_q[i].T, d_q, i)
            gbs[i][k, 0] = d_q.sum(axis=0)
            if i > 0:
                d_q = _activation_grad(net.product(d_q, w.T, i), ins_q[i], net.kind)
                d_pi = _activation_grad(net.product(d_pi, w.T, i), ins_pi[i], net.kind)
            else:
                d_a_pi[rows] = matmul(d_pi, w[cache[0].shape[1] - self.act_dim:].T)


# ---------------------------------------------------------------------- DDPG/TD3
class NumpyTD3Update(_NumpyUpdate):
    """``DDPG.compute_loss`` (TD3's target smoothing and policy delay included) and its
    backward passes in numpy.

    In two lanes (see ``Lanes``): the online critics over (observation, stored action) |
    the target policy and target critics over the next observations; then the TD errors;
    the critics' backward pass | on policy steps, the policy and the first critic over
    (observation, policy action) and the policy's backward pass through that critic's
    action input.
    """

    def __init__(self, algo, smoothing):
        self.algo = algo
        self._bind_actor_critic(algo.actor, algo.target.critics)
        self.target_policy = NumpyEnsemble(algo.target.policy_net)
        self.smoothing = smoothing

    @classmethod
    def build(cls, algo):
        """``(engine, None)`` for ``algo``, or ``(None, reason)`` when numpy cannot compute
        exactly what its torch path computes."""
        from pytorchrl.agent.algorithms.td3 import DDPG, TD3
        reason = _check_common(algo, DDPG, ("q_values", "policy_output", "deterministic_policy", "_obs_features"),
                               ("compute_loss", "unpack_batch", "weighted_mean", "report_td_errors",
                                "policy_step"))
        if reason is not None:
            return None, reason
        next_actions = type(algo).next_actions
        if next_actions is not DDPG.next_actions and next_actions is not TD3.next_actions:
            return None, "next_actions overridden"
        actor = algo.actor
        for name in ("critic_obs_net", "critic_act_net", "policy_obs_net"):
            if getattr(actor, name) is not None:
                return None, f"{name} {type(getattr(actor, name)).__name__}"
        for net in (actor.critics, actor.policy_net, algo.target.critics, algo.target.policy_net):
            reason = ensemble_reason(net)
            if reason is not None:
                return None, reason
        expected = {"q": list(actor.critics.parameters()), "pi": list(actor.policy_net.parameters())}
        if not _same_params(algo.parameter_groups(), expected):
            return None, "parameter groups other than critics and policy"
        return cls(algo, smoothing=next_actions is TD3.next_actions), None

    def compute(self, batch):
        """Fill the gradients of the critics (and of the policy on policy steps; None
        otherwise); return the statistics."""
        algo = self.algo
        obs, obs2 = _float2d(batch[OBS]), _float2d(batch[OBS2])
        act = (_float2d(batch[ACT]) - self.center) / self.scale
        rew, disc = _column(batch[REW]), _column(batch[DISCOUNT])
        weights = batch.get(WEIGHT)
        w = None if weights is None else _column(weights)
        n = obs.shape[0]

        noise = torch.randn(n, self.act_dim).numpy() if self.smoothing else None
        c_cache = []

        def online():
            return self.critics.forward(np.concatenate([obs, act], axis=1), cache=c_cache)

        def next_values():
            a2 = np.tanh(self.target_policy.forward(obs2, copy=0))
            if noise is not None:     # TD3's target policy smoothing
                a2 = np.clip(a2 + np.clip(noise * algo.target_noise, -algo.noise_clip, algo.noise_clip), -1.0, 1.0)
            return self.target.forward(np.concatenate([obs2, a2], axis=1)).min(axis=0)

        q, q2 = self.lanes.run(online, next_values)
        y = rew + disc * q2
        td = q - y[None]
        per_critic = td * td if w is None else td * td * w
        q_loss = float(per_critic.mean(axis=(1, 2)).sum())
        info = {"LossQ": q_loss, "QMean": float(q.mean())}
        dq = td * (2.0 / n) if w is None else td * (w * (2.0 / n))

        def critics_backward():
            gws, gbs, _ = self.critics.backward(c_cache, dq)
            return gws + gbs

        def policy_gradient():
            p_cache, q_cache = [], []
            a_pi = np.tanh(self.policy.forward(obs, copy=0, cache=p_cache))
            q_pi = self.critics.forward(np.concatenate([obs, a_pi], axis=1), copy=0, cache=q_cache)
            d_q = np.full((n, 1), -1.0 / n, dtype=np.float32)
            _, _, d_x = self.critics.backward(q_cache, d_q, copy=0, input_grad=True, param_grads=False)
            p_gw, p_gb, _ = self.policy.backward(p_cache, d_x[:, obs.shape[1]:] * (1.0 - a_pi * a_pi), copy=0)
            return -float(q_pi.mean()), p_gw + p_gb

        if algo.policy_step():
            q_grads, (info["LossPi"], pi_grads) = self.lanes.run(critics_backward, policy_gradient)
            _set_grads(self.pi_params, pi_grads)
        else:
            q_grads = critics_backward()
            for p in self.pi_params:
                p.grad = None
        _set_grads(self.q_params, q_grads)
        if w is not None:
            info[TD_ERROR] = np.abs(td).mean(axis=0).reshape(-1)
        return info


__all__ = ["NumpyOffPolicyActing", "NumpyDDQNUpdate", "NumpySACUpdate", "NumpyTD3Update", "NumpyEnsemble"]
