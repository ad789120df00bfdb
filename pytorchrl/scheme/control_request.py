"""Control requests: one object per change asked of a running scheme.

A hot-swap (an algorithm or storage parameter, a replaced agent component) or a restored
collector state is one ``ControlRequest``. The Learner validates it once
(``learner_control.py``); then each level of the worker tree applies it to what it holds
and hands the same object down with one method, ``handle_control``: update worker ->
gradient workers -> collector set -> collection workers, Ray actors included (the request
is pickled with its value). Collector sets log the requests they sent, to replay them on
the replacements of dead workers.

The methods users call (``update_algorithm_parameter``, ``update_storage_parameter``,
``replace_agent_component``) are written once, in ``ControlEntries``, and inherited by
the Learner and every worker.
"""

from dataclasses import dataclass

#: What a request changes: an algorithm hyperparameter, a storage parameter, an agent
#: component (``name`` is the component, ``value`` its factory), or the collectors'
#: accumulated state (``value``; restored from a checkpoint).
TARGETS = ("algorithm", "storage", "component", "collector_state")


@dataclass(frozen=True)
class ControlRequest:
    """One change, delivered unchanged to every worker of a scheme.

    Parameters
    ----------
    target : str
        What it changes, one of ``TARGETS``.
    name : str or None
        The parameter (``target`` "algorithm" or "storage") or the component
        ("component") to change; None for "collector_state".
    value : object
        The new parameter value, the new component's factory, or the collector state.

    Raises
    ------
    ValueError
        ``target`` is not one of ``TARGETS``.
    """

    target: str
    name: object = None
    value: object = None

    def __post_init__(self):
        if self.target not in TARGETS:
            raise ValueError(f"unknown control target {self.target!r}; valid: {list(TARGETS)}")

    def supersedes(self, earlier):
        """Whether replaying this request makes replaying ``earlier`` useless: it sets the
        same parameter again, or restores a whole collector state again. A replaced
        component supersedes nothing (what was set before it may have been read by it)."""
        if self.target == "component" or earlier.target != self.target:
            return False
        return self.target == "collector_state" or earlier.name == self.name


class ControlEntries:
    """The hot-swap methods users call, each one ``ControlRequest`` handed to
    ``self.handle_control``, which the inheriting class defines: the Learner validates the
    request, sends it to every worker and logs it; a worker applies it to its own
    components and forwards it to the workers below it.
    """

    def update_algorithm_parameter(self, parameter_name, new_parameter_value):
        """Change an algorithm hyperparameter here and on every worker below, between
        updates; returns the value set.

        At the Learner the request is validated first: an unknown name raises ValueError
        naming it and listing the valid ones, a wrong type TypeError, an out-of-range or
        fixed value ValueError, and no worker is touched.

        Parameters
        ----------
        parameter_name : str
            Algorithm attribute name (one of the algorithm's ``hyperparameters``).
        new_parameter_value : object
            Its new value.
        """
        return self.handle_control(ControlRequest("algorithm", parameter_name, new_parameter_value))

    def update_storage_parameter(self, parameter_name, new_parameter_value):
        """Change a storage parameter here and on every worker below, between updates;
        returns the value set (validated at the Learner first, as
        ``update_algorithm_parameter``).

        Parameters
        ----------
        parameter_name : str
            Storage attribute name (one of the storage's ``hyperparameters``).
        new_parameter_value : object
            Its new value.
        """
        return self.handle_control(ControlRequest("storage", parameter_name, new_parameter_value))

    def replace_agent_component(self, component_name, new_component_factory):
        """Replace an agent component here and on every worker below.

        A new actor (or algorithm) starts a new weight version that every worker continues
        from; the data being collected for the current update is dropped (it may not fit
        the new component).

        Parameters
        ----------
        component_name : str
            "actor", "algo", "storage", "envs_train" or "envs_test" (ValueError otherwise).
        new_component_factory : callable
            Factory of the new component, with that component's factory signature.
        """
        return self.handle_control(ControlRequest("component", component_name, new_component_factory))


class WorkerControlEntries(ControlEntries):
    """The hot-swap methods of a worker, and the restore of the collectors' state, which
    travels down the worker tree the same way (the Learner restores it with a checkpoint)."""

    def set_collector_state(self, state):
        """Give every collection worker at or below this one ``state`` (what
        ``Algorithm.collector_state`` accumulated: RND's statistics), for a resumed run:
        before its first rollout it makes the algorithm skip its warm-up. Replacements of
        dead collectors get it too (it is logged with the hot-swaps).

        Parameters
        ----------
        state : dict or None
            What the collectors' ``get_collector_state`` returned.
        """
        return self.handle_control(ControlRequest("collector_state", value=state))


__all__ = ["TARGETS", "ControlRequest", "ControlEntries", "WorkerControlEntries"]
