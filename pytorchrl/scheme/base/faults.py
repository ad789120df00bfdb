"""Worker failures: what counts as a dead worker, the restart policy, and the events reported.

A remote worker (a Ray actor) whose process ends — killed, out of memory, an environment
that takes its process down, its node lost — is replaced by the worker set that owns it:
a new actor with the same index, the parameters hot-swapped since the start replayed on
it, and the current weights. The rules are a :class:`FaultPolicy` shared by every worker
set of a scheme (remote gradient workers carry it to the sets of their collectors):

- each worker (a slot: "collection worker 2 of gradient worker 1") may be restarted
  ``max_worker_restarts`` times over the run; its next failure ends the run with a
  :class:`WorkerFailure` naming it and the last cause;
- ``worker_restart_delay_s`` seconds pass before each restart, so that a worker that
  dies at once is not rebuilt in a tight loop (and Ray has time to see a lost node go);
- an environment that raises (``EnvError``) in a worker whose process survives is
  rebuilt in that worker (``on_env_error="restart"``, counted against the same limit) or
  ends the run (``"stop"``).

Ray's own actor restarts stay off (``max_restarts=0``): it would rebuild a worker with the
weights and hyperparameters it was created with. Every restart is an event (a dict, see
:func:`event`) that travels up with the collection and update information to the
Learner, which counts it (``Scheme/WorkerRestarts``, ``Scheme/EnvRestarts``) and logs
its one line.

Ray is imported only inside the functions that need it.
"""

import re
import time

from pytorchrl.scheme.base.ray_runtime import WorkerFailure, _last_line

#: Values of ``on_env_error``.
ENV_ERROR_POLICIES = ("restart", "stop")


class FaultPolicy:
    """How a scheme reacts to workers that die and environments that fail.

    Parameters
    ----------
    max_worker_restarts : int
        Restarts allowed to each worker over the run (process replacements and
        environment rebuilds together); its next failure ends the run. 0 ends the run at
        the first failure.
    worker_restart_delay_s : float
        Seconds waited before each restart.
    on_env_error : str
        "restart": an environment that raises is rebuilt in its worker and the rollout
        it was producing is dropped; "stop": the run ends with the error.
    start_timeout_s : float
        Seconds a replacement may take to start (it waits for free resources) before the
        run ends with a message saying that it does not fit.
    """

    def __init__(self, max_worker_restarts=3, worker_restart_delay_s=1.0, on_env_error="restart",
                 start_timeout_s=60.0):
        from pytorchrl.scheme.base.checks import check_int
        check_int("max_worker_restarts", max_worker_restarts, 0)
        for name, value in (("worker_restart_delay_s", worker_restart_delay_s), ("start_timeout_s", start_timeout_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"{name} must be a non-negative number of seconds, got {value!r}")
        if on_env_error not in ENV_ERROR_POLICIES:
            raise ValueError(f"on_env_error must be one of {list(ENV_ERROR_POLICIES)}, got {on_env_error!r}")
        self.max_worker_restarts = int(max_worker_restarts)
        self.worker_restart_delay_s = float(worker_restart_delay_s)
        self.on_env_error = on_env_error
        self.start_timeout_s = float(start_timeout_s)

    def __repr__(self):
        return (f"FaultPolicy(max_worker_restarts={self.max_worker_restarts}, worker_restart_delay_s="
                f"{self.worker_restart_delay_s:g}, on_env_error={self.on_env_error!r})")


class RestartBook:
    """Restarts of the workers of one set, per worker index, against the policy's limit.

    Parameters
    ----------
    policy : FaultPolicy
        The limit and the delay.
    """

    def __init__(self, policy):
        self.policy = policy
        self.counts = {}
        self.events = []   # events not yet handed to the owner (see ``pop_events``)

    def allow(self, index, headline):
        """Count one more restart of worker ``index``, or raise WorkerFailure if its limit
        is reached; then wait the restart delay.

        Parameters
        ----------
        index : int
            The worker's index in its set.
        headline : str
            What happened, naming the worker: "collection worker 2 of gradient worker 1
            died (killed by SIGKILL)".

        Returns
        -------
        int
            The number of this restart (1 for the first).
        """
        done = self.counts.get(index, 0)
        limit = self.policy.max_worker_restarts
        if done >= limit:
            after = f" after {done} restart{'s' if done > 1 else ''}" if done else ""
            raise WorkerFailure(f"{headline}{after}; restart limit reached (scheme.max_worker_restarts={limit}): "
                                f"the run stops")
        self.counts[index] = done + 1
        if self.policy.worker_restart_delay_s > 0:
            # A deliberate pause between restarts (not a polling loop): a worker that dies
            # at once is not rebuilt in a tight loop, and a lost node has time to be seen.
            time.sleep(self.policy.worker_restart_delay_s)
        return done + 1

    def record(self, kind, headline, restart, done):
        """Keep the event of one restart for the owner (see :func:`event`); returns it."""
        ev = event(kind, headline, restart, self.policy.max_worker_restarts, done)
        self.events.append(ev)
        return ev

    def pop_events(self):
        """The events recorded since the last call."""
        out, self.events = self.events, []
        return out


def event(kind, headline, restart, limit, done):
    """One restart, as reported to the Learner.

    Parameters
    ----------
    kind : str
        "worker" (a process replaced) or "env" (environments rebuilt in a live worker).
    headline : str
        What happened, naming the worker ("collection worker 2 of gradient worker 1 died
        (killed by SIGKILL)").
    restart, limit : int
        This restart's number and the worker's limit.
    done : str
        What was done ("replaced", "environments rebuilt").

    Returns
    -------
    dict
        ``kind``, ``restart``, ``limit`` and ``text``: the line logged, e.g. "collection
        worker 2 of gradient worker 1 died (killed by SIGKILL); replaced (restart 1 of 3)".
    """
    return {"kind": kind, "restart": restart, "limit": limit,
            "text": f"{headline}; {done} (restart {restart} of {limit})"}


# ------------------------------------------------------------------ classifying errors
def worker_died(exc):
    """True when ``exc`` (raised by ``ray.get`` on a call of a worker) means that the worker's
    process is gone: the actor died or is unreachable, its result was lost with its node,
    or Ray killed it for memory."""
    from ray.exceptions import NodeDiedError, ObjectLostError, OutOfMemoryError, RayActorError, WorkerCrashedError
    return isinstance(exc, (RayActorError, ObjectLostError, OutOfMemoryError, WorkerCrashedError, NodeDiedError))


def _origin(exc):
    """The exception raised in the worker: the cause of a Ray task error (which Ray raises
    as an instance of both RayTaskError and the cause's class, with a traceback in its
    text), else ``exc`` itself."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


def env_error_of(exc):
    """The ``EnvError`` behind ``exc`` (the error itself, or the cause of a Ray task error),
    or None."""
    from pytorchrl.agent.vec_env import EnvError
    origin = _origin(exc)
    return origin if isinstance(origin, EnvError) else None


def failure_of(exc):
    """A ``WorkerFailure`` raised further down (a gradient worker reporting that one of its
    collectors reached its limit) behind ``exc``, or None."""
    origin = _origin(exc)
    return origin if isinstance(origin, WorkerFailure) else None


def death_cause(exc):
    """A few words on why a worker died, from the Ray exception ``exc``: "killed with
    ray.kill()", "its node was lost", "out of memory", "its process ended unexpectedly
    (<Ray's exit detail>)"."""
    from ray.exceptions import ActorUnavailableError, ObjectLostError, OutOfMemoryError
    if isinstance(exc, OutOfMemoryError):
        return "out of memory"
    if isinstance(exc, ObjectLostError):
        return "its result was lost with its node"
    text = " ".join((getattr(exc, "error_msg", None) or str(exc)).split())
    if isinstance(exc, ActorUnavailableError):
        # Its node does not answer (lost, or cut off): it is given up and replaced.
        rpc = re.search(r"RpcError: (.*)$", text)
        return f"unreachable: {(rpc.group(1) if rpc else _last_line(text))[:160]}"
    # Ray says why after "The actor is dead because", then lists guesses ("Some common causes").
    m = re.search(r"The actor is dead because (.*?)(?: Some common causes|$)", text)
    reason = m.group(1) if m else text
    low = reason.lower()
    if "ray.kill" in low:
        return "killed with ray.kill()"
    if "node" in low and ("died" in low or "dead" in low):
        return "its node was lost"
    if "memory" in low:
        return "out of memory"
    detail = re.search(r"Worker exit detail: (?:Worker unexpectedly exits with a )?(.*?)(?: Some common causes|$)",
                       reason)
    if "process has died" in low or detail:
        return f"its process ended unexpectedly: {(detail.group(1) if detail else reason).rstrip('.')}"
    return _last_line(reason)[:200]


def gather(refs):
    """Wait for every ref and retrieve each one, failed or not.

    Every result is fetched, errors included: a failed ref that is dropped unread makes Ray
    print "Unhandled error" when it is garbage-collected (two workers failing at once).

    Parameters
    ----------
    refs : list of ObjectRef

    Returns
    -------
    list of (object, Exception or None)
        ``(value, None)`` or ``(None, the Ray exception)``, in the order of ``refs``.
    """
    from pytorchrl.scheme.base.ray_runtime import require_ray
    ray = require_ray()
    from ray.exceptions import RayError
    if refs:
        ray.wait(list(refs), num_returns=len(refs))
    out = []
    for ref in refs:
        try:
            out.append((ray.get(ref), None))
        except RayError as exc:
            out.append((None, exc))
    return out


def raise_failure(exc, what):
    """Raise the failure ``exc`` of a call as one line: a ``WorkerFailure`` reported from
    further down (a gradient worker whose collector reached its restart limit) as it is,
    anything else as ``as_worker_error(exc, what)``.

    Parameters
    ----------
    exc : Exception
        The Ray exception the call ended with.
    what : str
        Words naming the worker(s) called, for the message ("collection worker 2").
    """
    from pytorchrl.scheme.base.ray_runtime import as_worker_error
    failure = failure_of(exc)
    raise (failure if failure is not None else as_worker_error(exc, what)) from None


def get_all(refs, what):
    """``ray.get`` of every ref, raising the first failure as one line (``raise_failure``)
    once all are read (see ``gather``)."""
    out = []
    for value, exc in gather(refs):
        if exc is not None:
            raise_failure(exc, what)
        out.append(value)
    return out


class InFlight(dict):
    """Requests in flight: ObjectRef -> the handle of the worker it was sent to."""

    def drop(self, worker):
        """Forget the requests sent to ``worker`` (it failed or is being replaced) and
        return their refs, to be read (``drain``) and, where due, sent again."""
        stale = [ref for ref, w in self.items() if w is worker]
        for ref in stale:
            del self[ref]
        return stale


def drain(refs, timeout=0.0):
    """Retrieve the refs of requests that are being abandoned (a worker that died, a round
    given up) so that their errors are read, not reported by Ray as unhandled.

    Those already finished, or finishing within ``timeout`` seconds, are read; their values
    and errors are what abandoning them means to drop. Returns the refs still running.
    """
    if not refs:
        return []
    from pytorchrl.scheme.base.ray_runtime import require_ray
    ray = require_ray()
    from ray.exceptions import RayError
    ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
    for ref in ready:
        try:
            ray.get(ref)
        except RayError:   # the error of an abandoned request: what dropping it means
            pass
    return pending
