"""The fused categorical actor-critic loss equals the reference autograd loss, value and gradient."""

import gymnasium as gym
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.algorithms import A2C, PPO


def _batch(n, num_actions, seed):
    g = torch.Generator().manual_seed(seed)
    return {prl.OBS: torch.randn(n, 4, generator=g),
            prl.ACT: torch.randint(0, num_actions, (n, 1), generator=g),
            # Old log-probabilities far from the current ones, so that many ratios are clipped.
            prl.LOGP: torch.randn(n, 1, generator=g) * 0.5 - 1.0,
            prl.ADV: torch.randn(n, 1, generator=g),
            prl.RET: torch.randn(n, 1, generator=g),
            # Values at collection time, for PPO's clipped value loss.
            prl.VAL: torch.randn(n, 1, generator=g)}


def _loss_and_grads(algo, batch, fused):
    loss, info = algo.compute_loss(batch, fused=fused)
    algo.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    return loss.item(), info, [p.grad.clone() for p in algo.actor.parameters()]


@pytest.mark.parametrize("cls,kwargs", [
    (PPO, {"clip_param": 0.1, "entropy_coef": 0.01}),
    (PPO, {"clip_param": 0.3, "entropy_coef": 0.0, "normalize_advantages": False,
           "use_clipped_value_loss": False}),
    (A2C, {"entropy_coef": 0.05}),
    (A2C, {"entropy_coef": 0.0, "normalize_advantages": True}),
])
def test_fused_equals_reference(cls, kwargs):
    torch.manual_seed(1)
    actor = OnPolicyActor("cpu", gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3), cls.name,
                          feature_extractor_kwargs={"hidden_sizes": [16, 16], "activation": "tanh"})
    algo = cls("cpu", actor, None, **kwargs)
    batch = _batch(64, 3, seed=2)
    loss_f, info_f, grads_f = _loss_and_grads(algo, batch, fused=True)
    loss_r, info_r, grads_r = _loss_and_grads(algo, batch, fused=False)
    assert loss_f == pytest.approx(loss_r, abs=1e-6)
    assert info_f.keys() == info_r.keys()
    for key in info_f:
        assert info_f[key] == pytest.approx(info_r[key], abs=1e-6), key
    if cls is PPO:
        assert 0.0 < info_f["ClipFraction"] < 1.0  # the case where clipping matters is covered
    for gf, gr in zip(grads_f, grads_r):
        torch.testing.assert_close(gf, gr, atol=1e-6, rtol=1e-5)


def test_gaussian_policy_takes_reference_path():
    torch.manual_seed(0)
    actor = OnPolicyActor("cpu", gym.spaces.Box(-1, 1, (4,)), gym.spaces.Box(-1, 1, (2,)), "PPO",
                          feature_extractor_kwargs={"hidden_sizes": [8], "activation": "tanh"})
    algo = PPO("cpu", actor, None)
    batch = _batch(32, 1, seed=3)
    batch[prl.ACT] = torch.randn(32, 2)
    loss_f, _, grads_f = _loss_and_grads(algo, batch, fused=True)
    loss_r, _, grads_r = _loss_and_grads(algo, batch, fused=False)
    assert loss_f == loss_r
    for gf, gr in zip(grads_f, grads_r):
        assert torch.equal(gf, gr)
