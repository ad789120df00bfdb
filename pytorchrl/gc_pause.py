"""Python's cyclic garbage collector paused while large modules are imported.

Importing torch leaves about 160,000 objects tracked by the collector, and torch.optim's
first optimizer imports ``torch._dynamo`` (about 1.2 CPU-s) on top of them. These imports
create no garbage in cycles: the collections they trigger on the way only walk what was
imported, again and again. Paused, the import of torch costs 0.10-0.14 CPU-s less and that
of ``torch._dynamo`` 0.3-0.4 less, or 0.1-0.2 less once torch's objects are frozen (below;
measured on this project's 2-core machine). Every Ray
worker and every command-line run pays these imports once, and a scheme starts several
processes, so the library pauses the collector around them.

Once torch is imported, what exists at that moment, torch's objects first, moves to the
collector's permanent generation (``gc.freeze``): the collections of everything imported
and built later no longer walk them either. A process importing the worker modules after
that spends 0.08-0.09 CPU-s in collections instead of 0.17-0.20, a Ray worker 0.06 instead
of 0.09-0.13 (measured with ``gc.callbacks``). What is frozen stays for the life of the process: objects that exist
when torch is imported, and later become garbage in a cycle, are not reclaimed.

``import pytorchrl`` does not import torch itself: it installs ``freeze_torch_on_import``,
so that whichever module of the process imports torch first does so paused and frozen.
A process that never needs torch (the queue server, the weight board: data servers of
numpy arrays) then never pays its import: a queue server's process starts and answers in
about 0.5 CPU-s and 100 MB instead of 1.5 CPU-s and 285 MB (benchmarks/server_startup).
"""

import contextlib
import gc
import importlib
import importlib.abc
import importlib.util
import sys

__all__ = ["gc_paused", "import_and_freeze", "freeze_torch_on_import"]


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


class _FreezeAfterImport(importlib.abc.MetaPathFinder):
    """The first time module ``name`` is imported, its spec is the one the rest of
    ``sys.meta_path`` finds, with a loader that runs the module's code paused and then
    freezes (as ``import_and_freeze`` does); it then leaves ``sys.meta_path``."""

    def __init__(self, name):
        self.name = name

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        self.remove()
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _PausedLoader(spec.loader)
        return spec

    def remove(self):
        if self in sys.meta_path:
            sys.meta_path.remove(self)


class _PausedLoader(importlib.abc.Loader):
    """Runs ``loader``'s module code with the collector paused, then freezes; the module
    keeps ``loader`` as its own."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = self.loader
        module.__spec__.loader = self.loader
        with gc_paused():
            self.loader.exec_module(module)
        gc.freeze()


def freeze_torch_on_import():
    """Have torch imported paused and frozen (``import_and_freeze``) by whatever imports it
    first in this process; at once if it is already imported. Safe to call again."""
    if "torch" in sys.modules:
        gc.freeze()
        return
    if not any(isinstance(f, _FreezeAfterImport) and f.name == "torch" for f in sys.meta_path):
        sys.meta_path.insert(0, _FreezeAfterImport("torch"))
