"""Picklable factories: the only form in which components cross process boundaries; and the
parameters that components document (read by the configuration and by hot-swaps)."""

import inspect
import re

import numpy as np


class ComponentFactory:
    """A picklable callable that builds ``cls`` where it is called.

    Parameters
    ----------
    cls : type
        Class to instantiate. It must be importable by module path (plain pickle) or at
        least cloudpickle-able (Ray).
    **kwargs
        Keyword arguments bound now and passed to ``cls`` at build time, after the
        positional/keyword arguments given to the factory call itself.
    """

    def __init__(self, cls, **kwargs):
        self.cls = cls
        self.kwargs = kwargs

    def __call__(self, *args, **kwargs):
        return self.cls(*args, **{**self.kwargs, **kwargs})

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        return f"{self.cls.__name__}.create_factory({args})"


def accepted_kwargs(fn, candidates):
    """Return the subset of ``candidates`` (a dict) that ``fn`` names as parameters.

    A catch-all ``**kwargs`` does not count as naming them: such functions usually forward
    their keyword arguments to something that would reject these.

    Parameters
    ----------
    fn : callable
        Function whose signature is inspected.
    candidates : dict
        Keyword arguments that may be passed.
    """
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    named = {n for n, p in params.items() if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                         inspect.Parameter.KEYWORD_ONLY)}
    return {k: v for k, v in candidates.items() if k in named}


_PARAM_LINE = re.compile(r"^([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s+:\s+(\S.*)$")
# A full stop ends a sentence only before a capital letter ("e.g. 'lr'" does not).
_SENTENCE_END = re.compile(r"(?<=[\w)\]])\.\s+(?=[A-Z])")


def documented_parameters(obj):
    """Parameters documented in numpydoc style by ``obj`` (a class, with its bases, or a function).

    Parameters
    ----------
    obj : type or callable
        Where to read ``name : type`` lines and the description under each.

    Returns
    -------
    dict
        name -> (type text, first sentence of the description). A subclass's
        documentation of a name wins over its bases'.
    """
    sources = [k.__dict__.get("__doc__") for k in reversed(obj.__mro__)] if inspect.isclass(obj) \
        else [obj.__doc__]
    docs = {}
    for text in sources:
        lines = inspect.cleandoc(text or "").splitlines()
        for i, line in enumerate(lines):
            m = _PARAM_LINE.match(line)
            if not m:
                continue
            desc = []
            for follow in lines[i + 1:]:
                if not follow.startswith((" ", "\t")) or not follow.strip():
                    break
                desc.append(follow.strip())
            sentence = " ".join(desc).replace("``", "")
            sentence = _SENTENCE_END.split(sentence)[0].rstrip(".") + "." if sentence else ""
            for name in m.group(1).split(","):
                docs[name.strip()] = (m.group(2).strip(), sentence)
    return docs


def documented_kind(type_text):
    """The kind of value a documented type admits ("float or None" -> "number"): "bool",
    "int", "number", "str" or "dict", the first of these words it names; None when it names
    none of them.

    Parameters
    ----------
    type_text : str or None
        The type of a numpydoc parameter line (``documented_parameters``).
    """
    text = (type_text or "").lower()
    for word, kind in (("bool", "bool"), ("int", "int"), ("float", "number"), ("str", "str"), ("dict", "dict")):
        if re.search(rf"\b{word}\b", text):
            return kind
    return None


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
