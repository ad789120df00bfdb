"""Fast paths of ``OffPolicyActor``'s default networks on the CPU: acting, and the updates
of DDQN, SAC (Box actions) and DDPG/TD3.

Off-policy control networks (two hidden layers of 256 units, mini-batches of 64 to 256)
are small enough that torch's per-operator dispatch and autograd bookkeeping cost as much
as the arithmetic. Written out in numpy (``networks.NumpyEnsemble``), with the losses'
gradients from their kernels (``losses``), an update runs at the speed of its matrix
products (about 1.7x faster than the torch path for SAC's and 1.5x for DDQN's on one core;
acting a single observation is 10x faster).

- ``NumpyOffPolicyActing`` computes ``OffPolicyActor.act`` for every algorithm: the
  uniform warm-up, DDQN's epsilon-greedy argmax, SAC's squashed Gaussian (or categorical)
  sample, DDPG/TD3's deterministic action with Gaussian or Ornstein-Uhlenbeck noise; its
  randomness comes from the actor's ``np_rng`` (the torch path draws its exploration from
  the same generator, SAC's policy sample from torch's).
- ``NumpyDDQNUpdate``, ``NumpySACUpdate`` and ``NumpyTD3Update`` compute what the
  algorithm's ``compute_loss`` followed by the backward passes computes, and fill every
  trainable parameter's ``.grad`` (float32, like torch); the optimizer steps are
  ``NumpyAdam``'s. The noise the SAC and TD3 losses sample is drawn from torch's
  generator, in the torch path's order: a seed gives the same run on either path.
- An update is cut into pairs of independent pieces that ``threads.Lanes`` runs on two
  threads when the second core is free.

The reference classes declare them (``OffPolicyActor``, ``DDQN``, ``SAC``, ``DDPG``,
``TD3``) with the methods each reproduces; tests/unit/test_accel_parity.py runs each against
its reference.
"""

import time

import numpy as np
import torch

from pytorchrl import ACT, DISCOUNT, OBS, OBS2, REW, TD_ERROR, WEIGHT
from pytorchrl.agent.losses import deterministic, q_learning, sac
from pytorchrl.agent.accel.networks import (LANE_MIN_WEIGHTS, NumpyEnsemble, activation_grad, bf16_matmul, column,
                                            float2d, matmul, program_of, set_grads, view)
from pytorchrl.agent.accel.observations import numpy_normalizer
from pytorchrl.agent.accel.sampling import categorical_sample
from pytorchrl.agent.accel.threads import Lanes, ThreadChoice, limit_blas_threads, update_threads
from pytorchrl.agent.accel.xp import NUMPY

_ZERO = np.float32(0.0)


def _ensemble_reason(*nets):
    """None when numpy computes every network of ``nets`` (default ``EnsembleMLP``s), else why not."""
    for net in nets:
        program, reason = program_of(net)
        if program is None:
            return reason
        if not isinstance(program, NumpyEnsemble):
            return f"network {type(net).__name__} (numpy runs the default MLP)"
    return None


def _common_reason(algo):
    """Why no numpy update applies to ``algo`` whatever its algorithm, or None."""
    if algo.device.type != "cpu":
        return f"device {algo.device}"
    if algo.actor.is_recurrent:
        return "recurrent actor (sequences with a memory)"
    return None


def _same_params(groups, expected):
    """True when the algorithm's parameter groups are exactly ``expected`` (name -> list)."""
    return set(groups) == set(expected) and all(
        [id(p) for p in groups[g]] == [id(p) for p in expected[g]] for g in expected)


# ------------------------------------------------------------------------- acting
class NumpyOffPolicyActing:
    """``OffPolicyActor.act`` in numpy: callable ``(obs, state, deterministic) ->
    (env_action, {}, state)``.

    Parameters
    ----------
    actor : OffPolicyActor
        The actor (checked by ``build``).
    """

    def __init__(self, actor):
        self.actor = actor
        self.warmup = view(actor.warmup)                 # 0-d views of the exploration buffers
        self.epsilon = view(actor.epsilon)
        self.discrete = actor.discrete
        self.kind = actor.policy_kind                    # None (DDQN), "stochastic", "deterministic"
        self.dueling = actor.dueling
        self.num_actions = actor.num_actions
        self.act_dim = actor.act_dim
        self.normalize = numpy_normalizer(actor)
        self.net = NumpyEnsemble(actor.critics if self.kind is None else actor.policy_net)
        self.layers = self.net.layers(0)
        self.low = self.net.low
        self.relu = self.net.kind == "relu"
        if not self.discrete:
            self.scale = view(actor.scaler.scale)
            self.center = view(actor.scaler.center)

    @classmethod
    def build(cls, actor):
        """``(acting, None)`` for ``actor``, or ``(None, reason)`` when numpy cannot
        compute what its torch path computes."""
        if actor.device.type != "cpu":
            return None, f"device {actor.device}"
        if actor.is_recurrent:
            return None, "recurrent actor (memory state)"
        if actor.use_sde:
            return None, "gSDE exploration (numpy acts with the Gaussian policy of SAC)"
        obs_net, net = ((actor.critic_obs_net, actor.critics) if actor.policy_kind is None
                        else (actor.policy_obs_net, actor.policy_net))
        if obs_net is not None:
            return None, f"observation feature extractor {type(obs_net).__name__}"
        reason = _ensemble_reason(net)
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
        out = self._forward(self.normalize(np.asarray(obs, dtype=np.float32).reshape(n, -1)))
        if self.kind is None:        # DDQN: epsilon-greedy on the Q-values
            if self.dueling:
                out = q_learning.dueling_q(NUMPY, out)
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
                weights = np.exp(out - out.max(axis=1, keepdims=True))
                return categorical_sample(weights, self.actor.np_rng.random((n, 1))), {}, state
            d = self.act_dim
            mean = out[:, :d]
            if deterministic:
                a = np.tanh(mean)
            else:
                std = np.exp(np.clip(out[:, d:], sac.LOG_STD_MIN, sac.LOG_STD_MAX))
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
        self.scale = view(actor.scaler.scale)
        self.center = view(actor.scaler.center)
        self.act_dim = actor.act_dim
        self.normalize = numpy_normalizer(actor)
        self.q_params = self.critics.parameters()
        self.pi_params = self.policy.parameters()

    @staticmethod
    def _actor_critic_reason(algo, nets):
        """Why a Box-action actor-critic update cannot run, or None."""
        actor = algo.actor
        for name in ("critic_obs_net", "critic_act_net", "policy_obs_net"):
            if getattr(actor, name) is not None:
                return f"{name} {type(getattr(actor, name)).__name__}"
        return _ensemble_reason(*nets)

    def __call__(self, batch):
        """Fill the gradients from ``batch``; return the statistics."""
        start = time.perf_counter()
        info = self.compute(batch)
        self.choice.record(time.perf_counter() - start)
        return info


# ------------------------------------------------------------------------- DDQN
class NumpyDDQNUpdate(_NumpyUpdate):
    """``DDQN.compute_loss`` and its backward pass in numpy.

    Forward passes of the online network over the observations and the next observations
    together (one lane; over the observations alone for DQN's targets, ``double_q=False``)
    and of the target network over the next observations (the other lane; where the
    collectors computed the targets, ``targets_on_collector``, the online pass over the
    observations alone), then the backward pass of the taken actions' values (the TD
    loss kernel: Huber or squared error, optionally weighted by prioritized replay; dueling
    heads included), each large layer's weight gradient beside the gradient it passes down.

    Parameters
    ----------
    algo : DDQN
        The algorithm (checked by ``build``).
    """

    def __init__(self, algo):
        self.algo = algo
        self.net = NumpyEnsemble(algo.actor.critics)
        self.target = NumpyEnsemble(algo.target.critics)
        self._setup_threads(self.net)
        self.params = self.net.parameters()
        self.dueling = algo.actor.dueling
        self.normalize = numpy_normalizer(algo.actor)

    @classmethod
    def build(cls, algo):
        """``(engine, None)`` for ``algo``, or ``(None, reason)`` when numpy cannot compute
        exactly what its torch path computes."""
        reason = _common_reason(algo)
        if reason is not None:
            return None, reason
        actor = algo.actor
        if actor.critic_obs_net is not None:
            return None, f"observation feature extractor {type(actor.critic_obs_net).__name__}"
        reason = _ensemble_reason(actor.critics, algo.target.critics)
        if reason is not None:
            return None, reason
        if not _same_params(algo.parameter_groups(), {"actor": list(actor.critics.parameters())}):
            return None, "parameter groups other than the Q-network"
        return cls(algo), None

    def _q(self, out):
        return q_learning.dueling_q(NUMPY, out) if self.dueling else out

    def compute(self, batch):
        """Fill the Q-network's ``.grad`` with the loss gradient of ``batch``; return the statistics."""
        algo = self.algo
        obs, obs2 = self.normalize(float2d(batch[OBS])), self.normalize(float2d(batch[OBS2]))
        act = batch[ACT].numpy().reshape(-1, 1).astype(np.int64, copy=False)
        rew, disc = column(batch[REW]), column(batch[DISCOUNT])
        weights = batch.get(WEIGHT)
        w = None if weights is None else column(weights)
        n = obs.shape[0]

        cache = []
        if algo.targets_on_collector:   # the collectors computed them (collector-side pre-processing)
            target = column(algo.stored_targets(batch))
            q_all = self._q(self.net.forward(obs, copy=0, cache=cache))
        elif algo.double_q:
            # Double Q: the online network picks the next actions, the target network values
            # them. The online network's two passes (observations, next observations) are
            # one pass over both (half the operator calls), beside the target's pass.
            q_both, q_target = self.lanes.run(
                lambda: self._q(self.net.forward(np.concatenate([obs, obs2]), copy=0, cache=cache)),
                lambda: self._q(self.target.forward(obs2, copy=0)))
            q_all = q_both[:n]
            target = q_learning.bellman_target(rew, disc, q_learning.next_values(NUMPY, q_target, q_both[n:]))
            cache = [h[:n] for h in cache]      # the backward pass is the observations' only
        else:
            # DQN's targets: the target network's maximum (no online pass over obs2).
            q_all, q_target = self.lanes.run(
                lambda: self._q(self.net.forward(obs, copy=0, cache=cache)),
                lambda: self._q(self.target.forward(obs2, copy=0)))
            target = q_learning.bellman_target(rew, disc, q_learning.next_values(NUMPY, q_target))
        q = NUMPY.take(q_all, act)
        loss, td, g = q_learning.td_loss(NUMPY, q, target, w, algo.loss)

        d_q = np.zeros_like(q_all)
        NUMPY.add_at(d_q, act, g)
        if self.dueling:    # through V + A - mean(A): d/dV = sum, d/dA = d - mean(d)
            d_out = np.empty((n, q_all.shape[1] + 1), dtype=np.float32)
            d_out[:, :1] = g
            d_out[:, 1:] = d_q - g / self.num_actions
        else:
            d_out = d_q
        gw, gb, _ = self.net.backward(cache, d_out, copy=0, lanes=self.lanes)
        set_grads(self.params, gw + gb)
        info = {"Loss": float(loss), "QMean": float(q.mean()), "Epsilon": algo.epsilon}
        if w is not None:
            info[TD_ERROR] = np.abs(td).reshape(-1)
        return info

    @property
    def num_actions(self):
        return self.algo.actor.num_actions


# -------------------------------------------------------------------------- SAC
class NumpySACUpdate(_NumpyUpdate):
    """``SAC.compute_loss`` (Box actions) and its three backward passes in numpy.

    In two lanes (see ``threads.Lanes``): the policy over the observations | over the next
    observations (the target's actions); even | odd critics, each over (observation,
    stored action) and (observation, policy action) together, and its target copy over the
    next observations; then the loss kernels (``losses.q_learning.critic_loss``,
    ``losses.sac``); the backward pass of even | odd critics: their parameters from the
    TD errors, and the policy actions' gradient through the critic that gave each sample's
    minimum (``min`` routes a sample's gradient to that one critic, so each critic
    back-propagates its own samples only); the policy (through the actions and the
    log-probabilities), each large layer's weight gradient beside the gradient it passes
    down; log-alpha from the entropy.

    Parameters
    ----------
    algo : SAC
        The algorithm (checked by ``build``).
    """

    def __init__(self, algo):
        self.algo = algo
        self._bind_actor_critic(algo.actor, algo.target.critics)
        self.log_alpha = algo.alpha_module.log_alpha
        self.log_alpha_view = view(self.log_alpha)

    @classmethod
    def build(cls, algo):
        """``(engine, None)`` for ``algo``, or ``(None, reason)`` when numpy cannot compute
        exactly what its torch path computes."""
        reason = _common_reason(algo)
        if reason is not None:
            return None, reason
        actor = algo.actor
        if actor.discrete:
            return None, "Discrete actions (numpy runs SAC on Box actions)"
        if actor.use_sde:
            return None, "gSDE policy (numpy runs SAC's Gaussian policy)"
        reason = cls._actor_critic_reason(algo, (actor.critics, actor.policy_net, algo.target.critics))
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
        obs, obs2 = self.normalize(float2d(batch[OBS])), self.normalize(float2d(batch[OBS2]))
        act = (float2d(batch[ACT]) - self.center) / self.scale
        rew, disc = column(batch[REW]), column(batch[DISCOUNT])
        weights = batch.get(WEIGHT)
        w = None if weights is None else column(weights)
        n, d = obs.shape[0], self.act_dim
        log_alpha = self.log_alpha_view
        alpha = np.exp(log_alpha)

        # Noise in the torch path's order: the next observations' sample first.
        noise2, noise = torch.randn(n, d).numpy(), torch.randn(n, d).numpy()
        p_cache = []
        (a_pi, logp_pi, sample), (a2, logp2, _) = self.lanes.run(
            lambda: sac.squashed_gaussian(NUMPY, self.policy.forward(obs, copy=0, cache=p_cache), noise),
            lambda: sac.squashed_gaussian(NUMPY, self.policy.forward(obs2, copy=0), noise2))

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
        y = sac.soft_target(rew, disc, np.stack(q_next).min(axis=0), logp2, alpha)
        q, q_pi_all = q_all[:, :n], q_all[:, n:]
        q_loss, td, dq = q_learning.critic_loss(NUMPY, q, y, w, scale=0.5)
        pi_loss, alpha_loss, entropy, (g_logp, g_q_pi, best, g_log_alpha) = sac.policy_and_alpha_losses(
            NUMPY, q_pi_all, logp_pi, log_alpha, alpha, algo.target_entropy)

        gws = [np.empty_like(w_) for w_ in self.critics.w]
        gbs = [np.empty_like(b_) for b_ in self.critics.b]
        d_a_pi = np.empty((n, d), dtype=np.float32)

        def critics_backward(ks):
            def run():
                for k in ks:
                    self._critic_backward(k, caches[k], dq[k], best == k, n, g_q_pi, gws, gbs, d_a_pi)
            return run

        self.lanes.run(critics_backward(range(0, copies, 2)), critics_backward(range(1, copies, 2)))

        # Policy: through the action (tanh) and the log-probability.
        g_out = sac.squashed_gaussian_grad(NUMPY, sample, d_a_pi, g_logp)
        p_gw, p_gb, _ = self.policy.backward(p_cache, g_out, copy=0, lanes=self.lanes)

        set_grads(self.q_params, gws + gbs)
        set_grads(self.pi_params, p_gw + p_gb)
        self.log_alpha.grad = torch.tensor(float(g_log_alpha), dtype=torch.float32)
        info = {"LossQ": float(q_loss), "LossPi": float(pi_loss), "LossAlpha": float(alpha_loss),
                "Alpha": float(alpha), "QMean": float(q.mean()), "Entropy": float(entropy.mean())}
        if w is not None:
            info[TD_ERROR] = np.abs(td).mean(axis=0).reshape(-1)
        return info

    def _critic_backward(self, k, cache, dq, mine, n, g_q_pi, gws, gbs, d_a_pi):
        """Critic ``k``'s parameter gradients (TD rows, ``dq``) into ``gws``/``gbs``, and
        the gradient of the policy actions of the samples whose minimum it gave (``mine``;
        the gradient of its output there is ``g_q_pi``) into ``d_a_pi``."""
        net = self.critics
        rows = np.flatnonzero(mine)
        # Inputs of each layer: the stored-action rows and this critic's policy rows.
        ins_q = [c[:n] for c in cache]
        ins_pi = [None] + [c[n:][rows] for c in cache[1:]]
        d_q = dq
        d_pi = np.full((len(rows), 1), g_q_pi, dtype=np.float32)
        for i in range(len(net.w) - 1, -1, -1):
            w = net.w[i][k]
            gws[i][k] = net.product(ins_q[i].T, d_q, i)
            gbs[i][k, 0] = d_q.sum(axis=0)
            if i > 0:
                d_q = activation_grad(net.product(d_q, w.T, i), ins_q[i], net.kind)
                d_pi = activation_grad(net.product(d_pi, w.T, i), ins_pi[i], net.kind)
            else:
                d_a_pi[rows] = matmul(d_pi, w[cache[0].shape[1] - self.act_dim:].T)


# ---------------------------------------------------------------------- DDPG/TD3
class NumpyTD3Update(_NumpyUpdate):
    """``DDPG.compute_loss`` (TD3's target smoothing and policy delay included) and its
    backward passes in numpy.

    In two lanes (see ``threads.Lanes``): the online critics over (observation, stored
    action) | the target policy and target critics over the next observations; then the
    TD errors (``losses.q_learning.critic_loss``); the critics' backward pass | on policy
    steps, the policy and the first critic over (observation, policy action) and the
    policy's backward pass through that critic's action input (``losses.deterministic``).

    Parameters
    ----------
    algo : DDPG or TD3
        The algorithm (checked by ``build``).
    smoothing : bool
        TD3's target policy smoothing (``TD3.next_actions``) instead of DDPG's target actions.
    """

    def __init__(self, algo, smoothing):
        self.algo = algo
        self._bind_actor_critic(algo.actor, algo.target.critics)
        self.target_policy = NumpyEnsemble(algo.target.policy_net)
        self.smoothing = smoothing

    @classmethod
    def build(cls, algo, smoothing=False):
        """``(engine, None)`` for ``algo``, or ``(None, reason)`` when numpy cannot compute
        exactly what its torch path computes."""
        reason = _common_reason(algo)
        if reason is not None:
            return None, reason
        actor = algo.actor
        reason = cls._actor_critic_reason(algo, (actor.critics, actor.policy_net, algo.target.critics,
                                                 algo.target.policy_net))
        if reason is not None:
            return None, reason
        expected = {"q": list(actor.critics.parameters()), "pi": list(actor.policy_net.parameters())}
        if not _same_params(algo.parameter_groups(), expected):
            return None, "parameter groups other than critics and policy"
        return cls(algo, smoothing), None

    @classmethod
    def build_smoothed(cls, algo):
        """``build`` with TD3's target policy smoothing."""
        return cls.build(algo, smoothing=True)

    def compute(self, batch):
        """Fill the gradients of the critics (and of the policy on policy steps; None
        otherwise); return the statistics."""
        algo = self.algo
        obs, obs2 = self.normalize(float2d(batch[OBS])), self.normalize(float2d(batch[OBS2]))
        act = (float2d(batch[ACT]) - self.center) / self.scale
        rew, disc = column(batch[REW]), column(batch[DISCOUNT])
        weights = batch.get(WEIGHT)
        w = None if weights is None else column(weights)
        n = obs.shape[0]

        noise = torch.randn(n, self.act_dim).numpy() if self.smoothing else None
        c_cache = []

        def online():
            return self.critics.forward(np.concatenate([obs, act], axis=1), cache=c_cache)

        def next_values():
            a2 = np.tanh(self.target_policy.forward(obs2, copy=0))
            if noise is not None:     # TD3's target policy smoothing
                a2 = deterministic.smoothed_actions(NUMPY, a2, noise, algo.target_noise, algo.noise_clip)
            return self.target.forward(np.concatenate([obs2, a2], axis=1)).min(axis=0)

        q, q2 = self.lanes.run(online, next_values)
        q_loss, td, dq = q_learning.critic_loss(NUMPY, q, q_learning.bellman_target(rew, disc, q2), w)
        info = {"LossQ": float(q_loss), "QMean": float(q.mean())}

        def critics_backward():
            gws, gbs, _ = self.critics.backward(c_cache, dq)
            return gws + gbs

        def policy_gradient():
            p_cache, q_cache = [], []
            a_pi = np.tanh(self.policy.forward(obs, copy=0, cache=p_cache))
            q_pi = self.critics.forward(np.concatenate([obs, a_pi], axis=1), copy=0, cache=q_cache)
            pi_loss, g_q = deterministic.policy_loss(NUMPY, q_pi)
            d_q = np.full((n, 1), g_q, dtype=np.float32)
            _, _, d_x = self.critics.backward(q_cache, d_q, copy=0, input_grad=True, param_grads=False)
            p_gw, p_gb, _ = self.policy.backward(p_cache, d_x[:, obs.shape[1]:] * (1.0 - a_pi * a_pi), copy=0)
            return float(pi_loss), p_gw + p_gb

        if algo.policy_step():
            q_grads, (info["LossPi"], pi_grads) = self.lanes.run(critics_backward, policy_gradient)
            set_grads(self.pi_params, pi_grads)
        else:
            q_grads = critics_backward()
            for p in self.pi_params:
                p.grad = None
        set_grads(self.q_params, q_grads)
        if w is not None:
            info[TD_ERROR] = np.abs(td).mean(axis=0).reshape(-1)
        return info


__all__ = ["NumpyOffPolicyActing", "NumpyDDQNUpdate", "NumpySACUpdate", "NumpyTD3Update"]
