"""Structured spaces on Ray workers: PPO with two remote collection workers (compressed
rollouts) on DictCartPole-v1 (Dict observations, packed, read by DictNet) and
MultiDiscreteCartPole-v1 (MultiDiscrete([2, 3]) actions), for a small budget, on the
session's Ray instance. The rollouts that reach the gradient worker have the packed
observations and the action vectors of their space, and the scheme trains on them."""

import os

import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.spaces import PackedBox
from pytorchrl.agent.storages import GAEBuffer
from pytorchrl.envs import make_gym_env
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme

from distributed_fixtures import SMALL, factories, free_cpus, resources_released, wait_gone

#: Sent to Ray workers by value (tests/conftest.py's ray_for_module): this module's functions.
RAY_BY_VALUE = (__name__,)


class RecordingGAEBuffer(GAEBuffer):
    """A GAEBuffer that keeps the shape and dtype of every array of every rollout it
    receives (the gradient worker's, in this process)."""

    received = []

    def add_data(self, data):
        RecordingGAEBuffer.received.append({k: (tuple(v.shape), v.dtype) for k, v in data.items()
                                            if isinstance(v, torch.Tensor)})
        super().add_data(data)


@pytest.mark.parametrize("env_id, obs_size, action_shape, action_dtype", [
    ("DictCartPole-v1", 4, (1,), torch.int64),
    ("MultiDiscreteCartPole-v1", 4, (2,), torch.int64),
])
def test_ppo_with_two_ray_collectors_on_structured_spaces(ray_for_module, env_id, obs_size, action_shape,
                                                          action_dtype):
    torch.manual_seed(0)
    vec_env_size, rollout = 4, 16
    parts = factories(env_kwargs={"env_id": env_id}, vec_env_size=vec_env_size, rollout_size=rollout,
                      num_epochs=2, mini_batch_size=32)
    _, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": env_id})
    assert isinstance(obs_space, PackedBox) == (env_id == "DictCartPole-v1")
    # The default feature extractor: DictNet for the Dict observations, MLP otherwise.
    parts["actor_factory"] = OnPolicyActor.create_factory(obs_space, action_space, "PPO")
    parts["storage_factory"] = RecordingGAEBuffer.create_factory(size=rollout, gae_lambda=0.8)
    RecordingGAEBuffer.received = []
    free = free_cpus()
    scheme = Scheme(**parts, num_col_workers=2, col_compress_data=True, col_workers_resources=SMALL)
    learner = Learner(scheme, target_steps=4 * 2 * vec_env_size * rollout)
    pids = [pid for _, pid in scheme.process_info()]
    try:
        assert len(pids) == 2 and os.getpid() not in pids
        first = [p.detach().clone() for p in scheme.update_worker.local_worker.actor.parameters()]
        while not learner.done():
            learner.step()
        trained = list(scheme.update_worker.local_worker.actor.parameters())
        assert any(not torch.equal(a, b) for a, b in zip(first, trained))
        assert learner.num_samples_collected >= 4 * 2 * vec_env_size * rollout
    finally:
        learner.stop()
    assert wait_gone(pids) == []
    assert resources_released(free)
    assert len(RecordingGAEBuffer.received) >= 4
    for shapes in RecordingGAEBuffer.received:
        steps = shapes[prl.OBS][0][0]
        assert 0 < steps <= rollout
        assert shapes[prl.OBS] == ((steps, vec_env_size, obs_size), torch.float32)
        assert shapes[prl.ACT] == ((steps, vec_env_size) + action_shape, action_dtype)
        assert shapes[prl.LOGP] == ((steps, vec_env_size, 1), torch.float32)
    np.testing.assert_array_equal(sorted({s[prl.OBS][0][1] for s in RecordingGAEBuffer.received}), [vec_env_size])
