"""On-policy rollout storages: fixed-length rollouts, returns and advantages, mini-batches.

One class serves both sides of a scheme. A collection worker fills a preallocated
rollout buffer step by step (``reset_rollout``, ``insert_transition``, ``finish_rollout``)
and ships it with ``get_data``. A gradient worker receives any number of such rollouts
(``add_data``; several collectors, or rollouts cut short by preemption), computes targets
on each (``before_gradients``), then serves shuffled mini-batches (``generate_batches``).

Episode ends are handled per step: after termination nothing is bootstrapped; after
truncation (a time limit) the value of the final observation (``TRUNC_VAL``) is; at the
end of a rollout the value of the last observation is.
"""

import numpy as np
import torch

from pytorchrl import ACT, ADV, DONE, LOGP, OBS, RET, REW, TERM, TRUNC, TRUNC_VAL, VAL
from pytorchrl.agent.algorithms.base import check_parameter
from pytorchrl.agent.factory import ComponentFactory

_ROLLOUT_KEYS = (OBS, ACT, LOGP, VAL, REW, TERM, TRUNC, TRUNC_VAL)


def _as_numpy(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return x


def compute_gae(rew, val, term, trunc, trunc_val, gamma, gae_lambda):
    """Generalized advantage estimation over one rollout.

    Parameters
    ----------
    rew, term, trunc, trunc_val : torch.Tensor
        Shape (T, N, 1): rewards, termination and truncation flags (0/1) after each step,
        and the value of the final observation where the step was truncated (else 0).
    val : torch.Tensor
        Shape (T + 1, N, 1): value of every observation, the last one being the
        observation reached after the final step (the bootstrap).
    gamma : float
        Discount factor.
    gae_lambda : float
        GAE's lambda; 1 gives Monte-Carlo returns bootstrapped at cuts.

    Returns
    -------
    adv, ret : torch.Tensor
        Advantages and return targets (adv + value), shape (T, N, 1).
    """
    ended = torch.maximum(term, trunc)
    not_ended = 1.0 - ended
    # Value of the next state: the following observation's while the episode goes on, the
    # final observation's after truncation, zero after termination.
    next_val = val[1:] * not_ended + trunc_val * trunc
    delta = rew + gamma * next_val - val[:-1]
    decay = gamma * gae_lambda * not_ended
    adv = torch.empty_like(rew)
    if adv.device.type == "cpu":
        # The reverse scan is sequential: on CPU, numpy row operations cost a few hundred
        # nanoseconds where each torch operator costs several microseconds of dispatch.
        _reverse_scan(delta.numpy(), decay.numpy(), adv.numpy())
    else:
        last = torch.zeros_like(rew[0])
        for t in range(rew.shape[0] - 1, -1, -1):
            last = delta[t] + decay[t] * last
            adv[t] = last
    return adv, adv + val[:-1]


def _reverse_scan(delta, decay, out):
    """out[t] = delta[t] + decay[t] * out[t + 1] (out[T] = 0), written into ``out``."""
    if delta[0].size == 1:  # one environment: plain floats beat even numpy's per-call cost
        acc, values = 0.0, []
        for d, k in zip(delta.ravel().tolist()[::-1], decay.ravel().tolist()[::-1]):
            acc = d + k * acc
            values.append(acc)
        out.reshape(-1)[:] = values[::-1]
        return
    last = np.zeros_like(delta[0])
    for t in range(delta.shape[0] - 1, -1, -1):
        np.multiply(decay[t], last, out=last)
        last += delta[t]
        out[t] = last


class VanillaOnPolicyBuffer:
    """Rollout storage with discounted returns (bootstrapped at cuts and time limits).

    Parameters
    ----------
    device : torch.device or str
        Device of the stored tensors.
    actor : nn.Module
        The actor (for its action shape and dtype).
    algorithm : Algorithm
        The algorithm (its ``gamma`` is read each time targets are computed, so a hot-swap
        of gamma applies to the next rollout).
    envs : TorchVecEnv or None
        Environments whose batch size sets the buffer width; None for a learner-side buffer.
    size : int
        Environment steps per environment in one rollout (the collector's ``update_every``).
    """

    gae_lambda = 1.0

    def __init__(self, device, actor, algorithm, envs, size):
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"storage size must be a positive integer, got {size!r}")
        self.size = size
        self.device = torch.device(device)
        self.actor = actor
        self.algorithm = algorithm
        self.envs = envs
        self.step = 0
        self.buffers = None
        self.chunks = []      # rollouts received by a learner-side storage
        self.flat = None      # the chunks' samples with targets, flattened

    @classmethod
    def create_factory(cls, size, **kwargs):
        """Return a picklable ``factory(device, actor, algorithm, envs)`` (parameters as in the class)."""
        return ComponentFactory(cls, size=size, **kwargs)

    # ------------------------------------------------------------ hyperparameters
    @property
    def hyperparameters(self):
        """Parameters that ``update_storage_parameter`` may change."""
        return {"size": self.size}

    def update_storage_parameter(self, parameter_name, new_parameter_value):
        """Change a storage parameter; it applies from the next rollout on.

        Parameters
        ----------
        parameter_name : str
            One of ``self.hyperparameters``; anything else raises ValueError listing them.
        new_parameter_value : object
            The new value (a positive integer for ``size``).
        """
        value = check_parameter(self.hyperparameters, parameter_name, new_parameter_value,
                                f"{type(self).__name__} parameter")
        if parameter_name == "size" and value < 1:
            raise ValueError(f"storage size must be >= 1, got {value}")
        if parameter_name == "gae_lambda" and not 0.0 <= value <= 1.0:
            raise ValueError(f"gae_lambda must be in [0, 1], got {value}")
        setattr(self, parameter_name, value)

    # ------------------------------------------------------------ collection side
    # The collection buffers are CPU tensors written through numpy views: one numpy
    # assignment per array and step costs a fraction of a torch indexing call, and the
    # actor reads its input straight from the observation buffer (no extra copy).
    def reset_rollout(self, obs):
        """Start a rollout whose first observations are ``obs`` (num_envs, *obs_shape; array or tensor)."""
        obs = obs.cpu().numpy() if isinstance(obs, torch.Tensor) else np.asarray(obs)
        n = obs.shape[0]
        T = self.size
        b = self.buffers
        if b is None or b[OBS].shape[0] != T + 1 or b[OBS].shape[1] != n:
            act_shape = tuple(self.actor.action_shape)

            def z(*shape, dtype=torch.float32):
                return torch.zeros(shape, dtype=dtype)
            self.buffers = b = {
                # One observation more than steps: the last one is the bootstrap input.
                OBS: torch.from_numpy(np.zeros((T + 1, n) + obs.shape[1:], dtype=obs.dtype)),
                ACT: z(T, n, *act_shape, dtype=self.actor.action_dtype),
                LOGP: z(T, n, 1), VAL: z(T + 1, n, 1), REW: z(T, n, 1),
                TERM: z(T, n, 1), TRUNC: z(T, n, 1), TRUNC_VAL: z(T, n, 1)}
            self._np = {k: v.numpy() for k, v in b.items()}
        self._np[OBS][0] = obs
        self.step = 0

    def current_obs(self):
        """Observations (num_envs, *obs_shape) the next action is taken from, as a tensor view."""
        return self.buffers[OBS][self.step]

    def current_obs_numpy(self):
        """``current_obs`` as a numpy view."""
        return self._np[OBS][self.step]

    def insert_transition(self, act, logp, val, rew, term, trunc, next_obs, trunc_val=None):
        """Record one vectorized step taken from ``current_obs()``.

        Parameters
        ----------
        act, logp, val : torch.Tensor or np.ndarray
            Action (as stored), its log-probability and the value of the observation, (N, ...).
        rew : array (N,)
            Reward.
        term, trunc : array of bool (N,)
            Episode terminated / truncated by this step.
        next_obs : array (N, *obs_shape)
            Observation after the step (the first of a new episode where one ended); copied.
        trunc_val : array (N, 1) or None
            Value of the final observation of truncated episodes (0 elsewhere).
        """
        b, t = self._np, self.step
        b[ACT][t] = _as_numpy(act)
        b[LOGP][t] = _as_numpy(logp)
        b[VAL][t] = _as_numpy(val)
        b[REW][t, :, 0] = _as_numpy(rew)
        b[TERM][t, :, 0] = _as_numpy(term)
        b[TRUNC][t, :, 0] = _as_numpy(trunc)
        b[TRUNC_VAL][t] = 0.0 if trunc_val is None else _as_numpy(trunc_val)
        b[OBS][t + 1] = _as_numpy(next_obs)
        self.step = t + 1

    def finish_rollout(self, last_value):
        """Close the rollout with the value (N, 1) of ``current_obs()``, the observation after its last step."""
        self._np[VAL][self.step] = _as_numpy(last_value)

    @property
    def full(self):
        """True when the rollout holds ``size`` steps."""
        return self.step >= self.size

    def get_data(self, data_to_cpu=True):
        """The recorded steps (possibly fewer than ``size``, if cut) as a dict of tensors."""
        k = self.step
        data = {key: (self.buffers[key][:k + 1] if key == VAL else self.buffers[key][:k]).clone()
                for key in _ROLLOUT_KEYS}
        if not data_to_cpu and self.device.type != "cpu":
            data = {key: v.to(self.device) for key, v in data.items()}
        return data

    def next_rollout_obs(self):
        """Observations after the last recorded step (the start of the next rollout), a copy."""
        return self._np[OBS][self.step].copy()

    # -------------------------------------------------------------- learner side
    def add_data(self, data):
        """Receive one rollout (a dict as produced by ``get_data``); empty rollouts are ignored."""
        if data[REW].shape[0] > 0:
            self.chunks.append({k: v.to(self.device) for k, v in data.items()})

    def before_gradients(self):
        """Compute advantages and return targets of every received rollout and flatten them."""
        gamma = self.algorithm.gamma
        flat = {OBS: [], ACT: [], LOGP: [], VAL: [], RET: [], ADV: [], DONE: []}
        for c in self.chunks:
            adv, ret = compute_gae(c[REW], c[VAL], c[TERM], c[TRUNC], c[TRUNC_VAL], gamma, self.gae_lambda)
            T, n = c[REW].shape[:2]
            flat[OBS].append(c[OBS].reshape(T * n, *c[OBS].shape[2:]))
            flat[ACT].append(c[ACT].reshape(T * n, *c[ACT].shape[2:]))
            flat[LOGP].append(c[LOGP].reshape(T * n, 1))
            flat[VAL].append(c[VAL][:-1].reshape(T * n, 1))
            flat[RET].append(ret.reshape(T * n, 1))
            flat[ADV].append(adv.reshape(T * n, 1))
            flat[DONE].append(torch.maximum(c[TERM], c[TRUNC]).reshape(T * n, 1))
        self.flat = {k: torch.cat(v) for k, v in flat.items()} if self.chunks else None

    @property
    def num_samples(self):
        """Samples ready for training (after ``before_gradients``)."""
        return 0 if self.flat is None else self.flat[OBS].shape[0]

    def generate_batches(self, num_mini_batch, mini_batch_size=None, num_epochs=1, generator=None):
        """Yield shuffled mini-batches over ``num_epochs`` passes of the prepared samples.

        Parameters
        ----------
        num_mini_batch : int
            Mini-batches per epoch when ``mini_batch_size`` is None (sizes differ by at most
            one sample when it does not divide the number of samples).
        mini_batch_size : int or None
            Samples per mini-batch (the last one of an epoch may be smaller).
        num_epochs : int
            Passes over the data.
        generator : torch.Generator or None
            Source of the shuffling randomness.
        """
        n = self.num_samples
        if n == 0:
            return
        if (mini_batch_size or 0) >= n or (mini_batch_size is None and num_mini_batch == 1):
            # One mini-batch holds every sample: its gradient does not depend on the order,
            # so there is nothing to shuffle or gather.
            for _ in range(num_epochs):
                yield self.flat
            return
        for _ in range(num_epochs):
            perm = torch.randperm(n, generator=generator, device=self.device)
            parts = perm.split(mini_batch_size) if mini_batch_size else perm.tensor_split(min(num_mini_batch, n))
            for idx in parts:
                yield {k: v[idx] for k, v in self.flat.items()}

    def after_gradients(self):
        """Forget the trained-on data (on-policy: it is stale now)."""
        self.chunks = []
        self.flat = None


class GAEBuffer(VanillaOnPolicyBuffer):
    """Rollout storage with generalized advantage estimation.

    Parameters
    ----------
    device, actor, algorithm, envs, size
        As in ``VanillaOnPolicyBuffer``.
    gae_lambda : float
        GAE's lambda (0: one-step TD advantages; 1: Monte-Carlo).
    """

    def __init__(self, device, actor, algorithm, envs, size, gae_lambda=0.95):
        super().__init__(device, actor, algorithm, envs, size)
        self.gae_lambda = float(gae_lambda)
        if not 0.0 <= self.gae_lambda <= 1.0:
            raise ValueError(f"gae_lambda must be in [0, 1], got {gae_lambda}")

    @classmethod
    def create_factory(cls, size, gae_lambda=0.95):
        """Return a picklable ``factory(device, actor, algorithm, envs)`` (parameters as in the class)."""
        return ComponentFactory(cls, size=size, gae_lambda=gae_lambda)

    @property
    def hyperparameters(self):
        return {"size": self.size, "gae_lambda": self.gae_lambda}
