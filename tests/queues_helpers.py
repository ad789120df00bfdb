"""Helpers of the queue data path tests (tests/distributed/test_queues.py,
tests/learning/test_learning_queues.py): the Learner of an EXARL RMA workflow's example
configuration."""

import os

from pytorchrl.config import build_learner, load_config

from cli_helpers import EXARL


def rma_learner(name, *overrides, test_env=False):
    """The Learner of the workflow's example configuration, with ``overrides``."""
    return build_learner(load_config(os.path.join(EXARL, f"{name}.yaml"),
                                     ["learner.tensorboard=false", f"env.test_env={str(test_env).lower()}",
                                      *overrides]))
