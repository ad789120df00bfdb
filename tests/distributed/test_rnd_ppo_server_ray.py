"""RND_PPO trains in a SEED layout of Ray collectors acting through the inference server (the
rewards through the server in this process: tests/unit/test_rnd_ppo_server.py)."""

import math

import pytest

from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme

from rnd_ppo_server_helpers import rnd_agent


@pytest.mark.timeout(120)
def test_rnd_ppo_trains_in_a_seed_layout_of_ray_collectors(ray_session):
    algo, actor, storage, train = rnd_agent(env_id="MountainCar-v0", vec_env_size=2, size=64, num_mini_batch=2)
    scheme = Scheme(algo, actor, storage, train, num_col_workers=2, col_workers_resources={"num_cpus": 0.25},
                    col_policy="server", inference_server={"timeout_ms": 20, "num_cpus": 0.25})
    learner = Learner(scheme, target_steps=1024)
    infos = []
    try:
        while not learner.done():
            infos += [i.get("algo", {}) for i in learner.step()]
        stats = scheme.inference_stats()
    finally:
        learner.stop()
    infos = [i for i in infos if i]
    rollouts = learner.num_samples_collected // (2 * 64)
    assert rollouts >= 8 and learner.num_updates >= 4 and len(infos) >= 4
    rewards = [i["IntrinsicReward"] for i in infos]
    assert all(math.isfinite(r) and r > 0 for r in rewards), rewards
    assert all(math.isfinite(i["PredictorLoss"]) and math.isfinite(i["IntValueLoss"]) for i in infos)
    # Every rollout's intrinsic rewards and intrinsic bootstrap were computed by the server.
    assert stats["algorithm_calls"] >= 2 * rollouts and stats["version"] == learner.policy_version > 0
