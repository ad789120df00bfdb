"""Helpers of the queue data path tests (tests/unit/test_queues.py, tests/distributed/test_queues_ray.py,
tests/cli/test_cli_queues.py, tests/learning/test_learning_queues.py): the Learner of an
EXARL RMA workflow's example configuration, tagged rollouts and a queue configuration."""

import os

from pytorchrl.config import build_learner, load_config

from cli_helpers import EXARL
from cli_helpers import tiny


def rma_learner(name, *overrides, test_env=False):
    """The Learner of the workflow's example configuration, with ``overrides``."""
    return build_learner(load_config(os.path.join(EXARL, f"{name}.yaml"),
                                     ["learner.tensorboard=false", f"env.test_env={str(test_env).lower()}",
                                      *overrides]))


def rollout(tag):
    """A stand-in rollout the server only stores and hands back."""
    return {"tag": tag}


def tags(items):
    return [data["tag"] for data, *_ in items]


def queue_config(scheme, **learner):
    return tiny(scheme={"num_col_workers": 2, "col_workers_communication": "async", "data_path": "queues",
                        **scheme}, learner={"target_steps": 1000, **learner})
