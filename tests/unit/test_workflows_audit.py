"""docs/workflows.md's audit of the seeds: every test a row names exists (a row whose test
was renamed or removed is found here, not by a reader)."""

import ast
import os
import re

from cli_helpers import REPO


def _tests_of(path):
    with open(os.path.join(REPO, path)) as f:
        tree = ast.parse(f.read())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_every_test_the_audit_names_exists():
    with open(os.path.join(REPO, "docs", "workflows.md")) as f:
        doc = f.read()
    audit = doc[doc.index("## The audit: every behaviour the seeds describe"):]
    named = re.findall(r"`(tests/[\w/]+\.py)::(test_\w+)`", audit)
    rows = [line for line in audit.splitlines() if line.startswith("| ") and not line.startswith("| seed says")
            and not line.startswith("| ---")]
    assert len(named) == len(rows) > 80, (len(named), len(rows))   # one test per row
    missing = [f"{path}::{name}" for path, name in named if name not in _tests_of(path)]
    assert not missing, missing
