"""The accelerator layer: fast paths that reproduce a reference torch class, one way.

Every algorithm and actor is first a reference class written in torch with autograd: the
one definition users read and subclass. Some of them run much faster on small networks
through a fast path (a numpy program on the CPU, a fused torch loss, a captured CUDA
graph) that computes the same numbers. This package holds those fast paths and is
imported by the reference classes, never the other way round:

- generic kernels: array namespaces (``xp``), network forward and backward passes in
  numpy (``networks``), Adam (``adam``), two-thread lanes and BLAS limits (``threads``),
  the private torch operators we call, each with a public fallback (``private_torch``);
- per algorithm, only the loss: its value and its gradient with respect to the network
  outputs, written once over an array namespace (``losses``). The reference class calls
  the same function with torch (autograd differentiates the value), the numpy engine
  with numpy (the hand-written gradient is used), the fused torch loss with torch;
- the engines that assemble them (``on_policy``, ``off_policy``, ``cuda_graph``).

A reference class declares its fast paths with the ``accelerated`` decorator, naming the
methods each reproduces. When an instance's methods are exactly those (the same function
objects: a subclass or an instance that overrides one is detected, whatever its name), the
fast path is built by ``build``; otherwise it steps aside, says why once, and the
reference path runs. ``registry()`` lists every declared fast path: the parity test runs
each against its reference.
"""

import logging

from pytorchrl.agent.notices import say_once

#: Kinds of fast paths: how an actor acts, how an algorithm's update computes its gradients,
#: a fused loss inside the reference torch update, and the reference update itself replayed
#: as a captured CUDA graph (where no "update" fast path serves).
KINDS = ("acting", "update", "loss", "graph")


class Accelerator:
    """A fast path of one kind, declared by a reference class with ``accelerated``.

    Parameters
    ----------
    kind : str
        One of ``KINDS``.
    name : str
        Words for the messages (e.g. "numpy update").
    build : callable
        ``build(instance)`` -> ``(engine, None)``, or ``(None, reason)`` when the fast
        path cannot compute what the reference computes for this instance (another
        device, a network it has no program for, ...).
    reproduces : tuple of str
        Methods of the reference class whose results the fast path reproduces.
    actor_class : type or None
        For an algorithm's fast path: the actor class whose methods it reproduces too.
    actor_reproduces : tuple of str
        Those methods of ``actor_class`` (checked on the instance's ``actor``).
    fallback : str
        Words saying what runs instead (e.g. "updating in torch").
    routine : callable or None
        ``routine(instance)`` is true where the fast path not applying is the normal case
        (the CUDA graph update on a CPU): its reason is then said at info level, out of a
        default log, instead of as a warning.
    refuses : callable or None
        ``refuses(instance)`` -> why the fast path cannot compute what this instance's
        reference methods compute although none of them is overridden (a term the
        instance adds to its loss from its own state: the policy-loss add-ons), or None.
        Asked before ``build``.
    """

    def __init__(self, kind, name, build, reproduces, actor_class=None, actor_reproduces=(),
                 fallback="using the torch path", routine=None, refuses=None):
        if kind not in KINDS:
            raise ValueError(f"accelerator kind must be one of {KINDS}, got {kind!r}")
        self.kind = kind
        self.name = name
        self.build = build
        self.reproduces = tuple(reproduces)
        self.actor_class = actor_class
        self.actor_reproduces = tuple(actor_reproduces)
        self.fallback = fallback
        self.routine = routine
        self.refuses = refuses


def _function(attribute):
    """The plain function behind a method, classmethod or staticmethod as looked up."""
    return getattr(attribute, "__func__", attribute)


class Binding:
    """An ``Accelerator`` bound to the reference class that declared it, with the function
    objects of the methods it reproduces (taken when the class was defined).

    Parameters
    ----------
    reference : type
        The declaring class.
    accelerator : Accelerator
        The fast path.
    """

    def __init__(self, reference, accelerator):
        self.reference = reference
        self.accelerator = accelerator
        self.methods = {n: _function(getattr(reference, n)) for n in accelerator.reproduces}
        cls = accelerator.actor_class
        self.actor_methods = {n: _function(getattr(cls, n)) for n in accelerator.actor_reproduces}

    @property
    def kind(self):
        """The accelerator's kind."""
        return self.accelerator.kind

    @property
    def name(self):
        """``"<reference class> <accelerator name>"``, e.g. ``"PPO numpy update"``."""
        return f"{self.reference.__name__} {self.accelerator.name}"

    def mismatch(self, instance):
        """Why ``instance`` does not compute what the fast path reproduces, or None.

        A method looked up on the instance (and, for an algorithm, on its actor) must be
        the very function the reference class had: an override in a subclass or an
        attribute set on the instance makes the fast path step aside.

        Parameters
        ----------
        instance : object
            The algorithm or actor about to use the fast path.
        """
        for name, func in self.methods.items():
            if _function(getattr(instance, name, None)) is not func:
                return f"{name} overridden: the {self.accelerator.name} computes {self.reference.__name__}.{name}"
        if self.actor_methods:
            actor = getattr(instance, "actor", None)
            cls = self.accelerator.actor_class
            if not isinstance(actor, cls):
                return f"actor {type(actor).__name__} (the {self.accelerator.name} computes {cls.__name__}'s)"
            for name, func in self.actor_methods.items():
                if _function(getattr(actor, name, None)) is not func:
                    return f"{type(actor).__name__}.{name} overridden"
        return None


_REGISTRY = []


def accelerated(*accelerators):
    """Class decorator: the decorated reference class declares ``accelerators``.

    Subclasses inherit the declaration (and use the fast path while they override none of
    the reproduced methods); a subclass may declare its own, which then replaces the
    inherited one of the same kind.

    Parameters
    ----------
    *accelerators : Accelerator
        The fast paths, at most one per kind.
    """
    kinds = [a.kind for a in accelerators]
    if len(set(kinds)) != len(kinds):
        raise ValueError(f"one accelerator per kind, got kinds {kinds}")

    def decorate(cls):
        bindings = {a.kind: Binding(cls, a) for a in accelerators}
        cls._accelerators = bindings
        _REGISTRY.extend(bindings.values())
        return cls
    return decorate


def binding(instance, kind):
    """The ``Binding`` of kind ``kind`` nearest to ``type(instance)`` in its MRO, or None."""
    for cls in type(instance).__mro__:
        found = cls.__dict__.get("_accelerators", {}).get(kind)
        if found is not None:
            return found
    return None


def reason_not_applied(instance, kind):
    """Why the fast path of kind ``kind`` cannot serve ``instance`` (identity of the
    reproduced methods only), "no fast path declared", or None when it may."""
    bound = binding(instance, kind)
    if bound is None:
        return "no fast path declared"
    return bound.mismatch(instance)


def build(instance, kind):
    """The fast path of kind ``kind`` for ``instance``, or None.

    None without a word when no class of ``instance`` declares one; None, said once per
    class and reason, when one is declared but does not apply (a warning, or an info line
    where that is the accelerator's ``routine``).

    Parameters
    ----------
    instance : object
        An algorithm or an actor.
    kind : str
        One of ``KINDS``.
    """
    bound = binding(instance, kind)
    if bound is None:
        return None
    reason = bound.mismatch(instance)
    if reason is None and bound.accelerator.refuses is not None:
        reason = bound.accelerator.refuses(instance)
    engine = None
    if reason is None:
        engine, reason = bound.accelerator.build(instance)
    if engine is None:
        cls = type(instance).__name__
        accelerator = bound.accelerator
        routine = accelerator.routine is not None and accelerator.routine(instance)
        say_once((accelerator.name, cls, reason),
                 f"{cls}: {accelerator.name} not used ({reason}); {accelerator.fallback}",
                 logging.INFO if routine else logging.WARNING)
    return engine


def registry():
    """Every declared fast path (``Binding``), in declaration order. Only classes already
    imported have declared theirs: import ``pytorchrl.agent.algorithms`` and
    ``pytorchrl.agent.actors`` first for the library's own."""
    return list(_REGISTRY)


__all__ = ["Accelerator", "Binding", "KINDS", "accelerated", "binding", "build", "reason_not_applied",
           "registry"]
