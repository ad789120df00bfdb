"""Picklable factories: the only form in which components cross process boundaries."""

import inspect


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
