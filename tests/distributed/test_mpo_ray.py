"""MPO over Ray workers: two collection workers feeding the local gradient worker, and two
remote gradient workers whose gradients (the Lagrange multipliers' included) are averaged
by the update worker. The scheme is generic; this checks that MPO's state (target
networks, multipliers) travels with the weights as any algorithm's."""

import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.algorithms import MPO
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import ReplayBuffer
from pytorchrl.envs import make_gym_env
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme

pytestmark = pytest.mark.timeout(300)


def mpo_scheme(**layout):
    train, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": "Pendulum-v1"}, vec_env_size=1,
                                                           seed=0)
    algo_factory, _ = MPO.create_factory(num_updates=8, update_every=8, start_steps=16, mini_batch_size=16,
                                         sample_action_num=4, kl_mean_constraint=1e-6, alpha_mean_max=1e3)
    actor_factory = OffPolicyActor.create_factory(obs_space, action_space, "MPO",
                                                  common_feature_extractor_kwargs={"hidden_sizes": [16]})
    return Scheme(algo_factory=algo_factory, actor_factory=actor_factory,
                  storage_factory=ReplayBuffer.create_factory(size=1000), train_envs_factory=train, **layout)


@pytest.mark.parametrize("layout", [
    dict(num_col_workers=2, col_workers_resources={"num_cpus": 0.25}),
    dict(num_grad_workers=2, grad_workers_resources={"num_cpus": 0.25}, grad_workers_communication=prl.SYNC)],
    ids=["two-collectors", "two-gradient-workers"])
def test_mpo_trains_over_ray_workers(ray_for_module, layout):
    with Learner(mpo_scheme(**layout), target_steps=96) as learner:
        while not learner.done():
            learner.step()
        algo = learner.update_worker.local_worker.algo
        assert algo.updates_applied > 0 and algo.skipped_updates == 0
        assert all(torch.isfinite(p).all() for p in algo.actor.parameters())
        # A bound no KL stays under: the multiplier grew from 0 on the updating worker.
        assert float(algo.multipliers.alpha_mean.detach()) > 0
        assert learner.get_metrics()  # MPO's statistics reach the learner's metrics
