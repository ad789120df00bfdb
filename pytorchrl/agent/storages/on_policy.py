"""On-policy rollout storages: fixed-length rollouts, returns and advantages, mini-batches.

Collection side (see ``Storage``): a rollout of ``size`` steps per environment is recorded;
``finish`` asks the algorithm's ``bootstrap`` hook, in one batched call, for the values
of the observation after the last step and of the final observations of truncated
episodes. Learner side: any number of such rollouts (several collectors, or rollouts cut
short by preemption) are received with ``add_data``; ``batches`` computes targets on each
(``prepare``) and yields shuffled mini-batches, ``num_epochs`` passes of
``num_mini_batch`` (or ``mini_batch_size``) as the algorithm says, then forgets the data.

Episode ends are handled per step: after termination nothing is bootstrapped; after
truncation (a time limit) the value of the final observation (``TRUNC_VAL``) is; at the
end of a rollout the value of the last observation is.

Recurrent actors: a rollout also carries ``RHS``, the actor's state at its start, and
mini-batches are sequences, never single steps shuffled across time: a mini-batch is a
subset of the environments with all their steps (``OBS`` and ``DONE`` (T, B, ...), the
other entries flattened time first, ``RHS`` (B, ...)), over which the actor re-runs its
memory from the stored state, zeroing it after episode ends as the collector did.

Intrinsic rewards (RND_PPO, pytorchrl's pairing of it with ``GAEBuffer``): when the
algorithm's acting extras hold an intrinsic value (``prl.IVAL``), a rollout also carries
the intrinsic value of its last observation, and the algorithm's ``preprocess_rollout``
adds the intrinsic rewards (``prl.IREW``). Their advantages and returns (``prl.IADV``,
``prl.IRET``) are non-episodic: GAE with the algorithm's ``gamma_intrinsic`` over the
whole rollout, episode ends ignored, bootstrapped with the value of the observation after
each step (the next episode's first one after an episode end). (The algorithm's
``warm_up`` of its observation statistics is the collector's, before its first rollout.)
"""

import numpy as np
import torch

from pytorchrl import ACT, ADV, DONE, IADV, IRET, IREW, IVAL, LOGP, OBS, RET, REW, RHS, TERM, TRUNC, TRUNC_VAL, VAL
from pytorchrl.agent.losses.q_learning import bellman_target
from pytorchrl.agent.factory import ComponentFactory
from pytorchrl.agent.storages.base import Storage, as_numpy

_ROLLOUT_KEYS = (OBS, ACT, LOGP, VAL, REW, TERM, TRUNC, TRUNC_VAL)


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
    not_ended = 1.0 - torch.maximum(term, trunc)
    delta = bellman_target(rew, gamma, next_values(val[1:], not_ended, trunc, trunc_val)) - val[:-1]
    adv = reverse_scan(delta, gamma * gae_lambda * not_ended)
    return adv, adv + val[:-1]


def compute_intrinsic_gae(irew, ival, gamma, gae_lambda):
    """Non-episodic generalized advantage estimation (intrinsic rewards): ``compute_gae``
    with no episode end, each step bootstrapped with the value of the observation after it.

    Parameters
    ----------
    irew : torch.Tensor
        (T, N, 1) intrinsic rewards.
    ival : torch.Tensor
        (T + 1, N, 1) intrinsic values, the last one of the observation after the last step.
    gamma, gae_lambda : float
        Discount factor and GAE's lambda.

    Returns
    -------
    adv, ret : torch.Tensor
        (T, N, 1) intrinsic advantages and return targets.
    """
    zeros = torch.zeros_like(irew)
    return compute_gae(irew, ival, zeros, zeros, zeros, gamma, gae_lambda)


def next_values(following, not_ended, trunc, trunc_val):
    """Value of the state after each step: ``following`` (the next observation's) while
    the episode goes on, the final observation's (``trunc_val``) after truncation, zero
    after termination. All tensors have the same shape (T, N, 1)."""
    return following * not_ended + trunc_val * trunc


def reverse_scan(delta, decay):
    """``out[t] = delta[t] + decay[t] * out[t + 1]`` with ``out[T] = 0``, backwards in time.

    Parameters
    ----------
    delta, decay : torch.Tensor
        Shape (T, N, 1), outside any autograd graph; ``decay`` is zero where an episode ended.

    Returns
    -------
    torch.Tensor
        ``out``, shape (T, N, 1).
    """
    out = torch.empty_like(delta)
    if out.device.type == "cpu":
        # The reverse scan is sequential: on CPU, numpy row operations cost a few hundred
        # nanoseconds where each torch operator costs several microseconds of dispatch.
        _reverse_scan(delta.numpy(), decay.numpy(), out.numpy())
    else:
        last = torch.zeros_like(delta[0])
        for t in range(delta.shape[0] - 1, -1, -1):
            last = delta[t] + decay[t] * last
            out[t] = last
    return out


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


class VanillaOnPolicyBuffer(Storage):
    """Rollout storage with discounted returns (bootstrapped at cuts and time limits).

    Parameters
    ----------
    device : torch.device or str
        Device of the mini-batches.
    actor : Actor
        The actor.
    algorithm : Algorithm
        An on-policy algorithm: its ``bootstrap`` values rollouts, its ``gamma`` is read
        each time targets are computed and its ``num_epochs``, ``num_mini_batch`` and
        ``mini_batch_size`` shape the mini-batches (so hot-swaps apply to the next rollout).
    envs : TorchVecEnv or None
        Environments of a collector; None for a learner-side buffer.
    size : int
        Environment steps per environment in one rollout (the collector's ``update_every``).

    With a recurrent actor, ``num_mini_batch`` splits the environments (each mini-batch
    holds whole env trajectories of the rollout), so it may not exceed the number of
    environments of a collector; ``mini_batch_size`` gives mini-batches of
    ``max(1, mini_batch_size // size)`` environments. Rollouts of different lengths (cut by
    preemption) are batched apart.
    """

    gae_lambda = 1.0

    def __init__(self, device, actor, algorithm, envs, size):
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"storage size must be a positive integer, got {size!r}")
        super().__init__(device, actor, algorithm, envs)
        self.size = size
        self._last_val = None
        self._trunc_val = None
        self.chunks = []      # rollouts received by the learner side
        self.flat = None      # the chunks' samples with targets, flattened
        self.generator = None  # torch.Generator of the shuffling (None: torch's global one)
        self.sequences = None  # recurrent actors: prepared rollouts, one dict per rollout length
        self.intrinsic = IVAL in tuple(getattr(algorithm, "acting_extras", ()))
        self._last_ival = None
        if getattr(actor, "is_recurrent", False):
            self.check_sequences(algorithm, envs)

    def check_sequences(self, algorithm, envs):
        """Refuse mini-batches that a recurrent actor's sequences cannot fill: each holds at
        least one environment's whole rollout."""
        num_mini_batch = getattr(algorithm, "num_mini_batch", 1)
        if envs is not None and getattr(algorithm, "mini_batch_size", None) is None and \
                num_mini_batch > envs.num_envs:
            raise ValueError(f"num_mini_batch={num_mini_batch} with a recurrent actor: its mini-batches are "
                             f"subsets of the environments (whole sequences), and a collector has only "
                             f"{envs.num_envs} (vec_env_size); set num_mini_batch <= {envs.num_envs} or use "
                             f"more environments")

    # ------------------------------------------------------------ collection side
    def rollout_steps(self, num_envs):
        return self.size

    def finish(self, state=None):
        """Ask the algorithm's ``bootstrap`` for the values of the observation after the
        last step and of the final observations of truncated episodes (one call)."""
        rec, k = self._rec, self.step
        n = rec[OBS].shape[1]
        if self.intrinsic:
            self._last_ival = np.asarray(self.algorithm.bootstrap_intrinsic(rec[OBS][k], state),
                                         dtype=np.float32).reshape(n, 1)
        truncated = [(t, i, o) for t, i, o, was_trunc in self._final_obs if was_trunc]
        obs = rec[OBS][k]
        if truncated:
            obs = np.concatenate([obs, np.stack([o for _, _, o in truncated])])
            if state is not None and all((t, i) in self._final_state for t, i, _ in truncated):
                # A recurrent actor values each final observation with the state that reached it.
                state = np.concatenate([as_numpy(state)] + [self._final_state[(t, i)][None] for t, i, _ in truncated])
        values = np.asarray(self.algorithm.bootstrap(obs, state), dtype=np.float32).reshape(len(obs), 1)
        self._last_val = values[:n]
        self._trunc_val = np.zeros((k, n, 1), dtype=np.float32)
        for (t, i, _), v in zip(truncated, values[n:]):
            self._trunc_val[t, i] = v

    def get_data(self, data_to_cpu=True):
        """The recorded steps (possibly fewer than ``size``, if cut) as a dict of tensors
        (``VAL`` has one row more: the bootstrap value of the last observation; ``RHS``:
        a recurrent actor's state at the start of the rollout)."""
        data = self.recorded_steps((ACT, LOGP, VAL) + ((IVAL,) if self.intrinsic else ()))
        data[VAL] = np.concatenate([data[VAL], self._last_val[None]])
        if self.intrinsic:
            data[IVAL] = np.concatenate([data[IVAL], self._last_ival[None]])
        data[TRUNC_VAL] = self._trunc_val[:self.step]
        if self._start_state is not None:
            data[RHS] = self._start_state
        return self.rollout_tensors(data, data_to_cpu)

    def recorded_steps(self, keys):
        """Numpy arrays of the recorded steps: ``OBS``, ``REW``, ``TERM`` and ``TRUNC`` (as
        (k, N, 1) floats) and the per-step ``keys``, each with k rows (the steps recorded)."""
        rec, k = self._rec, self.step
        # Per-step arrays are allocated by the first insert: a rollout cut before its first
        # step on a fresh storage has none, and hands over empty ones (ignored by add_data).
        empty = np.zeros((0, rec[OBS].shape[1], 1), dtype=np.float32)
        data = {OBS: rec[OBS][:k]}
        data.update({key: rec[key][:k] if key in rec else empty for key in keys})
        data.update({key: rec[key][:k, :, None] if key in rec else empty for key in (REW, TERM, TRUNC)})
        return data

    def rollout_tensors(self, data, data_to_cpu=True):
        """Dict of numpy arrays -> dict of tensors that own their memory (the buffers are
        reused by the next rollout), on ``device`` unless ``data_to_cpu``."""
        data = {key: torch.from_numpy(np.array(v)) for key, v in data.items()}
        if not data_to_cpu and self.device.type != "cpu":
            data = {key: v.to(self.device) for key, v in data.items()}
        return data

    # -------------------------------------------------------------- learner side
    def add_data(self, data):
        """Receive one rollout (a dict as produced by ``get_data``); empty rollouts are ignored."""
        if data[REW].shape[0] > 0:
            self.chunks.append({k: v.to(self.device) for k, v in data.items()})

    def ready(self):
        return bool(self.chunks)

    def batches(self):
        """Prepare the received rollouts, yield the algorithm's epochs x mini-batches, then
        forget the data (it is stale once trained on)."""
        a = self.algorithm
        self.prepare()
        try:
            yield from self.generate_batches(a.num_mini_batch, a.mini_batch_size, a.num_epochs, self.generator)
        finally:
            self.clear()

    def prepare(self):
        """Compute advantages and return targets of every received rollout and flatten them
        (recurrent actors: keep them as sequences, see ``prepare_sequences``)."""
        gamma = self.algorithm.gamma
        if self.chunks and RHS in self.chunks[0]:
            self.prepare_sequences(gamma)
            return
        flat = {}
        for c in self.chunks:
            T, n = c[REW].shape[:2]
            for key, v in self.rollout_samples(c, gamma).items():
                flat.setdefault(key, []).append(v.reshape(T * n, *v.shape[2:]))
        self.flat = {k: torch.cat(v) for k, v in flat.items()} if self.chunks else None

    def rollout_samples(self, c, gamma):
        """The training samples of one received rollout ``c``, with their targets.

        Parameters
        ----------
        c : dict of tensors
            A rollout as produced by ``get_data`` (on ``device``).
        gamma : float
            Discount factor.

        Returns
        -------
        dict
            ``OBS``, ``ACT``, ``LOGP``, ``VAL``, ``RET``, ``ADV`` and ``DONE``, each (T, N, ...);
            with intrinsic rewards also ``IREW``, ``IVAL``, ``IRET``, ``IADV`` and the
            algorithm's ``intrinsic_samples``.
        """
        adv, ret = compute_gae(c[REW], c[VAL], c[TERM], c[TRUNC], c[TRUNC_VAL], gamma, self.gae_lambda)
        samples = {OBS: c[OBS], ACT: c[ACT], LOGP: c[LOGP], VAL: c[VAL][:-1], RET: ret, ADV: adv,
                   DONE: torch.maximum(c[TERM], c[TRUNC])}
        if IREW in c:
            iadv, iret = compute_intrinsic_gae(c[IREW], c[IVAL], self.algorithm.gamma_intrinsic, self.gae_lambda)
            samples.update({IREW: c[IREW], IVAL: c[IVAL][:-1], IRET: iret, IADV: iadv})
            samples.update(self.algorithm.intrinsic_samples(c))
        return samples

    def prepare_sequences(self, gamma):
        """Compute the targets of every received rollout and keep them as sequences (T, N,
        ...): rollouts of one length side by side (``self.sequences``, one dict each)."""
        by_length = {}
        for c in self.chunks:
            samples = self.rollout_samples(c, gamma)
            samples[RHS] = c[RHS]
            by_length.setdefault(c[REW].shape[0], []).append(samples)
        self.sequences = [{k: torch.cat([s[k] for s in group], dim=0 if k == RHS else 1) for k in group[0]}
                          for group in by_length.values()]

    @property
    def num_samples(self):
        """Samples ready for training (after ``prepare``)."""
        if self.sequences is not None:
            return sum(seq[OBS].shape[0] * seq[OBS].shape[1] for seq in self.sequences)
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
        if self.sequences is not None:
            yield from self.sequence_batches(num_mini_batch, mini_batch_size, num_epochs, generator)
            return
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

    def sequence_batches(self, num_mini_batch, mini_batch_size=None, num_epochs=1, generator=None):
        """Yield ``num_epochs`` passes of sequence mini-batches (recurrent actors): each is a
        shuffled subset of the environments with all their steps (see the module docstring).

        Parameters are those of ``generate_batches``; ``num_mini_batch`` is capped at the
        number of environments, ``mini_batch_size`` counts samples (whole sequences of
        ``mini_batch_size // T`` environments, at least one).
        """
        for _ in range(num_epochs):
            for seq in self.sequences:
                T, n = seq[OBS].shape[:2]
                envs_per_batch = max(1, mini_batch_size // T) if mini_batch_size else None
                if (envs_per_batch or 0) >= n or (envs_per_batch is None and min(num_mini_batch, n) == 1):
                    yield self.sequence_batch(seq, None)
                    continue
                perm = torch.randperm(n, generator=generator, device=self.device)
                parts = perm.split(envs_per_batch) if envs_per_batch else perm.tensor_split(min(num_mini_batch, n))
                for idx in parts:
                    yield self.sequence_batch(seq, idx)

    @staticmethod
    def sequence_batch(seq, idx):
        """The mini-batch of the environments ``idx`` (None: all) of the sequences ``seq``:
        ``OBS`` and ``DONE`` stay (T, B, ...), ``RHS`` is (B, ...), the rest is flattened
        to (T * B, ...), time first (the order of the actor's outputs)."""
        batch = {}
        for key, v in seq.items():
            if idx is not None:
                v = v[idx] if key == RHS else v[:, idx]
            batch[key] = v if key in (OBS, DONE, RHS) else v.reshape(-1, *v.shape[2:])
        return batch

    def clear(self):
        """Forget the received rollouts (on-policy: they are stale once trained on)."""
        self.chunks = []
        self.flat = None
        self.sequences = None


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
        self.check_parameter_value("gae_lambda", self.gae_lambda)

    @classmethod
    def create_factory(cls, size, gae_lambda=0.95):
        """Return a picklable ``factory(device, actor, algorithm, envs)`` (parameters as in the class)."""
        return ComponentFactory(cls, size=size, gae_lambda=gae_lambda)

    @property
    def hyperparameters(self):
        return {"size": self.size, "gae_lambda": self.gae_lambda}

    def check_parameter_value(self, name, value):
        super().check_parameter_value(name, value)
        if name == "gae_lambda" and not 0.0 <= value <= 1.0:
            raise ValueError(f"gae_lambda must be in [0, 1], got {value}")
