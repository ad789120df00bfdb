"""A2C with pytorchrl's names: ``A2C.create_factory(lr_v, lr_pi, gamma, test_every,
max_grad_norm, num_test_episodes, policy_loss_addons=[])``, one Adam for the policy and one
for the value function, each rate hot-swappable, ``lr`` kept as the name of both; the numpy
update serves the two optimizers."""

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.algorithms import A2C

from cli_helpers import assert_one_line_error, pytorchrl_in_process, tiny, write_config

OBS, ACTIONS = gym.spaces.Box(-1, 1, (5,)), gym.spaces.Discrete(3)
SHARED = {"feature_extractor_kwargs": {"hidden_sizes": [16], "activation": "tanh"}}
TWIN = {"feature_extractor_kwargs": {"hidden_sizes": [16], "activation": "tanh"},
        "shared_policy_value_network": False}


def _actor(kwargs):
    torch.manual_seed(0)
    return OnPolicyActor("cpu", OBS, ACTIONS, "A2C", **kwargs)


def _batch(seed, n=32):
    g = torch.Generator().manual_seed(seed)
    return {prl.OBS: torch.rand(n, 5, generator=g) * 2 - 1, prl.ACT: torch.randint(0, 3, (n, 1), generator=g),
            prl.LOGP: torch.randn(n, 1, generator=g) - 1.0, prl.ADV: torch.randn(n, 1, generator=g),
            prl.RET: torch.randn(n, 1, generator=g), prl.VAL: torch.randn(n, 1, generator=g)}


def _update(algo, seed):
    algo.compute_gradients(_batch(seed), return_grads=False)
    assert algo.apply_gradients()


def test_create_factory_takes_pytorchrl_names_and_builds_two_optimizers():
    factory, name = A2C.create_factory(lr_v=1e-3, lr_pi=2e-4, gamma=0.98, test_every=5000, max_grad_norm=0.5,
                                       num_test_episodes=5, policy_loss_addons=[])
    algo = factory("cpu", _actor(SHARED), None)
    assert name == "A2C" and algo.update_engine is not None       # the numpy update still applies
    assert (algo.lr_v, algo.lr_pi, algo.lr, algo.gamma) == (1e-3, 2e-4, None, 0.98)
    assert algo.v_optimizer.param_groups[0]["lr"] == 1e-3 and algo.pi_optimizer.param_groups[0]["lr"] == 2e-4
    groups = algo.parameter_groups()
    value_ids = {id(p) for p in algo.actor.value_head.parameters()}
    assert {id(p) for p in groups["value"]} == value_ids
    assert len(groups["policy"]) + len(groups["value"]) == len(list(algo.actor.parameters()))


@pytest.mark.parametrize("actor_kwargs", [SHARED, TWIN], ids=["shared", "twin"])
def test_each_optimizer_steps_its_parameters_at_its_own_rate(actor_kwargs):
    # Adam's first step moves every parameter with a gradient by its learning rate (almost
    # exactly: the update is lr * g / (|g| + eps), eps 1e-5).
    algo = A2C("cpu", _actor(actor_kwargs), None, lr_v=1e-2, lr_pi=1e-4, max_grad_norm=None)
    before = {n: p.detach().clone() for n, p in algo.actor.named_parameters()}
    _update(algo, 0)
    for n, p in algo.actor.named_parameters():
        step = (p.detach() - before[n]).abs().max().item()
        expected = 1e-2 if n.startswith("value_head") else 1e-4
        assert step == pytest.approx(expected, rel=0.05), n


def test_hot_swaps_set_one_rate_or_both():
    algo = A2C("cpu", _actor(SHARED), None, lr=7e-4)
    _update(algo, 0)   # the optimizers exist: a swap must reach them
    algo.update_algorithm_parameter("lr_v", 3e-3)
    assert (algo.lr_v, algo.lr_pi, algo.lr) == (3e-3, 7e-4, None)
    assert algo.v_optimizer.param_groups[0]["lr"] == 3e-3 and algo.pi_optimizer.param_groups[0]["lr"] == 7e-4
    algo.update_algorithm_parameter("lr_pi", 1e-3)
    assert algo.pi_optimizer.param_groups[0]["lr"] == 1e-3
    algo.update_algorithm_parameter("lr", 5e-4)     # our name: both
    assert (algo.lr_v, algo.lr_pi, algo.lr) == (5e-4, 5e-4, 5e-4)
    assert {o.param_groups[0]["lr"] for o in algo.optimizers.values()} == {5e-4}
    with pytest.raises(ValueError, match="lr_v must be >= 0"):
        algo.update_algorithm_parameter("lr_v", -1.0)
    assert (algo.lr_v, algo.lr_pi) == (5e-4, 5e-4)    # refused: nothing changed
    # A checkpoint of two different rates restores both.
    algo.update_algorithm_parameter("lr_v", 2e-3)
    other = A2C("cpu", _actor(SHARED), None)
    other.load_state_dict(algo.state_dict())
    assert (other.lr_v, other.lr_pi) == (2e-3, 5e-4)


def test_numpy_update_of_two_optimizers_is_the_torch_one():
    fast = A2C("cpu", _actor(TWIN), None, lr_v=3e-3, lr_pi=1e-3, entropy_coef=0.01, max_grad_norm=0.3)
    ref = A2C("cpu", copy.deepcopy(fast.actor), None, lr_v=3e-3, lr_pi=1e-3, entropy_coef=0.01,
              max_grad_norm=0.3, numpy_update=False)
    assert fast.update_engine is not None and ref.update_engine is None
    for seed in range(4):
        _update(fast, seed)
        _update(ref, seed)
    for (n, pf), pr in zip(fast.actor.named_parameters(), ref.actor.parameters()):
        np.testing.assert_allclose(pf.detach().numpy(), pr.detach().numpy(), atol=2e-6, err_msg=n)


def test_policy_loss_addons_other_than_addons_are_refused(tmp_path):
    # (What add-ons do in A2C: tests/unit/test_policy_loss_addons.py.)
    with pytest.raises(ValueError, match="A2C policy_loss_addons: <object object at .*> is not a policy-loss add-on"):
        A2C("cpu", _actor(SHARED), None, policy_loss_addons=[object()])
    for not_a_list in (None, 0, "", {}, "AttractionKL"):
        with pytest.raises(ValueError, match="A2C policy_loss_addons: expected a list of policy-loss add-ons"):
            A2C("cpu", _actor(SHARED), None, policy_loss_addons=not_a_list)
    for empty in ([], ()):
        assert A2C("cpu", _actor(SHARED), None, policy_loss_addons=empty).policy_loss_addons == []
    config = tiny(algorithm={"name": "A2C", "policy_loss_addons": ["AttractionKL"]})
    result = pytorchrl_in_process("train", write_config(tmp_path, config), cwd=tmp_path)
    assert_one_line_error(result, "algorithm.policy_loss_addons.0: expected a mapping of keys, got 'AttractionKL'")
    config = tiny(algorithm={"name": "A2C", "lr_v": 1e-3, "lr_pi": 5e-4},
                  learner={"target_steps": 64, "log_every": 0.1})
    result = pytorchrl_in_process("train", write_config(tmp_path, config), "learner.tensorboard=false", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
