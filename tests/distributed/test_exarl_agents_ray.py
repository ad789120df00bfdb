"""An agent written only against EXARL's ``ExaAgent`` (tests/exarl_helpers.py) trains with
several learners on Ray: the central update of averaged weight changes with the RMA queues
(an ``ExaData`` pool of the user's) and the decentralized all-reduce."""

import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.exarl import ExaAlgorithm
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme

from exarl_helpers import NewestFirst, TorchDQN, exa_factories, exa_layout, make_exa_env

#: Sent to Ray workers by value (tests/conftest.py's ray_for_module): the agent, pool and environment of exarl_helpers.
RAY_BY_VALUE = ("exarl_helpers",)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("preset", ["exarl-ml-rma-queue", "exarl-multi-learner-async"])
def test_an_exa_agent_trains_with_several_learners(ray_for_module, preset):
    """Two learners (EXARL's multi-learner workflows: a central update of the averaged weight
    changes, or their all-reduce), each with its own agent: every agent trains, and all
    hold the same weights, moved from where they started. The RMA queues' memory pool is an
    ExaData subclass of the user's."""
    layout = exa_layout(preset)
    if preset == "exarl-ml-rma-queue":
        layout["queues"] = dict(layout["queues"], kind=NewestFirst)
    else:
        # (Each learner's own collector, in its process: the all-reduce is what is shown.)
        layout.update(num_col_workers=1, col_workers_communication=prl.SYNC)
        del layout["col_workers_resources"]
    f = exa_factories()
    start = [w.copy() for w in TorchDQN(make_exa_env(), seed=0).get_weights()]
    f["algo_factory"], _ = ExaAlgorithm.create_factory(gamma=0.99, num_updates=4, update_every=16, start_steps=32,
                                                       mini_batch_size=32, test_every=10 ** 9)
    learner = Learner(Scheme(**f, **layout), target_steps=192)
    try:
        while not learner.done():
            learner.step()
        uw = learner.update_worker
        remotes = uw.grad_workers.remote_workers()
        weights = [ray_for_module.get(w.get_weights.remote()) for w in remotes] + [uw.get_weights()]
        trained = ray_for_module.get([w.get_hyperparameters.remote() for w in remotes])
    finally:
        learner.stop()
    assert learner.num_updates > 0 and all(g[0]["version"] > 0 for g in trained)
    for w in weights[1:]:
        assert all(torch.equal(w[k], weights[0][k]) for k in weights[0])
    assert not all(np.array_equal(a, weights[0][str(i)].numpy()) for i, a in enumerate(start))
