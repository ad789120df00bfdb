"""Factories pickled with pickle and cloudpickle build a working scheme in a fresh interpreter,
as on a Ray worker (in this process: tests/unit/test_factories.py)."""

import os
import subprocess
import sys
import textwrap

from factories_helpers import PICKLERS, agent_factories


#: tests/, where the child imports the pickled factories' functions from (factories_helpers).
TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


CHILD = textwrap.dedent("""
    import pickle, sys
    import torch
    from pytorchrl.scheme import Scheme
    from pytorchrl.learner import Learner
    for path in sys.argv[1:]:
        with open(path, "rb") as fh:
            f = pickle.load(fh)
        scheme = Scheme(**f)
        learner = Learner(scheme, target_steps=32)
        while not learner.done():
            learner.step()
        assert learner.num_samples_collected == 32, learner.num_samples_collected
        learner.stop()
    assert "ray" not in sys.modules
    print("CHILD-OK")
""")


def test_factories_work_in_a_fresh_process(tmp_path):
    """What Ray does: unpickle the factories in another interpreter and build from them there
    (one child process for both picklers, to keep the test fast)."""
    paths = []
    for name, pickler in PICKLERS.items():
        paths.append(str(tmp_path / f"factories_{name}.pkl"))
        with open(paths[-1], "wb") as fh:
            pickler.dump(agent_factories(size=8), fh)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS_DIR, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", CHILD, *paths], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "CHILD-OK" in proc.stdout
