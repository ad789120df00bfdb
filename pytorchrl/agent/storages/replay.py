"""Replay storages: uniform, n-step and prioritized experience replay, and replay of
sequences for recurrent actors (``RecurrentReplayBuffer``, R2D2).

Collection side (see ``Storage``): a rollout of ``ceil(update_every / num_envs)``
vectorized steps is recorded; ``get_data`` turns it into transitions ``(OBS, ACT, REW,
OBS2, DISCOUNT)`` where ``REW`` is the n-step discounted return and ``DISCOUNT`` the factor
of the bootstrap value of ``OBS2`` (``gamma^k`` after k steps, 0 when the episode
terminated within them). N-step returns are computed where the steps are contiguous, on
the collector (as in Ape-X): a window never crosses an episode end; a truncated episode
(time limit) bootstraps from its final observation; the last ``n - 1`` steps of a rollout
wait for the next rollout of the same collector to complete their window.

Learner side: transitions go into preallocated ring arrays (no per-transition Python
object), with whatever the algorithm's collector-side pre-processing added to them
(``Algorithm.preprocessed_keys``: DDQN's Bellman targets with ``targets_on_collector``). Once ``start_steps`` transitions are in, every ``update_every`` inserted grant
``num_updates`` mini-batches of ``mini_batch_size`` (the algorithm's hyperparameters,
read when data arrives, so hot-swaps apply to the next stage); ``batches()`` yields the
mini-batches granted so far. The replay ratio is the same whatever the layout: one
collector or many, synchronous or asynchronous.

``RecurrentReplayBuffer`` keeps fixed-length sequences of each environment's stream
instead of transitions, with the memory state the actor had at their start (see its
docstring); the other storages refuse a recurrent actor.
"""

import math

import numpy as np
import torch

from pytorchrl import ACT, BOOTSTRAP_STEP, DISCOUNT, DONE, INDEX, OBS, OBS2, REW, RHS, TD_ERROR, TERM, TRUNC, WEIGHT
from pytorchrl.agent.factory import ComponentFactory
from pytorchrl.agent.storages.base import Storage
from pytorchrl.agent.storages.nstep import nstep_transitions, nstep_windows
from pytorchrl.agent.storages.sum_tree import SumTree, importance_weights

_TRANSITION_KEYS = (OBS, ACT, REW, OBS2, DISCOUNT)


class ReplayBuffer(Storage):
    """Uniform experience replay (see the module docstring).

    Parameters
    ----------
    device : torch.device or str
        Device of the mini-batches.
    actor : Actor
        The actor.
    algorithm : Algorithm
        An off-policy algorithm: its ``gamma``, ``update_every``, ``num_updates``,
        ``start_steps`` and ``mini_batch_size`` drive this storage.
    envs : TorchVecEnv or None
        Environments of a collector; None for a learner-side buffer.
    size : int
        Capacity in transitions (the oldest are overwritten).
    """

    n_step = 1
    fixed_parameters = ("size",)
    #: Whether the buffer stores sequences for a recurrent actor (RecurrentReplayBuffer)
    #: rather than single transitions.
    sequences = False

    def __init__(self, device, actor, algorithm, envs, size):
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"replay size must be a positive integer, got {size!r}")
        if getattr(actor, "is_recurrent", False) and not self.sequences:
            raise ValueError(f"{type(self).__name__} stores single transitions; a recurrent actor learns from "
                             f"sequences: use RecurrentReplayBuffer")
        for name in ("update_every", "num_updates", "start_steps", "mini_batch_size", "gamma"):
            if not hasattr(algorithm, name):
                raise ValueError(f"{type(self).__name__} needs an off-policy algorithm (one with {name}); "
                                 f"{type(algorithm).__name__} has none")
        super().__init__(device, actor, algorithm, envs)
        self.size = size
        self._tail = None         # last n - 1 steps of the previous rollout (n-step windows)
        self._arrays = None       # key -> ring array (size, ...)
        self.pos = 0              # next slot to write
        self.num_items = 0        # transitions held (<= size)
        self.num_inserted = 0     # transitions received since the start
        self._stages = 0          # update stages granted so far
        self._last_stage = 0      # num_inserted at the boundary of the last stage granted
        self._credits = 0         # mini-batches granted and not yet served
        self.rng = np.random.default_rng(int(torch.randint(0, 2 ** 31 - 1, ()).item()))

    @classmethod
    def create_factory(cls, size, **kwargs):
        """Return a picklable ``factory(device, actor, algorithm, envs)`` (parameters as in the class)."""
        return ComponentFactory(cls, size=size, **kwargs)

    # ------------------------------------------------------------ hyperparameters
    @property
    def hyperparameters(self):
        return {"size": self.size}

    def check_parameter_value(self, name, value):
        if name in self.fixed_parameters and value != getattr(self, name):
            raise ValueError(f"{type(self).__name__} parameter {name!r} is fixed once the buffer is built "
                             f"(it is {getattr(self, name)!r})")
        super().check_parameter_value(name, value)

    # ------------------------------------------------------------ collection side
    def rollout_steps(self, num_envs):
        return max(1, math.ceil(self.algorithm.update_every / num_envs))

    def recorded_keys(self):
        return (ACT, REW, TERM, TRUNC)

    def start(self, obs, state=None):
        super().start(obs, state)
        if self._tail is not None and not np.array_equal(self._tail_start, self._rec[OBS][0]):
            self._tail = None  # the environments were replaced or reset: the window is broken

    def finish(self, state=None):
        """Nothing to bootstrap here: the learner bootstraps from ``OBS2``."""

    def get_data(self, data_to_cpu=True):
        """The rollout's transitions (n-step: those whose window is complete), a dict of
        tensors of shape (M, ...)."""
        rec, k, n = self._rec, self.step, self.n_step
        out = None
        if k > 0:
            seq = self.recorded_steps()
            seq["next"] = seq.pop(OBS2)
            if self._tail is not None:
                seq = {key: np.concatenate([self._tail[key], v]) for key, v in seq.items()}
            out = nstep_transitions(seq[OBS], seq["next"], seq[ACT], seq[REW], seq[TERM], seq[TRUNC],
                                    self.algorithm.gamma, n)
            if n > 1:
                # The last n - 1 steps complete their window with the next rollout, which
                # must start where this one ended (checked by start()).
                L = len(seq[REW])
                keep = min(n - 1, L)
                self._tail = {key: v[L - keep:].copy() for key, v in seq.items()}
                self._tail_start = rec[OBS][k].copy()
        if out is None:
            obs = rec[OBS]
            out = {OBS: obs[:0, 0], ACT: rec[ACT][:0, 0] if ACT in rec else np.zeros((0, 1), np.int64),
                   REW: np.zeros((0, 1), np.float32), OBS2: obs[:0, 0], DISCOUNT: np.zeros((0, 1), np.float32)}
        return self._tensors(out, data_to_cpu)

    def recorded_steps(self):
        """The steps of the rollout, (k, N, ...) arrays: ``OBS``, ``OBS2`` (the observation
        after each step, the final one where an episode ended: a copy) and the recorded keys."""
        rec, k = self._rec, self.step
        nxt = rec[OBS][1:k + 1].copy()
        for t, i, o, _ in self._final_obs:
            nxt[t, i] = o
        return {OBS: rec[OBS][:k], OBS2: nxt, **{key: rec[key][:k] for key in self.recorded_keys()}}

    def _tensors(self, arrays, data_to_cpu):
        """``get_data``'s output: arrays -> tensors (copies), on ``device`` unless ``data_to_cpu``."""
        data = {key: torch.from_numpy(np.array(v)) for key, v in arrays.items()}
        if not data_to_cpu and self.device.type != "cpu":
            data = {key: v.to(self.device) for key, v in data.items()}
        return data

    # -------------------------------------------------------------- learner side
    def add_data(self, data):
        """Insert the transitions of one rollout (from any collector) into the ring, with
        the keys of ``algorithm.preprocessed_keys``."""
        m = int(data[REW].shape[0])
        if m == 0:
            return
        keys = self.stored_keys() + tuple(self.algorithm.preprocessed_keys)
        missing = [key for key in keys if key not in data]
        if missing:
            raise KeyError(f"{type(self).__name__}: a rollout lacks {missing}, which "
                           f"{type(self.algorithm).__name__} adds on the collector (preprocess_rollout)")
        arrays = {key: np.asarray(data[key].numpy() if isinstance(data[key], torch.Tensor) else data[key])
                  for key in keys}
        if self._arrays is None:
            self._arrays = {key: np.zeros((self.size,) + v.shape[1:], dtype=v.dtype) for key, v in arrays.items()}
        received = self.steps_received(arrays, m)
        if m > self.size:  # more than fits: only the newest survive anyway
            arrays = {key: v[m - self.size:] for key, v in arrays.items()}
            m = self.size
        idx = (self.pos + np.arange(m)) % self.size
        for key, v in arrays.items():
            self._arrays[key][idx] = v
        self._on_insert(idx)
        self.pos = int((self.pos + m) % self.size)
        self.num_items = min(self.size, self.num_items + m)
        self.num_inserted += received
        self._grant()

    def stored_keys(self):
        """Keys of a rollout's items kept in the ring (besides the algorithm's preprocessed ones)."""
        return _TRANSITION_KEYS

    def steps_received(self, arrays, m):
        """Environment steps that the ``m`` items of one rollout (``arrays``) count for the
        replay schedule (all of them, ``steps_per_item`` each)."""
        return m * self.steps_per_item

    @property
    def steps_per_item(self):
        """Environment steps one stored item counts for the replay schedule (a transition: 1)."""
        return 1

    def _grant(self):
        """Grant ``num_updates`` mini-batches each time ``update_every`` more transitions are
        in, the first stage once ``start_steps`` (and at least ``update_every``) are in.

        A stage boundary is fixed once reached and the next one placed ``update_every``
        after it, so that a hot-swap of ``update_every`` or ``num_updates`` applies from the
        next stage on (it neither grants past stages again nor withholds updates until the
        total catches up with the new spacing)."""
        a = self.algorithm
        every = max(1, a.update_every)
        while True:
            boundary = max(a.start_steps, every) if self._stages == 0 else self._last_stage + every
            if self.num_inserted < boundary:
                return
            self._credits += a.num_updates
            self._stages += 1
            self._last_stage = boundary

    def ready(self):
        return self._credits > 0 and self.num_items > 0

    def batches(self):
        """Yield the mini-batches granted so far (sampled when asked for, so each sees the
        priorities updated after the previous one)."""
        while self._credits > 0 and self.num_items > 0:
            self._credits -= 1
            yield self.sample(self.algorithm.mini_batch_size)

    def sample(self, batch_size):
        """One mini-batch of ``batch_size`` transitions (uniform, with replacement)."""
        idx = self.rng.integers(0, self.num_items, batch_size)
        return self._batch(idx)

    def _batch(self, idx, **extra):
        batch = self._arrange({key: arr[idx] for key, arr in self._arrays.items()})
        batch.update(extra)
        out = self._to_device(batch)
        out[INDEX] = idx
        return out

    def _arrange(self, batch):
        """The mini-batch's arrays as the algorithm reads them (transitions: as stored)."""
        return batch

    def _on_insert(self, idx):
        """Called with the slots just written (prioritized replay gives them priorities)."""

    def after_update(self, batch, info):
        info.pop(TD_ERROR, None)

    def clear(self):
        """Forget the collector-side window (the learner's replay keeps its transitions:
        they stay valid for a new actor or algorithm of the same spaces)."""
        self._tail = None

    # --------------------------------------------------------------- checkpoints
    def state_dict(self):
        """The replay contents and counters (for checkpoints that keep the replay)."""
        return {"arrays": None if self._arrays is None else {k: torch.from_numpy(v.copy())
                                                             for k, v in self._arrays.items()},
                "pos": self.pos, "num_items": self.num_items, "num_inserted": self.num_inserted,
                "stages": self._stages, "last_stage": self._last_stage, "credits": self._credits}

    def load_state_dict(self, state):
        """Restore ``state_dict``'s output."""
        arrays = state["arrays"]
        self._arrays = None if arrays is None else {k: v.numpy().copy() for k, v in arrays.items()}
        self.pos, self.num_items, self.num_inserted = state["pos"], state["num_items"], state["num_inserted"]
        self._stages, self._credits = state["stages"], state["credits"]
        if "last_stage" in state:
            self._last_stage = state["last_stage"]
        else:  # saved before stage boundaries were kept: where the old rule placed the last one
            a = self.algorithm
            self._last_stage = a.start_steps + (self._stages - 1) * max(1, a.update_every) if self._stages else 0
        if self._arrays is not None:
            self._on_insert(np.arange(self.num_items))


class NStepReplayBuffer(ReplayBuffer):
    """Uniform replay of n-step transitions (see the module docstring).

    Parameters
    ----------
    device, actor, algorithm, envs, size
        As in ``ReplayBuffer``.
    n_step : int
        Steps summed into each transition's return (1: ordinary transitions).
    """

    fixed_parameters = ("size", "n_step")

    def __init__(self, device, actor, algorithm, envs, size, n_step=1):
        super().__init__(device, actor, algorithm, envs, size)
        if not isinstance(n_step, int) or isinstance(n_step, bool) or n_step < 1:
            raise ValueError(f"n_step must be a positive integer, got {n_step!r}")
        self.n_step = n_step

    @property
    def hyperparameters(self):
        return {"size": self.size, "n_step": self.n_step}


class PERBuffer(NStepReplayBuffer):
    """Prioritized experience replay (Schaul et al., 2016), proportional variant.

    Transition i is sampled with probability p_i / sum_j p_j, p_i = (|delta_i| + epsilon)
    ^ alpha where delta_i is its latest TD error (the algorithm reports it after each
    gradient step: ``after_update``); new transitions get the priority of an error
    ``default_error`` so that they are soon replayed. Mini-batches carry ``prl.WEIGHT``, the
    importance-sampling weights (N P_i)^-beta normalised by their largest possible value.

    Parameters
    ----------
    device, actor, algorithm, envs, size, n_step
        As in ``NStepReplayBuffer``.
    epsilon : float
        Added to every |TD error| so that no transition has zero probability.
    alpha : float
        How much the priorities count (0: uniform).
    beta : float
        Importance-sampling correction (0: none, 1: full); anneal it with a schedule
        (``target: storage``).
    default_error : float
        TD error assumed for transitions not yet trained on.
    """

    def __init__(self, device, actor, algorithm, envs, size, n_step=1, epsilon=0.0, alpha=0.0, beta=1.0,
                 default_error=1e6):
        super().__init__(device, actor, algorithm, envs, size, n_step)
        self.epsilon, self.alpha, self.beta = float(epsilon), float(alpha), float(beta)
        self.default_error = float(default_error)
        for name in ("epsilon", "alpha", "beta", "default_error"):
            self.check_parameter_value(name, getattr(self, name))
        self.tree = SumTree(size)

    @property
    def hyperparameters(self):
        return {"size": self.size, "n_step": self.n_step, "epsilon": self.epsilon, "alpha": self.alpha,
                "beta": self.beta, "default_error": self.default_error}

    def check_parameter_value(self, name, value):
        super().check_parameter_value(name, value)
        if name in ("epsilon", "alpha", "default_error") and value < 0:
            raise ValueError(f"PERBuffer parameter {name} must be >= 0, got {value}")
        if name == "beta" and not 0.0 <= value <= 1.0:
            raise ValueError(f"PERBuffer parameter beta must be in [0, 1], got {value}")

    def _priority(self, errors):
        return (np.abs(errors) + self.epsilon) ** self.alpha

    def _on_insert(self, idx):
        self.tree.update(idx, float(self._priority(np.float64(self.default_error))))

    def sample(self, batch_size):
        idx, priorities = self.tree.sample(batch_size, self.rng)
        weights = importance_weights(priorities, self.tree.total(), self.tree.min(), self.num_items, self.beta)
        return self._batch(idx, **{WEIGHT: weights.reshape(-1, 1)})

    def after_update(self, batch, info):
        """Set the priorities of the batch's transitions from the TD errors in ``info``."""
        errors = info.pop(TD_ERROR, None)
        if errors is None:
            raise KeyError(f"PERBuffer needs per-sample TD errors from the algorithm (info[{TD_ERROR!r}]): "
                           f"{type(self.algorithm).__name__} did not report them")
        self.tree.update(np.asarray(batch[INDEX]), self._priority(np.asarray(errors, dtype=np.float64).reshape(-1)))

    def state_dict(self):
        state = super().state_dict()
        if self.num_items:
            state["priorities"] = torch.from_numpy(self.tree.get(np.arange(self.num_items)))
        return state

    def load_state_dict(self, state):
        super().load_state_dict(state)
        if "priorities" in state:
            self.tree.update(np.arange(self.num_items), state["priorities"].numpy())


class EREBuffer(PERBuffer):
    """Emphasizing Recent Experience (Wang and Ross, 2019), optionally with priorities.

    The k-th of the K = ``num_updates`` mini-batches of a stage is drawn from the newest
    c_k = max(N eta^(1000 k / K), c_min) transitions only (N: transitions held), so that
    early updates of a stage see the whole buffer and later ones the recent data. With
    ``alpha`` > 0 the draw inside that window follows the priorities (as PERBuffer,
    importance weights relative to the window); with ``alpha`` 0 it is uniform.

    Parameters
    ----------
    device, actor, algorithm, envs, size, n_step, epsilon, alpha, beta, default_error
        As in ``PERBuffer`` (its defaults make it uniform).
    eta : float
        In (0, 1]: how fast the window shrinks along a stage (1: never, plain replay).
    cmin : int
        Smallest window, in transitions.
    """

    def __init__(self, device, actor, algorithm, envs, size, n_step=1, epsilon=0.0, alpha=0.0, beta=1.0,
                 default_error=1e6, eta=1.0, cmin=5000):
        super().__init__(device, actor, algorithm, envs, size, n_step, epsilon, alpha, beta, default_error)
        self.eta, self.cmin = float(eta), int(cmin)
        self.check_parameter_value("eta", self.eta)
        self.check_parameter_value("cmin", self.cmin)
        self._served = 0

    @property
    def hyperparameters(self):
        return {**super().hyperparameters, "eta": self.eta, "cmin": self.cmin}

    def check_parameter_value(self, name, value):
        super().check_parameter_value(name, value)
        if name == "eta" and not 0.0 < value <= 1.0:
            raise ValueError(f"EREBuffer parameter eta must be in (0, 1], got {value}")
        if name == "cmin" and value < 1:
            raise ValueError(f"EREBuffer parameter cmin must be >= 1, got {value}")

    def window(self):
        """Size c_k of the recent window the next mini-batch is drawn from."""
        k_total = max(1, self.algorithm.num_updates)
        k = self._served % k_total
        n = self.num_items
        return int(min(n, max(n * self.eta ** (1000.0 * k / k_total), self.cmin)))

    def sample(self, batch_size):
        c = self.window()
        self._served += 1
        newest = (self.pos - 1 - np.arange(c)) % self.size   # newest first
        if self.alpha == 0.0:
            # Unit weights, as PERBuffer's batches with alpha 0: the algorithm reports the TD
            # errors that ``after_update`` turns into priorities (all 1 with alpha 0; an
            # alpha swapped in later weighs the errors reported from then on).
            return self._batch(newest[self.rng.integers(0, c, batch_size)],
                               **{WEIGHT: np.ones((batch_size, 1), dtype=np.float32)})
        priorities = self.tree.get(newest)
        probs = priorities / priorities.sum()
        pick = self.rng.choice(c, size=batch_size, p=probs)
        weights = (c * probs[pick]) ** -self.beta
        weights /= (c * probs.min()) ** -self.beta
        return self._batch(newest[pick], **{WEIGHT: weights.astype(np.float32).reshape(-1, 1)})


class RecurrentReplayBuffer(PERBuffer):
    """Replay of fixed-length sequences for a recurrent actor (R2D2: Kapturowski et al.,
    2019), uniform or prioritized.

    Collection side: the steps of each environment of a collector form one stream across
    its rollouts. A sequence starts every ``stride`` steps of it, holds S = ``burn_in +
    sequence_length`` steps and is sent once complete: ``OBS`` and ``OBS2`` (S, ...)
    (``OBS2``: the observation after each step, the final one where an episode ended),
    ``DONE`` (S, 1) the episode ends, ``RHS`` the memory state the actor had before the
    first step, and for the last ``sequence_length`` steps (the training steps) the action
    ``ACT``, the n-step return ``REW``, its ``DISCOUNT`` and ``BOOTSTRAP_STEP``, the step
    whose ``OBS2`` bootstraps it (its window stops after an episode end and at the end of
    the sequence, R2D2's truncated n-step). A sequence runs across episode ends: the
    memory is zeroed there, as it was while acting, so the steps after one start from the
    state the actor had; no window and no memory crosses an episode end. The stride is
    ``max(1, round((1 - sequence_overlap) * S))`` with the actor's ``sequence_overlap``
    (0.5 with ``burn_in == sequence_length``: the training steps of consecutive sequences
    tile the stream, as in R2D2).

    Learner side: a ring of ``size`` sequences; each sequence received counts ``stride``
    transitions (the new steps it brings) for the replay schedule (``update_every``,
    ``start_steps``); a mini-batch holds ``ceil(mini_batch_size / sequence_length)``
    sequences (about ``mini_batch_size`` training steps), its per-step entries time first
    (``OBS``, ``OBS2``, ``DONE``: (S, B, ...); ``ACT``, ``REW``, ``DISCOUNT``: (T, B, 1);
    ``BOOTSTRAP_STEP``: (T, B)), ``RHS`` (B, state size). With ``alpha`` > 0 sequences are
    sampled by priority (as ``PERBuffer``), a sequence's |TD error| being R2D2's mix
    ``priority_eta * max + (1 - priority_eta) * mean`` over its training steps.

    Parameters
    ----------
    device, actor, algorithm, envs
        As in ``ReplayBuffer`` (``actor``: a recurrent actor, ``algorithm``: DDQN).
    size : int
        Capacity in sequences (the oldest are overwritten).
    sequence_length : int
        Training steps of a sequence: the steps its loss covers.
    burn_in : int
        Steps before the training steps that only bring the memory's state up to date (no
        gradient, not in the loss).
    n_step : int
        Most steps summed into each training step's return.
    epsilon, alpha, beta, default_error
        As in ``PERBuffer``, for sequences (alpha 0: uniform sampling).
    priority_eta : float
        In [0, 1]: weight of the largest |TD error| of a sequence in its priority, the rest
        going to their mean.
    """

    sequences = True
    fixed_parameters = ("size", "n_step", "sequence_length", "burn_in")

    def __init__(self, device, actor, algorithm, envs, size, sequence_length=40, burn_in=40, n_step=1, epsilon=0.0,
                 alpha=0.0, beta=1.0, default_error=1e6, priority_eta=0.9):
        if not getattr(actor, "is_recurrent", False):
            raise ValueError("RecurrentReplayBuffer stores sequences for a recurrent actor (recurrent_net); this "
                             "actor has no memory: use ReplayBuffer, NStepReplayBuffer or PERBuffer")
        for name, value, low in (("sequence_length", sequence_length, 1), ("burn_in", burn_in, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"RecurrentReplayBuffer parameter {name} must be an integer >= {low}, got {value!r}")
        super().__init__(device, actor, algorithm, envs, size, n_step, epsilon, alpha, beta, default_error)
        self.sequence_length, self.burn_in = sequence_length, burn_in
        self.priority_eta = float(priority_eta)
        self.check_parameter_value("priority_eta", self.priority_eta)
        span = burn_in + sequence_length
        self.stride = max(1, int(round((1.0 - float(actor.sequence_overlap)) * span)))
        self._tail_state = None   # state the rollout after the tail must start from
        self._next_state = None   # the state after the rollout just read (stream_steps)

    @property
    def hyperparameters(self):
        return {**super().hyperparameters, "sequence_length": self.sequence_length, "burn_in": self.burn_in,
                "priority_eta": self.priority_eta}

    def check_parameter_value(self, name, value):
        super().check_parameter_value(name, value)
        if name == "priority_eta" and not 0.0 <= value <= 1.0:
            raise ValueError(f"RecurrentReplayBuffer parameter priority_eta must be in [0, 1], got {value}")

    @property
    def span(self):
        """Steps S of a stored sequence: burn-in and training steps."""
        return self.burn_in + self.sequence_length

    # ------------------------------------------------------------ collection side
    def recorded_keys(self):
        return (ACT, REW, TERM, TRUNC, RHS)

    def start(self, obs, state=None):
        if state is None:
            raise ValueError("RecurrentReplayBuffer needs the actor's recurrent state at the start of a rollout")
        super().start(obs, state)
        if self._tail is not None and not np.array_equal(self._tail_state, self._start_state):
            self._tail = None   # the state was reset (a new actor): the memory's stream is broken

    def get_data(self, data_to_cpu=True):
        """The sequences completed by this rollout, a dict of tensors (M, ...) (see the class
        docstring); the steps of sequences still incomplete wait for the next rollout."""
        if self.step == 0:
            return self._tensors(self._sequences(self._no_steps(), 0), data_to_cpu)
        steps = self.stream_steps()
        # The stream continues the tail, which begins at a sequence start.
        chunk = steps if self._tail is None else {key: np.concatenate([self._tail[key], v])
                                                 for key, v in steps.items()}
        L = len(chunk[DONE])
        count = 0 if L < self.span else (L - self.span) // self.stride + 1
        out = self._sequences(chunk, count)
        self._tail = {key: v[count * self.stride:].copy() for key, v in chunk.items()}
        self._tail_start = self._rec[OBS][self.step].copy()
        self._tail_state = self._next_state
        return self._tensors(out, data_to_cpu)

    def stream_steps(self):
        """The rollout's steps as the stream keeps them, (k, N, ...) arrays: those of
        ``recorded_steps`` with ``DONE`` (1.0 where an episode ended) and ``RHS`` the
        state before each step (the one after the previous step, zeroed where an episode
        ended, as the collector's ``reset_state`` did; the rollout's start state first)."""
        steps = self.recorded_steps()
        ended = (steps[TERM] > 0) | (steps[TRUNC] > 0)
        steps[DONE] = ended.astype(np.float32)
        after = steps[RHS]
        after = np.where(ended[:, :, None], np.zeros((), after.dtype), after)
        steps[RHS] = np.concatenate([self._start_state[None].astype(after.dtype), after[:-1]])
        self._next_state = after[-1]      # what the next rollout must start from
        return steps

    def _no_steps(self):
        """``stream_steps`` of a rollout without steps."""
        rec, actor = self._rec, self.actor
        n = rec[OBS].shape[1]
        zeros = {key: np.zeros((0, n), np.float32) for key in (REW, TERM, TRUNC, DONE)}
        return {OBS: rec[OBS][:0], OBS2: rec[OBS][:0], ACT: rec[ACT][:0] if ACT in rec else
                np.zeros((0, n, 1), np.int64), RHS: np.zeros((0,) + actor.initial_state(n).shape, np.float32),
                **zeros}

    def _sequences(self, chunk, count):
        """The ``count`` sequences starting every ``stride`` steps of ``chunk`` ((L, N, ...)
        arrays), one row per (start, environment): the arrays ``get_data`` sends."""
        S, b = self.span, self.burn_in

        def rows(v, first=0):
            # (count, S', N, ...) -> (count * N, S', ...)
            idx = (np.arange(count) * self.stride)[:, None] + np.arange(first, S)[None, :]
            w = np.moveaxis(v[idx], 2, 1)
            return w.reshape(count * v.shape[1], S - first, *v.shape[2:])

        ret, discount, last = nstep_windows(rows(chunk[REW]).T, rows(chunk[TERM]).T, rows(chunk[TRUNC]).T,
                                            self.algorithm.gamma, self.n_step, np.arange(b, S))
        rhs = chunk[RHS][np.arange(count) * self.stride]
        return {OBS: rows(chunk[OBS]), OBS2: rows(chunk[OBS2]), DONE: rows(chunk[DONE])[..., None],
                RHS: rhs.reshape(count * rhs.shape[1], *rhs.shape[2:]), ACT: rows(chunk[ACT], b),
                REW: ret.T.astype(np.float32)[..., None], DISCOUNT: discount.T.astype(np.float32)[..., None],
                BOOTSTRAP_STEP: last.T.astype(np.int64)}

    def clear(self):
        super().clear()
        self._tail_state = None

    # -------------------------------------------------------------- learner side
    def stored_keys(self):
        return (OBS, OBS2, DONE, RHS, ACT, REW, DISCOUNT, BOOTSTRAP_STEP)

    @property
    def steps_per_item(self):
        return self.stride

    def sample(self, batch_size):
        """``ceil(batch_size / sequence_length)`` sequences (by priority when ``alpha`` > 0)."""
        return super().sample(max(1, math.ceil(batch_size / self.sequence_length)))

    def _arrange(self, batch):
        # Time first, as the memory reads them.
        return {key: v if key == RHS else np.swapaxes(v, 0, 1) for key, v in batch.items()}

    def after_update(self, batch, info):
        """Set the priorities of the batch's sequences from the TD errors of their training
        steps in ``info`` ((B * T,), sequence after sequence): R2D2's max/mean mix."""
        errors = info.get(TD_ERROR)
        if errors is not None:
            errors = np.abs(np.asarray(errors, dtype=np.float64)).reshape(len(batch[INDEX]), -1)
            info[TD_ERROR] = self.priority_eta * errors.max(1) + (1.0 - self.priority_eta) * errors.mean(1)
        super().after_update(batch, info)


__all__ = ["ReplayBuffer", "NStepReplayBuffer", "PERBuffer", "EREBuffer", "RecurrentReplayBuffer",
           "nstep_transitions", "nstep_windows"]
