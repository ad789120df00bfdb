"""The Learner's control API: hot-swaps of hyperparameters and agent components.

A change is validated here first, so that a bad request touches no worker; it then goes
to every worker through the update worker (applied between updates, acknowledged) and is
logged in ``hot_swaps``.
"""

from dataclasses import replace

from pytorchrl.agent.factory import check_parameter
from pytorchrl.scheme.base.components import check_component_name


class LearnerControl:
    """Validates, sends and logs the changes asked of a running scheme.

    Parameters
    ----------
    update_worker : UWorker
        The scheme's update worker: it delivers each change to every worker; its local
        gradient worker's algorithm and storage are the reference the requests are
        checked against.

    Attributes
    ----------
    hot_swaps : list of tuple
        (env step, kind, name, value) of every change applied; kind is "algorithm",
        "storage" or "component".
    """

    def __init__(self, update_worker):
        self.update_worker = update_worker
        self.hot_swaps = []

    def algorithm(self):
        """The local gradient worker's algorithm."""
        return self.update_worker.local_worker.algo

    def storage(self):
        """The local gradient worker's storage."""
        return self.update_worker.local_worker.storage

    def check(self, target, name, value, what):
        """Raise ValueError/TypeError unless ``name`` is a parameter of the algorithm
        (``target`` "algorithm") or of the storage (else) that accepts ``value`` (type and,
        for a change, range and fixed parameters: the component's ``check_update``); ``what``
        names the parameter in the message (e.g. "scheduled algorithm parameter"). Returns
        the value converted to the parameter's type."""
        component = self.algorithm() if target == "algorithm" else self.storage()
        value = check_parameter(component.hyperparameters, name, value, what, owner=component)
        return component.check_update(name, value)

    def validate(self, request):
        """Check ``request`` (a ``ControlRequest``) against the local gradient worker's
        components before it travels: the parameter's name, type, range and fixedness
        (ValueError naming the parameter and listing the valid ones, or TypeError), or the
        component's name. Returns the request with its value converted to the parameter's
        type; the workers apply it as it is."""
        if request.target in ("algorithm", "storage"):
            what = (f"{self.algorithm().name} hyperparameter" if request.target == "algorithm"
                    else f"{type(self.storage()).__name__} parameter")
            return replace(request, value=self.check(request.target, request.name, request.value, what))
        if request.target == "component":
            check_component_name(request.name)
            return request
        raise ValueError(f"{request.target!r} is not a hot-swap: a collector state is restored with a checkpoint")

    def submit(self, request, env_step):
        """Validate ``request`` (see ``validate``), have the update worker deliver it to every
        worker between updates, and log it; ``env_step`` dates the log entry. Returns what
        the update worker returned: the value set, for a parameter."""
        request = self.validate(request)
        result = self.update_worker.handle_control(request)
        logged = repr(request.value) if request.target == "component" else result
        self.hot_swaps.append((env_step, request.target, request.name, logged))
        return result


__all__ = ["LearnerControl"]
