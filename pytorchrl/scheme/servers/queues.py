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

from pytorchrl.scheme.base.servers import ServerLost, ServerPath
# The path's options, server and work counter, importable from here.
from pytorchrl.scheme.servers.queue_options import (ENDS, KINDS, POPS, QUEUE_DEFAULTS, ROUTES,  # noqa: F401
                                                      SELECTIONS, check_queue_path, pool_class, queue_options,
                                                      steal_refused)
from pytorchrl.scheme.servers.queue_server import (CLOSED, EMPTY, MAX_CONCURRENCY, OK, POP_POLL_S,  # noqa: F401
                                                     TIMEOUT, PoolWindow, QueueServer, make_queue_server)
from pytorchrl.scheme.servers.work_counter import WorkCounter  # noqa: F401


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
