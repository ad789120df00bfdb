"""EXARL's multi-learner RMA queues on a real local Ray: work stealing (``exarl-ml-rma-queue``)
with a step budget and with an episode budget, one group of collectors slowed down, and the
short variant (``exarl-ml-rma-queue-short``: no stealing, the run ends when the first group
is exhausted); the budget is one work counter shared by every collector (EXARL's), so the
fast group does most of the work. (The server's rules in this process:
tests/unit/test_work_stealing_in_process.py.)"""


import gymnasium as gym
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.algorithms import DDQN
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import ReplayBuffer
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme
from pytorchrl.scheme.presets import PRESETS

from distributed_fixtures import SMALL, SleepyStep

#: Sent to Ray workers by value (tests/conftest.py's ray_for_module): this module's functions.
RAY_BY_VALUE = (__name__,)

pytestmark = pytest.mark.timeout(300)


#: Seconds a step of a stalled environment takes: its collector's rollout in progress (16
#: steps) is what stopping the run waits for, so no longer than the stall needs.
STALL_DELAY = 0.25


def group_cartpole(index_grad_worker=0, slow_group=2, delay=0.03, stall_after=None):
    """CartPole whose every step sleeps ``delay`` s in the collectors of gradient worker
    ``slow_group`` only: one group of actors much slower than the other (and, after
    ``stall_after`` steps of each environment, ``STALL_DELAY`` s a step: stalled)."""
    env = gym.make("CartPole-v1")
    return SleepyStep(env, delay, stall_after, STALL_DELAY) if index_grad_worker == slow_group else env


def _scheme(preset, delay=0.03, stall_after=None):
    """The preset's layout (2 learners x 2 collectors, queue data path) with DDQN on
    CartPole, group 2's environments ``delay`` s slower per step: its collectors queue
    less than its learner could train on (about 66 env steps/s against one mini-batch per
    popped transition), while group 1's fill their queues. A learner stays busy with what
    it popped for a while (DDQN trains one mini-batch per transition), so rollouts its
    collectors queue meanwhile wait for the first learner free to take them."""
    torch.manual_seed(0)
    train, action_space, obs_space = VecEnv.create_factory(group_cartpole, {"delay": delay, "stall_after": stall_after},
                                                           vec_env_size=1, seed=0)
    algo, name = DDQN.create_factory(lr=1e-3, mini_batch_size=32, update_every=16, num_updates=16, start_steps=64,
                                     test_every=10 ** 9)
    actor = OffPolicyActor.create_factory(obs_space, action_space, name,
                                          common_feature_extractor_kwargs={"hidden_sizes": [32]})
    layout = dict(PRESETS[preset].scheme)
    layout.update(col_workers_communication=prl.ASYNC, grad_workers_communication=prl.SYNC,
                  col_workers_resources=SMALL, grad_workers_resources=SMALL, max_policy_lag=None)
    return Scheme(algo_factory=algo, actor_factory=actor, storage_factory=ReplayBuffer.create_factory(size=5000),
                  train_envs_factory=train, **layout)


def _run(learner):
    while not learner.done():
        learner.step()
    return learner.scheme.queue_stats(), learner.get_metrics(add_scheme_metrics=True)


def _episodes_by_group(learner):
    """Finished episodes handed over by each gradient worker's group of collectors."""
    counts = {1: 0, 2: 0}
    for record in learner.episode_records:
        counts[record["grad_worker"]] += 1
    return counts


@pytest.mark.parametrize("budget", ["steps", "episodes"])
def test_a_finished_learner_steals_from_the_slowed_group_and_every_rollout_is_consumed(ray_for_module, budget):
    kwargs = {"target_steps": 1600} if budget == "steps" else {"target_steps": 10 ** 6, "target_episodes": 40}
    learner = Learner(_scheme("exarl-ml-rma-queue"), record_episodes=True, **kwargs)
    try:
        stats, metrics = _run(learner)
    finally:
        learner.stop()
    assert learner.budget_spent
    # The fast group finished first; its learner then popped rollouts of the slow group's queues.
    assert stats["stolen_pops"] > 0 and stats["stolen_rollouts"] >= stats["stolen_pops"], stats
    assert metrics["Queues/StolenPops"] == stats["stolen_pops"]
    assert metrics["Queues/PoppedRollouts"] == stats["popped_rollouts"]
    # All data consumed: every rollout put was popped, nothing is left, no actor is active.
    assert stats["held"] == 0 and stats["puts"] == stats["popped_rollouts"] and stats["active_groups"] == 0, stats
    assert stats["active_actors"] == 0, stats
    if budget == "steps":
        assert learner.num_samples_collected >= 1600
        assert stats["counted_steps"] == learner.num_samples_collected
    else:
        assert learner.num_episodes == 40 == stats["counted_episodes"]
        # One work counter for all (EXARL's): the fast group took most of the episodes, and
        # the slow group did fewer than the half that a fixed share per group gave it (20),
        # so the run no longer waits for the slow group to play its share.
        by_group = _episodes_by_group(learner)
        assert by_group[1] > by_group[2] and by_group[2] < 20, by_group


def test_the_short_variant_never_steals_and_ends_with_the_first_exhausted_group(ray_for_module):
    # The slow group's collectors are stalled from their first step (0.25 s a step): an
    # episode takes each at least 2 s (8 steps), so that group plays a few episodes at most,
    # while the fast group plays one in a few milliseconds.
    learner = Learner(_scheme("exarl-ml-rma-queue-short", stall_after=0), target_steps=10 ** 6, target_episodes=40,
                      record_episodes=True)
    try:
        stats, _ = _run(learner)
    finally:
        learner.stop()
    assert learner.budget_spent and stats["stolen_pops"] == 0
    # The first learner to find its group done (nothing left to claim, no request out) and
    # its queues empty ended the run (EXARL's mlrma_queue_short), whatever the other group's
    # queues still held: within the budget.
    by_group = _episodes_by_group(learner)
    assert sum(by_group.values()) == learner.num_episodes <= 40, by_group
    # The fast group played the episodes the slow one could not: more than the half that a
    # fixed share per group gave it (20, the whole run before the counter was shared).
    assert by_group[1] > 20, by_group


# --------------------------------------------------------------- server rules
