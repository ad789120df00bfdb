"""The folders of tests/ match the markers that tests/conftest.py gives each test from what it
uses: tests/unit holds no test that uses Ray, starts a child process or trains to a return
threshold (``python -m pytest tests/unit`` is the quick run of the components), every test of
tests/distributed uses Ray, and the tests that train to a threshold are all in
tests/learning, which holds nothing else. tests/cli holds the command line's tests, run in
this process or as a child.

The markers are read from a collection of the whole of tests/ in this process (a child
process would make this a ``subprocess`` test): the same code that marks the tests for a run
marks them here, so a test whose use changes is caught in the folder it is in."""

import os
import sys

import pytest

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TESTS)

#: Folder of tests/: the markers every test there has, and those none has.
RULES = {
    "unit": ((), ("ray", "subprocess", "learning")),
    "distributed": (("ray",), ("learning",)),
    "learning": (("learning",), ()),
    "cli": ((), ("learning",)),
}


class _MarkerRecorder:
    """A pytest plugin that records the markers of every test a collection finds."""

    def __init__(self):
        self.markers = {}

    def pytest_collection_finish(self, session):
        for item in session.items:
            self.markers[item.nodeid] = {mark.name for mark in item.iter_markers()}


@pytest.fixture(scope="module")
def markers_by_test():
    """{node id relative to the repository: set of marker names} of every test of tests/."""
    recorder = _MarkerRecorder()
    path = list(sys.path)
    try:
        status = pytest.main(["--collect-only", "-qq", "-p", "no:cacheprovider", "--rootdir", REPO,
                              "-c", os.path.join(REPO, "pytest.ini"), TESTS], plugins=[recorder])
    finally:
        sys.path[:] = path      # the collection puts each test folder on it
    assert status == pytest.ExitCode.OK, f"collecting tests/ failed ({status!r}): see the output above"
    assert recorder.markers
    return recorder.markers


def test_every_test_is_in_a_folder_of_its_kind(markers_by_test):
    misplaced = []
    for nodeid, marked in sorted(markers_by_test.items()):
        parts = nodeid.split("/")
        folder = parts[1] if parts[0] == "tests" and len(parts) > 2 else None
        if folder not in RULES:
            misplaced.append(f"{nodeid}: not in one of tests/{{{','.join(RULES)}}}/")
            continue
        required, forbidden = RULES[folder]
        wrong = sorted(set(forbidden) & marked) + [f"no {m}" for m in required if m not in marked]
        if wrong:
            misplaced.append(f"{nodeid}: {', '.join(wrong)}")
    assert not misplaced, ("tests in a folder not of their kind (tests/unit: none of ray, subprocess, learning; "
                           "tests/distributed: ray; tests/learning: learning, and every learning test):\n"
                           + "\n".join(misplaced))
