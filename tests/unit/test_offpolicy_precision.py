"""bfloat16 mixed precision of the off-policy actors' MLP networks
(``OffPolicyActor(precision="bf16")``, YAML ``actor.precision``): the products between two
hidden layers read bfloat16 copies and accumulate in float32 (the numpy update and acting
compute the same products: cases of tests/unit/test_accel_parity.py); weights, gradients and
optimizer state stay float32; what cannot act is refused. (SAC still learns Pendulum with it:
tests/learning/test_learning_offpolicy.py.)"""

import copy
import logging

import gymnasium as gym
import numpy as np
import pytest
import torch

from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.actors.feature_extractors import precision as precision_module
from pytorchrl.agent.actors.feature_extractors.mlp import MLP
from pytorchrl.agent.actors.feature_extractors.ensemble import EnsembleMLP
from pytorchrl.agent.algorithms import SAC

from _util import needs_bf16
from cli_helpers import tiny, train_checking_float32

OBS = gym.spaces.Box(-1.0, 1.0, (5,), dtype=np.float32)
DISCRETE = gym.spaces.Discrete(3)
BOX = gym.spaces.Box(np.array([-2.0, 0.0], dtype=np.float32), np.array([2.0, 1.0], dtype=np.float32))
NETS = {"hidden_sizes": [48, 40, 32]}   # two products between hidden layers


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _relative(a, b):
    return float((a - b).norm() / (b.norm() + 1e-12))


# ----------------------------------------------------------------------- network
@needs_bf16
def test_the_products_between_hidden_layers_are_bfloat16_and_the_rest_float32():
    torch.manual_seed(0)
    net = EnsembleMLP(5, [48, 40, 32], 3, copies=2, precision="bf16")
    assert net.low_precision_layers(torch.device("cpu")) == (1, 2)
    assert EnsembleMLP(5, [48], 3, precision="bf16").low_precision_layers(torch.device("cpu")) == ()
    assert EnsembleMLP(5, [48, 40], 3).low_precision_layers(torch.device("cpu")) == ()
    x = torch.rand(7, 5)
    out = net(x)
    w, b = list(net.weights), list(net.biases)
    with torch.no_grad():
        h = torch.relu(x @ w[0] + b[0])
        for i in (1, 2):
            h = torch.relu((h.bfloat16() @ w[i].bfloat16()).float() + b[i])
        expected = h @ w[3] + b[3]
        full_net = copy.deepcopy(net)      # the float32 network on the same weights
        full_net.precision = "fp32"
        full = full_net(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.detach(), expected, atol=1e-6, rtol=1e-5)
    # Not the float32 result, but within bfloat16's rounding of it.
    assert 1e-4 < _relative(out.detach(), full) < 0.03
    out.pow(2).sum().backward()
    assert all(p.grad.dtype == torch.float32 and p.dtype == torch.float32 for p in net.parameters())


def test_without_native_bfloat16_the_networks_compute_float32_and_say_so_once(monkeypatch, caplog):
    monkeypatch.setattr(precision_module, "native_bf16", lambda device_type: False)
    monkeypatch.setattr("pytorchrl.agent.notices._said", set())
    torch.manual_seed(0)
    actor = OffPolicyActor("cpu", OBS, BOX, "SAC", common_feature_extractor_kwargs=NETS, precision="bf16")
    full = OffPolicyActor("cpu", OBS, BOX, "SAC", common_feature_extractor_kwargs=NETS)
    full.load_state_dict(actor.state_dict())
    x = torch.rand(6, 5)
    with caplog.at_level(logging.WARNING, logger="pytorchrl"):
        assert actor.critics.low_precision_layers(torch.device("cpu")) == ()
        out = actor.policy_output(x)
        actor.policy_output(x)
    assert torch.equal(out, full.policy_output(x))
    notes = [r.getMessage() for r in caplog.records if "bf16" in r.getMessage()]
    assert len(notes) == 1 and "computing in fp32" in notes[0]


def test_bf16_on_networks_without_hidden_products_says_so(monkeypatch, caplog):
    monkeypatch.setattr("pytorchrl.agent.notices._said", set())
    with caplog.at_level(logging.WARNING, logger="pytorchrl"):
        actor = OffPolicyActor("cpu", OBS, DISCRETE, "DDQN", common_feature_extractor_kwargs={"hidden_sizes": [64]},
                               precision="bf16")
    assert actor.critics.low_precision_layers(torch.device("cpu")) == ()
    notes = [r.getMessage() for r in caplog.records if "no product between two hidden layers" in r.getMessage()]
    assert len(notes) == 1 and "computing in fp32" in notes[0]


def test_precision_is_checked_and_needs_the_default_mlp():
    with pytest.raises(ValueError, match="precision must be one of"):
        OffPolicyActor("cpu", OBS, BOX, "SAC", precision="fp16")
    with pytest.raises(ValueError, match="precision must be one of"):
        OffPolicyActor.create_factory(OBS, BOX, "SAC", precision="half")

    class Wide(MLP):
        pass

    with pytest.raises(ValueError, match="computed by the default MLP networks .* not by Wide"):
        OffPolicyActor.create_factory(OBS, BOX, "SAC", common_feature_extractor=Wide, precision="bf16")
    factory = OffPolicyActor.create_factory(OBS, DISCRETE, "DDQN", precision="bf16")
    actor = factory("cpu")
    assert actor.precision == "bf16" and actor.critics.precision == "bf16"


# --------------------------------------------------------------- configuration
def test_yaml_precision_reaches_the_off_policy_networks_and_trains():
    from pytorchrl.config import validate_config
    from pytorchrl.config.build import build_actor_factory, build_env_factories

    config = validate_config(dict(tiny(actor={"precision": "bf16"}, learner={"target_steps": 400}),
                                  algorithm={"name": "DDQN", "start_steps": 100, "update_every": 50,
                                             "num_updates": 5, "mini_batch_size": 32},
                                  storage={"name": "ReplayBuffer", "size": 1000}))
    _, _, action_space, obs_space = build_env_factories(config)
    actor = build_actor_factory(config, obs_space, action_space, "DDQN")("cpu")
    assert actor.precision == "bf16" and actor.critics.precision == "bf16"
    train_checking_float32(config)
