"""Where a collector's rollout goes once collected (``CWorker.collect_data``).

Three paths, one class each, with one method, ``deliver(data, info, request)``:

- ``ToCaller``: the rollout is returned to whoever asked for it, as collected (in the
  learner's process: nothing is copied), or packed for the wire (``transport.pack``);
- ``ToReplayServer``: inserted into a replay server (the replay-server data path);
- ``ToQueueServer``: put into this collector's queue of a queue server (the queue path).

A worker builds its three deliveries once (``Deliveries``); each request picks one by the
server it names (the collector set sends the servers with every request: a server that died
is replaced by one of a later generation). ``HeldRollouts`` keeps the rollouts an actor is
not ready to send yet (an EXARL agent without data).
"""

from collections import namedtuple

import numpy as np
import torch

from pytorchrl.scheme.base.servers import call_or_lost
from pytorchrl.scheme.transport import pack, payload_bytes


#: Rollouts a collector keeps while its actor is not ready to send them (an EXARL agent whose
#: ``has_data`` stays false) before it says so.
MAX_HELD_ROLLOUTS = 1000


#: What a request says of its rollout's way: ``pack_data`` (``collect_data``'s: pack a rollout
#: returned to the caller; None: when compression is on), the ``server`` it goes to, that
#: server's ``generation`` (reported with a loss) and the node's ``proxy`` (or None).
Request = namedtuple("Request", ["pack_data", "server", "generation", "proxy"])


def _server_call(proxy, server, method, args, kind, generation):
    """``call_or_lost(server, method, args, ...)``, through the node's ``proxy`` when there is
    one (it passes the call on with those of the node's other collectors); a proxy that died
    is bypassed."""
    if proxy is not None:
        import ray
        from pytorchrl.scheme.base.faults import worker_died
        try:
            return ray.get(proxy.forward.remote(server, kind, generation, method, args))
        except Exception as exc:  # noqa: BLE001 - only a dead proxy is passed over
            if not worker_died(exc):
                raise
    return call_or_lost(server, method, args, kind, generation)


class ToCaller:
    """The rollout is returned: as collected, or packed when the request asks for it (or,
    with ``pack_data`` None, when compression is on), its sizes then in ``raw_bytes`` and
    ``sent_bytes``.

    Parameters
    ----------
    compress : bool or "auto"
        The worker's ``compress_data_to_send``.
    """

    def __init__(self, compress):
        self.compress = compress

    def deliver(self, data, info, request):
        """The rollout ``data`` to return (``info`` gets the sizes of a packed one)."""
        pack_data = request.pack_data
        if pack_data or (pack_data is None and self.compress):
            data = pack(data, self.compress)
            info.update(raw_bytes=data.raw_bytes, sent_bytes=data.sent_bytes)
        return data


class _ToServer:
    """A delivery to a data server: the rollout is sent, None is returned in its place, and
    ``info`` says how it went (``<kind>_outcome``, ``server_lost`` when the server died)."""

    kind = None

    def __init__(self, compress):
        self.compress = compress

    def payload(self, data):
        """What is sent of ``data``."""
        raise NotImplementedError

    def send(self, payload, info, request):
        """Send ``payload``; returns ``call_or_lost``'s ``(outcome, lost)``."""
        raise NotImplementedError

    def deliver(self, data, info, request):
        """Send the rollout ``data``; returns None (``info`` reports the send)."""
        payload = self.payload(data)
        outcome, lost = self.send(payload, info, request)
        info[f"{self.kind}_outcome"] = outcome or "lost"
        if payload is not data:
            info.update(raw_bytes=payload.raw_bytes, sent_bytes=payload.sent_bytes)
        else:
            info["raw_bytes"] = info["sent_bytes"] = payload_bytes(data)
        if lost is not None:
            info["server_lost"] = lost
        return None


class ToReplayServer(_ToServer):
    """The rollout is inserted into a replay server (compressed first when compression is on:
    the server unpacks it), waiting as long as its rate limiter says.

    Parameters
    ----------
    compress : bool or "auto"
        The worker's ``compress_data_to_send``.
    """

    kind = "replay"

    def payload(self, data):
        """``data``, packed when compression is on."""
        return pack(data, self.compress) if self.compress else data

    def send(self, payload, info, request):
        """Insert ``payload`` with the rollout's weight version."""
        return _server_call(request.proxy, request.server, "insert", (payload, info["version"]), self.kind,
                            request.generation)


class ToQueueServer(_ToServer):
    """The rollout is put into this collector's queue of a queue server, waiting while the
    queue is full (back-pressure). It is always packed (numpy arrays): the queue server then
    never unpickles a tensor, so its process does without torch (pytorchrl/gc_pause.py); the
    gradient worker unpacks what it pops.

    Parameters
    ----------
    compress : bool or "auto"
        The worker's ``compress_data_to_send``.
    collector : tuple
        ``(index_parent, index_worker)``: the queue of this collector.
    """

    kind = "queue"

    def __init__(self, compress, collector):
        super().__init__(compress)
        self.collector = collector

    def payload(self, data):
        """``data`` packed (compressed as ``compress`` says)."""
        return pack(data, self.compress)

    def send(self, payload, info, request):
        """Put ``payload`` with the rollout's weight version and episodes finished."""
        return _server_call(request.proxy, request.server, "put",
                            (self.collector, payload, info["version"], None, len(info["episodes"])), self.kind,
                            request.generation)


class Deliveries:
    """The deliveries of one collector, built once with it.

    Parameters
    ----------
    compress : bool or "auto"
        The worker's ``compress_data_to_send``.
    collector : tuple
        ``(index_parent, index_worker)`` of the worker.
    """

    def __init__(self, compress, collector):
        self.caller = ToCaller(compress)
        self.replay = ToReplayServer(compress)
        self.queue = ToQueueServer(compress, collector)

    def of(self, replay_server, queue_server):
        """``(delivery, server)`` of a request naming ``replay_server`` or ``queue_server``
        (both None: returned to the caller, server None)."""
        if replay_server is not None:
            return self.replay, replay_server
        if queue_server is not None:
            return self.queue, queue_server
        return self.caller, None


def _concatenate(rollouts):
    """One rollout of several (dicts of arrays or tensors of shape (M, ...), the storage's
    ``get_data``), joined along their first axis."""
    first = rollouts[0]
    out = {}
    for key, value in first.items():
        parts = [r[key] for r in rollouts]
        if isinstance(value, dict):
            out[key] = _concatenate(parts)
        elif isinstance(value, torch.Tensor):
            out[key] = torch.cat(parts)
        elif isinstance(value, np.ndarray):
            out[key] = np.concatenate(parts)
        else:
            out[key] = value
    return out


class HeldRollouts:
    """Rollouts kept until the actor is ready to send (``ready_to_send``, an EXARL agent's),
    then sent together as one."""

    def __init__(self):
        self.rollouts = []   # (data, info) of rollouts the actor was not ready to send

    def gate(self, ready, data, info, index_worker, update_every):
        """``(data, info)`` to send: the rollout with those kept before it, once the actor's
        ``ready(data)`` says so; until then ``(None, report)``, the rollout kept and the report
        saying so (``held`` True, no samples and no episodes: they are reported with the
        rollout that sends them, so counts and budgets see them once).

        Parameters
        ----------
        ready : callable
            The actor's ``ready_to_send``.
        data, info : dict
            The rollout and its information.
        index_worker : int
            The worker's index (in a held report).
        update_every : int
            Steps of a rollout (in the error of an actor that never gets ready).
        """
        if not ready(data):
            self.rollouts.append((data, info))
            if len(self.rollouts) > MAX_HELD_ROLLOUTS:
                raise ValueError(f"the actor's agent said it has no data to send (ExaAgent.has_data) after "
                                 f"{MAX_HELD_ROLLOUTS} rollouts of {update_every} steps: a collector sends "
                                 f"only when it has; make has_data true once the agent remembers experiences")
            report = dict(collected_samples=0, steps=0, col_time=info["col_time"], version=info["version"],
                          episodes=[], index_worker=index_worker, cut=False, held=True)
            if "TestReward" in info:
                report["TestReward"] = info["TestReward"]
            return None, report
        if not self.rollouts:
            return data, info
        held, self.rollouts = self.rollouts + [(data, info)], []
        merged = dict(info, collected_samples=sum(i["collected_samples"] for _, i in held),
                      steps=sum(i["steps"] for _, i in held), col_time=sum(i["col_time"] for _, i in held),
                      version=held[0][1]["version"], episodes=[e for _, i in held for e in i["episodes"]],
                      cut=any(i["cut"] for _, i in held))
        return _concatenate([d for d, _ in held]), merged
