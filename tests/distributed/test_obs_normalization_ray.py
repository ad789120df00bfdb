"""Observation normalisation with Ray collectors: the learner merges the moments of every
rollout its two remote collectors send, and they act with the learner's statistics (the
buffers of their actors are the learner's after every update), never with their own."""

import gymnasium as gym
import torch

from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.actors.feature_extractors.mlp import MLP
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme

from distributed_fixtures import SMALL, factories

VEC, ROLLOUT, COLLECTORS = 4, 16, 2


def test_remote_collectors_act_with_the_learners_statistics(ray_for_module):
    ray = ray_for_module
    torch.manual_seed(0)
    kwargs = factories(vec_env_size=VEC, rollout_size=ROLLOUT, num_epochs=1, mini_batch_size=64)
    cartpole = gym.make("CartPole-v1")
    kwargs["actor_factory"] = OnPolicyActor.create_factory(
        cartpole.observation_space, cartpole.action_space, "PPO", feature_extractor_network=MLP,
        feature_extractor_kwargs={"hidden_sizes": [16], "activation": "tanh"}, normalize_observations=True)
    scheme = Scheme(**kwargs, num_col_workers=COLLECTORS, col_workers_resources=SMALL)
    learner = Learner(scheme, target_steps=10 ** 6)
    worker = scheme.update_worker.local_worker
    counts = set()
    try:
        for _ in range(12):      # 2 mini-batches per round: 6 rounds
            learner.step()
            # Merged when a version is published, before the round's requests carry it.
            stats = {k: v.clone() for k, v in worker.actor.obs_norm.state_dict().items()}
            counts.add(int(stats["count"]))
            for collector in worker.col_workers.remote_workers():
                weights = ray.get(collector.get_weights.remote())
                for key, value in stats.items():
                    torch.testing.assert_close(torch.as_tensor(weights[f"obs_norm.{key}"]), value)
    finally:
        learner.stop()
    # Every round's observations (the collectors' envs x rollout steps) are merged once.
    per_round = COLLECTORS * VEC * ROLLOUT
    assert len(counts) >= 4 and all(c % per_round == 0 for c in counts), counts
    assert max(counts) >= 4 * per_round
