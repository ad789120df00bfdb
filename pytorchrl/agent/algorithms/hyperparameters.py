"""An algorithm's hyperparameters: the names its factory accepts, their current values,
and their change while training (hot-swap), checked before anything changes.

``HyperparameterRegistry`` is the part of ``Algorithm`` that does this (the type check of a
hot-swap, ``check_parameter``, is shared with the storages: ``pytorchrl.agent.factory``).
"""

import inspect

from pytorchrl.agent.factory import ComponentFactory, check_parameter


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


__all__ = ["HyperparameterRegistry", "check_parameter"]
