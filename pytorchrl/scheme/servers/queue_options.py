"""The options of the queue data path (``scheme.queues``, ``QUEUE_DEFAULTS``; what each means:
``pytorchrl.scheme.servers.queues``) and the checks of a layout that uses it."""

from pytorchrl.scheme.base.checks import check_int, check_non_negative, merge_options

#: Options of ``Scheme(queues=...)`` (``scheme.queues``) and their defaults.
QUEUE_DEFAULTS = {"size": 4, "pop": "one", "prefetch": True, "selection": "binned", "steal": False,
                  "route": "collector", "kind": "fifo", "end": "all", "num_cpus": 0.25}
POPS = ("one", "all")
SELECTIONS = ("binned", "random")
ROUTES = ("collector", "learner")
KINDS = ("fifo", "circular")
ENDS = ("all", "first")


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
        Some of the keys of ``QUEUE_DEFAULTS`` (see ``pytorchrl.scheme.servers.queues``).

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


def check_queue_path(options, num_grad_workers=1, async_gradients=False):
    """Check the queue data path's options; returns ``queue_options(options)``. (The
    layouts the queue path cannot run are rules of ``pytorchrl.scheme.layout_rules``.)

    Parameters
    ----------
    options : dict or None
        ``Scheme(queues=...)``.
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
    refused = steal_refused(out, num_grad_workers, async_gradients)
    if refused is not None:
        raise ValueError(f"queues steal=True has no effect: {refused}; remove it")
    return out
