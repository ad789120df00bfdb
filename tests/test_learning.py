"""Learning tests: the in-process scheme actually learns CartPole within a small budget.

Each test stops as soon as its goal is met and fails only when its step budget runs out.
Seeds are fixed (environments and torch) so that a run is reproducible on one machine;
the budgets leave a wide margin over the steps these configurations usually need
(PPO ~22-33k of 50k, A2C ~15-20k of 60k), so that numerically different but correct
implementations pass too.
"""

import os

import pytest
import torch

from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.actors.feature_extractors.mlp import MLP
from pytorchrl.agent.algorithms import A2C, PPO
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import GAEBuffer, VanillaOnPolicyBuffer
from pytorchrl.envs import make_gym_env
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("no_ray_import")]

SEED = int(os.environ.get("PYTORCHRL_TEST_SEED", "0"))


def cartpole_learner(algo_factory, algo_name, storage_factory, target_steps, seed=SEED, num_envs=8):
    torch.manual_seed(seed)
    train, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": "CartPole-v1"},
                                                           vec_env_size=num_envs, seed=seed)
    test, _, _ = VecEnv.create_factory(make_gym_env, {"env_id": "CartPole-v1"}, vec_env_size=1, seed=seed + 100)
    actor_factory = OnPolicyActor.create_factory(obs_space, action_space, algo_name, feature_extractor_network=MLP,
                                                 shared_policy_value_network=False,
                                                 feature_extractor_kwargs={"hidden_sizes": [64, 64],
                                                                           "activation": "tanh"})
    scheme = Scheme(algo_factory=algo_factory, actor_factory=actor_factory, storage_factory=storage_factory,
                    train_envs_factory=train, test_envs_factory=test)
    return Learner(scheme, target_steps=target_steps)


def train_reward(learner):
    return learner.get_metrics(add_algo_metrics=False, add_episodes_metrics=True)["Episodes/TrainReward"]


def test_ppo_solves_cartpole():
    budget = 50_000
    algo_factory, name = PPO.create_factory(lr=1e-3, num_epochs=20, mini_batch_size=256, clip_param=0.2,
                                            gamma=0.98, entropy_coef=0.0, value_loss_coef=0.5, max_grad_norm=0.5,
                                            test_every=10**9, num_test_episodes=5)
    learner = cartpole_learner(algo_factory, name, GAEBuffer.create_factory(size=32, gae_lambda=0.8), budget)
    history = []
    best_train = best_eval = float("-inf")
    try:
        seen = 0
        while not learner.done():
            learner.step()
            if learner.num_samples_collected == seen:
                continue                                   # same round: no new episodes
            seen = learner.num_samples_collected
            reward = train_reward(learner)
            history.append((seen, reward))
            if reward == reward:
                best_train = max(best_train, reward)
            if best_train >= 195.0:
                # the training goal holds; check the greedy policy too (until it also holds)
                best_eval = max(best_eval, learner.evaluate(5))
                if best_eval >= 195.0:
                    break
        assert best_train >= 195.0, f"mean training return {best_train:.1f} < 195 after {seen} steps: {history[-5:]}"
        assert best_eval >= 195.0, f"deterministic evaluation {best_eval:.1f} < 195 after {seen} steps"
        assert seen <= budget
        print(f"PPO: training return {best_train:.1f}, evaluation {best_eval:.1f} after {seen} steps")
    finally:
        learner.stop()


def train_until(learner, goal, what, on_infos=lambda infos: None):
    """Step ``learner`` (one collection and one update per step, as A2C) until its mean
    training return exceeds ``goal`` or its budget runs out; assert the goal was reached.
    ``on_infos`` sees the infos of every step."""
    best = float("-inf")
    history = []
    while not learner.done():
        on_infos(learner.step())
        reward = train_reward(learner)
        history.append(reward)
        if reward == reward:
            best = max(best, reward)
        if best > goal:
            break
    assert best > goal, f"{what} mean training return {best:.1f} <= {goal} after " \
                        f"{learner.num_samples_collected} steps: {history[-5:]}"
    print(f"{what}: training return {best:.1f} after {learner.num_samples_collected} steps")


def test_a2c_improves_over_random():
    budget = 60_000
    algo_factory, name = A2C.create_factory(lr=1e-3, gamma=0.99, entropy_coef=0.0, value_loss_coef=0.5,
                                            max_grad_norm=0.5, test_every=10**9)
    learner = cartpole_learner(algo_factory, name, VanillaOnPolicyBuffer.create_factory(size=8), budget)
    try:
        train_until(learner, 100.0, "A2C")      # a random policy averages ~22
    finally:
        learner.stop()
