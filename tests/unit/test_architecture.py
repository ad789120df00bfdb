"""The shape of the package (DESIGN.md sections 2 and 6): no import circles, dependencies
pointing one way (``cli/config -> learner -> scheme -> agent``), and an accelerator layer
that imports no algorithm and no actor class.

The import graph is read from the sources (module-level and function-level imports). An
import of ``a.b.c`` from outside package ``a.b`` also runs ``a/b/__init__.py``, so it
counts as an import of ``a.b`` too: a package whose ``__init__`` imports modules that
import back from outside is a circle Python only survives by import order.
"""

import ast
import os

import pytorchrl

ROOT = os.path.dirname(os.path.abspath(pytorchrl.__file__))


def _modules():
    mods = {}
    base = os.path.dirname(ROOT)
    for folder, _, files in os.walk(ROOT):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                module = os.path.relpath(path, base)[:-3].replace(os.sep, ".")
                mods[module[:-len(".__init__")] if module.endswith(".__init__") else module] = path
    return mods


def _inside(module, package):
    return module == package or module.startswith(package + ".")


def import_graph():
    """Dict module -> set of the library's modules it imports (see the module docstring)."""
    mods = _modules()

    def resolve(name):
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in mods.items():
        package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.Import):
                targets.update(filter(None, (resolve(a.name) for a in node.names)))
            elif isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level:
                    parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                    source = ".".join(parts + ([source] if source else []))
                for alias in node.names:
                    full = f"{source}.{alias.name}"
                    target = full if full in mods else resolve(source)
                    if target:
                        targets.add(target)
        edges = set()
        for target in targets:
            edges.add(target)
            parent = target.rpartition(".")[0]
            while parent:
                if parent in mods and not _inside(module, parent):
                    edges.add(parent)
                parent = parent.rpartition(".")[0]
        edges.discard(module)
        graph[module] = edges
    return graph


def circles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_circles():
    assert circles(import_graph()) == []


def test_the_checker_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]


#: Layers, lowest first: a module imports its own layer's modules and lower ones only.
LAYERS = [
    ("pytorchrl", "pytorchrl.checkpoint", "pytorchrl.schedules", "pytorchrl.gc_pause"),
    ("pytorchrl.agent", "pytorchrl.envs"),
    ("pytorchrl.scheme",),
    ("pytorchrl.learner", "pytorchrl.learner_metrics", "pytorchrl.learner_checkpoint", "pytorchrl.learner_control"),
    ("pytorchrl.config", "pytorchrl.tools", "pytorchrl.utils"),
    # Population-based training drives training jobs (tools.session) like the command line.
    ("pytorchrl.pbt", "pytorchrl.tune"),
    ("pytorchrl.cli", "pytorchrl.cli_help"),
]


def _layer(module):
    best = None
    for rank, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if _inside(module, prefix) and (best is None or len(prefix) > len(best[1])):
                best = (rank, prefix)
    return best[0]


def test_dependencies_point_one_way():
    graph = import_graph()
    # A new top-level module is placed in a layer on purpose, not by default.
    assert [m for m in graph if _layer(m) == 0 and m not in LAYERS[0]] == []
    upward = [(m, t) for m, targets in graph.items() for t in targets if _layer(t) > _layer(m)]
    assert upward == []


def test_the_configuration_imports_nothing_that_runs_jobs():
    """The configuration is read by the tools, population-based training, Ray Tune and the
    command line, never the other way: it may import learner, scheme and agent only (the
    layering alone would let it import ``tools``, its neighbour)."""
    graph = import_graph()
    above = ("pytorchrl.tools", "pytorchrl.pbt", "pytorchrl.tune", "pytorchrl.cli")
    assert "pytorchrl.config.validate" in graph
    upward = sorted((m, t) for m, targets in graph.items() if _inside(m, "pytorchrl.config")
                    for t in targets if any(_inside(t, a) for a in above))
    assert upward == []


def test_the_accelerator_imports_no_algorithm_and_no_actor_class():
    # The losses are the numeric kernels' formulas: they obey the same rule.
    kernels = ("pytorchrl.agent.accel", "pytorchrl.agent.losses")
    allowed = kernels + ("pytorchrl.agent.notices", "pytorchrl.agent.actors.feature_extractors",
                         "pytorchrl.agent.actors.distributions")
    graph = import_graph()
    accel = {m: t for m, t in graph.items() if any(_inside(m, k) for k in kernels)}
    assert "pytorchrl.agent.accel.on_policy" in accel and "pytorchrl.agent.accel.off_policy" in accel
    outside = {(m, t) for m, targets in accel.items() for t in targets
               if t not in ("pytorchrl", "pytorchrl.agent", "pytorchrl.agent.actors")
               and not any(_inside(t, a) for a in allowed)}
    assert outside == set()
    # The actors package may be passed through only because its __init__ loads no actor class.
    assert graph["pytorchrl.agent.actors"] == set()


#: Lines a module of the package may have: a longer one holds several roles, to be split by role.
MAX_MODULE_LINES = 700


def test_no_module_is_longer_than_the_limit():
    long = {}
    for path in _modules().values():
        with open(path) as f:
            lines = sum(1 for _ in f)
        if lines > MAX_MODULE_LINES:
            long[os.path.relpath(path, ROOT)] = lines
    assert long == {}


# ------------------------------------------------------ docs/architecture.md stays true
DOCS = os.path.join(os.path.dirname(ROOT), "docs", "architecture.md")
EXAMPLES = os.path.join(os.path.dirname(ROOT), "examples", "configs")


def _blocks(marker):
    """The code blocks of docs/architecture.md that follow ``<!-- marker: name -->``:
    dict name -> list of blocks (each a list of lines)."""
    lines = open(DOCS).read().splitlines()
    found = {}
    for i, line in enumerate(lines):
        if line.startswith(f"<!-- {marker}: "):
            name = line[len(f"<!-- {marker}: "):-len(" -->")]
            j, blocks = i + 1, []
            while j < len(lines) and lines[j].startswith("```"):
                end = lines.index("```", j + 1)
                blocks.append(lines[j + 1:end])
                j = end + 1
            found[name] = blocks
    return found


def _files_of_a_collecting_step(config_name):
    import sys

    from pytorchrl.config import build_learner, load_config
    config = load_config(os.path.join(EXAMPLES, config_name), ["env.monitor=false", "learner.target_steps=10000000"])
    learner = build_learner(config)
    order = []

    def tracer(frame, event, arg):
        name = frame.f_code.co_filename
        if name.startswith(ROOT):
            rel = os.path.relpath(name, ROOT)
            if rel not in order:
                order.append(rel)

    try:
        for _ in range(3):
            learner.step()
        for _ in range(1000):
            order.clear()
            sys.settrace(tracer)
            try:
                infos = learner.step()
            finally:
                sys.settrace(None)
            if any("col_rounds" in info for info in infos):
                return order
    finally:
        learner.stop()
    raise AssertionError("no step collected")


def test_the_files_of_one_ppo_and_one_sac_step_are_those_documented():
    traces = _blocks("trace")
    assert set(traces) == {"ppo_cartpole.yaml", "sac_pendulum.yaml"}
    for config_name, (documented,) in traces.items():
        assert _files_of_a_collecting_step(config_name) == documented, config_name


def test_the_worked_example_is_the_code():
    for path, blocks in _blocks("worked example").items():
        source = open(os.path.join(ROOT, path)).read()
        assert blocks
        for block in blocks:
            assert "\n".join(block) in source
