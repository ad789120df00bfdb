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
SEPARATE = {"feature_extractor_kwargs": {"hidden_sizes": [16], "activation": "tanh"},
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


@pytest.mark.parametrize("actor_kwargs", [SHARED, SEPARATE], ids=["shared", "separate"])
def test_each_optimizer_steps_its_parameters_at_its_own_rate(actor_kwargs):
    # Adam's first step moves every parameter with a gradient by its learning rate (almost
    # exactly: the update is lr * g / (|g| + eps), eps 1e-5).
    algo = A2C("cpu", _actor(actor_kwargs), None, lr_v=1e-2, lr_pi=1e-4, max_grad_norm=None)
    before = {n: p.detach().clone() for n, p in algo.actor.named_parameters()}
    _update(algo, 0)
    for n, p in algo.actor.named_parameters():
        step = (p.detach() - before[n]).abs().max().item()
        # The value network (its own extractor when the actor has separate ones) is the
        # value optimizer's, as pytorchrl's v_optimizer over value_net1.
        expected = 1e-2 if n.startswith(("value_head", "value_net")) else 1e-4
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


def test_an_a2c_of_two_rates_is_rebuilt_from_its_hyperparameters():
    """replace_agent_component("actor", ...) rebuilds the algorithm from its hyperparameters,
    whose lr reads None once lr_v and lr_pi differ (docs/hot-swapping.md's snippet failed
    with a TypeError there)."""
    algo = A2C("cpu", _actor(SHARED), None, lr=7e-4)
    algo.update_algorithm_parameter("lr_v", 3e-3)
    assert algo.hyperparameters["lr"] is None
    rebuilt = A2C("cpu", _actor(SEPARATE), None, **algo.hyperparameters)
    assert (rebuilt.lr_v, rebuilt.lr_pi) == (3e-3, 7e-4)
    assert rebuilt.v_optimizer.param_groups[0]["lr"] == 3e-3 and rebuilt.pi_optimizer.param_groups[0]["lr"] == 7e-4


def test_numpy_update_of_two_optimizers_is_the_torch_one():
    fast = A2C("cpu", _actor(SEPARATE), None, lr_v=3e-3, lr_pi=1e-3, entropy_coef=0.01, max_grad_norm=0.3)
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


def test_separate_networks_are_one_per_optimizer_as_pytorchrl():
    # pytorchrl: pi_optimizer over policy_net (its extractor and head), v_optimizer over
    # value_net1 (its own extractor and head).
    algo = A2C("cpu", _actor(SEPARATE), None)
    actor = algo.actor
    assert actor.twin_net is None and type(actor.policy_net).__name__ == type(actor.value_net).__name__ == "MLP"
    groups = {name: {id(p) for p in params} for name, params in algo.parameter_groups().items()}
    assert groups["policy"] == {id(p) for m in (actor.policy_net, actor.dist) for p in m.parameters()}
    assert groups["value"] == {id(p) for m in (actor.value_net, actor.value_head) for p in m.parameters()}
    assert algo.update_engine is not None     # the numpy update serves the two networks
    # A PPO actor keeps its twin (one stacked network, one optimizer).
    assert OnPolicyActor("cpu", OBS, ACTIONS, "PPO", **SEPARATE).twin_net is not None
    with pytest.raises(ValueError, match="build the actor with algorithm_name='A2C'"):
        A2C("cpu", OnPolicyActor("cpu", OBS, ACTIONS, "PPO", **SEPARATE), None).parameter_groups()


def test_one_clip_bounds_the_gradients_of_both_optimizers_together():
    # pytorchrl's nn.utils.clip_grad_norm_(actor.parameters(), max_grad_norm): one global
    # norm. Clipping each optimizer's group on its own lost A2C's learning (0 of 8 seeds
    # reached 500 on CartPole, against 5 of 8 before the split).
    algo = A2C("cpu", _actor(SEPARATE), None, max_grad_norm=0.05)
    algo.compute_gradients(_batch(0), return_grads=False)
    grads = {name: [p.grad.clone() for p in params] for name, params in algo.parameter_groups().items()}
    norms = {name: float(torch.sqrt(sum((g * g).sum() for g in gs))) for name, gs in grads.items()}
    total = (norms["policy"] ** 2 + norms["value"] ** 2) ** 0.5
    assert min(norms.values()) > 0.05     # each group above the bound: separate clips would scale both to it
    clipped = []
    for opt in algo.optimizers.values():     # what apply_gradients clips, read before the step
        step = opt.step
        opt.step = lambda step=step, opt=opt: (clipped.append([p.grad.clone() for p in opt.params]), step())[1]
    assert algo.apply_gradients()
    scale = 0.05 / (total + 1e-6)
    for name, after in zip(algo.optimizers, clipped):
        for g0, g1 in zip(grads[name], after):
            torch.testing.assert_close(g1, g0 * scale)


def test_a_twin_network_saved_before_the_split_loads_into_the_two_networks():
    # An A2C actor with separate MLPs held one ParallelMLP (twin_net.*) before: its saved
    # weights load into the two networks, which then compute the same policy and value.
    torch.manual_seed(0)
    old = OnPolicyActor("cpu", OBS, ACTIONS, "PPO", **SEPARATE)       # the twin layout
    new = _actor(SEPARATE)
    new.load_state_dict(old.state_dict())
    obs = torch.rand(6, 5)
    for a, b in zip(old.logits_and_value(obs), new.logits_and_value(obs)):
        torch.testing.assert_close(a, b)
