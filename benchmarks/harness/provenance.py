"""The code under test and what a run's records say about it: which ``pytorchrl`` the workers
import (a snapshot of the working tree taken at the start of the run, HEAD exported with
``git archive``, or a given directory), its commit and uncommitted difference, the versions
of the libraries an interpreter imports, and the ``meta`` record of a run (command, date,
machine, code).

Stdlib only, so that every interpreter can import it.
"""

import datetime
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

from .machine import cpu_model, mem_total_gib
from .paths import REPO


def _git(*argv, **kw):
    """``git *argv`` in the repository, its output captured (``kw``: more of subprocess.run's)."""
    return subprocess.run(["git", *argv], cwd=REPO, capture_output=True, check=False, **kw)


def export_head(repo=REPO):
    """Copy HEAD's pytorchrl/ of the repository ``repo`` into a new temporary directory;
    return (directory, short hash of HEAD)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True,
                            check=True).stdout.strip()
    dest = tempfile.mkdtemp(prefix=f"pytorchrl-{commit}-")
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD", "pytorchrl"], cwd=repo,
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    return dest, commit


def tree_files(repo=REPO, sub="pytorchrl"):
    """Files of the folder ``sub`` in the working tree of ``repo``, relative to it: tracked and
    untracked, minus ignored ones."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "--", sub], cwd=repo,
                         capture_output=True, text=True, check=True).stdout
    return sorted(p for p in out.splitlines() if p and os.path.isfile(os.path.join(repo, p)))


def snapshot_tree(repo=REPO):
    """Copy the working tree's pytorchrl/ (uncommitted edits and new files included) into a
    new temporary directory, so that a run imports one consistent version of the code even
    while someone edits the tree. repo: the repository. Returns (directory, source facts: see
    ``source_facts``)."""
    dest = tempfile.mkdtemp(prefix="pytorchrl-tree-")
    for rel in tree_files(repo):
        target = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(repo, rel), target)
    return dest, source_facts(repo, dest)


def source_facts(repo=REPO, snapshot=None):
    """Commit of the repository ``repo``, whether its pytorchrl/ differs from it, and a hash
    of the difference.

    ``pytorchrl_diff_sha256`` hashes ``git diff HEAD -- pytorchrl`` plus the content of the
    untracked files in pytorchrl/ (of ``snapshot``, a copy made by ``snapshot_tree``, when
    given): two runs with the same hash measured the same code. ``_diff_bytes`` (not
    recorded: ``save_diff`` writes it next to the results) is that difference, new files
    included.
    """
    facts = {"git_commit": None, "git_dirty": None, "pytorchrl_diff_sha256": None, "untracked_files": []}
    try:
        facts["git_commit"] = _git("rev-parse", "--short", "HEAD", text=True).stdout.strip() or None
        diff = _git("diff", "HEAD", "--", "pytorchrl").stdout
        untracked = _git("ls-files", "-o", "--exclude-standard", "--", "pytorchrl", text=True).stdout.split()
    except OSError:
        return facts
    h = hashlib.sha256(diff)
    for rel in sorted(untracked):
        path = os.path.join(snapshot or repo, rel)
        if os.path.isfile(path):
            h.update(rel.encode())
            with open(path, "rb") as f:
                h.update(f.read())
    facts["git_dirty"] = bool(diff or untracked)
    facts["untracked_files"] = sorted(untracked)
    facts["pytorchrl_diff_sha256"] = h.hexdigest()[:16] if facts["git_dirty"] else None
    for rel in sorted(untracked):   # new files, as a diff against nothing (the index is left alone)
        path = os.path.join(snapshot or repo, rel)
        if os.path.isfile(path):
            diff += _git("diff", "--no-index", "--", "/dev/null", path).stdout
    facts["_diff_bytes"] = diff
    return facts


def add_source_args(ap):
    """Add the options choosing which pytorchrl is measured to the parser ``ap`` (default: a
    snapshot of the working tree)."""
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--clean-head", action="store_true",
                     help="measure the committed code: HEAD's pytorchrl/ exported (git archive) to a temporary "
                          "directory, first on the workers' PYTHONPATH")
    src.add_argument("--live-tree", action="store_true",
                     help="import pytorchrl from the working tree as installed (default: a snapshot of the "
                          "working tree copied at the start, so edits made during the run are not picked up)")
    src.add_argument("--ours-src", default=None,
                     help="directory holding the pytorchrl package to measure (put first on PYTHONPATH)")


class prepared_source:
    """Context manager: sets ``args.ours_src`` (None = installed package) and ``args.source``
    (facts about the measured code) from --clean-head/--live-tree/--ours-src; removes any
    temporary copy on exit (also on SIGTERM, which it turns into SystemExit).

    args: the script's parsed arguments (``add_source_args``'s options)."""

    def __init__(self, args):
        self.args = args
        self.tmp = None

    def __enter__(self):
        import signal
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
        a = self.args
        if getattr(a, "clean_head", False):
            self.tmp, commit = export_head(REPO)
            a.ours_src = self.tmp
            a.source = {"kind": "HEAD exported (git archive)", "git_commit": commit, "git_dirty": False,
                        "pytorchrl_diff_sha256": None}
        elif getattr(a, "ours_src", None):
            a.source = {"kind": f"directory {a.ours_src}", "git_commit": None, "git_dirty": None,
                        "pytorchrl_diff_sha256": None}
        elif getattr(a, "live_tree", False):
            a.ours_src = None
            a.source = {"kind": "working tree (live)", **source_facts(REPO)}
        else:
            self.tmp, facts = snapshot_tree(REPO)
            a.ours_src = self.tmp
            a.source = {"kind": "snapshot of the working tree at start", **facts}
        return a

    def __exit__(self, *exc):
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return False


def source_line(source):
    """One line naming the measured code ``source`` (``args.source``, or the ``source`` of a
    meta record), e.g. 'commit abc1234 + uncommitted changes (diff 0123...)'."""
    commit = source.get("git_commit") or "unknown commit"
    if source.get("git_dirty"):
        return (f"{source['kind']}: commit {commit} + uncommitted changes in pytorchrl/ "
                f"(diff sha256 {source.get('pytorchrl_diff_sha256')})")
    if source.get("git_dirty") is False:
        return f"{source['kind']}: commit {commit} (clean)"
    return f"{source['kind']}"


def source_from_env():
    """Source facts passed down by ``reexec_in_source`` (or those of the live tree)."""
    raw = os.environ.get("PYTORCHRL_BENCH_SOURCE")
    if raw:
        return json.loads(raw)
    return {"kind": "working tree (live)", **{k: v for k, v in source_facts(REPO).items() if not k.startswith("_")}}


def command_line():
    """The command that started this run (in a child of ``reexec_in_source``: the parent's)."""
    if os.environ.get("PYTORCHRL_BENCH_COMMAND"):
        return os.environ["PYTORCHRL_BENCH_COMMAND"]
    exe = sys.executable
    return " ".join([os.path.relpath(exe, REPO) if exe.startswith(REPO) else exe] + sys.argv)


def machine_meta(name, args=None, source=None, extra=None):
    """The ``meta`` record of a run: what, when, where, with which code and versions.

    name: the benchmark; args: the script's arguments, whose ``source`` (``prepared_source``)
    names the code unless ``source`` is given; extra: the benchmark's own fields (settings,
    versions), added last."""
    meta = {"record": "meta", "benchmark": name,
            "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": command_line(), "nproc": os.cpu_count(), "cpu_model": cpu_model(),
            "mem_total_GiB": mem_total_gib(), "platform": platform.platform(), "python": platform.python_version(),
            "loadavg_at_start": [round(x, 2) for x in os.getloadavg()]}
    src = source if source is not None else getattr(args, "source", None)
    if src:
        meta["source"] = {k: v for k, v in src.items() if not k.startswith("_")}
        meta["git_commit"] = src.get("git_commit")
        meta["git_dirty"] = src.get("git_dirty")
    if extra:
        meta.update(extra)
    return meta


def versions(python, modules, env=None):
    """{module: version} of ``modules`` (names) as imported by the interpreter ``python`` in
    the environment ``env`` (None: this one's); None for a module that does not import."""
    code = ("import importlib, json, sys\nout = {}\nfor m in sys.argv[1:]:\n    try:\n"
            "        out[m] = getattr(importlib.import_module(m), '__version__', '?')\n"
            "    except Exception:\n        out[m] = None\nprint(json.dumps(out))")
    r = subprocess.run([python, "-c", code, *modules], capture_output=True, text=True, env=env)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {m: None for m in modules}
