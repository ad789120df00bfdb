"""A policy-loss add-on on Ray workers: PPO with AttractionKL trained by two remote gradient
workers (each collecting in its own process), or by this process's gradient worker with two
remote collectors, on the session's Ray instance. The add-on reaches the workers inside the
algorithm's factory (pickled with the behaviour's weights: the file is gone before they
start), each gradient worker sets it up on its device, and its term comes back among the
learner's metrics."""

import os

import pytest
import torch

from pytorchrl.agent.algorithms import PPO
from pytorchrl.agent.algorithms.policy_loss_addons import AttractionKL, SavedActorFactory
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme

from distributed_fixtures import SMALL, factories, free_cpus, resources_released, wait_gone


@pytest.mark.parametrize("num_col_workers, num_grad_workers", [(1, 2), (2, 1)],
                         ids=["remote-gradient-workers", "remote-collectors"])
def test_attraction_kl_trains_on_ray_workers(ray_for_module, tmp_path, num_col_workers, num_grad_workers):
    torch.manual_seed(0)
    parts = factories(vec_env_size=4, rollout_size=16)
    behaviour = parts["actor_factory"]("cpu")
    with torch.no_grad():
        behaviour.dist.linear.bias.copy_(torch.tensor([2.0, -2.0]))    # mostly pushes left
    path = tmp_path / "model.state_dict"
    torch.save(behaviour.state_dict(), path)
    addon = AttractionKL([SavedActorFactory(parts["actor_factory"], str(path))], [1.0], loss_term_weight=2.0)
    os.remove(path)
    parts["algo_factory"], _ = PPO.create_factory(num_epochs=2, mini_batch_size=32, policy_loss_addons=[addon])
    free = free_cpus()
    scheme = Scheme(**parts, num_col_workers=num_col_workers, num_grad_workers=num_grad_workers,
                    col_workers_resources=SMALL, grad_workers_resources=SMALL)
    learner = Learner(scheme, target_steps=4 * 64)
    pids = [pid for _, pid in scheme.process_info()]
    try:
        assert len(pids) == 2 and os.getpid() not in pids
        while not learner.done():
            learner.step()
        metrics = learner.get_metrics()
        assert metrics["Algorithm/AddOnLoss/AttractionKL"] > 0.1       # KL to a 0.98/0.02 policy, weighted 2
        remote = [params for per_worker in scheme.get_hyperparameters() for params in per_worker]
        assert all(type(p["algorithm"]["policy_loss_addons"][0]) is AttractionKL for p in remote)
    finally:
        learner.stop()
    assert wait_gone(pids) == []
    assert resources_released(free)
