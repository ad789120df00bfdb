"""Data servers that die: what their clients see, and how the scheme replaces them.

A scheme's data servers (the replay server, the inference server and the queue server,
each a threaded Ray actor) are processes like the workers and die like them: killed, out
of memory, their node lost. They are replaced under the workers' rules
(``FaultPolicy``: ``max_worker_restarts`` restarts per server over the run,
``worker_restart_delay_s`` before each; the next death ends the run with one line,
``WorkerFailure``), each restart is an event of kind ``"server"`` (the Learner counts
``Scheme/ServerRestarts`` and logs its line), and every client is given the replacement:

- A client that finds its server dead raises :class:`ServerLost`, naming the server, the
  generation of the handle it used and why the server died (``death_cause``). Clients in
  the learner's process hand it at once to the scheme's :class:`ServerSupervisor` (their
  recover hook); clients in a remote gradient worker raise it out of the call the update
  worker made, and the update worker hands it over.
- The supervisor replaces a server once per generation (later reports of the same death
  name an older generation and change nothing), restores what the server keeps (the
  replay server: the contents saved with the last checkpoint) and gives the new handle
  and generation to every client (``set_server`` down the worker tree).
- Collectors never raise it: what they were doing when their server died is reported in
  the rollout's information (an insert or a put lost, an act to send again), so that a
  collector is never taken for dead because its server is.

Ray is imported only inside the functions that need it.
"""

from pytorchrl.scheme.base.faults import RestartBook, WorkerFailure, _origin, death_cause, drain, worker_died

#: The servers a scheme supervises, by kind, and the words naming them in messages.
SERVER_TITLES = {"replay": "replay server", "inference": "inference server", "queue": "queue server"}


def server_title(kind):
    """Words naming the server of ``kind`` in messages ("replay server")."""
    return SERVER_TITLES.get(kind, f"{kind} server")


class ServerLost(Exception):
    """A client found its data server dead.

    Parameters
    ----------
    kind : str
        Which server: a key of ``SERVER_TITLES``.
    generation : int
        Generation of the handle the client used (0 for the first server, one more for each
        replacement): a report about a generation already replaced is stale.
    cause : str
        Why it died, in a few words (``faults.death_cause``).
    """

    def __init__(self, kind, generation, cause):
        self.kind = kind
        self.generation = int(generation)
        self.cause = cause
        super().__init__(f"{server_title(kind)} died ({cause})")

    def __reduce__(self):
        # Crosses process boundaries as the cause of a Ray task error: rebuilt from its fields.
        return type(self), (self.kind, self.generation, self.cause)

    def report(self):
        """The loss as plain values, for a rollout's information (see ``from_report``)."""
        return {"kind": self.kind, "generation": self.generation, "cause": self.cause}

    @classmethod
    def from_report(cls, report):
        """The ``ServerLost`` of a ``report()`` dict."""
        return cls(report["kind"], report["generation"], report["cause"])


def server_lost_of(exc):
    """The ``ServerLost`` behind ``exc`` (the error itself, or the cause of a Ray task error
    raised by a remote gradient worker), or None."""
    origin = _origin(exc)
    return origin if isinstance(origin, ServerLost) else None


def raise_lost(lost):
    """The recover hook of clients outside the learner's process: the loss goes up to the
    caller (the update worker hands it to the supervisor)."""
    raise lost


def is_remote(server):
    """Whether ``server`` is a Ray actor handle (else an object in this process)."""
    return type(server).__module__.startswith("ray.")


class ServerClient:
    """Calls a data server the same way whether it is in this process or a Ray actor, and
    turns the death of a remote one into ``ServerLost``.

    Parameters
    ----------
    server : object or ray.actor.ActorHandle
        The server (``ReplayServer``, ``QueueServer``, ``InferenceServer``) or its handle.
    remote : bool or None
        Whether ``server`` is a Ray actor handle (None: read from its type).
    kind : str or None
        Which server it is (a key of ``SERVER_TITLES``), named by ``ServerLost``.
    generation : int
        Generation of ``server`` (see ``ServerLost``).
    """

    def __init__(self, server, remote=None, kind=None, generation=0):
        self.kind = kind
        self.set(server, generation, remote)

    def set(self, server, generation, remote=None):
        """Call ``server`` (of ``generation``) from now on: the replacement of a dead one."""
        self.server = server
        self.generation = int(generation)
        self.remote = is_remote(server) if remote is None else bool(remote)

    def call(self, method, *args):
        """``server.method(*args)``, waited for.

        Raises
        ------
        ServerLost
            The remote server's process is gone.
        """
        if not self.remote:
            return getattr(self.server, method)(*args)
        return self.get(self.submit(method, *args))

    def submit(self, method, *args):
        """Ask the remote server for ``server.method(*args)`` without waiting: its Ray
        reference (read with ``get``).

        Raises
        ------
        ServerLost
            The server's process is gone (found when the call is submitted).
        """
        try:
            return getattr(self.server, method).remote(*args)
        except Exception as exc:  # noqa: BLE001 - a dead actor may fail the submission itself
            if worker_died(exc):
                raise self.lost(exc) from None
            raise

    def get(self, ref):
        """``ray.get(ref)`` of a call made to the server (a prefetched pop), raising
        ``ServerLost`` when the server died."""
        import ray
        from ray.exceptions import RayError
        try:
            return ray.get(ref)
        except RayError as exc:
            if worker_died(exc):
                raise self.lost(exc) from None
            raise

    def ready(self, ref, wait=True):
        """Whether a call made to the server (a prefetched pop) has answered; with ``wait``,
        waits for it (True). A dead server's call counts as answered: ``get`` raises
        ``ServerLost`` for it."""
        if wait or not self.remote:
            return True
        import ray
        ready, _ = ray.wait([ref], timeout=0)
        return bool(ready)

    def lost(self, exc):
        """The ``ServerLost`` saying that this client's server died of ``exc``."""
        return ServerLost(self.kind, self.generation, death_cause(exc))


class ServerPath:
    """Base of a gradient worker's data path to a server (``ReplayDataPath``,
    ``QueueDataPath``): the client of the server, and what is done when it died.

    Parameters
    ----------
    server : object or ray.actor.ActorHandle
        The server.
    kind : str
        Which server (see ``SERVER_TITLES``).
    generation : int
        Generation of ``server``.
    remote : bool or None
        As in ``ServerClient``.

    Attributes
    ----------
    client : ServerClient
        Calls the server.
    recover : callable
        ``recover(lost)`` with the ``ServerLost`` of a dead server: in the learner's
        process the scheme's supervisor replaces it (and ``set_server`` gives the
        replacement to this path); elsewhere it raises (the default), and the loss reaches
        the update worker, which does the same.
    """

    def __init__(self, server, kind, generation=0, remote=None):
        self.client = ServerClient(server, remote=remote, kind=kind, generation=generation)
        self.recover = raise_lost

    def set_server(self, server, generation):
        """Use ``server`` (of ``generation``), the replacement of a dead one, from now on."""
        self.client.set(server, generation)


def call_or_lost(server, method, args, kind, generation):
    """Call remote ``server.method(*args)`` from a collector and wait for it: ``(result,
    None)``, or ``(None, ServerLost report)`` when the server died, so that the collector
    reports the loss instead of failing (a collector whose call raises is taken for dead).

    Parameters
    ----------
    server : ray.actor.ActorHandle
        The server.
    method : str
        Its method.
    args : tuple
        The arguments.
    kind : str
        Which server (see ``SERVER_TITLES``).
    generation : int or None
        Generation of ``server`` (None: 0).
    """
    try:
        return ServerClient(server, remote=True, kind=kind, generation=generation or 0).call(method, *args), None
    except ServerLost as lost:
        return None, lost.report()


class ServerProcess:
    """Base of the data servers: ``process_info`` says where one runs (the supervisor waits
    for it to answer before using a replacement; the soak benchmark kills it by its pid)."""

    def process_info(self):
        """(node id, process id) of the process this server lives in."""
        from pytorchrl.scheme.base.ray_runtime import process_info
        return process_info()


class _Slot:
    """One supervised server: its handle and generation, how to start another, and what
    to restore on it."""

    def __init__(self, kind, handle, start, restore):
        self.kind = kind
        self.handle = handle
        self.generation = 0
        self.start = start
        self.restore = restore


class ServerSupervisor:
    """Replaces the data servers of a scheme that die (see the module docstring).

    Lives in the learner's process, with the scheme. Each server is registered with
    ``add``; ``recover`` replaces one that a client found dead and tells every listener
    (``listen``: the scheme, which gives the new handle to the worker tree).

    Parameters
    ----------
    fault_policy : FaultPolicy
        The workers' restart limit, delay and start timeout, applied to each server.
    """

    def __init__(self, fault_policy):
        self.policy = fault_policy
        self.restarts = RestartBook(fault_policy)
        self._slots = {}
        self._listeners = []
        self._stopped = False

    def add(self, kind, handle, start, restore=None):
        """Supervise the remote server ``handle`` of ``kind``.

        Parameters
        ----------
        kind : str
            A key of ``SERVER_TITLES``.
        handle : ray.actor.ActorHandle
            The running server (generation 0).
        start : callable
            ``start()`` -> the handle of a new server built with the same options; not
            waited for (the supervisor waits for it, within ``start_timeout_s``).
        restore : callable or None
            ``restore(client)`` (a ``ServerClient`` of the new server) puts back what the
            server keeps and returns words saying it, for the line ("replaced with the
            4,096 transitions saved at 20,000 env steps"); may raise ``ServerLost``.
            None: "replaced".
        """
        if kind not in SERVER_TITLES:
            raise ValueError(f"kind must be one of {list(SERVER_TITLES)}, got {kind!r}")
        self._slots[kind] = _Slot(kind, handle, start, restore)

    def listen(self, callback):
        """Call ``callback(kind, handle, generation)`` after every replacement."""
        self._listeners.append(callback)

    def __contains__(self, kind):
        return kind in self._slots

    def handle(self, kind):
        """The handle of the running server of ``kind``."""
        return self._slots[kind].handle

    def generation(self, kind):
        """The generation of the running server of ``kind`` (0 until it is first replaced)."""
        return self._slots[kind].generation

    def generations(self):
        """Generation of every supervised server, by kind."""
        return {kind: slot.generation for kind, slot in self._slots.items()}

    def pop_events(self):
        """The restart events (kind ``"server"``) recorded since the last call."""
        return self.restarts.pop_events()

    def recover(self, lost):
        """Replace the server that ``lost`` (a ``ServerLost``) reports dead, unless a newer
        generation already runs; returns the handle of the running server.

        The restart is counted against the server's limit (``WorkerFailure`` once it is
        reached), the delay waited, the dead actor killed, a new one started and what it
        keeps restored; then every listener gets it. A replacement that dies while being
        started counts as one more restart.

        Raises
        ------
        WorkerFailure
            The limit is reached, or the replacement could not be started.
        """
        slot = self._slots.get(lost.kind)
        if slot is None or self._stopped:
            # Not a supervised (remote) server, or the scheme is stopping: not replaced.
            raise lost
        if lost.generation < slot.generation:
            return slot.handle
        title = server_title(slot.kind)
        headline = f"{title} died ({lost.cause})"
        while True:
            restart = self.restarts.allow(slot.kind, headline)
            _kill(slot.handle)
            new, outcome = self._start(slot)
            if isinstance(outcome, ServerLost):
                slot.handle = new
                headline = f"{title} died again while being replaced ({outcome.cause})"
                continue
            slot.handle, slot.generation = new, slot.generation + 1
            for callback in self._listeners:
                callback(slot.kind, new, slot.generation)
            self.restarts.record("server", headline, restart, outcome)
            return new

    def _start(self, slot):
        """Start a new server of ``slot`` and restore it: ``(handle, words)``, or
        ``(handle, ServerLost)`` when it died meanwhile."""
        import ray
        from ray.exceptions import RayError
        from pytorchrl.scheme.base.ray_runtime import as_worker_error
        title = server_title(slot.kind)
        handle = slot.start()
        client = ServerClient(handle, remote=True, kind=slot.kind, generation=slot.generation + 1)
        ref = handle.process_info.remote()
        timeout = self.policy.start_timeout_s
        ready, _ = ray.wait([ref], timeout=timeout)
        if not ready:
            _kill(handle)
            drain([ref], timeout=5.0)
            raise WorkerFailure(f"{title} died; its replacement did not start within {timeout:g} s: not enough "
                                f"free resources in the Ray cluster") from None
        try:
            ray.get(ref)
            done = slot.restore(client) if slot.restore is not None else "replaced"
        except ServerLost as again:
            return handle, again
        except RayError as exc:
            text = getattr(exc, "error_msg", None) or str(exc)
            if worker_died(exc) and "creation task" not in text:
                return handle, client.lost(exc)
            _kill(handle)
            raise WorkerFailure(f"{title} died; its replacement failed: {as_worker_error(exc, title)}") from None
        return handle, done

    def stop(self):
        """Replace nothing any more (the scheme is stopping): ``recover`` raises the loss."""
        self._stopped = True
        self._listeners = []


def close_server(server):
    """End every wait of ``server`` (its ``stop``: in this process or a Ray actor); a server
    that is already gone is left alone."""
    try:
        ServerClient(server).call("stop")
    except Exception:  # noqa: BLE001 - a dead actor: nothing waits in it any more
        pass


def stop_server(server):
    """``close_server``, then end a remote server's process."""
    close_server(server)
    if is_remote(server):
        _kill(server)


def _kill(handle):
    """End a server actor that died or is given up (nothing happens if it is gone)."""
    import ray
    try:
        ray.kill(handle, no_restart=True)
    except Exception:  # noqa: BLE001 - an actor Ray already forgot needs no killing
        pass


__all__ = ["SERVER_TITLES", "ServerLost", "ServerClient", "ServerPath", "ServerProcess", "ServerSupervisor", "call_or_lost",
           "close_server", "is_remote", "raise_lost", "server_lost_of", "server_title", "stop_server"]
