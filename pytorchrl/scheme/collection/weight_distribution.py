"""How the workers of a collector set get the acting weights: versions, the copy sent with
requests, the weight board (pulled weights) and the inference server's copy."""

from pytorchrl.scheme.transport import WeightBroadcast


class WeightDistribution:
    """The acting weights of one collector set and how its remote workers get them.

    The local collection worker acts with the learner's weights (``get_weights`` reads
    them); every change of them the set is told of is a new ``version``. Remote workers
    get them with each request (``push``: prepared once per version by a
    ``WeightBroadcast``), or pull them from a weight board that gets each version once
    (``pull``), or hold none and act through an inference server, which gets them when
    their version changes.

    Parameters
    ----------
    get_weights : callable
        ``get_weights()`` -> the current acting weights (tensors).
    stats : dict
        The set's statistics: ``weight_bytes`` counts the weight bytes its workers load
        (the broadcast adds ``weight_versions_sent`` and ``weight_puts``).
    inference_server : InferenceServer, ray.actor.ActorHandle or None
        Central inference: requests carry no weights, the server gets them.
    board : WeightBoard, ray.actor.ActorHandle or None
        Weights pulled (``weights="pull"``): each version is published to this board and
        requests carry none.

    Attributes
    ----------
    version : int
        Version of the local (learner's) weights.
    broadcast : WeightBroadcast
        The weights sent with requests.
    publisher : BoardPublisher or None
        The board's publisher (None without a board).
    """

    def __init__(self, get_weights, stats, inference_server=None, board=None):
        self.get_weights = get_weights
        self.stats = stats
        self.inference_server = inference_server
        self.version = 0
        self.broadcast = WeightBroadcast(get_weights, stats=stats)
        self.publisher = None
        self._server_client = None
        if inference_server is not None:
            from pytorchrl.scheme.base.servers import ServerClient
            self._server_client = ServerClient(inference_server, kind="inference")
        if board is not None:
            from pytorchrl.scheme.servers.weight_board import BoardPublisher
            self.publisher = BoardPublisher(board, get_weights)
        self._server_version = None  # version of the weights the inference server holds

    def invalidate(self):
        """Forget the prepared copies of the weights: the local actor changed without a new
        version (a restored checkpoint, a replaced actor)."""
        self.broadcast.invalidate()
        if self.publisher is not None:
            self.publisher.invalidate()
        self._server_version = None

    def current(self):
        """The current weights as sent with requests, prepared once per version (see
        ``WeightBroadcast``)."""
        return self.broadcast.current(self.version)

    def for_round(self):
        """The weights sent with every request of a synchronous round: the current ones, or
        None when the collectors act through an inference server (they hold no weights)."""
        return None if self.inference_server is not None else self.current()

    def count_sent(self):
        """Count the weight bytes of one request that carries the current weights."""
        self.stats["weight_bytes"] += self.broadcast.nbytes

    def for_request(self):
        """(weights, version) sent with one asynchronous request: the current ones (counted),
        or (None, None) when the workers pull them or act through an inference server."""
        if self.publisher is not None or self.inference_server is not None:
            return None, None
        self.count_sent()
        return self.current(), self.version

    def push_to_server(self):
        """Give the inference server the current weights if it holds another version
        (waited for: the rollouts asked for next act with them). Raises ``ServerLost``
        when the server died."""
        if self.inference_server is None or self._server_version == self.version:
            return
        client = self._server_client
        if not client.remote:
            weights = self.get_weights()
        else:
            weights = self.current()
            self.count_sent()
        client.call("set_weights", weights, self.version)
        self._server_version = self.version

    def set_inference_server(self, server, generation):
        """Give the weights to ``server`` (of ``generation``), the replacement of a dead
        inference server, from now on; it holds none yet (``push_to_server`` sends them)."""
        self.inference_server = server
        self._server_client.set(server, generation)
        self._server_version = None

    def publish(self):
        """Publish the current version to the weight board, once (nothing without a board)."""
        if self.publisher is not None:
            self.publisher.publish(self.version)

    def bring_up_to_date(self, worker):
        """Calls that give a replacement of a remote worker the current weights and version."""
        return [worker.set_weights.remote(self.current(), self.version)]

    def stop(self):
        """End the weight board (idempotent)."""
        if self.publisher is not None:
            from pytorchrl.scheme.servers.weight_board import stop_remote_board
            stop_remote_board(self.publisher.board)
            self.publisher = None


__all__ = ["WeightDistribution"]
