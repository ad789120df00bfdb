"""Numerical faults with remote gradient workers on Ray: CartPole whose rewards turn NaN in one
gradient worker's environments (tests/fault_envs.py); DD-PPO's and the central update's
workers all skip the NaN gradient and the learner stops after too many in a row
(in one process: tests/unit/test_nonfinite_updates.py)."""

import copy

import pytest
import torch

from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.actors.feature_extractors.mlp import MLP
from pytorchrl.agent.algorithms import PPO
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import GAEBuffer
from pytorchrl.learner import Learner, NonFiniteUpdatesError
from pytorchrl.scheme import Scheme

#: Sent to Ray workers by value (tests/conftest.py's ray_for_module): the fault environments.
RAY_BY_VALUE = ("fault_envs",)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("decentralized", [True, False], ids=["dd-ppo", "central-sync"])
def test_remote_gradient_workers_all_skip_a_nan_gradient(ray_for_module, decentralized):
    """Two remote gradient workers; only gradient worker 2's rewards turn NaN. DD-PPO: the
    all-reduced gradient is NaN on both, both skip, their weights stay identical. Central:
    the averaged gradient is NaN and the update worker skips it. Either way the learner
    stops after ``max_nonfinite_updates`` and the weights are the last finite ones."""
    import ray

    from distributed_fixtures import SMALL
    import fault_envs
    train, action_space, obs_space = VecEnv.create_factory(
        fault_envs.nan_reward_cartpole, {"nan_from": 20, "nan_grad_worker": 2}, vec_env_size=2, seed=0)
    algo_factory, name = PPO.create_factory(num_epochs=2, num_mini_batch=1)
    actor_factory = OnPolicyActor.create_factory(obs_space, action_space, name, feature_extractor_network=MLP,
                                                 feature_extractor_kwargs={"hidden_sizes": [8]})
    scheme = Scheme(algo_factory=algo_factory, actor_factory=actor_factory,
                    storage_factory=GAEBuffer.create_factory(size=8), train_envs_factory=train,
                    num_grad_workers=2, grad_workers_resources=SMALL,
                    decentralized_update_execution=decentralized)
    with Learner(scheme, target_steps=100_000, max_nonfinite_updates=3) as learner:
        uw = learner.update_worker
        good, updates = None, None
        # (Optimizer steps, not versions: DD-PPO's gradient workers publish a version per round.)
        with pytest.raises(NonFiniteUpdatesError, match="3 updates in a row had NaN"):
            for _ in range(40):
                infos = learner.step()
                if not any(i.get("update_skipped") for i in infos):
                    good = copy.deepcopy(uw.get_weights())
                    updates = uw.local_worker.algo.updates_applied
        # Rounds 1-2 of gradient worker 2 are finite (8 steps each, NaN from the 20th).
        assert good is not None and updates >= 4
        uw.sync_local_weights()
        assert learner.skipped_updates == 3 and uw.local_worker.algo.updates_applied == updates
        remote = ray.get([w.get_weights.remote() for w in uw.grad_workers.remote_workers()])
        for weights in remote + [uw.get_weights()]:
            assert all(torch.equal(torch.as_tensor(v), good[k]) for k, v in weights.items())
        states = ray.get([w.get_state.remote() for w in uw.grad_workers.remote_workers()])
        if decentralized:   # (central: the remote workers' count is that of the weights sent)
            assert [s["algo"]["updates_applied"] for s in states] == [updates, updates]
