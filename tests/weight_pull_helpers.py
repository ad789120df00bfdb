"""Helpers of the pulled-weights tests (tests/unit/test_weight_pull.py,
tests/distributed/test_weight_pull_ray.py): a DDQN collector that pulls from a weight
board, weights shifted by a constant, and the comparison of a collector's acting weights."""

import torch

from pytorchrl.scheme.collection.c_worker import CWorker

from distributed_fixtures import ddqn_factories as shared_ddqn_factories


ROLLOUT = 10


def ddqn_factories():
    return shared_ddqn_factories(update_every=ROLLOUT, start_steps=0, replay=1000, test_every=10 ** 9)


def make_collector(board, every):
    torch.manual_seed(0)
    return CWorker(1, 0, **ddqn_factories(), weight_board=board, weight_pull_every=every)


def shifted(weights, by):
    """Other network weights of the same shapes (a later version, as after training); the
    scalar buffers (epsilon, warm-up) are kept."""
    return {k: v + by if v.dim() > 0 else v for k, v in weights.items()}


def acting_weights_equal(worker, weights):
    return all(torch.equal(worker.get_weights()[k], v) for k, v in weights.items())
