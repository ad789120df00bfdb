"""Results files: ``results/<name>_<stamp>.jsonl`` (a ``meta`` record first, one record per
run, a ``summary`` record last), the report next to it as ``.md`` and the measured
uncommitted difference as ``.pytorchrl.diff``; reading them back, also several files or a
run stopped part-way.
"""

import datetime
import json
import os

from .paths import RESULTS_DIR
from .provenance import machine_meta, source_line


def new_results_file(name, out_dir=RESULTS_DIR):
    """The path of a new results file ``<out_dir>/<name>_<stamp>.jsonl`` (the folder made if
    missing; the file is not): name: the benchmark; out_dir: where results go."""
    os.makedirs(out_dir, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join(out_dir, f"{name}_{stamp}.jsonl")


def append_jsonl(path, record):
    """Append ``record`` (a dict; what JSON cannot hold as a string) as one line to the file ``path``."""
    with open(path, "a") as f:
        f.write(json.dumps(record, default=str) + "\n")


def open_results(name, args=None, source=None, extra=None):
    """Open the results of a benchmark that writes its records as they come:
    ``<args.out_dir>/<name>_<stamp>.jsonl`` with the run's ``meta`` record (``machine_meta``)
    as its first line. Returns (path of the .jsonl, meta).

    name: the benchmark; args: the script's arguments (``out_dir``: where results go, default
    ``RESULTS_DIR``); source: the measured code's facts (None: ``args.source`` if any);
    extra: the benchmark's own fields (settings)."""
    jsonl = new_results_file(name, getattr(args, "out_dir", RESULTS_DIR))
    meta = machine_meta(name, args, source=source, extra=extra)
    append_jsonl(jsonl, meta)
    return jsonl, meta


def write_markdown(jsonl, meta, table):
    """Write ``table`` (the report) next to the results file ``jsonl`` as .md, headed by the
    command, date, code and machine of the run's ``meta`` record (``header_lines``). Returns
    the path of the .md."""
    md = jsonl[:-len(".jsonl")] + ".md"
    with open(md, "w") as f:
        f.write(header_lines(meta) + "\n\n" + table + "\n")
    return md


def header_lines(meta):
    """The lines that head a report: the command, date and code of the run (``meta``: its meta
    record) and of each run ``read_results`` merged into it, then the machine."""
    def run_line(m):
        return f"`{m['command']}`  \n{m['date_utc']}; {source_line(m['source']) if m.get('source') else 'code: unknown'}"

    lines = (f"{run_line(meta)}  \n"
             f"machine: {meta.get('nproc')} CPUs ({meta.get('cpu_model')}), {meta.get('mem_total_GiB')} GiB, "
             f"Python {meta.get('python')}; load average at start {meta.get('loadavg_at_start')}")
    for other in meta.get("merged", ()):
        lines += f"  \nwith the runs of {run_line(other)}"
    return lines


def save_diff(jsonl, source):
    """Keep the measured uncommitted difference (``git diff HEAD -- pytorchrl``, new files
    included) next to the results file ``jsonl``: the ``_diff_bytes`` of ``source`` (the
    measured code's facts), or in a child of ``reexec_in_source`` the one its parent passed
    down. Returns the path written, or None when nothing differed."""
    diff = (source or {}).get("_diff_bytes")
    if not diff and os.environ.get("PYTORCHRL_BENCH_DIFF"):
        try:
            with open(os.environ["PYTORCHRL_BENCH_DIFF"], "rb") as f:
                diff = f.read()
        except OSError:
            diff = None
    if diff:
        path = jsonl[:-len(".jsonl")] + ".pytorchrl.diff"
        with open(path, "wb") as f:
            f.write(diff)
        return path
    return None


def start_results(name, args, extra, plan):
    """Open a run's results: ``<args.out_dir>/<name>_<stamp>.jsonl`` with the ``meta`` record
    (``machine_meta`` plus ``extra``, the benchmark's settings) as its first line, and the
    measured diff saved next to it. Prints ``plan`` (what will run), the code measured and
    where the results go. name: the benchmark; args: the script's arguments (``out_dir``,
    and ``source`` from ``prepared_source``). Returns (path of the .jsonl, meta)."""
    jsonl = new_results_file(name, args.out_dir)
    meta = machine_meta(name, args, extra=extra)
    append_jsonl(jsonl, meta)
    diff = save_diff(jsonl, args.source)
    print(f"{name}: {plan}; {source_line(args.source)}; raw results -> {os.path.relpath(jsonl)}"
          + (f" (measured diff: {os.path.relpath(diff)})" if diff else ""), flush=True)
    return jsonl, meta


def finish_results(jsonl, meta, records, summary, table):
    """Close a run's results: ``summary`` (a dict with string keys) as the last record of the
    file ``jsonl``, the report ``table`` written next to it (.md, headed from ``meta``) and
    printed. Returns the exit status: 1 if any of ``records`` (the run records) failed, else
    0."""
    append_jsonl(jsonl, {"record": "summary", **summary})
    write_markdown(jsonl, meta, table)
    print()
    print(table)
    return 1 if any("error" in r for r in records) else 0


def read_results(paths):
    """(meta record, run records) of a results file (.jsonl), also of a run stopped part-way.

    ``paths``: one path, or several (a list): their runs together, under the first file's
    meta record, which lists the others' under ``merged``. A run (task, system, seed) found
    in two files raises ValueError: it would be counted twice."""
    paths = [paths] if isinstance(paths, str) else list(paths)
    meta, records, seen = None, [], {}
    for path in paths:
        with open(path) as f:
            lines = [json.loads(ln) for ln in f if ln.strip()]
        file_meta = next(r for r in lines if r.get("record") == "meta")
        if meta is None:
            meta = dict(file_meta, merged=[])
        else:
            meta["merged"].append(file_meta)
        for rec in (r for r in lines if "record" not in r):
            key = (rec.get("task"), rec.get("system"), rec.get("seed"))
            if key in seen:
                raise ValueError(f"run {key} is in both {seen[key]} and {path}")
            seen[key] = path
            records.append(rec)
    return meta, records
