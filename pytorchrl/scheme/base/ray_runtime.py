"""Starting or joining Ray, and refusing resource requests that can never be scheduled.

Ray is imported only here and only when a scheme has remote workers, so that a scheme
with one worker at every level runs without it.
"""

import os


class ResourceError(RuntimeError):
    """A resource request that the Ray cluster cannot satisfy."""


_started_here = False


def require_ray():
    """Import and return the ``ray`` module, with a clear message if it is missing."""
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - ray is a dependency
        raise ImportError("remote workers need Ray: pip install 'ray>=2.40'") from exc
    return ray


def ensure_ray(address=None, num_cpus=None):
    """Make sure this process is connected to Ray, starting a local instance if needed.

    Parameters
    ----------
    address : str or None
        Address of an existing cluster ("auto", "ray://host:10001", "host:6379"). None uses
        the ``RAY_ADDRESS`` environment variable if set, else starts a local instance.
    num_cpus : int or None
        CPUs of a local instance started here (default: all of this machine's).

    Returns
    -------
    ray : module
    """
    global _started_here
    ray = require_ray()
    if ray.is_initialized():
        return ray
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=True, include_dashboard=False)
    else:
        ray.init(num_cpus=num_cpus or os.cpu_count(), include_dashboard=False, log_to_driver=True,
                 configure_logging=False)
        _started_here = True
    return ray


def shutdown_ray_if_started_here():
    """Shut down the local Ray instance if this module started it (a joined cluster stays up)."""
    global _started_here
    if _started_here:
        ray = require_ray()
        if ray.is_initialized():
            ray.shutdown()
        _started_here = False


def check_schedulable(requests):
    """Refuse at once a set of actor resource requests that the cluster can never hold.

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
    names = {"num_cpus": "CPU", "num_gpus": "GPU", "memory": "memory"}
    demand = {}
    parts = {}
    for what, count, res in requests:
        if count <= 0:
            continue
        items = [(names.get(k, k), v) for k, v in res.items() if k in names and v]
        items += list((res.get("resources") or {}).items())
        for key, v in items:
            demand[key] = demand.get(key, 0) + count * v
            parts.setdefault(key, []).append(f"{count} {what} x {v:g}")
    for key, need in demand.items():
        have = total.get(key, 0)
        if need > have + 1e-9:
            raise ResourceError(
                f"impossible resource request: {' + '.join(parts[key])} = {need:g} {key}, "
                f"but the Ray cluster has {have:g} {key}. Lower the per-worker resources "
                f"(e.g. col_workers_resources={{'num_cpus': 0.5}}) or the number of workers.")


class WorkerError(RuntimeError):
    """A remote worker failed; the message carries the original error's type and text."""


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
    from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
    try:
        return ray.get(refs, timeout=timeout)
    except RayTaskError as exc:
        cause = exc.cause if getattr(exc, "cause", None) is not None else exc
        raise WorkerError(f"{what} failed: {type(cause).__name__}: {_first_line(cause)}") from None
    except RayActorError as exc:
        cause = getattr(exc, "cause", None) or exc
        raise WorkerError(f"{what} died: {_first_line(cause)}") from None
    except GetTimeoutError:
        raise WorkerError(f"{what} did not answer within {timeout:g} s "
                          f"(not enough free resources to start it?)") from None


def _first_line(exc):
    text = str(exc).strip()
    # Ray prefixes remote messages with a traceback; the cause is its last line.
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else type(exc).__name__
