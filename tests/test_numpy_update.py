"""The numpy update engine computes what the torch path computes: losses, gradients, Adam steps."""

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.algorithms import A2C, PPO
from pytorchrl.agent.numpy_engine import NumpyActorCriticUpdate, NumpyAdam


def _batch(n, seed):
    g = torch.Generator().manual_seed(seed)
    return {prl.OBS: torch.randn(n, 4, generator=g), prl.ACT: torch.randint(0, 3, (n, 1), generator=g),
            prl.LOGP: torch.randn(n, 1, generator=g) * 0.3 - 1.1, prl.ADV: torch.randn(n, 1, generator=g),
            prl.RET: torch.randn(n, 1, generator=g),
            # Values at collection time, for PPO's clipped value loss.
            prl.VAL: torch.randn(n, 1, generator=g)}


def _pair(cls, actor_kwargs, algo_kwargs):
    torch.manual_seed(0)
    actor = OnPolicyActor("cpu", gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3), cls.name, **actor_kwargs)
    twin = copy.deepcopy(actor)
    fast = cls("cpu", actor, None, numpy_update=True, **algo_kwargs)
    ref = cls("cpu", twin, None, numpy_update=False, **algo_kwargs)
    assert fast.update_engine is not None and ref.update_engine is None
    return fast, ref


CASES = [
    (PPO, {"feature_extractor_kwargs": {"hidden_sizes": [16, 16], "activation": "tanh"},
           "shared_policy_value_network": False},
     {"clip_param": 0.1, "entropy_coef": 0.01, "max_grad_norm": 0.5}),
    (PPO, {"feature_extractor_kwargs": {"hidden_sizes": [16, 8, 8], "activation": "relu"},
           "shared_policy_value_network": False},
     {"normalize_advantages": False, "max_grad_norm": 0.0, "use_clipped_value_loss": False}),
    (PPO, {"feature_extractor_kwargs": {"hidden_sizes": [16, 16], "activation": "tanh"},
           "shared_policy_value_network": True}, {"entropy_coef": 0.02}),
    (A2C, {"feature_extractor_kwargs": {"hidden_sizes": [12], "activation": "relu"},
           "shared_policy_value_network": True}, {"entropy_coef": 0.05, "max_grad_norm": 0.1}),
    (A2C, {"feature_extractor_kwargs": {"hidden_sizes": [16, 16], "activation": "tanh"},
           "shared_policy_value_network": False}, {}),
]


@pytest.mark.parametrize("cls,actor_kwargs,algo_kwargs", CASES)
def test_numpy_update_matches_torch(cls, actor_kwargs, algo_kwargs):
    fast, ref = _pair(cls, actor_kwargs, algo_kwargs)
    for step in range(6):
        batch = _batch(64, seed=step)
        _, info_f = fast.compute_gradients(batch, return_grads=False)
        _, info_r = ref.compute_gradients(batch, return_grads=False)
        for key in info_r:
            assert info_f[key] == pytest.approx(info_r[key], abs=2e-6), key
        for pf, pr in zip(fast.actor.parameters(), ref.actor.parameters()):
            torch.testing.assert_close(pf.grad, pr.grad, atol=2e-6, rtol=1e-4)
        fast.apply_gradients()
        ref.apply_gradients()
        for pf, pr in zip(fast.actor.parameters(), ref.actor.parameters()):
            torch.testing.assert_close(pf.detach(), pr.detach(), atol=2e-6, rtol=1e-4)
    assert isinstance(fast.optimizer, NumpyAdam)


def test_returned_gradients_and_external_application():
    fast, ref = _pair(PPO, CASES[0][1], CASES[0][2])
    batch = _batch(32, seed=9)
    grads, _ = fast.compute_gradients(batch, return_grads=True)
    ref_grads, _ = ref.compute_gradients(batch, return_grads=True)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, atol=2e-6, rtol=1e-4)
    # As an update worker does with gradients from another process.
    fast.apply_gradients([g.clone() for g in grads])
    ref.apply_gradients([g.clone() for g in ref_grads])
    for pf, pr in zip(fast.actor.parameters(), ref.actor.parameters()):
        torch.testing.assert_close(pf.detach(), pr.detach(), atol=2e-6, rtol=1e-4)


def test_optimizer_state_moves_between_numpy_and_torch():
    fast, ref = _pair(PPO, CASES[0][1], CASES[0][2])
    for step in range(3):
        batch = _batch(32, seed=step)
        fast.compute_gradients(batch, return_grads=False)
        fast.apply_gradients()
    ref.set_weights(fast.get_weights())
    ref.optimizer.load_state_dict(fast.optimizer.state_dict())
    batch = _batch(32, seed=7)
    fast.compute_gradients(batch, return_grads=False)
    ref.compute_gradients(batch, return_grads=False)
    fast.apply_gradients()
    ref.apply_gradients()
    for pf, pr in zip(fast.actor.parameters(), ref.actor.parameters()):
        torch.testing.assert_close(pf.detach(), pr.detach(), atol=2e-6, rtol=1e-4)


def test_lr_hot_swap_reaches_numpy_adam_and_flag_is_fixed():
    fast, _ = _pair(PPO, CASES[0][1], CASES[0][2])
    fast.update_algorithm_parameter("lr", 0.0)
    before = [p.detach().clone() for p in fast.actor.parameters()]
    fast.compute_gradients(_batch(16, seed=1), return_grads=False)
    fast.apply_gradients()
    assert all(torch.equal(b, p.detach()) for b, p in zip(before, fast.actor.parameters()))
    assert fast.optimizer.param_groups[0]["lr"] == 0.0
    fast.update_algorithm_parameter("numpy_update", True)  # same value: accepted
    with pytest.raises(ValueError, match="fixed"):
        fast.update_algorithm_parameter("numpy_update", False)


def test_unsupported_actors_keep_the_torch_path():
    torch.manual_seed(0)
    gaussian = OnPolicyActor("cpu", gym.spaces.Box(-1, 1, (4,)), gym.spaces.Box(-1, 1, (2,)), "PPO",
                             feature_extractor_kwargs={"hidden_sizes": [8], "activation": "tanh"})
    assert PPO("cpu", gaussian, None).update_engine is None
    elu = OnPolicyActor("cpu", gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), "PPO",
                        feature_extractor_kwargs={"hidden_sizes": [8], "activation": "elu"})
    engine, reason = NumpyActorCriticUpdate.build(PPO("cpu", elu, None))
    assert engine is None and "activation" in reason
    assert np.isfinite(PPO("cpu", elu, None).compute_gradients(_batch(8, 0) | {prl.ACT: torch.zeros(8, 1, dtype=torch.long)},
                                                                return_grads=False)[1]["Loss"])
