"""Python's cyclic garbage collector paused while large modules are imported.

Importing torch leaves about 160,000 objects tracked by the collector, and torch.optim's
first optimizer imports ``torch._dynamo`` (about 1.2 CPU-s) on top of them. These imports
create no garbage in cycles: the collections they trigger on the way only walk what was
imported, again and again. Paused, the import of torch costs 0.10-0.14 CPU-s less and that
of ``torch._dynamo`` 0.3-0.4 less, or 0.1-0.2 less once torch's objects are frozen (below;
measured on this project's 2-core machine). Every Ray
worker and every command-line run pays these imports once, and a scheme starts several
processes, so the library pauses the collector around them.

``import pytorchrl`` then moves what exists at that moment, torch's objects first, to the
collector's permanent generation (``gc.freeze``): the collections of everything imported
and built later no longer walk them either. A process importing the worker modules after
that spends 0.08-0.09 CPU-s in collections instead of 0.17-0.20, a Ray worker 0.06 instead
of 0.09-0.13 (measured with ``gc.callbacks``). What is frozen stays for the life of the process: objects that exist
when the library is imported, and later become garbage in a cycle, are not reclaimed.
"""

import contextlib
import gc
import importlib

__all__ = ["gc_paused", "import_and_freeze"]


@contextlib.contextmanager
def gc_paused():
    """Context manager: the cyclic garbage collector is disabled inside and put back as it
    was found on the way out (an error inside included). Nested uses are safe."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def import_and_freeze(name):
    """Import module ``name`` with the collector paused (``gc_paused``), then freeze every
    object the collector tracks (``gc.freeze``): the module's, and whatever the process
    held before. Returns the module.

    Parameters
    ----------
    name : str
        Dotted name of the module ("torch").
    """
    with gc_paused():
        module = importlib.import_module(name)
    gc.freeze()
    return module
