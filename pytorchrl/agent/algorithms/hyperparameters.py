"""An algorithm's hyperparameters: the names its factory accepts, their current values,
and their change while training (hot-swap), checked before anything changes.

``HyperparameterRegistry`` is the part of ``Algorithm`` that does this; ``check_parameter``
is the type check every hot-swappable component shares (storages, the learner's control).
"""

import inspect

import numpy as np

from pytorchrl.agent.factory import ComponentFactory, documented_kind, documented_parameters


class HyperparameterRegistry:
    """Hyperparameters as plain attributes, named by the constructor's keyword arguments,
    and their hot-swap (``update_algorithm_parameter``).

    A class declares what a hot-swap may not change (``fixed_hyperparameters``), what must
    hold of the values (``check_hyperparameters``) and what follows every change
    (``hyperparameter_effects``: methods run once the value is set, e.g. writing a new
    learning rate into the optimizers). Its instances need ``name`` (for the messages).
    """

    #: Hyperparameters fixed at construction: a hot-swap may only repeat their value.
    fixed_hyperparameters = ()
    #: Names of the methods (no arguments) called, in order, after every accepted
    #: ``update_algorithm_parameter``: what depends on the hyperparameters beyond reading
    #: them (optimizer settings, DDQN's exploration rate held by the actor).
    hyperparameter_effects = ()

    @classmethod
    def hyperparameter_names(cls):
        """Names accepted by ``create_factory`` (the constructor's keyword arguments)."""
        # Read once per class: a schedule checks every hot swap against these names, and
        # inspect.signature per check cost ~4% of PPO CartPole's training time.
        names = cls.__dict__.get("_hyperparameter_names")
        if names is None:
            params = inspect.signature(cls.__init__).parameters
            names = tuple(n for n in params if n not in ("self", "device", "actor", "envs"))
            cls._hyperparameter_names = names
        return list(names)

    @classmethod
    def create_factory(cls, **hyperparameters):
        """Return ``(factory, name)``: a picklable ``factory(device, actor, envs)`` and the algorithm name.

        Every keyword argument is a hyperparameter of the algorithm (see the class
        docstring); an unknown name raises ValueError listing the valid ones.
        """
        valid = cls.hyperparameter_names()
        unknown = [k for k in hyperparameters if k not in valid]
        if unknown:
            raise ValueError(f"unknown {cls.name} hyperparameter(s) {unknown}; valid: {valid}")
        return ComponentFactory(cls, **hyperparameters), cls.name

    @property
    def hyperparameters(self):
        """Dict of the current value of every hyperparameter."""
        return {n: getattr(self, n) for n in self.hyperparameter_names()}

    def check_update(self, parameter_name, new_parameter_value):
        """What ``update_algorithm_parameter(parameter_name, new_parameter_value)`` would set
        (the value converted to the parameter's type), or the ValueError/TypeError it would
        raise: name, type, range and fixed hyperparameters. Nothing changes.

        Parameters
        ----------
        parameter_name : str
            One of ``self.hyperparameters``.
        new_parameter_value : object
            The value asked for.
        """
        value = check_parameter(self.hyperparameters, parameter_name, new_parameter_value,
                                f"{self.name} hyperparameter", owner=self)
        old = getattr(self, parameter_name)
        if parameter_name in self.fixed_hyperparameters:
            if value != old:
                raise ValueError(f"{self.name} hyperparameter {parameter_name!r} is fixed once the "
                                 f"algorithm is built (it is {old!r})")
            return value
        # The ranges are checked on the algorithm as it would be, then every hyperparameter
        # held as an attribute is put back (one set through a property, A2C's ``lr``, may
        # change several).
        names = set(self.hyperparameter_names())
        saved = {n: v for n, v in self.__dict__.items() if n in names}
        setattr(self, parameter_name, value)
        try:
            self.check_hyperparameters()
        finally:
            self.__dict__.update(saved)
        return value

    def update_algorithm_parameter(self, parameter_name, new_parameter_value):
        """Set hyperparameter ``parameter_name`` to ``new_parameter_value`` (refused, with
        nothing changed, as ``check_update`` says), then run the ``hyperparameter_effects``
        (also when a fixed hyperparameter was given its own value again).

        Parameters
        ----------
        parameter_name : str
            One of ``self.hyperparameters``; anything else raises ValueError listing them.
        new_parameter_value : object
            New value; numbers must stay numbers, booleans booleans.
        """
        value = self.check_update(parameter_name, new_parameter_value)
        if parameter_name not in self.fixed_hyperparameters:
            setattr(self, parameter_name, value)
        for effect in self.hyperparameter_effects:
            getattr(self, effect)()

    def check_hyperparameters(self):
        """Raise ValueError/TypeError if a hyperparameter holds a value the algorithm cannot use.

        Called by the constructor and by every hot-swap, so that a change refused at
        construction is refused while training too.
        """


def check_parameter(current, name, value, what, owner=None):
    """Validate a hot-swap of ``name`` to ``value`` against the dict ``current``.

    Returns the value converted to the parameter's type (1 -> 1.0 for a float parameter).
    Raises ValueError naming the valid names for an unknown name, and TypeError for a value
    of the wrong kind (a string for a number, 2.5 for an integer, a number for a boolean).
    A parameter whose current value is None takes the kind its owner documents ("int or
    None": an integer, 1.0 refused; "float or None": a number), or None again.

    Parameters
    ----------
    current : dict
        Current values of the parameters that may change.
    name : str
        Name of the parameter to change.
    value : object
        Requested value.
    what : str
        Words naming the kind of parameter, for the messages.
    owner : object, type or None
        The component (or its class) whose docstring documents the parameters (read only
        for a parameter that is None now; None: such a parameter accepts anything).
    """
    if name not in current:
        raise ValueError(f"unknown {what} {name!r}; valid: {sorted(current)}")
    old = current[name]
    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if old is None:
        return _check_documented(owner, name, value, what, number)
    if isinstance(old, bool):
        if isinstance(value, bool):
            return value
    elif isinstance(old, int):
        if number and float(value).is_integer():
            return int(value)
    elif isinstance(old, float):
        if number:
            return float(value)
    elif isinstance(value, type(old)):
        return value
    raise TypeError(f"{what} {name!r} expects {type(old).__name__}, got {value!r}")


def _check_documented(owner, name, value, what, number):
    """``check_parameter`` of a parameter that is None now: ``value`` must be None or of
    the kind ``owner`` documents for ``name`` (anything when it documents none)."""
    if value is None or owner is None:
        return value
    cls = owner if isinstance(owner, type) else type(owner)
    type_text = documented_parameters(cls).get(name, ("", ""))[0]
    kind = documented_kind(type_text)
    if kind is None:
        return value
    if kind == "int" and number and isinstance(value, (int, np.integer)):
        return int(value)
    if kind == "number" and number:
        return float(value)
    if (kind, type(value)) in (("bool", bool), ("str", str), ("dict", dict)):
        return value
    raise TypeError(f"{what} {name!r} expects {type_text} (it is None now), got {value!r}")


__all__ = ["HyperparameterRegistry", "check_parameter"]
