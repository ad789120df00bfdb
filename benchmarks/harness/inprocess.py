"""Benchmarks that measure in-process: several configurations in ONE process sharing one
local Ray instance, repeated and interleaved (scaling_latency, straggler, compression_images,
cnn_update, soak; replay_server and seed_inference measure a series the same way).

Such a script runs in two steps: the parent prepares the measured code (a snapshot of the
working tree by default, see ``provenance.prepared_source``) and runs itself again in a child
process that imports it (``main``). Ray is started here with ``ray.init(num_cpus=<machine's
CPUs>)`` (``OwnedRay``), and a scheme joins an initialised Ray instead of starting its own.
"""

import argparse
import json
import os
import sys

from .machine import add_load_args, maybe_wait_idle, others_share
from .paths import RESULTS_DIR
from .provenance import add_source_args, prepared_source, source_from_env
from .subprocesses import reexec_in_source, run_in_turn

IN_SOURCE_FLAG = "--_in-source"


def base_parser(description):
    """The parser of an in-process benchmark (``description``: its ``--help`` text), with the
    options they all take: passes, --quick, seed, threads, output folder, the code measured
    (``add_source_args``), the machine's load (``add_load_args``) and the hidden flag of the
    child (``IN_SOURCE_FLAG``)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--repeats", type=int, default=3, help="passes over all configurations (interleaved; default 3)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 pass, few rounds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--torch-threads", type=int, default=1, help="OMP_NUM_THREADS (default 1)")
    ap.add_argument("--out-dir", default=RESULTS_DIR)
    ap.add_argument(IN_SOURCE_FLAG, dest="in_source", action="store_true", help=argparse.SUPPRESS)
    add_source_args(ap)
    add_load_args(ap)
    return ap


def main(parse_args, run, argv=None):
    """Parent: prepare the measured code and run the script again in a child importing it.
    Child (``--_in-source``): ``run(args)``. Returns the exit status.

    parse_args(argv): the script's arguments (``base_parser``'s options); run(args): the
    measurements; argv: the command line (None: ``sys.argv[1:]``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.in_source:
        args.source = source_from_env()
        return run(args)
    with prepared_source(args):
        child_argv = [a for a in argv if a not in ("--clean-head", "--live-tree")]
        if "--ours-src" in child_argv:   # the child gets the code through PYTHONPATH
            i = child_argv.index("--ours-src")
            del child_argv[i:i + 2]
        return reexec_in_source(args, child_argv, IN_SOURCE_FLAG)


class OwnedRay:
    """Context manager: a local Ray instance for the benchmark (or the one already running,
    e.g. a test session's, which is then left running), with ``num_cpus`` CPUs (default: the
    machine's); ``workerlib.envs`` reaches its workers by value."""

    def __init__(self, num_cpus=None):
        self.num_cpus = num_cpus or os.cpu_count()
        self.started = False

    def __enter__(self):
        import ray
        if not ray.is_initialized():
            # address="local": a new instance even if another user's cluster on this machine
            # is recorded in /tmp/ray/ray_current_cluster (a plain ray.init() would join it).
            ray.init(address="local", num_cpus=self.num_cpus, include_dashboard=False, configure_logging=False,
                     log_to_driver=True)
            self.started = True
        from workerlib import envs   # the benchmarks' environments reach Ray's workers by value
        envs.register_with_ray()
        return ray

    def __exit__(self, *exc):
        if self.started:
            import ray
            ray.shutdown()
        return False


def interleaved(configs, repeats):
    """(repeat, config) in the order they run: every pass of the ``repeats`` covers every one
    of ``configs``; odd passes run in reverse so that slow drift of the machine does not
    favour one end."""
    for r in range(repeats):
        for cfg in (configs if r % 2 == 0 else list(reversed(configs))):
            yield r, cfg


def measure_passes(jsonl, configs, repeats, measure, error_fields, label, progress):
    """Measure every configuration ``repeats`` times, interleaved; returns the records, each
    with its ``pass`` and appended to the results file ``jsonl`` as soon as it is in.

    configs: the configurations, in the order of the first pass. measure(cfg): the record of
    one run; an exception is a result too (a layout that fails): the run's record is then
    ``error_fields(cfg)`` (the fields that name the configuration) with the ``error``, and the
    passes go on. One line is printed per run: ``label(cfg)`` (padded to line the runs up;
    stripped on a failed run's line) then ``FAILED`` and the error, or ``progress(record)``
    and the CPU share other processes used during the run.
    """
    def run_one(run):
        rep, cfg = run
        try:
            rec = measure(cfg)
        except Exception as exc:  # a failing layout is a result: record it and go on
            rec = dict(error_fields(cfg), error=f"{type(exc).__name__}: {exc}"[:2000])
        rec["pass"] = rep
        return rec

    return run_in_turn(jsonl, interleaved(configs, repeats), run_one,
                       label=lambda run: f"pass {run[0]} {label(run[1])}", progress=progress,
                       failure=lambda rec: f"FAILED {rec['error']}")


def torch_versions():
    """Versions of what this process imports (pytorchrl and where from, torch and its thread
    count, ray, gymnasium), for a run's ``meta`` record."""
    import gymnasium
    import ray
    import torch
    import pytorchrl
    return {"pytorchrl": pytorchrl.__version__, "torch": torch.__version__, "ray": ray.__version__,
            "gymnasium": gymnasium.__version__, "torch_threads": torch.get_num_threads(),
            "pytorchrl_path": os.path.dirname(pytorchrl.__file__)}


def add_series_args(ap):
    """Add to the parser ``ap`` the options ``run_series_on_local_ray`` reads: ``--json`` and
    the machine's load (``add_load_args``)."""
    ap.add_argument("--json", action="store_true", help="print one JSON record per configuration too")
    add_load_args(ap)


def run_series_on_local_ray(args, values, measure, render):
    """Measure each value in turn on one local Ray instance (``OwnedRay`` of 2 CPUs, started
    here unless one is running) and print the rendered table; returns the records.

    Parameters
    ----------
    args : argparse.Namespace
        The script's arguments (``add_series_args``'s options: ``json``, also print each
        record as a JSON line when it is measured; --wait-idle).
    values : iterable
        What is varied between runs (one record each).
    measure : callable
        ``measure(value, args) -> dict``: one record.
    render : callable
        ``render(records, load_share) -> str``: the table, told the share of the CPU other
        processes used just before the runs.
    """
    maybe_wait_idle(args)
    share = others_share(window=2.0)
    records = []
    with OwnedRay(num_cpus=2):     # a Ray instance of its own, never another run's cluster
        for value in values:
            r = measure(value, args)
            records.append(r)
            if getattr(args, "json", False):
                print(json.dumps(r), flush=True)
    print(render(records, share))
    return records
