"""The Learner counts every transition collected by an off-policy scheme in one process (the
distributed layouts: tests/distributed/test_off_policy_layouts.py)."""

import torch

from pytorchrl.agent.algorithms import DDQN
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme

from off_policy_layouts_helpers import factories, run


def test_learner_counts_every_transition_collected():
    """In-process: the learner's step count is the number of transitions collected
    (the warm-up needs several collection rounds before the first update)."""
    torch.manual_seed(0)
    scheme = Scheme(**factories("DDQN"))
    learner = Learner(scheme, target_steps=600)
    try:
        run(learner)
        storage = scheme.update_worker.local_worker.storage
        assert learner.num_samples_collected == storage.num_inserted
    finally:
        learner.stop()
