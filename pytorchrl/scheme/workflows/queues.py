"""The queue data path: bounded per-collector queues between collectors and gradient
workers (EXARL's RMA windows and RMA queues).

Each remote collector puts every rollout, with the weight version that produced it, into
a bounded queue of one ``QueueServer`` (a threaded Ray actor holding all the queues, the
"RMA windows") and hands only its information to its collector set. A collector whose
queue is full waits (back-pressure) before it collects more. Gradient workers pop
rollouts from the queues (``QueueDataPath``), drop those more than ``max_policy_lag``
versions old, and add the others to their own storage, so that on-policy (A2C, PPO) and
off-policy (DDQN) algorithms train on them as on the direct path.

Options (``scheme.queues``, ``QUEUE_DEFAULTS``):

- ``size``: rollouts a queue holds (K); a put into a full queue waits.
- ``pop``: ``one`` takes the oldest rollout of the queue chosen; ``all`` drains it (FIFO).
- ``prefetch``: the gradient worker asks for its next pop before it trains on the data
  of the current one, overlapping the transfer with training.
- ``selection`` (``route: collector``): ``binned`` (each gradient worker reads the queues
  of its own collectors, a contiguous bin; of them the one whose head is oldest) or
  ``random`` (a random non-empty queue among all collectors', as EXARL's RMA learners
  read a random actor's window).
- ``steal``: a gradient worker whose group is finished (none of its collectors has a
  request out and nothing is left of the budget to claim, see below) and whose
  own queues are empty pops from the other gradient workers' queues (EXARL's
  multi-learner work stealing). While some group is finished the other workers' pops
  asked ahead (prefetch) take nothing: a rollout queued while its owner trains stays for
  the first worker that needs it, the owner or a finished one.
- ``end``: ``all`` (the run ends once every group is finished and every queue is empty:
  EXARL's ``mlrma_queue``) or ``first`` (it ends as soon as one gradient worker's group is
  finished and its queues are empty: EXARL's ``mlrma_queue_short``, where learners never
  help each other).
- ``kind``: ``fifo`` (a bounded queue: a put into a full one waits) or ``circular`` (a
  circular buffer: a put into a full one overwrites its oldest rollout, counted in
  ``overwritten``, and never waits): EXARL's RMA memory-pool data structures. Or a user's
  memory pool: a subclass of EXARL's ``ExaData`` (``pytorchrl.agent.exarl``), or its import
  path ("package.module:Class"), built once with one window (rank) per queue; the server
  pushes each rollout into its window and pops the window its selection rule picks. What
  the pool does with a full window is its own (its ``push`` says what it lost, counted in
  ``overwritten``): a put never waits.
- ``route``: ``collector`` (one queue per collector) or ``learner`` (one queue per
  gradient worker, and each collector puts into a random one that has room; ours).
- ``num_cpus``: Ray CPUs of the server actor.

The budget of a run on this path (episodes, ``learner.target_episodes``, or env steps,
``learner.target_steps``) is one shared work counter in the server (``WorkCounter``, EXARL's
"claim the next episode" counter): every collector set claims each request's episodes from
it before sending the request, and settles the claim with what the rollout held when it is
reported, so a fast group of collectors does more of the work than a slow one. The server
also keeps EXARL's record of active actors, one entry per collector (its bitmap): a
collector is active while a request of its is out. A gradient worker's group is finished
when none of its collectors is active and nothing is left to claim; stealing and the end
read that.
"""

import collections
import math
import random
import threading
import time
from collections import deque

import numpy as np

from pytorchrl.scheme.base.checks import check_int, check_non_negative, merge_options
from pytorchrl.scheme.base.servers import ServerLost, ServerPath, ServerProcess
from pytorchrl.scheme.transport import Packed, is_tensor

#: Options of ``Scheme(queues=...)`` (``scheme.queues``) and their defaults.
QUEUE_DEFAULTS = {"size": 4, "pop": "one", "prefetch": True, "selection": "binned", "steal": False,
                  "route": "collector", "kind": "fifo", "end": "all", "num_cpus": 0.25}
POPS = ("one", "all")
SELECTIONS = ("binned", "random")
ROUTES = ("collector", "learner")
KINDS = ("fifo", "circular")
ENDS = ("all", "first")

#: Outcomes of ``QueueServer.put`` and ``pop``.
OK, EMPTY, TIMEOUT, CLOSED = "ok", "empty", "timeout", "closed"

#: Seconds a gradient worker waits in one pop before it reads its collectors' reports
#: again (env steps and episodes must reach the learner while it waits).
POP_POLL_S = 0.5

#: Threads of the remote server: every collector and gradient worker may wait in it at
#: once, and stats/stop calls must still get through.
MAX_CONCURRENCY = 64


def pool_class(kind):
    """The ``ExaData`` subclass that ``kind`` names (the class, or its import path
    "package.module:Class" or "package.module.Class"), or None for ``fifo`` and ``circular``.

    Raises
    ------
    ValueError
        Neither a built-in kind nor an importable ``ExaData`` subclass, in one line.
    """
    if isinstance(kind, str) and kind in KINDS:
        return None
    from pytorchrl.agent.exa_data import ExaData
    cls = kind
    if isinstance(kind, str):
        import importlib
        module, _, name = kind.replace(":", ".").rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), name) if module else None
        except (ImportError, AttributeError, ValueError) as exc:
            raise ValueError(f"queues kind must be one of {', '.join(map(repr, KINDS))} or the import path of an "
                             f"ExaData subclass ('package.module:Class'); {kind!r} cannot be imported "
                             f"({type(exc).__name__}: {exc})") from None
    if not (isinstance(cls, type) and issubclass(cls, ExaData)):
        raise ValueError(f"queues kind must be one of {', '.join(map(repr, KINDS))} or an ExaData subclass (EXARL's "
                         f"memory pool, pytorchrl.agent.exarl.ExaData), got {kind!r}")
    return cls


def queue_options(options):
    """``QUEUE_DEFAULTS`` updated with ``options``, checked.

    Parameters
    ----------
    options : dict or None
        Some of the keys of ``QUEUE_DEFAULTS`` (see the module docstring).

    Raises
    ------
    ValueError
        An unknown key (naming the valid ones) or a value out of range.
    """
    out = merge_options("queues", options, QUEUE_DEFAULTS)
    check_int("queues size", out["size"], 1)
    pool_class(out["kind"])
    for key, valid in (("pop", POPS), ("selection", SELECTIONS), ("route", ROUTES), ("end", ENDS)):
        if out[key] not in valid:
            raise ValueError(f"queues {key} must be one of {', '.join(map(repr, valid))}, got {out[key]!r}")
    for key in ("prefetch", "steal"):
        if not isinstance(out[key], bool):
            raise ValueError(f"queues {key} must be true or false, got {out[key]!r}")
    if out["route"] == "learner" and out["selection"] != "binned":
        raise ValueError("queues selection='random' reads collectors' queues; with route='learner' each gradient "
                         "worker reads its own queue (use selection='binned', and steal to read the others')")
    check_non_negative("queues num_cpus", out["num_cpus"])
    return out


def steal_refused(options, num_grad_workers, async_gradients=False):
    """Why ``steal: true`` would have no effect in this layout (words that follow "steal
    has no effect: "), or None when it acts or is off.

    Parameters
    ----------
    options : dict
        ``queue_options`` output.
    num_grad_workers : int
        Gradient workers of the scheme.
    async_gradients : bool
        Asynchronous gradients (A3C): a gradient worker whose share is spent gets no new
        request, so it could not steal for long (refused).
    """
    if not options["steal"]:
        return None
    if num_grad_workers < 2:
        return "one gradient worker has no other group's queues to drain (it needs num_grad_workers >= 2)"
    if async_gradients:
        return ("with asynchronous gradients a gradient worker whose share is spent gets no new request (stealing "
                "acts with grad_workers_communication sync)")
    if options["selection"] == "random":
        return "selection 'random' pops any collector's queue already (stealing acts with selection 'binned')"
    if options["end"] == "first":
        return "with end 'first' the run ends when the first group is finished, before anyone could steal"
    return None


def check_queue_path(options, num_col_workers, async_collection, collect_only, num_grad_workers=1,
                     async_gradients=False):
    """Check the queue data path's layout; returns ``queue_options(options)``.

    Parameters
    ----------
    options : dict or None
        ``Scheme(queues=...)``.
    num_col_workers : int
        Collection workers per gradient worker (they must be remote: at least 2).
    async_collection : bool
        Whether collection is asynchronous (required).
    collect_only : bool
        A collection-only scheme (refused: nothing pops).
    num_grad_workers : int
        Gradient workers (``steal`` needs several).
    async_gradients : bool
        Asynchronous gradients (``steal`` is refused with them).

    Raises
    ------
    ValueError
        Naming the cause.
    """
    out = queue_options(options)
    if collect_only:
        raise ValueError("a collection-only scheme (num_grad_workers=0) trains nothing: it needs "
                         "data_path='direct', not queues")
    if num_col_workers < 2:
        raise ValueError("data_path='queues' needs remote collectors (num_col_workers >= 2): one collector runs "
                         "in its gradient worker's process and hands its rollouts over directly")
    if not async_collection:
        raise ValueError("data_path='queues' needs asynchronous collection (col_workers_communication=prl.ASYNC): "
                         "a synchronous round would wait for puts that only the waiting learner's pops admit")
    refused = steal_refused(out, num_grad_workers, async_gradients)
    if refused is not None:
        raise ValueError(f"queues steal=True has no effect: {refused}; remove it")
    return out


def _nbytes(data):
    """Bytes of the arrays and tensors of a rollout (what a put moves: a packed rollout's
    bytes as sent, compressed where it was)."""
    if isinstance(data, Packed):
        return data.sent_bytes
    total = 0
    for v in (data or {}).values():
        if is_tensor(v):
            total += v.element_size() * v.nelement()
        elif isinstance(v, np.ndarray):
            total += v.nbytes
        elif isinstance(v, dict):
            total += _nbytes(v)
    return total


class WorkCounter:
    """EXARL's shared work counter and its record of active actors, for every collector of
    every gradient worker (the queue server holds one; it is not thread-safe by itself: the
    server guards it).

    A collector set claims the episodes of each request before it sends it (``claim``) and
    settles the claim when the request reports (``settle``): the episodes the rollout
    finished are then handed over, and the ones it did not finish (a long episode goes on in
    the next rollout) are free to be claimed again. So the episodes handed over plus those
    claimed never pass the budget, whichever collectors do the work.

    Parameters
    ----------
    collectors : iterable of tuple
        (gradient worker index, collector index) of every collector.

    Attributes
    ----------
    episodes, steps : int or None
        The budget: finished episodes, env steps (None: no limit).
    received, samples : int
        Finished episodes and env steps handed over (episodes lost with a dead server are
        taken off, ``release``: they are run again).
    claimed : int
        Episodes the requests out may still finish.
    requests : dict
        Collector -> [requests out, episodes they claimed]: a collector is active while it
        has a request out (EXARL's bitmap of active actors, one entry per actor).
    """

    def __init__(self, collectors):
        self.episodes = self.steps = None
        self.received = self.samples = self.claimed = 0
        self.requests = {tuple(c): [0, 0] for c in collectors}

    @property
    def has_budget(self):
        """Whether a budget of episodes or env steps was set."""
        return self.episodes is not None or self.steps is not None

    def left(self):
        """Episodes that may still be claimed (``math.inf`` without an episode budget), 0
        once the env steps handed over reach the step budget."""
        if self.steps is not None and self.samples >= self.steps:
            return 0
        if self.episodes is None:
            return math.inf
        return max(0, self.episodes - self.received - self.claimed)

    def claim(self, collector, wanted):
        """Claim the episodes of one request of ``collector``.

        Parameters
        ----------
        collector : tuple
            (gradient worker index, collector index).
        wanted : int or None
            Episodes the request would finish at most (None: not bounded, a request of
            env steps: then it may go out while episodes are left to hand over).

        Returns
        -------
        (bool, int or None)
            Whether the request may go out, and the episodes it may finish (``wanted``,
            fewer when fewer are left; None: not bounded).
        """
        left = self.left()
        if left <= 0:
            return False, None
        granted = wanted if wanted is None or left == math.inf else int(min(wanted, left))
        entry = self.requests[tuple(collector)]
        entry[0] += 1
        entry[1] += granted or 0
        self.claimed += granted or 0
        return True, granted

    def settle(self, collector, claimed, episodes, samples):
        """A request of ``collector`` that claimed ``claimed`` episodes reported: ``episodes``
        finished episodes and ``samples`` env steps were handed over (0 and 0 when its
        rollout was lost: they are run again)."""
        entry = self.requests[tuple(collector)]
        entry[0] = max(0, entry[0] - 1)
        entry[1] = max(0, entry[1] - int(claimed or 0))
        self.claimed = max(0, self.claimed - int(claimed or 0))
        self.received += int(episodes)
        self.samples += int(samples)

    def release(self, episodes):
        """Take ``episodes`` handed over back (lost with a dead server): they are run again."""
        self.received = max(0, self.received - int(episodes))

    def reset(self, collectors):
        """Forget the requests of ``collectors`` (their gradient worker died with them): what
        they claimed is free again."""
        for c in collectors:
            entry = self.requests[tuple(c)]
            self.claimed = max(0, self.claimed - entry[1])
            entry[0] = entry[1] = 0

    def active(self, collector):
        """Whether ``collector`` has a request out."""
        return self.requests[tuple(collector)][0] > 0

    def finished(self, collectors):
        """Whether none of ``collectors`` is active and nothing is left to claim: they will
        hand nothing more over (a budget is set)."""
        return self.has_budget and self.left() <= 0 and not any(self.active(c) for c in collectors)


class PoolWindow:
    """One window (rank) of a user's ``ExaData`` memory pool, as the queue server sees its
    queues: the pool holds the items; the window keeps the put order of what it holds (the
    "oldest head first" of binned selection, and the sizes).

    Parameters
    ----------
    pool : ExaData
        The pool.
    rank : int
        The window's rank in it.
    """

    def __init__(self, pool, rank):
        self.pool, self.rank = pool, rank
        self.seqs = deque()

    def __len__(self):
        return len(self.seqs)

    def __getitem__(self, index):
        return (self.seqs[index],)

    def append(self, entry):
        """Push ``(seq, data, version, collector, episodes)`` (the pool gets all but ``seq``);
        returns 1 when the pool lost an item for it (EXARL's ``lost``), else 0."""
        seq, *item = entry
        _, lost = self.pool.push(tuple(item), self.rank)
        self.seqs.append(seq)
        if lost:
            self.seqs.popleft()   # it holds one fewer: the oldest overwritten, or this one refused
        return int(bool(lost))

    def popleft(self):
        """The next item of the window, ``(seq, data, version, collector, episodes)``, or None
        when the pool had none."""
        item = self.pool.pop(self.rank, 1)
        seq = self.seqs.popleft()
        return None if item is None else (seq, *item)


class QueueServer(ServerProcess):
    """Bounded rollout queues shared by every collector and gradient worker.

    Thread-safe: puts and pops wait on one condition (a remote server is a threaded Ray
    actor), never in sleeps.

    Parameters
    ----------
    groups : dict
        Gradient worker index -> indices of its collectors (the bins, in order).
    size : int
        Rollouts a queue holds.
    pop : str
        ``"one"`` or ``"all"`` (see the module docstring).
    selection : str
        ``"binned"`` or ``"random"``.
    steal : bool
        Whether a gradient worker whose group is finished pops from other bins.
    route : str
        ``"collector"`` (a queue per collector) or ``"learner"`` (a queue per gradient worker).
    kind : str or type
        ``"fifo"`` (a put into a full queue waits) or ``"circular"`` (it overwrites the
        queue's oldest rollout), or a user's memory pool: an ``ExaData`` subclass or its
        import path (see ``pool_class``), built as ``cls(object, size, comm_size=<queues>,
        max_model_lag=None, name="queues")``.
    seed : int or None
        Seed of the random choices (random selection, random routing).
    """

    def __init__(self, groups, size=4, pop="one", selection="binned", steal=False, route="collector", kind="fifo",
                 seed=None):
        queue_options({"size": size, "pop": pop, "selection": selection, "steal": steal, "route": route,
                       "kind": kind})
        self.size, self.pop_mode, self.selection, self.steal, self.route = size, pop, selection, steal, route
        self.kind = kind
        self.cond = threading.Condition()
        if route == "collector":
            self.bins = {g: [(g, c) for c in cols] for g, cols in groups.items()}
        else:
            self.bins = {g: [(g,)] for g in groups}
        keys = [key for keys in self.bins.values() for key in keys]
        pool = pool_class(kind)
        if pool is None:
            self.queues = {key: deque() for key in keys}
            self.pool = None
        else:
            # The max_policy_lag bound is applied when popped, by the gradient worker.
            self.pool = pool(object, size, comm_size=len(keys), max_model_lag=None, name="queues")
            self.queues = {key: PoolWindow(self.pool, rank) for rank, key in enumerate(keys)}
        self._rng = random.Random(seed)
        self._seq = 0          # put order over all queues: "oldest head" compares these
        self._closed = False
        self._paused = 0
        self._finished = set()  # groups a worker said were finished (pop), without a budget
        self.actors = {g: [(g, c) for c in cols] for g, cols in groups.items()}
        self.counter = WorkCounter(k for keys in self.actors.values() for k in keys)
        self.counters = {"puts": 0, "pops": 0, "popped_rollouts": 0, "stolen_pops": 0, "stolen_rollouts": 0,
                         "overwritten": 0, "put_blocked_s": 0.0, "pop_blocked_s": 0.0, "bytes_in": 0,
                         "max_size": 0, "put_messages": 0}

    # -------------------------------------------------------------- collectors
    def put(self, collector, data, version, timeout=None, episodes=0):
        """Put one rollout of ``collector`` once its queue has room (a circular queue has
        room always: its oldest rollout is overwritten).

        Parameters
        ----------
        collector : tuple
            (gradient worker index, collector index).
        data : dict or Packed
            The rollout (the storage's ``get_data``; packed when the collector compresses).
        version : int
            Weight version that produced it.
        timeout : float or None
            Seconds to wait at most (None: until there is room or the server is closed).
        episodes : int
            Finished episodes the rollout holds, handed back with it by ``pop`` (what a
            server that dies takes with it is counted in episodes too, see ``QueueLedger``).

        Returns
        -------
        str
            ``"ok"``, ``"timeout"`` or ``"closed"`` (the run is stopping: the data is dropped).
        """
        with self.cond:
            self.counters["put_messages"] += 1
        return self._put(collector, data, version, timeout, episodes)

    def put_many(self, items):
        """Put several rollouts sent as one message (a node's ``WorkerProxy`` passes its
        collectors' on together), each as ``put`` would, in order: one that waits for room
        holds the others back.

        Parameters
        ----------
        items : list of tuple
            ``put``'s arguments, one tuple per rollout.

        Returns
        -------
        list of str
            ``put``'s outcome of each.
        """
        with self.cond:
            self.counters["put_messages"] += 1
        return [self._put(*args) for args in items]

    def _put(self, collector, data, version, timeout=None, episodes=0):
        collector = tuple(collector)
        deadline = None if timeout is None else time.perf_counter() + timeout
        t0 = time.perf_counter()
        with self.cond:
            while True:
                if self._closed:
                    return CLOSED
                key = self._put_target(collector)
                if key is not None:
                    break
                remaining = None if deadline is None else deadline - time.perf_counter()
                if remaining is not None and remaining <= 0:
                    return TIMEOUT
                self.cond.wait(remaining)
            self.counters["put_blocked_s"] += time.perf_counter() - t0
            queue = self.queues[key]
            # (Full: circular, or admitted beyond the bound while paused; a user's pool decides itself.)
            if self.pool is None and len(queue) >= self.size:
                if self.kind == "circular":
                    queue.popleft()
                    self.counters["overwritten"] += 1
            lost = queue.append((self._seq, data, int(version), collector, int(episodes)))
            self.counters["overwritten"] += lost or 0
            self._seq += 1
            self.counters["puts"] += 1
            self.counters["bytes_in"] += _nbytes(data)
            self.counters["max_size"] = max(self.counters["max_size"], len(queue))
            self.cond.notify_all()
        return OK

    def _put_target(self, collector):
        """The queue ``collector`` puts into now, or None while it must wait (full)."""
        if self.route == "collector":
            if collector not in self.queues:
                raise ValueError(f"no queue for collector {collector}; queues: {sorted(self.queues)}")
            keys = [collector]
        else:
            keys = [k for keys in self.bins.values() for k in keys]
        room = [k for k in keys if len(self.queues[k]) < self.size]
        if not room and (self._paused or self.kind == "circular" or self.pool is not None):
            # A gradient worker waits for its collectors (admit beyond the bound), or a
            # circular queue overwrites its oldest rollout (a user's pool decides itself).
            room = keys
        return self._rng.choice(room) if room else None

    # -------------------------------------------------------- gradient workers
    def pop(self, group, finished=False, timeout=None, prefetch=False):
        """Take rollouts for gradient worker ``group``.

        Parameters
        ----------
        group : int
            The gradient worker's index.
        finished : bool
            Its collectors will put nothing more: recorded for a server without a budget.
            With a budget the work counter says when a group is finished (none of its
            collectors active, nothing left to claim); with ``steal`` a worker whose group is
            finished pops from other bins once its own are empty.
        timeout : float or None
            Seconds to wait for a rollout (None: until one comes or the server is closed;
            0: do not wait).
        prefetch : bool
            The pop is asked ahead, while the worker still trains on data it has: while
            another group is finished (and ``steal`` is on), it takes nothing and returns
            ``"empty"`` at once, so that a rollout queued meanwhile goes to the first worker
            that needs it.

        Returns
        -------
        outcome : str
            ``"ok"``, ``"empty"`` (nothing within the timeout) or ``"closed"``.
        items : list of (data, version, collector, episodes)
            The rollouts, oldest first, with the finished episodes each holds.
        stolen : bool
            They came from another gradient worker's bin.
        """
        deadline = None if timeout is None else time.perf_counter() + timeout
        t0 = time.perf_counter()
        with self.cond:
            if group not in self.bins:
                raise ValueError(f"no bin for gradient worker {group}; bins: {sorted(self.bins)}")
            if finished:
                self._finished.add(group)
            while True:
                if self._closed:
                    return CLOSED, [], False
                if prefetch and self.steal and any(self._group_finished(g) for g in self.bins if g != group):
                    return EMPTY, [], False
                key, stolen = self._pop_source(group)
                if key is not None:
                    break
                remaining = None if deadline is None else deadline - time.perf_counter()
                if remaining is not None and remaining <= 0:
                    self.counters["pop_blocked_s"] += time.perf_counter() - t0
                    return EMPTY, [], False
                self.cond.wait(remaining)
            self.counters["pop_blocked_s"] += time.perf_counter() - t0
            q = self.queues[key]
            taken = [q.popleft()] if self.pop_mode == "one" else [q.popleft() for _ in range(len(q))]
            taken = [item for item in taken if item is not None]   # (a user's pool found empty)
            self.counters["pops"] += 1
            self.counters["popped_rollouts"] += len(taken)
            if stolen:
                self.counters["stolen_pops"] += 1
                self.counters["stolen_rollouts"] += len(taken)
            self.cond.notify_all()   # room for the collectors waiting on this queue
        return OK, [item[1:] for item in taken], stolen

    def _pop_source(self, group):
        """(queue key, stolen) of the queue ``group`` pops now, or (None, False)."""
        if self.selection == "random":
            full = [k for k, q in self.queues.items() if q]
            return (self._rng.choice(full), False) if full else (None, False)
        own = [k for k in self.bins[group] if self.queues[k]]
        if own:
            return self._oldest(own), False
        if self.steal and self._group_finished(group):
            others = [k for g, keys in self.bins.items() if g != group for k in keys if self.queues[k]]
            if others:
                return self._oldest(others), True
        return None, False

    def _oldest(self, keys):
        return min(keys, key=lambda k: self.queues[k][0][0])

    def _group_finished(self, group):
        """Whether the collectors of gradient worker ``group`` will put nothing more: with a
        budget, none of them has a request out and nothing is left to claim (the work
        counter); without one, its worker said so in a pop."""
        if self.counter.has_budget:
            return self.counter.finished(self.actors[group])
        return group in self._finished

    def _finished_groups(self):
        return sum(1 for g in self.bins if self._group_finished(g))

    # ------------------------------------------------------------- work counter
    def set_episode_budget(self, episodes):
        """The run's budget of finished episodes, shared by every collector (None: no limit)."""
        with self.cond:
            self.counter.episodes = None if episodes is None else int(episodes)
            self.cond.notify_all()
        return episodes

    def set_step_budget(self, steps):
        """The run's budget of env steps handed over, shared by every collector (None: no
        limit): no request goes out once that many are in (the requests out may pass it by
        a rollout each)."""
        with self.cond:
            self.counter.steps = None if steps is None else int(steps)
            self.cond.notify_all()
        return steps

    def restore_counter(self, episodes, steps, received, samples, requests):
        """Put back the work counter of the server this one replaces, as its clients know it.

        Parameters
        ----------
        episodes, steps : int or None
            The budget.
        received, samples : int
            Finished episodes and env steps the collector sets have handed over.
        requests : dict
            Collector -> [requests out, episodes they claimed], of every collector set.
        """
        with self.cond:
            c = self.counter
            c.episodes, c.steps, c.received, c.samples = episodes, steps, int(received), int(samples)
            for key, (n, claimed) in requests.items():
                c.requests[tuple(key)] = [int(n), int(claimed)]
            c.claimed = sum(claimed for _, claimed in c.requests.values())
            self.cond.notify_all()
        return True

    def claim(self, collector, wanted):
        """Claim one request of ``collector`` from the work counter (see ``WorkCounter.claim``):
        ``(may go out, episodes it may finish)``."""
        with self.cond:
            out = self.counter.claim(collector, wanted)
            self.cond.notify_all()
            return out

    def settle(self, collector, claimed, episodes, samples):
        """A request of ``collector`` reported (see ``WorkCounter.settle``); a group may have
        finished: the waits see it."""
        with self.cond:
            self.counter.settle(collector, claimed, episodes, samples)
            self.cond.notify_all()
        return True

    def release(self, episodes):
        """Episodes handed over that a dead server took with it: claimable again."""
        with self.cond:
            self.counter.release(episodes)
            self.cond.notify_all()
        return True

    def reset_group(self, group):
        """The collectors of gradient worker ``group`` died with it: their claims are free
        again (its replacement's collectors claim anew)."""
        with self.cond:
            self.counter.reset(self.actors[group])
            self.cond.notify_all()
        return True

    # ------------------------------------------------------------------ control
    def pause_sampling(self):
        """Admit every put regardless of the bound until ``resume_sampling``: the learner
        waits for its collectors to answer a call queued behind their current rollout,
        whose put must not wait for pops (the name is the replay server's, whose
        ``sampling_paused`` context manager uses it)."""
        with self.cond:
            self._paused += 1
            self.cond.notify_all()
        return True

    def resume_sampling(self):
        """End one ``pause_sampling``."""
        with self.cond:
            self._paused = max(0, self._paused - 1)
        return True

    def stop(self):
        """End every wait (they return ``"closed"``); later calls are refused the same way."""
        with self.cond:
            self._closed = True
            self.cond.notify_all()
        return True

    def wait_for_data(self, timeout):
        """Wait until some queue holds a rollout, or some group finished since the call
        began (its learner has something to report), or the server is closed; at most
        ``timeout`` seconds. Returns True unless the timeout passed. The update worker of
        several gradient workers waits here when none of them had data, instead of asking
        them again at once."""
        deadline = time.perf_counter() + timeout
        with self.cond:
            finished = self._finished_groups()
            while not (self._closed or self._finished_groups() != finished or any(self.queues.values())):
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    return False
                self.cond.wait(remaining)
            return True

    def sizes(self):
        """Rollouts held by each queue, by key."""
        with self.cond:
            return {k: len(q) for k, q in self.queues.items()}

    def stats(self):
        """Counters: ``puts``, ``pops``, ``popped_rollouts``, ``stolen_pops`` and
        ``stolen_rollouts`` (pops from another group's queues, and the rollouts they took),
        ``overwritten`` (rollouts a circular queue dropped for newer ones), ``put_messages``
        (the put calls received: a proxy's ``put_many`` is one message for several), ``put_blocked_s``
        (collectors' time waiting for room), ``pop_blocked_s`` (gradient workers' time
        waiting for data), ``bytes_in`` (bytes put), ``max_size`` (largest queue seen),
        ``held`` (rollouts in the queues now), ``active_groups`` (groups not finished),
        ``active_actors`` (collectors with a request out: EXARL's bitmap, one entry each),
        ``counted_episodes`` and ``counted_steps`` (handed over, on the work counter)."""
        with self.cond:
            c = self.counter
            return dict(self.counters, held=sum(len(q) for q in self.queues.values()),
                        active_groups=len(self.bins) - self._finished_groups(),
                        active_actors=sum(1 for k in c.requests if c.active(k)),
                        counted_episodes=c.received, counted_steps=c.samples)

    def active_actors(self):
        """EXARL's bitmap of active actors: collector -> whether it has a request out."""
        with self.cond:
            return {k: self.counter.active(k) for k in self.counter.requests}


def make_queue_server(groups, options, remote, seed=None, wait=True):
    """The scheme's queue server: a threaded Ray actor (``remote``) or an object here.

    Parameters
    ----------
    groups : dict
        Gradient worker index -> its collectors' indices.
    options : dict
        ``queue_options`` output.
    remote : bool
        Whether the scheme uses Ray.
    seed : int or None
        Seed of the server's random choices.
    wait : bool
        Wait until a remote one is built (its error raised here); False returns the handle
        at once (the supervisor starting a replacement waits within its start timeout).
    """
    kwargs = {k: options[k] for k in ("size", "pop", "selection", "steal", "route", "kind")}
    if not remote:
        return QueueServer(groups, seed=seed, **kwargs)
    from pytorchrl.scheme.base.ray_runtime import require_ray
    ray = require_ray()
    handle = ray.remote(QueueServer).options(num_cpus=options["num_cpus"], max_concurrency=MAX_CONCURRENCY).remote(
        groups, seed=seed, **kwargs)
    if wait:
        ray.get(handle.stats.remote())   # built, or its error raised here
    return handle


class QueueLink:
    """What a collector set and its gradient worker need of the queue path: the server, its
    generation and whether the gradient worker prefetches.

    Parameters
    ----------
    server : QueueServer or ray.actor.ActorHandle
        The scheme's server.
    prefetch : bool
        The gradient worker asks for its next pop before training on the current data.
    generation : int
        Generation of ``server`` (see ``pytorchrl.scheme.base.servers``): one more each
        time it was replaced.
    """

    def __init__(self, server, prefetch, generation=0):
        self.server = server
        self.prefetch = bool(prefetch)
        self.generation = int(generation)


class QueueLedger:
    """The rollouts a gradient worker's collectors put into each generation of the queue
    server and the rollouts it popped, so that what a dead server took with it is counted.

    A put is known to the collector set whose collector made it (its report); a pop to the
    gradient worker that made it, which may hold another one's rollouts (random
    selection, stealing). When the server is replaced, the update worker gathers every
    gradient worker's pops of the dead generation by owner (``take_pops``) and gives each
    owner its total (``settle``). The owner's loss is its puts minus those pops, known once
    every request that carried that generation has reported (``take_lost``); until then
    the generation is ``unsettled`` and the owner's episode budget cannot be spent: the
    episodes lost are taken off the episodes handed over, so that collectors run others in
    their place.

    Attributes
    ----------
    generation : int
        Generation of the server the collector set uses now; older ones are dead.
    """

    def __init__(self):
        self.generation = 0
        self._out = collections.Counter()   # generation -> requests in flight that carry it
        self._puts = {}        # generation -> [rollouts, episodes] put by this set's collectors
        self._pops = {}        # generation -> {owner: [rollouts, episodes]} popped by this gradient worker
        self._settled = {}     # dead generation -> [rollouts, episodes] of this set's popped by anyone

    def sent(self, generation):
        """A request carrying ``generation`` went to a collector."""
        self._out[generation] += 1

    def reported(self, generation, put, episodes=0):
        """The request carrying ``generation`` came back (or was dropped with a dead
        collector); ``put``: its rollout went into the server (with ``episodes``)."""
        self._out[generation] -= 1
        if self._out[generation] <= 0:
            del self._out[generation]
        if put:
            counts = self._puts.setdefault(generation, [0, 0])
            counts[0] += 1
            counts[1] += int(episodes)

    def popped(self, generation, items):
        """Rollouts ``items`` (as ``QueueServer.pop`` returns them) taken from ``generation``."""
        pops = self._pops.setdefault(generation, {})
        for _, _, collector, episodes in items:
            counts = pops.setdefault(collector[0], [0, 0])
            counts[0] += 1
            counts[1] += int(episodes)

    def take_pops(self):
        """This gradient worker's pops of the dead generations, by owner (forgotten here):
        ``{generation: {owner: [rollouts, episodes]}}``."""
        dead = [g for g in self._pops if g < self.generation]
        return {g: self._pops.pop(g) for g in dead}

    def settle(self, generation, popped):
        """Every gradient worker's pops of this set's rollouts from dead ``generation``:
        ``[rollouts, episodes]``."""
        self._settled[generation] = list(popped)

    def unsettled(self):
        """Whether a dead generation's loss is not known yet."""
        dead = {g for g in list(self._out) + list(self._puts) if g < self.generation}
        return bool(dead - set(self._settled)) or any(self._out.get(g) for g in self._settled)

    def take_lost(self):
        """``(rollouts, episodes)`` lost with the dead generations settled since the last
        call (their puts that nobody popped)."""
        rollouts = episodes = 0
        for g in [g for g in self._settled if not self._out.get(g)]:
            put = self._puts.pop(g, [0, 0])
            popped = self._settled.pop(g)
            # (Never below zero: the puts of a replaced gradient worker's collectors died with it.)
            rollouts += max(0, put[0] - popped[0])
            episodes += max(0, put[1] - popped[1])
        return rollouts, episodes


class QueueDataPath(ServerPath):
    """The gradient worker's side of the queue data path (its ``client`` and ``recover``:
    see ``ServerPath``).

    Parameters
    ----------
    link : QueueLink
        The server, its generation and the prefetch switch.
    group : int
        This gradient worker's index (its bin).
    ledger : QueueLedger or None
        Where the pops are recorded (the collector set's, which records the puts); None:
        one of its own.
    """

    def __init__(self, link, group, ledger=None):
        super().__init__(link.server, "queue", link.generation, remote=not isinstance(link.server, QueueServer))
        self.group = group
        self.prefetch = link.prefetch and self.client.remote
        self.ledger = ledger if ledger is not None else QueueLedger()
        self._prefetched = None    # Ray reference of the pop asked for ahead
        self._carried = []         # rollouts of a prefetch answered by a server replaced since
        self.prefetches = 0

    def pop(self, finished, wait=True):
        """The next rollouts: a list of (data, version, collector, episodes), empty when none
        came within ``POP_POLL_S`` (at once when ``finished``: nothing more will come from
        this worker's collectors; or without ``wait``: a synchronous update of several
        gradient workers does not wait for one without data, and a pop asked ahead that has
        not answered yet stays out); None when the server died and was replaced meanwhile
        (ask again: what ``finished`` says may have changed).

        Raises
        ------
        RuntimeError
            The server was closed (the run is stopping).
        ServerLost
            The server died and this process cannot replace it (see ``recover``).
        """
        if self._carried:
            items, self._carried = self._carried, []
            return items
        outcome, items = EMPTY, []
        try:
            if self._prefetched is not None:
                ready = self.client.ready(self._prefetched, wait=wait or finished)
                if not ready:
                    return []
                ref, self._prefetched = self._prefetched, None
                outcome, items, _ = self.client.get(ref)
            if outcome == EMPTY:
                # (Also after an empty prefetched pop: it was asked before this worker knew its
                # collectors finished, or it stepped aside for a finished worker, and a rollout
                # may have been put since it returned.) A finished worker does not wait: in a
                # synchronous update its peers wait for its answer.
                timeout = POP_POLL_S if wait and not finished else 0
                outcome, items, _ = self.client.call("pop", self.group, finished, timeout)
        except ServerLost as lost:
            self.recover(lost)
            return None
        if outcome == CLOSED:
            raise RuntimeError("the queue server is closed: the scheme is stopping")
        self.ledger.popped(self.client.generation, items)
        if items and self.prefetch and not finished:
            # Asked now, served while this worker trains on ``items``.
            self._prefetched = self.client.server.pop.remote(self.group, finished, POP_POLL_S, True)
            self.prefetches += 1
        return items

    def set_server(self, server, generation):
        """Pop from ``server`` (of ``generation``), the replacement of a dead one, from now on.

        A pop asked ahead of the old server is read first: the rollouts it took before the
        server died are this worker's (handed over by the next ``pop``).

        Returns
        -------
        dict
            This worker's pops of the dead generations by owner (``QueueLedger.take_pops``).
        """
        if self._prefetched is not None:
            ref, self._prefetched = self._prefetched, None
            try:
                outcome, items, _ = self.client.get(ref)
            except ServerLost:
                outcome, items = EMPTY, []
            if outcome == OK and items:
                self.ledger.popped(self.client.generation, items)
                self._carried += items
        super().set_server(server, generation)
        self.ledger.generation = int(generation)
        return self.ledger.take_pops()
