"""Shared fixtures of the test suite, and the one place where tests get their markers.

Nothing here imports Ray at module level: the agent-layer and in-process scheme tests must
run (and prove that they run) without it. Distributed tests ask for ``ray_session``.

Markers are never written by hand on a test: ``pytest_collection_modifyitems`` reads what
each test uses (its fixtures, and every function and class of tests/ that it calls, followed
down to what they import or call) and marks it:

* ``ray``: talks to Ray in this process (``ray_session`` or a fixture built on it, or it
  imports ``ray``), or starts a Ray cluster of its own;
* ``netns``: starts a two-node Ray cluster in network namespaces (needs root);
* ``subprocess``: runs the command line, a script or a Ray cluster in a child process;
* ``learning``: trains until a return threshold (its name says ``learns``, ``solves`` or
  ``improves_over_random``, or it uses a helper of learning_helpers.py).

A test with none of them is a unit test: ``python -m pytest -m "not (ray or subprocess or
learning)"`` runs those alone, in under two minutes. Reading the code cannot see a child
process or a Ray instance started deep inside the library, so two checks back it up at run
time: a test not marked ``ray`` fails if it imports Ray, and one marked neither ``ray`` nor
``subprocess`` fails if it starts a child process with ``subprocess``. Unit tests run first
(then subprocess, Ray and learning tests), so that the first check holds in a whole run too,
before any Ray test has imported it, and a broken unit shows in the first minutes.
"""

import inspect
import os
import re
import subprocess
import sys
import sysconfig
import types

import numpy as np
import pytest
import torch

from _util import make_actor

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)
STDLIB = os.path.abspath(sysconfig.get_paths()["stdlib"])

MARKERS = {
    "ray": "uses Ray in the test process or starts a Ray cluster (set by tests/conftest.py)",
    "netns": "two-node Ray cluster in network namespaces; needs root (set by tests/conftest.py)",
    "subprocess": "runs the command line or a script in a child process (set by tests/conftest.py)",
    "learning": "trains until a return threshold (set by tests/conftest.py)",
}

#: Run order of the groups: unit tests first, the longest (learning) last.
ORDER = ("subprocess", "ray", "learning")

#: Tests that each take most of a minute, run first within their group: on two workers (``-n 2``) the
#: longest test started last would leave the other worker idle while it finishes.
LONGEST_FIRST = ("test_soak_kills_any_process_and_reaches_its_target",
                 "test_recurrent_ddqn_solves_what_feed_forward_ddqn_cannot_on_masked_cartpole")

#: A learning test says so in its name (the repository's naming: what the test proves).
LEARNING_NAME = re.compile(r"_(learns|solves|improves_over_random)(_|$)")

#: Modules whose use marks a test.
MODULE_MARKERS = {"ray": "ray", "subprocess": "subprocess"}
#: Helpers of tests/ whose use marks a test (beyond what they themselves reach).
HELPER_MARKERS = {"NetnsCluster": ("netns", "ray", "subprocess"), "learning_helpers": ("learning",)}
#: Fixtures of this file whose use marks a test (the others mark nothing).
CONFTEST_FIXTURE_MARKERS = {"ray_session": ("ray",), "ray_for_module": ("ray",)}


# ---------------------------------------------------------------------- markers
def _in_tests(obj):
    """True for a module, function or class of a file under tests/."""
    module = obj if isinstance(obj, types.ModuleType) else sys.modules.get(getattr(obj, "__module__", None) or "")
    path = os.path.abspath(getattr(module, "__file__", None) or "/")
    return os.path.commonpath([path, TESTS]) == TESTS


def _names(code):
    """Global, attribute and imported names of a code object and of the code nested in it
    (lambdas, comprehensions, inner functions)."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _functions_of(obj):
    if isinstance(obj, type):
        for value in vars(obj).values():
            value = getattr(value, "__func__", getattr(value, "fget", value))
            if inspect.isfunction(value):
                yield value
    elif callable(obj):
        obj = inspect.unwrap(getattr(obj, "__func__", obj))
        if inspect.isfunction(obj):
            yield obj


def _markers_of(obj, seen):
    """Markers earned by what ``obj`` (a function or class) uses, followed through the
    functions and classes of tests/ it reaches."""
    found = set()
    for fn in _functions_of(obj):
        if fn in seen:
            continue
        seen.add(fn)
        names = _names(fn.__code__)
        # ``from cli_helpers import tiny`` inside a function: its names are not globals.
        imported = [sys.modules[n] for n in names if n in sys.modules and _in_tests(sys.modules[n])]
        for name in names:
            found.update(m for m in (MODULE_MARKERS.get(name),) if m)        # import ray / subprocess
            for target in [fn.__globals__.get(name)] + [getattr(m, name, None) for m in imported]:
                if target is None:
                    continue
                module = target.__name__ if isinstance(target, types.ModuleType) else getattr(target, "__module__", "")
                found.update(m for m in (MODULE_MARKERS.get((module or "").split(".")[0]),) if m)
                if _in_tests(target):
                    found.update(HELPER_MARKERS.get(name, ()))
                    found.update(HELPER_MARKERS.get(module, ()))
                    found |= _markers_of(target, seen)
    return found


def _item_markers(item, seen):
    found = set()
    if LEARNING_NAME.search(item.originalname):
        found.add("learning")
    found |= _markers_of(item.obj, seen)
    for name in item.fixturenames:
        for fixturedef in item._fixtureinfo.name2fixturedefs.get(name, ()):
            func = fixturedef.func
            if os.path.abspath(inspect.getfile(func)) == os.path.abspath(__file__):
                found.update(CONFTEST_FIXTURE_MARKERS.get(name, ()))
            elif _in_tests(func):
                found |= _markers_of(func, seen)
    return found


def pytest_configure(config):
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    if not hasattr(config, "workerinput"):      # once per run: not again in each xdist worker
        _compile_repository()
        _one_openmp_thread()


def _one_openmp_thread():
    """One OpenMP thread in every process the run starts (xdist workers, Ray actors, command
    lines), unless the caller set ``OMP_NUM_THREADS``: the suite runs one process per core
    and more, so a second thread per process only contends with the others, and OpenMP's
    start-up of one thread per core costs each torch import about 0.1 CPU-s (1.13 against
    1.03-1.07 CPU-s, measured). Set before xdist starts its workers, which inherit it."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")


#: Folders of this repository whose modules the suite's child processes import.
COMPILED = ("pytorchrl", "tests", "benchmarks")


def _compile_repository():
    """Write the bytecode of the repository's modules once, before any test starts a process.

    With PYTHONDONTWRITEBYTECODE set (as on this project's machines) Python never caches the
    bytecode of an editable install, so each of the suite's ~500 processes (every Ray actor,
    every command-line run) compiled the modules it imports again: about 0.25 CPU-s each,
    measured. Python still reads bytecode that exists, so compiling once here saves that;
    the timestamps in the files keep an edited module from running stale code."""
    if not sys.dont_write_bytecode:
        return                          # Python caches what it imports by itself
    import compileall
    for folder in COMPILED:
        for root, dirs, files in os.walk(os.path.join(REPO, folder)):
            # Not into hidden folders: benchmarks/.venv-peers holds the peers' installs.
            dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
            for name in files:
                if name.endswith(".py"):
                    compileall.compile_file(os.path.join(root, name), quiet=2)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if not isinstance(item, pytest.Function):
            continue
        stated = {m.name for m in item.iter_markers() if m.name in MARKERS}
        if stated:
            raise pytest.UsageError(f"{item.nodeid}: markers {sorted(stated)} are set by tests/conftest.py from "
                                    "what the test uses, not by hand")
        for name in sorted(_item_markers(item, set())):
            item.add_marker(name)

    def group(item):
        marked = {m.name for m in item.iter_markers()}
        return max((ORDER.index(m) + 1 for m in marked if m in ORDER), default=0)

    # Stable: file order within a group, but for the longest tests.
    items.sort(key=lambda item: (group(item), getattr(item, "originalname", "") not in LONGEST_FIRST))


# ------------------------------------------------------------ run-time checks
def _marked(item, name):
    return item.get_closest_marker(name) is not None


def _runs_python(args):
    """True for a child running Python (the command line, a script): what costs seconds of
    imports; a quick tool (git, ip) is no reason to leave the unit tests."""
    program = os.path.basename(str(args[0] if isinstance(args, (list, tuple)) else args).split()[0])
    return program.startswith("python") or program in ("ray", "pytorchrl")


def _started_by_this_repository():
    """True when the code that asked for a child process (the nearest caller outside the
    standard library) is this repository's: a third-party library's own probe at import
    (glfw runs ``python -c`` once) or helper (imageio's ffmpeg) is not a test's choice."""
    frame = sys._getframe(2)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not (path.startswith(STDLIB) and "site-packages" not in path):
            return os.path.commonpath([path, REPO]) == REPO and ".venv" not in path
        frame = frame.f_back
    return False


@pytest.fixture(autouse=True)
def _undeclared_ray_or_child_process(request, monkeypatch):
    """Fail a test that uses Ray or a child process without its marker: the markers decide
    what the quick command runs, and reading the code cannot see everything."""
    item = request.node
    had_ray = "ray" in sys.modules
    children = []
    if not (_marked(item, "ray") or _marked(item, "subprocess")):
        execute = subprocess.Popen._execute_child

        def recorded(self, args, *rest, **kwargs):
            if _runs_python(args) and _started_by_this_repository():
                children.append(args)
            return execute(self, args, *rest, **kwargs)

        monkeypatch.setattr(subprocess.Popen, "_execute_child", recorded)
    yield
    if not had_ray and not _marked(item, "ray"):
        assert "ray" not in sys.modules, (
            "this test imported Ray without the ray marker: make the use visible to tests/conftest.py "
            "(ask for ray_session, or call Ray from the test or a helper of tests/)")
    assert not children, (
        f"this test started child processes {children} without the subprocess marker: make the use visible "
        "to tests/conftest.py (call subprocess from the test or a helper of tests/)")


# ---------------------------------------------------------------------------- ray
@pytest.fixture(scope="session")
def ray_session():
    """A local Ray instance (2 CPUs, no dashboard) shared by the whole session.

    Started on first request only and shut down at the end of the session. If Ray was
    already initialised by someone else it is reused and left running.
    """
    import ray  # imported here so that tests not asking for Ray never import it

    started = False
    if not ray.is_initialized():
        # "local": a Ray instance of its own, never a cluster another run on this machine
        # left as the current one (RAY_ADDRESS or /tmp/ray), which num_cpus could not join.
        ray.init(address="local", num_cpus=2, include_dashboard=False)
        started = True
    yield ray
    if started and ray.is_initialized():
        _warn_of_actors_left(ray)
        ray.shutdown()


@pytest.fixture(scope="module")
def ray_for_module(ray_session, request):
    """The session's Ray instance (``ray_session``) for a test module whose functions or
    classes reach Ray workers: the workers cannot import tests/, so the helpers of
    tests/distributed_fixtures.py are sent to them by value, and so are the modules that the
    test module lists in ``RAY_BY_VALUE``: module names (``__name__`` for itself) or
    functions returning a module (imported only when Ray is)."""
    import importlib

    from distributed_fixtures import register_for_ray
    modules = []
    for entry in getattr(request.module, "RAY_BY_VALUE", ()):
        module = entry() if callable(entry) else importlib.import_module(entry)
        modules.append(module.__name__)
    register_for_ray(*modules)
    return ray_session


def _live_actors():
    """Ids and class names of the actors of this process's Ray instance not dead yet; None
    when this process has not started Ray (Ray is never imported here for a test that does
    not use it)."""
    if "ray" not in sys.modules:
        return None
    import ray
    if not ray.is_initialized():
        return None
    from ray._private.state import actors   # (the public state API needs the dashboard)
    return {aid: a["ActorClassName"] for aid, a in actors().items() if a["State"] != "DEAD"}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    item._actors_before_call = _live_actors()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Warn, naming the test, when actors it started are still alive once its fixtures are
    finalised (Ray is given 15 s to end them): a later test would find their CPUs taken."""
    yield
    before = getattr(item, "_actors_before_call", None)
    if before is None:
        return
    from distributed_fixtures import wait_until

    def left():
        return sorted(name for aid, name in (_live_actors() or {}).items() if aid not in before)
    if not wait_until(lambda: not left(), timeout=15.0, every=0.2):
        import warnings
        warnings.warn(f"{item.nodeid} left actors alive: {left()}")


def _warn_of_actors_left(ray):
    """Name the actors still holding CPUs once every test is done: each test checks what its
    own scheme gave back (``resources_released``), so a worker that outlived its test
    shows here."""
    import warnings
    from distributed_fixtures import resources_released
    if not resources_released(ray.cluster_resources().get("CPU", 0.0)):
        alive = sorted((_live_actors() or {}).values())
        warnings.warn(f"actors left alive by the session's tests, holding CPUs: {alive}")


# -------------------------------------------------------------------------- seeds
@pytest.fixture(autouse=True)
def _seed_torch():
    """Every test starts from the same torch and numpy seeds (reproducible failures)."""
    torch.manual_seed(0)
    np.random.seed(0)
    yield


# ------------------------------------------------------------------------- agents
@pytest.fixture
def actor_builder():
    """``actor_builder(obs_space, action_space, ...)`` -> a small CPU OnPolicyActor."""
    return make_actor


@pytest.fixture
def one_torch_thread():
    """Torch computes on one thread during the test, and on as many as before after it: the
    bfloat16 tests compare and time products whose speed depends on the thread count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def no_ray_import():
    """Assert that a test does not import Ray (the in-process scheme must not need it).

    Only checkable while no earlier test of the session has imported Ray: unit tests run
    before every Ray test (``pytest_collection_modifyitems``)."""
    had_ray = "ray" in sys.modules
    yield
    if not had_ray:
        assert "ray" not in sys.modules, "an in-process test imported ray"
