"""An agent written only against EXARL's ``ExaAgent`` (tests/exarl_helpers.py) learns CartPole
in the ``exarl-async`` and ``exarl-rma`` workflows on Ray."""

import pytest

from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme

from exarl_helpers import exa_factories, exa_layout
from learning_helpers import greedy_returns_along_run

#: Sent to Ray workers by value (tests/conftest.py's ray_for_module): the agent, pool and environment of exarl_helpers.
RAY_BY_VALUE = ("exarl_helpers",)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("preset", ["exarl-async", "exarl-rma"])
def test_an_exa_agent_learns_cartpole_in_exarls_workflows(ray_for_module, preset):
    # Random play scores about 22, an untrained greedy policy less; this agent reached 137-178
    # by 3-4k steps in both layouts.
    learner = Learner(Scheme(**exa_factories(), **exa_layout(preset)), target_steps=20_000)
    try:
        returns = greedy_returns_along_run(learner, first=1000, every=1000, episodes=5, stop_at=120)
        agent = learner.update_worker.local_worker.actor.agent
    finally:
        learner.stop()
    assert max(returns) >= 120, returns
    assert agent.trained == learner.num_updates > 0
    print(preset, learner.num_samples_collected, [round(r) for r in returns])
