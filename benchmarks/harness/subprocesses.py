"""Running workers in subprocesses: their environments (which ``pytorchrl`` ours import, the
thread counts), one worker run whose last JSON line is its record (with the machine's load
during it), the checks and warm-up before a side-by-side run, and the options and ``main``
shared by the side-by-side orchestrators.
"""

import json
import os
import subprocess
import sys
import time

from .machine import LoadProbe, add_load_args, maybe_wait_idle
from .paths import DEFAULT_PEERS_PYTHON, REPO, RESULTS_DIR
from .provenance import add_source_args, command_line, prepared_source, versions
from .report import fmt_share
from .results import append_jsonl


def add_side_by_side_args(ap, timeout):
    """Add to the parser ``ap`` the options of the orchestrators that run our workers and the
    peers' side by side (offpolicy/run.py, atari_ppo/run.py): the two interpreters, the
    warm-up, the timeout of one run (``timeout`` seconds by default), the output directory,
    ``--report``, the code measured (``add_source_args``) and the machine's load
    (``add_load_args``)."""
    ap.add_argument("--ours-python", default=sys.executable, help="interpreter with pytorchrl (default: this one)")
    ap.add_argument("--peers-python", default=DEFAULT_PEERS_PYTHON,
                    help="interpreter of the peers' workers (default: benchmarks/.venv-peers, see setup_peers.sh)")
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed short run of each interpreter")
    ap.add_argument("--timeout", type=float, default=timeout, help="seconds allowed to one worker run")
    ap.add_argument("--out-dir", default=RESULTS_DIR)
    ap.add_argument("--report", metavar="JSONL", nargs="+", default=None,
                    help="run nothing: print the report of a results file of this script (also of a run that "
                         "was stopped part-way: the runs recorded so far); several files: their runs together "
                         "(e.g. a run of more seeds with --first-seed), each run counted once")
    add_source_args(ap)
    add_load_args(ap)


def ours_env(args, threads=1, extra_path=()):
    """Environment of a worker that imports our pytorchrl (PYTHONPATH: the measured code,
    ``args.ours_src``, first, then the folders ``extra_path``); OMP/MKL threads and our
    workers' torch threads (``PYTORCHRL_TORCH_THREADS``) set to ``threads`` (0: the library's
    default, one torch thread per worker). Ray workers started by that process inherit it."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("PYTORCHRL_TORCH_THREADS", None)
    path = ([args.ours_src] if getattr(args, "ours_src", None) else []) + list(extra_path)
    if path:
        env["PYTHONPATH"] = os.pathsep.join(path)
    if threads and threads > 0:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = env["PYTORCHRL_TORCH_THREADS"] = str(threads)
    return env


def peers_env(threads=1):
    """Environment of a peer worker: no PYTHONPATH (only its own venv), OMP/MKL threads set to
    ``threads`` (0: the library's default)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if threads and threads > 0:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def reexec_in_source(args, argv, flag="--_in-source"):
    """Run this script again in a child process that imports the measured pytorchrl
    (``args.ours_src`` first on PYTHONPATH, Ray workers included, ``args.torch_threads``
    threads), with the arguments ``argv`` and ``flag`` so the child does not prepare the
    source again (``args.source`` is passed down: ``provenance.source_from_env``). Returns
    the child's exit status.

    Used by the benchmarks that measure in-process (one Ray instance for all configurations):
    the parent prepares the code (snapshot/HEAD), the child imports it.
    """
    env = ours_env(args, threads=args.torch_threads)
    env["PYTORCHRL_BENCH_SOURCE"] = json.dumps({k: v for k, v in args.source.items() if not k.startswith("_")})
    env["PYTORCHRL_BENCH_COMMAND"] = command_line()
    diff = args.source.get("_diff_bytes")
    if diff and getattr(args, "ours_src", None):
        path = os.path.join(args.ours_src, "measured-pytorchrl.diff")   # removed with the snapshot
        with open(path, "wb") as f:
            f.write(diff)
        env["PYTORCHRL_BENCH_DIFF"] = path
    cmd = [sys.executable, os.path.abspath(sys.argv[0]), flag, *argv]
    # In the measured tree: Ray puts its driver's working directory ahead of PYTHONPATH on
    # its workers' sys.path, so from the repository they would import the live pytorchrl.
    cwd = getattr(args, "ours_src", None) or REPO
    return subprocess.run(cmd, env=env, cwd=cwd).returncode


def run_json_worker(cmd, env, timeout, args=None, tag=None):
    """Run a worker subprocess whose last stdout line starting with '{' is its JSON record.

    Adds what the orchestrator measured: ``launch_time`` (time.time() just before the
    process was started), ``process_wall_s``, the CPU load of other processes during the
    run (``LoadProbe``: the worker's whole process tree, Ray's processes included, is
    ours), and --wait-idle's fields. On failure returns ``{"error": ..., "stderr_tail": ...}``.

    cmd: the worker's command line; env: its environment; timeout: seconds it may run;
    args: the script's arguments (--wait-idle before the run; None: no wait); tag: fields
    that start the record (e.g. the task), also on failure.
    """
    idle = maybe_wait_idle(args) if args is not None else {}
    rec = dict(tag or {})
    with LoadProbe() as probe:
        launch = time.time()
        t = time.perf_counter()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            return {**rec, "error": f"timed out after {timeout:.0f} s", "stderr_tail": (err or out)[-2000:]}
        wall = time.perf_counter() - t
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        return {**rec, "error": f"exit {r.returncode}", "stderr_tail": (r.stderr or r.stdout).strip()[-3000:]}
    rec.update(json.loads(lines[-1]))
    rec.update(launch_time=launch, process_wall_s=round(wall, 3), command=" ".join(cmd), **probe.report(), **idle)
    return rec


def worker_failure(rec):
    """How a progress line tells a failed worker run (``rec``: its record): the error, then the
    worker's last output."""
    return f"FAILED ({rec['error']})\n{rec.get('stderr_tail', '')}"


def run_in_turn(jsonl, runs, run_one, label, progress, failure=worker_failure):
    """Run the runs one after the other; returns their records, each appended to the results
    file ``jsonl`` as soon as it is in.

    runs: what to run, in the order to run it (interleaved systems, e.g. (seed, system)
    pairs); run_one(run): the run's record (e.g. ``run_json_worker``'s), with ``error`` when
    it failed. One line is printed per run: ``label(run)`` (padded to line the runs up;
    stripped on a failed run's line) then ``failure(record)`` for a failed run, else
    ``progress(record)`` and the CPU share other processes used during the run.
    """
    records = []
    for run in runs:
        rec = run_one(run)
        records.append(rec)
        append_jsonl(jsonl, rec)
        if "error" in rec:
            print(f"  {label(run).rstrip()}: {failure(rec)}", flush=True)
        else:
            print(f"  {label(run)}: {progress(rec)}  "
                  f"(others used {fmt_share(rec.get('others_cpu_share_during'))} of the CPU)", flush=True)
    return records


def check_interpreters(name, systems, python_of, env_of, is_ours, ours_imports="pytorchrl, gymnasium",
                       peers_imports="stable_baselines3, gymnasium"):
    """Exit early, with the fix, when an interpreter cannot run its worker.

    name: the benchmark (the messages' first word); systems: the systems to run;
    python_of(system), env_of(system): a system's interpreter and environment; is_ours(system):
    whether it is one of ours. ours_imports, peers_imports: what each side's workers import.
    """
    for system in systems:
        ours = is_ours(system)
        py = python_of(system)
        hint = " (pip install -e . in that env)" if ours else " (run benchmarks/setup_peers.sh first)"
        if not os.path.exists(py):
            sys.exit(f"{name}: interpreter for {system} not found: {py}{hint}")
        r = subprocess.run([py, "-c", f"import {ours_imports if ours else peers_imports}"], capture_output=True,
                           text=True, env=env_of(system))
        if r.returncode != 0:
            sys.exit(f"{name}: {py} cannot run the {system} worker{hint}:\n{r.stderr.strip()[-800:]}")


def report_or_run(args, report_from, run):
    """The ``main`` of a side-by-side orchestrator: with ``--report JSONL`` (``args.report``)
    print ``report_from(JSONL)``, else ``run(args)`` on the measured code
    (``prepared_source``). Returns the exit status."""
    if getattr(args, "report", None):
        print(report_from(args.report))
        return 0
    with prepared_source(args):
        return run(args)


def side_versions(args, systems, is_ours, env_of, modules):
    """``meta`` fields naming both sides' versions: ``ours_version``/``ours_versions`` (our
    interpreter: pytorchrl and ``modules``) and ``sb3_version``/``sb3_versions`` (the peers'
    interpreter: stable_baselines3 and ``modules``), for the sides among ``systems``.
    args: the script's arguments (``--ours-python``, ``--peers-python``); is_ours(system):
    whether a system is one of ours; env_of(system): the environment of a system's worker."""
    extra = {}
    if any(is_ours(s) for s in systems):
        v = versions(args.ours_python, ["pytorchrl", *modules], env_of("ours"))
        extra.update(ours_version=v["pytorchrl"], ours_versions=v)
    if "sb3" in systems:
        v = versions(args.peers_python, ["stable_baselines3", *modules], env_of("sb3"))
        extra.update(sb3_version=v["stable_baselines3"], sb3_versions=v)
    return extra


def warm_up(name, systems, is_ours, run_one):
    """Untimed: one short run of each interpreter among ``systems`` (ours once), which brings
    its libraries into the file cache; exits with the worker's error if one fails.
    name: the benchmark (the message's first word); is_ours(system): whether a system is one
    of ours; run_one(system): the short run's record."""
    for system in dict.fromkeys("ours" if is_ours(s) else s for s in systems):
        r = run_one(system)
        if "error" in r:
            sys.exit(f"{name}: warm-up of {system} failed: {r['error']}\n{r.get('stderr_tail', '')}")
