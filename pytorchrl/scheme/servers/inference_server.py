"""Central inference (SEED): collectors send observations, one server acts for all of them.

``InferenceServer`` holds the acting actor (the learner's weights, one copy) and answers
``act`` calls of every collector. Requests that arrive together are gathered into one
batch, until ``max_batch`` observations are waiting or ``timeout_ms`` have passed since
the oldest one came, and the actor runs once on the whole batch; each collector gets its
rows back (actions and the extras its storage keeps: nothing for DQN, log-probability and
value for A2C/PPO) with the weight version that produced them. Waiting is done on a
condition and per-request events, never in sleeps.

The server runs in this process (a scheme without Ray, tests) or as a threaded Ray actor
(``start_remote``). Collectors reach it through ``ServerActing``, the acting program that
``CWorker(policy="server")`` routes its actor through (``Actor.route_acting``): the
collector keeps no weights of its own, its rollout's bootstrap values come from the
server too, and the rollout is reported with the oldest version that acted in it. An
algorithm whose collector-side pre-processing computes with weights (RND_PPO's intrinsic
rewards and intrinsic bootstrap values) declares those computations as ``server_calls``:
the collector's algorithm sends them to the server (``call_algorithm``), which runs them
on its copy of the algorithm with the current weights, while what the collector
accumulates (RND's statistics) stays on the collector.

The first action of an episode is taken from that episode's first observation: the
vectorized environments reset an ended episode in the step that ends it and return the new
episode's reset observation, and that is the observation the collector sends next.
"""

import threading
import time

import numpy as np
import torch

from pytorchrl.agent.protocols import ActorFactory, ActorProtocol, AlgorithmFactory, AlgorithmProtocol
from pytorchrl.scheme.base.checks import check_int, check_non_negative, merge_options
from pytorchrl.scheme.base.servers import ServerClient, ServerProcess

#: Options of ``Scheme(inference_server=...)`` (``scheme.inference_server``) and their defaults.
INFERENCE_SERVER_DEFAULTS = {"max_batch": 64, "timeout_ms": 2.0, "num_cpus": 0.5}

#: Threads of the remote server: every collector waits in one, and stats/weights/stop
#: calls must still get through.
MAX_CONCURRENCY = 64


def inference_server_options(options):
    """``INFERENCE_SERVER_DEFAULTS`` updated with ``options``, checked.

    Parameters
    ----------
    options : dict or None
        Some of ``max_batch`` (most observations in one batched act, >= 1), ``timeout_ms``
        (how long the oldest waiting request waits for more, >= 0) and ``num_cpus`` (Ray
        CPUs of the remote server, >= 0).

    Raises
    ------
    ValueError
        An unknown key (naming the valid ones) or a value out of range.
    """
    out = merge_options("inference_server", options, INFERENCE_SERVER_DEFAULTS)
    check_int("inference_server max_batch", out["max_batch"], 1)
    for name in ("timeout_ms", "num_cpus"):
        check_non_negative(f"inference_server {name}", out[name])
    return out


def check_server_agent(actor: ActorProtocol, algo: AlgorithmProtocol):
    """Refuse an agent that cannot act through a central server.

    Parameters
    ----------
    actor : Actor
        An actor built by the scheme's factory.
    algo : Algorithm
        Its algorithm.

    Raises
    ------
    ValueError
        The actor keeps a per-environment state (a recurrent memory, Ornstein-Uhlenbeck
        noise), which the collectors would have to send and receive at every step, or
        explores with gSDE (per-environment weights held across steps); or the
        algorithm computes training data on the collectors with weights they do not hold
        (``collector_modules``) and cannot have the server compute it (no
        ``server_calls``: DDQN with ``targets_on_collector``).
    """
    if actor.initial_state(1) is not None:
        kind = "a recurrent memory" if actor.is_recurrent else "a per-environment state (e.g. OU noise)"
        raise ValueError(f"an inference server cannot act for {type(actor).__name__} with {kind}: it acts on "
                         f"observations only; use a feed-forward actor without state, or col_policy='learned'")
    if getattr(actor, "use_sde", False):
        raise ValueError(f"an inference server cannot act for {type(actor).__name__} with gSDE (use_sde): its "
                         f"exploration weights are drawn per environment and held across steps, which a server "
                         f"acting for batches of any collectors' observations cannot keep; use "
                         f"col_policy='learned'")
    if algo.collector_modules and not algo.server_calls:
        raise ValueError(f"an inference server cannot serve {algo.name} with collector-side pre-processing "
                         f"(collector_modules {list(algo.collector_modules)}: e.g. targets_on_collector): the "
                         f"collectors hold no weights and {algo.name} has no server_calls to run it on the server; "
                         f"turn it off or use col_policy='learned'")


class _Request:
    """One ``act`` call waiting for its batch."""

    __slots__ = ("obs", "deterministic", "arrived", "done", "result")

    def __init__(self, obs, deterministic):
        self.obs = obs
        self.deterministic = deterministic
        self.arrived = time.perf_counter()
        self.done = threading.Event()
        self.result = None


class InferenceServer(ServerProcess):
    """Batched acting for many collectors (SEED's learner-side inference).

    Thread-safe: concurrent ``act`` calls (threads of this process, or of a threaded Ray
    actor) are gathered by one batching thread.

    Parameters
    ----------
    actor : Actor
        The acting actor (feed-forward, no per-environment state); its weights are replaced
        by ``set_weights``.
    algo : Algorithm
        Its algorithm (``set_acting_weights`` loads what a weight broadcast holds).
    max_batch : int
        Most observations in one batch. A batch is run as soon as this many are waiting; a
        single request larger than this is run alone.
    timeout_ms : float
        Milliseconds the oldest waiting request waits for others before its batch runs
        anyway (0: run whatever is waiting at once).
    num_callers : int or None
        How many callers can have a request waiting at once (the collectors: each waits for
        its answer before it asks again). Once that many requests wait no other can come,
        so the batch runs without waiting out the timeout. None: not known (only
        ``max_batch`` and the timeout end the gathering).
    """

    def __init__(self, actor: ActorProtocol, algo: AlgorithmProtocol, max_batch=64, timeout_ms=2.0, num_callers=None):
        inference_server_options({"max_batch": max_batch, "timeout_ms": timeout_ms})
        check_server_agent(actor, algo)
        self.actor = actor
        self.algo = algo
        self.max_batch = int(max_batch)
        self.timeout_s = float(timeout_ms) / 1000.0
        if num_callers is not None and (isinstance(num_callers, bool) or not isinstance(num_callers, int)
                                        or num_callers < 1):
            raise ValueError(f"num_callers must be None or an integer >= 1, got {num_callers!r}")
        self.num_callers = num_callers
        self.version = 0
        self._cond = threading.Condition()
        self._model_lock = threading.Lock()   # weights are not replaced in the middle of a batch
        self._pending = []
        self._pending_obs = 0
        self._stopped = False
        self._start = time.perf_counter()
        self._counts = {"batches": 0, "observations": 0, "requests": 0, "wait_s": 0.0, "max_batch_seen": 0,
                        "value_calls": 0, "algorithm_calls": 0}
        self._thread = threading.Thread(target=self._serve, name="inference-batcher", daemon=True)
        self._thread.start()

    @classmethod
    def from_factories(cls, algo_factory: AlgorithmFactory, actor_factory: ActorFactory, max_batch=64, timeout_ms=2.0,
                       num_callers=None, initial_weights=None):
        """A server whose actor and algorithm are built on the CPU by the scheme's factories.

        Parameters
        ----------
        algo_factory, actor_factory : callable
            The scheme's agent factories.
        max_batch, timeout_ms, num_callers
            As in the class.
        initial_weights : dict or None
            Acting weights of version 0 (None: the actor's own initial weights).
        """
        return _FactoryInferenceServer(algo_factory, actor_factory, max_batch, timeout_ms, num_callers,
                                       initial_weights)

    # ------------------------------------------------------------------ acting
    def act(self, obs, deterministic=False):
        """Actions for ``obs`` (N, *obs_shape), computed in a batch with other callers' rows.

        Parameters
        ----------
        obs : np.ndarray
            One row per environment of the calling collector.
        deterministic : bool
            Greedy actions (evaluation); such requests are batched apart from exploring ones.

        Returns
        -------
        env_action : np.ndarray
            (N, ...) actions.
        extras : dict of np.ndarray
            The actor's per-step extras for these rows.
        version : int
            Weight version that computed them.

        Raises
        ------
        RuntimeError
            The server was stopped.
        """
        req = _Request(np.asarray(obs), bool(deterministic))
        with self._cond:
            if self._stopped:
                raise RuntimeError("the inference server was stopped")
            self._pending.append(req)
            self._pending_obs += len(req.obs)
            self._cond.notify_all()
        req.done.wait()
        if isinstance(req.result, BaseException):
            raise req.result
        return req.result

    def values(self, obs):
        """Value estimates (N, 1) of ``obs`` with the current weights (what an on-policy
        collector bootstraps its rollout with), and their version; not batched (once per
        rollout)."""
        with self._model_lock:
            self._counts["value_calls"] += 1
            return np.asarray(self.actor.values(np.asarray(obs))), self.version

    def call_algorithm(self, name, args):
        """``algo.<name>(*args)`` with the current weights, and their version: a collector's
        ``Algorithm.collector_call`` (RND's predictor errors and intrinsic values); not
        batched (a few per rollout).

        Parameters
        ----------
        name : str
            One of the algorithm's ``server_calls``.
        args : tuple
            Its arguments (numpy arrays or None).

        Raises
        ------
        ValueError
            ``name`` is not one of the algorithm's ``server_calls``.
        """
        with self._model_lock:
            self._counts["algorithm_calls"] += 1
            return self.algo.collector_call(name, *args), self.version

    def _serve(self):
        """The batching thread: wait for requests, gather a batch, act, answer."""
        while True:
            with self._cond:
                batch = self._next_batch()
                if batch is None:
                    return
            self._run(batch)

    def _next_batch(self):
        """Requests of the next batch (called holding the condition), None once stopped.

        Waits for a first request, then until ``max_batch`` observations (or ``num_callers``
        requests) are waiting or the oldest request has waited ``timeout_ms``; takes the
        oldest requests of the same kind (deterministic or not) up to ``max_batch``
        observations (at least one request)."""
        cond = self._cond
        while not self._pending and not self._stopped:
            cond.wait()
        if self._stopped:
            return None
        deadline = self._pending[0].arrived + self.timeout_s
        everyone = self.num_callers or float("inf")
        while self._pending_obs < self.max_batch and len(self._pending) < everyone and not self._stopped:
            left = deadline - time.perf_counter()
            if left <= 0:
                break
            cond.wait(left)
        if self._stopped:
            return None
        kind = self._pending[0].deterministic
        batch, n, rest = [], 0, []
        for req in self._pending:
            if req.deterministic == kind and (not batch or n + len(req.obs) <= self.max_batch):
                batch.append(req)
                n += len(req.obs)
            else:
                rest.append(req)
        self._pending = rest
        self._pending_obs -= n
        return batch

    def _run(self, batch):
        obs = batch[0].obs if len(batch) == 1 else np.concatenate([r.obs for r in batch])
        now = time.perf_counter()
        try:
            with self._model_lock:
                env_action, extras, _ = self.actor.act(obs, None, deterministic=batch[0].deterministic)
                version = self.version
        except BaseException as exc:  # noqa: BLE001 - handed to every caller of the batch
            for req in batch:
                req.result = exc
                req.done.set()
            return
        with self._cond:   # read together by stats()
            c = self._counts
            c["batches"] += 1
            c["observations"] += len(obs)
            c["requests"] += len(batch)
            c["wait_s"] += sum(now - r.arrived for r in batch)
            c["max_batch_seen"] = max(c["max_batch_seen"], len(obs))
        start = 0
        for req in batch:
            end = start + len(req.obs)
            # Copies: the batch's arrays are reused by nobody, but a slice would keep the
            # whole batch alive in the caller (and pickle all of it to a remote one).
            req.result = (np.array(env_action[start:end]), {k: np.array(v[start:end]) for k, v in extras.items()},
                          version)
            req.done.set()
            start = end

    # ----------------------------------------------------------------- control
    def set_weights(self, weights, version):
        """Load acting weights (``Algorithm.get_acting_weights``, as tensors or as the wire's
        numpy arrays) of ``version``; an older version than the one held is ignored (two
        publications may arrive out of order at a threaded actor). Returns the version held."""
        from pytorchrl.scheme.transport import weights_from_wire
        with self._model_lock:
            if version is None or int(version) >= self.version:
                self.algo.set_acting_weights(weights_from_wire(weights))
                self.version = int(version) if version is not None else self.version + 1
            return self.version

    def get_weights(self):
        """The acting weights held now (CPU tensors) and their version."""
        with self._model_lock:
            return self.algo.get_acting_weights(), self.version

    def stats(self):
        """Counters since the start: ``batches`` (batched act calls), ``observations``,
        ``requests``, ``mean_batch`` (observations per batch), ``mean_requests`` (requests per
        batch), ``mean_wait_ms`` (from a request's arrival to its batch's start),
        ``max_batch_seen``, ``calls_per_s`` (batches per second), ``value_calls``,
        ``algorithm_calls`` (``call_algorithm``), ``version``, ``max_batch``, ``timeout_ms``."""
        with self._cond:
            c = dict(self._counts)
        b = max(1, c["batches"])
        elapsed = max(1e-9, time.perf_counter() - self._start)
        return {"batches": c["batches"], "observations": c["observations"], "requests": c["requests"],
                "mean_batch": c["observations"] / b, "mean_requests": c["requests"] / b,
                "mean_wait_ms": 1000.0 * c["wait_s"] / max(1, c["requests"]), "max_batch_seen": c["max_batch_seen"],
                "calls_per_s": c["batches"] / elapsed, "value_calls": c["value_calls"],
                "algorithm_calls": c["algorithm_calls"], "version": self.version,
                "max_batch": self.max_batch, "timeout_ms": 1000.0 * self.timeout_s}

    def stop(self):
        """End the batching thread; waiting and later ``act`` calls raise RuntimeError."""
        with self._cond:
            self._stopped = True
            waiting, self._pending, self._pending_obs = self._pending, [], 0
            self._cond.notify_all()
        for req in waiting:
            req.result = RuntimeError("the inference server was stopped")
            req.done.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        return True


class _FactoryInferenceServer(InferenceServer):
    """An ``InferenceServer`` built from the agent factories (the form a Ray actor is built in)."""

    def __init__(self, algo_factory, actor_factory, max_batch, timeout_ms, num_callers=None, initial_weights=None):
        # One thread: the server shares the cores with the collectors, and small networks
        # gain nothing from intra-op parallelism.
        torch.set_num_threads(1)
        actor = actor_factory("cpu")
        algo = algo_factory("cpu", actor, None)
        super().__init__(actor, algo, max_batch=max_batch, timeout_ms=timeout_ms, num_callers=num_callers)
        if initial_weights is not None:
            self.set_weights(initial_weights, 0)


def make_server(algo_factory, actor_factory, options, remote, num_callers=None, initial_weights=None):
    """The scheme's inference server: a Ray actor (``remote``) or an object in this process.

    Parameters
    ----------
    algo_factory, actor_factory : callable
        The scheme's agent factories.
    options : dict
        ``inference_server_options`` output.
    remote : bool
        Whether the scheme uses Ray.
    num_callers : int or None
        The collectors that act through it (see ``InferenceServer``).
    initial_weights : dict or None
        Acting weights of version 0.
    """
    batching = {k: options[k] for k in ("max_batch", "timeout_ms")}
    if not remote:
        return InferenceServer.from_factories(algo_factory, actor_factory, num_callers=num_callers,
                                              initial_weights=initial_weights, **batching)
    return start_remote(algo_factory, actor_factory, options, num_callers, initial_weights)


def start_remote(algo_factory, actor_factory, options, num_callers=None, initial_weights=None, wait=True):
    """An ``InferenceServer`` as a threaded Ray actor (Ray must be running).

    Parameters
    ----------
    algo_factory, actor_factory : callable
        As in ``InferenceServer.from_factories``.
    options : dict
        ``inference_server_options`` output.
    num_callers : int or None
        The collectors that act through it (see ``InferenceServer``); more than
        ``MAX_CONCURRENCY - 4`` is refused (each waits in one of its threads).
    initial_weights : dict or None
        Acting weights of version 0.
    wait : bool
        Wait until it is built (its error raised here); False returns the handle at once
        (the supervisor starting a replacement waits within its start timeout).
    """
    if num_callers is not None and num_callers > MAX_CONCURRENCY - 4:
        raise ValueError(f"an inference server serves at most {MAX_CONCURRENCY - 4} collectors (each waits in "
                         f"one of its threads), got {num_callers}")
    from pytorchrl.scheme.base.ray_runtime import require_ray
    ray = require_ray()
    handle = ray.remote(_FactoryInferenceServer).options(num_cpus=options["num_cpus"],
                                                         max_concurrency=MAX_CONCURRENCY).remote(
        algo_factory, actor_factory, options["max_batch"], options["timeout_ms"], num_callers, initial_weights)
    if wait:
        ray.get(handle.stats.remote())  # built, or its error raised here
    return handle


class ServerActing:
    """A collector's acting program that asks an inference server (``Actor.route_acting``).

    Called as ``act`` is (``(obs, state, deterministic)`` -> ``(env_action, extras, None)``);
    ``value(obs)`` gives bootstrap values, and ``call_algorithm`` runs the collector's
    ``Algorithm.collector_call`` there (``Algorithm.route_collector_calls``). Remembers the
    oldest weight version that acted since ``start_rollout`` (the version a rollout is
    reported with, so that policy lag counts the stalest step). A server that died raises
    ``ServerLost`` from any call:
    the collector keeps its rollout where it stopped and asks the replacement
    (``set_server``) for the same observations again.

    Parameters
    ----------
    server : InferenceServer or ray.actor.ActorHandle
        The scheme's server.
    generation : int
        Generation of ``server`` (see ``pytorchrl.scheme.base.servers``).
    """

    def __init__(self, server, generation=0):
        self.client = ServerClient(server, kind="inference", generation=generation)
        self.oldest_version = None
        self.latest_version = 0

    def set_server(self, server, generation):
        """Ask ``server`` (of ``generation``), the replacement of a dead one, from now on."""
        self.client.set(server, generation)

    def _seen(self, version):
        self.latest_version = version
        if self.oldest_version is None or version < self.oldest_version:
            self.oldest_version = version

    def __call__(self, obs, state=None, deterministic=False):
        env_action, extras, version = self.client.call("act", np.asarray(obs), deterministic)
        self._seen(version)
        return env_action, extras, None

    def value(self, obs):
        """Value estimates (N, 1) of ``obs`` from the server's current weights."""
        values, version = self.client.call("values", np.asarray(obs))
        self._seen(version)
        return values

    def call_algorithm(self, name, *args):
        """``name(*args)`` of the algorithm's ``server_calls``, run by the server with its
        current weights (see ``InferenceServer.call_algorithm``)."""
        result, version = self.client.call("call_algorithm", name, tuple(args))
        self._seen(version)
        return result

    def start_rollout(self):
        """Forget the versions seen: a new rollout begins."""
        self.oldest_version = None

    def rollout_version(self):
        """Oldest version that acted since ``start_rollout`` (the latest seen if none did)."""
        return self.latest_version if self.oldest_version is None else self.oldest_version


__all__ = ["INFERENCE_SERVER_DEFAULTS", "InferenceServer", "ServerActing", "check_server_agent",
           "inference_server_options", "make_server", "start_remote"]
