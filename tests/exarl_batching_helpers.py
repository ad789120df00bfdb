"""Helpers of EXARL's batching tests (tests/unit/test_exarl_batching.py,
tests/distributed/test_exarl_batching_ray.py): a small DDQN agent."""

from distributed_fixtures import ddqn_factories


def ddqn_agent(update_every=64):
    """The factories of a small DDQN agent on CartPole that updates every ``update_every``
    env steps (distributed_fixtures.ddqn_factories)."""
    return ddqn_factories(update_every=update_every, start_steps=32, mini_batch_size=16, num_updates=1)
