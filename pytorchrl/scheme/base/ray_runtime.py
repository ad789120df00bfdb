"""Starting or joining Ray, refusing impossible resource requests, and clear remote errors.

Ray is imported only here (and only when a scheme has remote workers), so that a scheme
with one worker at every level runs without it.
"""

import contextlib
import logging
import math
import os
import re
import signal
import sys
import threading


class ResourceError(RuntimeError):
    """A resource request that the Ray cluster can never satisfy."""


class ClusterError(RuntimeError):
    """This process cannot join the Ray cluster it was pointed at (one-line message naming
    the address and the cause: a missing token, nothing listening there)."""


class WorkerError(RuntimeError):
    """A remote worker failed; the message names the workers, the error type and its text."""


class WorkerFailure(WorkerError):
    """The run cannot go on: a worker kept dying (its restart limit is reached), could not
    be replaced, or an environment failed under ``on_env_error="stop"``. One line that
    names the worker and the cause (see ``pytorchrl.scheme.base.faults``)."""


# A local Ray instance started by this module is shut down when the last scheme using it
# stops; a cluster that was joined (or initialised by the user) is never shut down here.
_lock = threading.Lock()
_started_here = False
_users = 0

#: Resource keys accepted in a worker's resource dict (``Worker.as_remote`` arguments).
RESOURCE_KEYS = ("num_cpus", "num_gpus", "memory", "object_store_memory", "resources")


def process_info():
    """(node id, process id) of this process (node None outside Ray): where a worker or a data server
    runs."""
    try:
        import ray
        node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except Exception:  # Ray missing or not in a Ray process: a local worker
        node = None
    return node, os.getpid()


def require_ray():
    """Import and return the ``ray`` module, with a clear message if it is missing."""
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - ray is a dependency
        raise ImportError("remote workers need Ray: pip install 'ray>=2.40'") from exc
    return ray


def ensure_ray(address=None, num_cpus=None):
    """Make sure this process is connected to Ray, starting a local instance if needed.

    Inside a Ray worker (a remote gradient worker building its collectors) Ray is already
    initialised and nothing happens.

    Parameters
    ----------
    address : str or None
        Address of an existing cluster ("auto", "ray://host:10001", "host:6379"). None uses
        the ``RAY_ADDRESS`` environment variable if set, else starts a local instance.
    num_cpus : int or None
        CPUs of a local instance started here (default: all this machine lets us use).

    Returns
    -------
    ray : module
    """
    global _started_here
    ray = require_ray()
    with _lock:
        if ray.is_initialized():
            return ray
        address = address or os.environ.get("RAY_ADDRESS")
        with _sigterm_handler_kept():
            if address:
                try:
                    # configure_logging=False: Ray's INFO lines (the address used, "Connected")
                    # stay off the run's output.
                    with _native_stderr_held():
                        ray.init(address=address, include_dashboard=False, log_to_driver=True,
                                 configure_logging=False)
                except Exception as exc:  # every way of failing to join becomes one line
                    raise ClusterError(f"cannot join the Ray cluster at {address}: {_join_failure(exc)}") from None
            else:
                # num_cpus None lets Ray count the CPUs, container limits included.
                # address="local": always a new instance, never a cluster someone else started here.
                with _quiet_token_notice():
                    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=True,
                             configure_logging=False)
                _started_here = True
    return ray


#: What Ray's errors say when a cluster's token authentication refuses a process (Ray
#: 2.60 wraps its AuthenticationError into the text of the RuntimeError it raises).
_REFUSED_TOKEN = ("AuthenticationError", "InvalidAuthToken", "Authentication token is missing or incorrect")


def _join_failure(exc):
    """Why ``ray.init(address=...)`` failed, in words: a token the cluster asks for and
    this process lacks (Ray 2.60's token authentication, docs/cluster.md), or Ray's own
    last line."""
    cause = exc
    while cause is not None:
        text = f"{type(cause).__name__}: {cause}"
        if any(mark in text for mark in _REFUSED_TOKEN):
            return ("its token authentication refused this process (no token, or another one): set "
                    "RAY_AUTH_MODE=token and give the cluster's token in ~/.ray/auth_token, RAY_AUTH_TOKEN_PATH or "
                    "RAY_AUTH_TOKEN (docs/cluster.md)")
        cause = cause.__cause__ or cause.__context__
    return _last_line(exc)


@contextlib.contextmanager
def _native_stderr_held():
    """Send what is written to file descriptor 2 while joining a cluster to nowhere: Ray's
    native GCS client logs a warning per second of retries (a refused token: twenty lines)
    before the Python error that ``ensure_ray`` turns into one line."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


@contextlib.contextmanager
def _sigterm_handler_kept():
    """Put back, after ``ray.init``, the SIGTERM handler this process had before it (when the
    program set one): ``ray.init`` replaces it with one that exits at once, and Ray's core
    worker adds a native one that prints a stack trace and kills the process, so a run that
    the program's handler would save (``pytorchrl train``, ``pytorchrl pbt``) was lost to a
    scheduler's SIGTERM. A process that had Python's default keeps Ray's."""
    previous = None
    if threading.current_thread() is threading.main_thread():
        handler = signal.getsignal(signal.SIGTERM)
        if handler not in (signal.SIG_DFL, None):
            previous = handler
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


#: Ray's logger of its token authentication set-up.
_TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"


@contextlib.contextmanager
def _quiet_token_notice():
    """Keep Ray's notice that token authentication is on (a warning that every local
    instance prints since Ray 2.60) off the user's terminal: a local instance started here
    is this process's own, and the notice asks nothing of the user. The behaviour stays
    Ray's default (a token in ~/.ray/auth_token, made if missing); a cluster that is joined
    is configured by whoever started it (docs/cluster.md)."""
    token_logger = logging.getLogger(_TOKEN_LOGGER)
    level = token_logger.level
    token_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        token_logger.setLevel(level)


def acquire_ray(address=None, num_cpus=None):
    """``ensure_ray`` for a user of Ray that will call ``release_ray`` when it is done
    (a Scheme): a local instance started here stays up while any user holds it."""
    global _users
    ray = ensure_ray(address, num_cpus)
    with _lock:
        _users += 1
    return ray


def release_ray():
    """Give back a hold taken with ``acquire_ray``; the last one shuts down a local
    instance that this module started (a joined cluster stays up)."""
    global _users, _started_here
    with _lock:
        _users = max(0, _users - 1)
        if _users or not _started_here:
            return
        _started_here = False
    ray = require_ray()
    if ray.is_initialized():
        ray.shutdown()


def shutdown_ray_if_started_here():
    """Shut down the local Ray instance if this module started it (a joined cluster stays up)."""
    global _started_here, _users
    with _lock:
        started, _started_here, _users = _started_here, False, 0
    if started:
        ray = require_ray()
        if ray.is_initialized():
            ray.shutdown()


def ray_started_here():
    """True while a local Ray instance started by this module is running."""
    return _started_here


def validate_resources(resources, what):
    """Check the keys and values of one worker's resource dict; return a clean copy.

    Parameters
    ----------
    resources : dict
        ``Worker.as_remote`` arguments: num_cpus, num_gpus, memory, object_store_memory,
        resources (custom resources, a dict).
    what : str
        Words naming the workers, for the messages.

    Raises
    ------
    ValueError
        For an unknown key or a negative or non-numeric amount.
    """
    resources = dict(resources or {})
    unknown = sorted(set(resources) - set(RESOURCE_KEYS))
    if unknown:
        raise ValueError(f"unknown resource key(s) {unknown} for {what}; valid: {list(RESOURCE_KEYS)}")
    amounts = [(k, v) for k, v in resources.items() if k != "resources"]
    amounts += list((resources.get("resources") or {}).items())
    for key, value in amounts:
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or math.isnan(value):
            raise ValueError(f"resource {key!r} of {what} must be a non-negative number, got {value!r}")
    return resources


def _demand(res):
    """Ray resource name -> amount asked by one actor with the resource dict ``res``."""
    names = {"num_cpus": "CPU", "num_gpus": "GPU", "memory": "memory"}
    out = {names[k]: float(v) for k, v in res.items() if k in names and v}
    for key, v in (res.get("resources") or {}).items():
        if v:
            out[key] = out.get(key, 0.0) + float(v)
    return out


def check_schedulable(requests):
    """Refuse at once a set of actor resource requests that the cluster can never hold.

    Two checks, both against what the cluster's alive nodes have in total (not what is free
    now: busy resources free up, missing ones never appear): every actor must fit on some
    node, and all actors together must fit in the cluster.

    Parameters
    ----------
    requests : list of (str, int, dict)
        (what, how many actors, resources of one actor), e.g.
        ``("collection workers", 4, {"num_cpus": 1, "num_gpus": 0})``.

    Raises
    ------
    ResourceError
        Naming the resource, what asked for it and what the cluster has.
    """
    ray = require_ray()
    total = ray.cluster_resources()
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    demand, parts = {}, {}
    for what, count, res in requests:
        if count <= 0:
            continue
        one = _demand(res)
        for key, v in one.items():
            if not any(node.get(key, 0.0) + 1e-9 >= v for node in nodes):
                biggest = max((node.get(key, 0.0) for node in nodes), default=0.0)
                raise ResourceError(
                    f"impossible resource request: each of the {what} asks for {v:g} {key}, but no "
                    f"node of the Ray cluster has that much (the largest has {biggest:g} {key}). "
                    f"Lower the per-worker resources (e.g. col_workers_resources={{'num_cpus': 0.5}}).")
            demand[key] = demand.get(key, 0.0) + count * v
            parts.setdefault(key, []).append(f"{count} {what} x {v:g}")
    for key, need in demand.items():
        have = total.get(key, 0.0)
        if need > have + 1e-9:
            raise ResourceError(
                f"impossible resource request: {' + '.join(parts[key])} = {need:g} {key}, "
                f"but the Ray cluster has {have:g} {key}. Lower the per-worker resources "
                f"(e.g. col_workers_resources={{'num_cpus': 0.5}}) or the number of workers.")


def remote_get(refs, timeout=None, what="remote worker"):
    """``ray.get`` that turns remote failures into one-line WorkerError messages.

    Parameters
    ----------
    refs : ObjectRef or list of ObjectRef
        What to wait for.
    timeout : float or None
        Seconds to wait before raising WorkerError (None waits for ever).
    what : str
        Words naming the workers, for the messages.
    """
    ray = require_ray()
    try:
        return ray.get(refs, timeout=timeout)
    except Exception as exc:  # every Ray failure becomes one line naming its cause
        raise as_worker_error(exc, what, timeout) from None


def as_worker_error(exc, what, timeout=None):
    """The WorkerError (one line) describing the Ray exception ``exc`` raised by ``what``."""
    from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError
    if isinstance(exc, WorkerError) and not isinstance(exc, RayError):
        return exc
    if isinstance(exc, GetTimeoutError):
        return WorkerError(f"{what} did not answer within {timeout:g} s "
                           f"(not enough free resources in the cluster to start them?)")
    if isinstance(exc, RayTaskError):
        cause = exc.cause if getattr(exc, "cause", None) is not None else exc
        if isinstance(cause, WorkerFailure):
            # Names the worker and its path already ("collection worker 2 of gradient worker 1").
            return cause
        if isinstance(cause, WorkerError):
            # Already one line from a worker further down (a gradient worker reporting its
            # collectors): keep it, naming the path.
            return WorkerError(f"{what}: {cause}")
        return WorkerError(f"{what} failed: {type(cause).__name__}: {_last_line(cause)}")
    if isinstance(exc, RayActorError):
        text = getattr(exc, "error_msg", None) or str(exc)
        if "creation task" in text:
            return WorkerError(f"{what} could not be built: {_last_line(text)}")
        return WorkerError(f"{what} died: {_last_line(text)}")
    if isinstance(exc, RayError):
        return WorkerError(f"{what}: {type(exc).__name__}: {_last_line(exc)}")
    return exc


def _last_line(exc):
    text = str(exc).strip()
    # Ray prefixes remote messages with a traceback; the cause is its last line.
    lines = [ln for ln in text.splitlines() if ln.strip()]
    line = lines[-1].strip() if lines else type(exc).__name__
    # "package.module.SomeError: text" -> "SomeError: text"
    return re.sub(r"^(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_]\w*: )", "", line)
