"""``col_compress_data`` on every data path, and nothing silently dropped: rollouts are
compressed on the replay-server and queue paths too (the collector packs; the replay
server unpacks when it inserts, the gradient worker when it pops); compression where
nothing is sent (one collection worker, one gradient worker, DD-PPO's all-reduced
gradients) is refused by the configuration and warned about once by the Scheme; and
``queues.steal`` where it cannot act is refused. (Rollouts compressed by Ray collectors:
tests/distributed/test_compression_paths_ray.py.)"""

import logging

import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.config import ConfigError, validate_config
from pytorchrl.scheme import Scheme
from pytorchrl.scheme.base.checks import ineffective_options
from pytorchrl.scheme.transport import pack
from pytorchrl.scheme.servers.replay_server import ReplayServer

from cli_helpers import assert_one_line_error, pytorchrl_in_process, tiny, write_config
from distributed_fixtures import factories


# --------------------------------------------------------------- refused or warned
def test_compression_where_nothing_is_sent_is_listed():
    options = {item.option: item for item in ineffective_options(1, False, 2, False, col_compress=True,
                                                                 grad_compress="auto", decentralized=True)}
    assert options["col_compress_data"].setting == "num_col_workers"
    assert options["grad_compress_data"].setting == "decentralized_update_execution"
    one_grad = ineffective_options(2, True, 1, False, col_compress=True, grad_compress=True)
    assert [(i.option, i.setting) for i in one_grad] == [("grad_compress_data", "num_grad_workers")]
    assert ineffective_options(2, True, 2, False, col_compress=True, grad_compress=True) == []


@pytest.mark.parametrize("scheme,key,words", [
    ({"col_compress_data": True}, "scheme.col_compress_data",
     "true has no effect with scheme.num_col_workers: 1 (one collection worker runs in its gradient worker's "
     "process: its rollouts are never sent); remove it, or set scheme.num_col_workers: 2 or more"),
    ({"preset": "dd-ppo", "grad_compress_data": "auto"}, "scheme.grad_compress_data",
     "'auto' has no effect with scheme.decentralized_update_execution: true (DD-PPO's gradients are all-reduced "
     "by torch.distributed, never packed); remove it, or set scheme.decentralized_update_execution: false"),
    ({"grad_compress_data": True}, "scheme.grad_compress_data", "has no effect with scheme.num_grad_workers: 1"),
    ({"preset": "exarl-rma", "queues": {"steal": True}}, "scheme.queues.steal",
     "true has no effect: one gradient worker has no other group's queues to drain"),
    ({"preset": "exarl-rma-window-random", "queues": {"steal": True}}, "scheme.queues.steal",
     "selection 'random' pops any collector's queue already"),
])
def test_the_configuration_refuses_options_without_effect(scheme, key, words):
    with pytest.raises(ConfigError) as info:
        validate_config(tiny(scheme=scheme))
    assert str(info.value).startswith(f"config error: {key}: ") and words in str(info.value)


def test_the_command_line_refuses_in_one_line(tmp_path):
    result = pytorchrl_in_process("train", write_config(tmp_path, tiny(scheme={"col_compress_data": True})), cwd=tmp_path)
    assert_one_line_error(result, "scheme.col_compress_data: true has no effect with scheme.num_col_workers: 1")


def test_the_scheme_warns_once_and_refuses_a_steal_without_effect(caplog):
    with caplog.at_level(logging.WARNING, logger="pytorchrl"):
        scheme = Scheme(**factories(vec_env_size=2, rollout_size=8), col_compress_data=True)
        scheme.stop()
    lines = [r.getMessage() for r in caplog.records if "col_compress_data" in r.getMessage()]
    assert lines == ["Scheme: col_compress_data=True has no effect with num_col_workers=1 (one collection worker "
                     "runs in its gradient worker's process: its rollouts are never sent); it is ignored (it acts "
                     "with num_col_workers=2 or more)"]
    with pytest.raises(ValueError, match="queues steal=True has no effect: one gradient worker"):
        Scheme(**factories(vec_env_size=2, rollout_size=8), num_col_workers=2,
               col_workers_communication=prl.ASYNC, data_path="queues", queues={"steal": True})


# ------------------------------------------------------------ compressed paths
def test_the_replay_server_inserts_a_packed_rollout_as_the_rollout():
    from pytorchrl.agent.actors import OffPolicyActor
    from pytorchrl.agent.algorithms import DDQN
    from pytorchrl.agent.storages import ReplayBuffer
    import gymnasium as gym
    obs_space, act_space = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
    actor_factory = OffPolicyActor.create_factory(obs_space, act_space, "DDQN")
    algo_factory, _ = DDQN.create_factory()
    server = ReplayServer.from_factories(algo_factory, actor_factory, ReplayBuffer.create_factory(size=100),
                                         min_size_to_sample=1)
    n = 10
    rollout = {prl.OBS: torch.rand(n, 4), prl.ACT: torch.randint(0, 2, (n, 1)), prl.REW: torch.rand(n, 1),
               prl.OBS2: torch.rand(n, 4), prl.DISCOUNT: torch.full((n, 1), 0.99)}
    packed = pack(rollout, True)
    assert all(kind == "lz4" for kind, *_ in packed.items.values())
    assert server.insert(packed) == "ok" and server.storage.num_items == n
    outcome, batch = server.sample(n)
    assert outcome == "ok"
    # The empty buffer took the rollout in slots 0..n-1, in order.
    index = np.asarray(batch[prl.INDEX]).reshape(-1)
    for key in (prl.OBS, prl.REW, prl.OBS2):
        np.testing.assert_array_equal(np.asarray(batch[key]), rollout[key].numpy()[index])
