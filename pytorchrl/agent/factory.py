"""Picklable factories: the only form in which components cross process boundaries; and the
parameters that components document (read by the configuration and by hot-swaps)."""

import inspect
import re


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
