"""DDQN learns CartPole through the replay server (``scheme.data_path: replay_server``) with
remote collectors on the session's Ray instance (the server itself:
tests/unit/test_replay_server.py)."""

import math

import torch

import pytorchrl as prl
from pytorchrl.agent.env import VecEnv
from pytorchrl.envs import make_gym_env
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme
from pytorchrl.scheme.servers import replay_server

from distributed_fixtures import SMALL
from replay_server_helpers import factories


def test_ddqn_learns_cartpole_through_the_server(ray_for_module):
    """Above random (a random policy returns ~22) within a small budget: the greedy policy
    is evaluated every 1000 inserted transitions, the run stops once it reaches the goal."""
    torch.manual_seed(0)
    test, _, _ = VecEnv.create_factory(make_gym_env, {"env_id": "CartPole-v1"}, vec_env_size=1, seed=100)
    f = factories(hidden=(64, 64), lr=2.3e-3, target_update_interval=100, epsilon_decay=0.99, min_epsilon=0.04)
    scheme = Scheme(**f, test_envs_factory=test, num_col_workers=2, col_workers_communication=prl.ASYNC,
                    col_workers_resources=SMALL, data_path="replay_server",
                    replay_server={"min_size_to_sample": 500, "samples_per_insert": 8.0, "error_buffer": 256.0,
                                   "num_cpus": 0.25})
    budget, goal, best, history = 12_000, 60.0, -math.inf, []
    learner = Learner(scheme, target_steps=budget)
    try:
        next_eval = 1000
        while not learner.done() and best < goal:
            learner.step()
            if learner.num_samples_collected >= next_eval:
                next_eval += 1000
                score = learner.evaluate(5)
                history.append((learner.num_samples_collected, round(score, 1)))
                best = max(best, score)
    finally:
        learner.stop()
    assert best >= goal, f"greedy return {best:.1f} < {goal} after {learner.num_samples_collected} steps: {history}"
    print(f"DDQN through the replay server: greedy return {best:.1f}, history {history}")
