"""Where the benchmarks live and write: the repository, the results folder (gitignored) and
the peers' interpreter (made by ``benchmarks/setup_peers.sh``)."""

import os

#: benchmarks/: the folder that holds ``harness``, ``workerlib`` and one folder per task.
BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(BENCH)
DEFAULT_PEERS_PYTHON = os.path.join(BENCH, ".venv-peers", "bin", "python")
RESULTS_DIR = os.path.join(BENCH, "results")
