"""Weights pulled by the collectors (EXARL's non-blocking async workflow).

On the default path (``Scheme(col_weights="push")``) a collector gets new weights with its
next rollout request, so it acts with one version for a whole rollout. With
``col_weights="pull"`` the collector set publishes each weight version once to a
``WeightBoard`` (a small threaded Ray actor holding the newest ``(version, ObjectRef)``;
the weights themselves are ``ray.put`` once, read from the node's shared object store),
and every collector asks the board for a newer version every ``col_weight_pull_every``
steps without waiting for the answer: a ``BoardReader`` issues the question at one check
and picks the answer up at a later one, when it is ready, then fetches the weights the
same way and swaps them in between two steps, mid-rollout. Rollout requests then carry no
weights. Staleness is unbounded unless ``max_policy_lag`` is set.

A rollout may thus be acted by several versions: its ``version`` is the oldest (the one
its first step acted with; policy lags and ``max_policy_lag`` use it) and its
``weight_swaps`` list says at which step each newer version took over. This suits
off-policy algorithms (DDQN, as in EXARL), which learn from any behaviour policy; an
on-policy algorithm's update assumes one policy per rollout, so pulling is refused for it.
"""

import threading

import numpy as np

from pytorchrl.scheme.base.servers import ServerProcess

#: Values of ``Scheme(col_weights=...)`` and ``scheme.col_weights``.
WEIGHT_MODES = ("push", "pull")

#: Default of ``col_weight_pull_every``: environment steps between two checks of the
#: board. Each check is a Ray call of some tens of microseconds, about one CartPole step
#: with a small network: checking every step would halve the collectors' speed.
DEFAULT_PULL_EVERY = 10

#: ``col_weight_pull_every`` value that reads the board at the start of every episode.
PULL_EACH_EPISODE = "episode"


def check_pull_every(value):
    """Raise ValueError unless ``value`` is None, a positive integer (steps) or
    ``PULL_EACH_EPISODE``."""
    if value == PULL_EACH_EPISODE:
        return
    from pytorchrl.scheme.base.checks import check_int
    try:
        check_int("col_weight_pull_every", value, 1, optional=True)
    except ValueError:
        raise ValueError(f"col_weight_pull_every must be >= 1 (env steps), {PULL_EACH_EPISODE!r} or None, got "
                         f"{value!r}") from None

#: Threads of the remote board: publications and the collectors' questions never wait
#: behind each other.
MAX_CONCURRENCY = 8


def check_weight_mode(col_weights, col_weight_pull_every, num_col_workers, algo_factory=None,
                      episodes_per_rollout=None):
    """Check the weight-distribution options of a scheme; returns the options that have
    no effect in this layout as ``(option, value, reason)`` triples, the reason in words
    that follow "has no effect with" (the Scheme warns, the configuration refuses).

    Parameters
    ----------
    col_weights : str
        One of ``WEIGHT_MODES``.
    col_weight_pull_every : int, str or None
        Steps between two checks of the board (None: ``DEFAULT_PULL_EVERY``), or
        ``"episode"``: a read at the start of every episode.
    num_col_workers : int
        Collection workers per gradient worker.
    algo_factory : callable or None
        The scheme's algorithm factory; pulling is refused for an on-policy algorithm
        (read from the factory's class when it has one), unless the weights change only
        between rollouts: reads at episode starts with rollouts that end with their first
        episode (``episodes_per_rollout`` 1).
    episodes_per_rollout : int or None
        Episodes that end a collector's rollout (``CWorker``'s ``rollout_episodes``; None:
        its steps end it).

    Raises
    ------
    PullRefused
        Pulled weights for an algorithm they cannot serve; the message follows "pulled
        weights". (The layouts they cannot serve are rules of
        ``pytorchrl.scheme.layout_rules``.)
    ValueError
        An unknown mode or a bad step count.
    """
    if col_weights not in WEIGHT_MODES:
        raise ValueError(f"col_weights must be one of {', '.join(map(repr, WEIGHT_MODES))}, got {col_weights!r}")
    check_pull_every(col_weight_pull_every)
    if col_weights == "push":
        if col_weight_pull_every is not None:
            return [("col_weight_pull_every", col_weight_pull_every,
                     "pushed weights (collectors get them with their requests and check no board)")]
        return []
    if num_col_workers < 2:
        return [("col_weights", col_weights,
                 "one collection worker (it is the learner's own actor, in its process: always current)")]
    cls = getattr(algo_factory, "cls", None)
    between_rollouts = col_weight_pull_every == PULL_EACH_EPISODE and episodes_per_rollout == 1
    if isinstance(cls, type) and getattr(cls, "on_policy", False) and not between_rollouts:
        raise PullRefused(f"change the policy in the middle of a rollout; {cls.__name__} is on-policy (its update "
                          f"assumes one policy per rollout): use an off-policy algorithm (DDQN, DDPG, TD3, SAC), "
                          f"pushed weights, or reads at episode starts (col_weight_pull_every 'episode') with "
                          f"rollouts of one episode (col_rollout_unit 'episodes')")
    return []


class PullRefused(ValueError):
    """Pulled weights cannot serve this algorithm; the message says why, in words that
    follow "pulled weights"."""


class WeightBoard(ServerProcess):
    """The newest weight version, published once and read by every collector.

    Thread-safe: run as a threaded Ray actor (``start_remote_board``) or, in one process,
    as a plain object (tests, where a ``BoardReader`` reads it directly).

    Every publication carries a sequence number given by its publisher, so that of two
    publications served out of order by the actor's threads the newer one stays, and so
    that a reader is answered only when something was published since its last answer.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._seq = 0
        self._version = None
        self._weights = None

    def publish(self, seq, version, weights):
        """Make ``weights`` (of version ``version``) the newest unless a publication with a
        higher sequence number came first; returns the sequence number held.

        Parameters
        ----------
        seq : int
            The publisher's sequence number of this publication (1, 2, ...).
        version : int
            Weight version.
        weights : dict or list
            The acting weights (a dict of arrays), or ``[ObjectRef]`` of them (in a list so
            that Ray hands the board the reference, not the weights).
        """
        with self._lock:
            if seq > self._seq:
                self._seq, self._version, self._weights = int(seq), int(version), weights
            return self._seq

    def latest(self, seen=0):
        """``(sequence, version, weights)`` of the newest publication if it is newer than
        sequence number ``seen``, else None."""
        with self._lock:
            if self._seq <= seen:
                return None
            return self._seq, self._version, self._weights

    def ping(self):
        """Answer True: used to wait until a remote board is built."""
        return True


def start_remote_board():
    """A ``WeightBoard`` as a threaded Ray actor (no CPU reserved: it only keeps a reference)."""
    from pytorchrl.scheme.base.ray_runtime import require_ray
    ray = require_ray()
    board = ray.remote(WeightBoard).options(num_cpus=0, max_concurrency=MAX_CONCURRENCY).remote()
    ray.get(board.ping.remote())
    return board


def stop_remote_board(board):
    """End a remote board's process (a board in this process needs nothing)."""
    if board is not None and not isinstance(board, WeightBoard):
        import ray
        try:
            ray.kill(board)
        except Exception:  # already gone (the run is stopping)
            pass


class BoardPublisher:
    """The collector set's side: publishes each weight version to its board once.

    Parameters
    ----------
    board : WeightBoard or ray.actor.ActorHandle
        The board.
    get_weights : callable
        ``get_weights()`` -> the current acting weights (tensors).
    """

    def __init__(self, board, get_weights):
        self.board = board
        self.get_weights = get_weights
        self.remote = not isinstance(board, WeightBoard)
        self._published = None
        self._seq = 0
        self._ref = None   # the newest put weights: kept alive by their owner, this process
        self.nbytes = 0    # size of the newest published weights

    def publish(self, version):
        """Publish the current weights as ``version`` unless they already are."""
        if self._published == version:
            return
        from pytorchrl.scheme.transport import weights_to_wire
        wire = weights_to_wire(self.get_weights())
        self.nbytes = sum(v.nbytes for v in wire.values() if isinstance(v, np.ndarray))
        self._seq += 1
        if self.remote:
            import ray
            self._ref = ray.put(wire)
            # Not waited for: the sequence number orders publications the board's threads
            # may serve out of order.
            self.board.publish.remote(self._seq, version, [self._ref])
        else:
            self.board.publish(self._seq, version,
                               {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in wire.items()})
        self._published = version

    def invalidate(self):
        """Publish again at the next ``publish``: the weights changed without a new version."""
        self._published = None


class BoardReader:
    """A collector's side: checks the board every ``every`` steps, never waiting.

    ``poll()`` is called before every step. At every ``every``-th call it picks up the
    answer to the previous check if it has come (and the weights it names, once they are
    in this node's object store), then sends the next question. A question is therefore
    answered at the earliest one check after it was sent, on a remote board and on one in
    this process alike (which makes the behaviour reproducible step by step in a test).

    Parameters
    ----------
    board : WeightBoard or ray.actor.ActorHandle
        The board.
    every : int
        Steps between two checks.
    """

    def __init__(self, board, every):
        self.board = board
        self.each_episode = every == PULL_EACH_EPISODE
        self.every = 1 if self.each_episode else int(every)
        self.remote = not isinstance(board, WeightBoard)
        self._seen = 0
        self._countdown = 1    # the first step checks
        self._question = None  # an ObjectRef (remote) or the answer itself (local)
        self._fetch = None     # (version, ObjectRef of the weights) not in this node yet
        self.checks = 0

    def poll(self):
        """Called before each step: ``(version, weights)`` to load now, or None."""
        self._countdown -= 1
        if self._countdown > 0:
            return None
        self._countdown = self.every
        self.checks += 1
        out = self._pick_up()
        if self._question is None and self._fetch is None:
            self._question = self.board.latest.remote(self._seen) if self.remote else ("answer",
                                                                                       self.board.latest(self._seen))
        return out

    def read(self):
        """Read the board now and wait for the answer (``col_weight_pull_every: episode``,
        at an episode's start): ``(version, weights)`` of a version newer than the last one
        read, or None. One Ray round trip, and the weights' fetch when there is a newer
        version."""
        self.checks += 1
        if not self.remote:
            answer = self.board.latest(self._seen)
        else:
            import ray
            answer = ray.get(self.board.latest.remote(self._seen))
        if answer is None:
            return None
        self._seen, version, weights = answer
        if not self.remote:
            return version, weights
        import ray
        return version, ray.get(weights[0])

    def _pick_up(self):
        if self._question is not None:
            if self.remote:
                import ray
                ready, _ = ray.wait([self._question], timeout=0)
                if not ready:
                    return None
                answer = ray.get(self._question)
            else:
                answer = self._question[1]
            self._question = None
            if answer is None:
                return None
            self._seen, version, weights = answer
            if not self.remote:
                return version, weights
            self._fetch = (version, weights[0])
        if self._fetch is not None:
            import ray
            version, ref = self._fetch
            ready, _ = ray.wait([ref], timeout=0, fetch_local=True)
            if not ready:
                return None
            self._fetch = None
            return version, ray.get(ref)
        return None
