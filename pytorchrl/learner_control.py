"""The Learner's control API: hot-swaps of hyperparameters and agent components.

A change is validated here first, so that a bad request touches no worker; it then goes
to every worker through the update worker (applied between updates, acknowledged) and is
logged in ``hot_swaps``.
"""

from pytorchrl.agent.algorithms.base import check_parameter


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

    def update_algorithm_parameter(self, parameter_name, new_parameter_value, env_step):
        """Change an algorithm hyperparameter on every worker (see
        ``Learner.update_algorithm_parameter``); ``env_step`` dates the log entry. Returns
        the value set."""
        self.check("algorithm", parameter_name, new_parameter_value, f"{self.algorithm().name} hyperparameter")
        value = self.update_worker.update_algorithm_parameter(parameter_name, new_parameter_value)
        self.hot_swaps.append((env_step, "algorithm", parameter_name, value))
        return value

    def update_storage_parameter(self, parameter_name, new_parameter_value, env_step):
        """Change a storage parameter on every worker (see ``Learner.update_storage_parameter``);
        ``env_step`` dates the log entry. Returns the value set."""
        self.check("storage", parameter_name, new_parameter_value, f"{type(self.storage()).__name__} parameter")
        value = self.update_worker.update_storage_parameter(parameter_name, new_parameter_value)
        self.hot_swaps.append((env_step, "storage", parameter_name, value))
        return value

    def replace_agent_component(self, component_name, new_component_factory, env_step):
        """Replace an agent component on every worker (see ``Learner.replace_agent_component``);
        ``env_step`` dates the log entry."""
        from pytorchrl.scheme.base.components import AGENT_COMPONENTS
        if component_name not in AGENT_COMPONENTS:
            raise ValueError(f"unknown agent component {component_name!r}; valid: {list(AGENT_COMPONENTS)}")
        self.update_worker.replace_agent_component(component_name, new_component_factory)
        self.hot_swaps.append((env_step, "component", component_name, repr(new_component_factory)))


__all__ = ["LearnerControl"]
