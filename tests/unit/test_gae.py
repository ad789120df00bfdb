"""compute_gae and the on-policy storages' targets against values computed by hand.

Conventions (see ``compute_gae``): tensors are (T, N, 1); ``val`` has T + 1 entries, the
last one being the value of the observation reached after the final step. ``term[t]`` /
``trunc[t]`` say that step t ended its episode; ``val[t + 1]`` is then the first
observation of the next episode and must not be used for step t.
"""

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.storages import GAEBuffer, VanillaOnPolicyBuffer, compute_gae

from _util import TablePPO, write_rollout


def col(*values):
    """(T,) numbers -> tensor (T, 1, 1) (one environment)."""
    return torch.tensor(values, dtype=torch.float32).reshape(-1, 1, 1)


def cols(*per_env):
    """N sequences of T numbers -> tensor (T, N, 1)."""
    return torch.tensor(per_env, dtype=torch.float32).T.unsqueeze(-1).contiguous()


def zeros(T, N=1):
    return torch.zeros(T, N, 1)


def assert_close(actual, expected):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=torch.float32).reshape(actual.shape),
                               rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ one environment
# gamma 0.9, lambda 0.8 -> gamma * lambda = 0.72
REW = col(1.0, 2.0, 3.0)
VAL = col(0.5, 1.0, 1.5, 2.0)          # last entry: value of the obs after step 2
GAMMA, LAMBDA = 0.9, 0.8


def test_bootstrap_at_end_of_rollout():
    # delta_t = r_t + 0.9 V_{t+1} - V_t
    # d0 = 1 + 0.9*1.0 - 0.5 = 1.4 ; d1 = 2 + 0.9*1.5 - 1.0 = 2.35 ; d2 = 3 + 0.9*2.0 - 1.5 = 3.3
    # A2 = 3.3 ; A1 = 2.35 + 0.72*3.3 = 4.726 ; A0 = 1.4 + 0.72*4.726 = 4.80272
    adv, ret = compute_gae(REW, VAL, zeros(3), zeros(3), zeros(3), GAMMA, LAMBDA)
    assert adv.shape == ret.shape == (3, 1, 1)
    assert_close(adv, [4.80272, 4.726, 3.3])
    assert_close(ret, [4.80272 + 0.5, 4.726 + 1.0, 3.3 + 1.5])


def test_termination_cuts_bootstrap_and_advantage_chain():
    term = col(0.0, 1.0, 0.0)   # step 1 terminates its episode
    # d1 = 2 + 0 - 1.0 = 1.0 (V_2 belongs to the next episode) ; d0 = 1.4 ; d2 = 3.3
    # A2 = 3.3 ; A1 = 1.0 (no A2 term) ; A0 = 1.4 + 0.72*1.0 = 2.12
    adv, ret = compute_gae(REW, VAL, term, zeros(3), zeros(3), GAMMA, LAMBDA)
    assert_close(adv, [2.12, 1.0, 3.3])
    assert_close(ret, [2.62, 2.0, 4.8])


def test_truncation_bootstraps_final_observation_value_and_cuts_chain():
    trunc = col(0.0, 1.0, 0.0)          # step 1 hits the time limit
    trunc_val = col(0.0, 4.0, 0.0)      # value of the final observation of that episode
    # d1 = 2 + 0.9*4.0 - 1.0 = 4.6 (TRUNC_VAL, not V_2 = 1.5) ; A1 = 4.6 (chain cut)
    # A0 = 1.4 + 0.72*4.6 = 4.712 ; A2 = 3.3
    adv, ret = compute_gae(REW, VAL, zeros(3), trunc, trunc_val, GAMMA, LAMBDA)
    assert_close(adv, [4.712, 4.6, 3.3])
    assert_close(ret, [5.212, 5.6, 4.8])


def test_truncation_and_termination_differ():
    flag = col(0.0, 1.0, 0.0)
    trunc_val = col(0.0, 4.0, 0.0)
    adv_term, ret_term = compute_gae(REW, VAL, flag, zeros(3), zeros(3), GAMMA, LAMBDA)
    adv_trunc, ret_trunc = compute_gae(REW, VAL, zeros(3), flag, trunc_val, GAMMA, LAMBDA)
    assert not torch.allclose(adv_term, adv_trunc)
    assert not torch.allclose(ret_term, ret_trunc)
    # Only the steps up to the cut differ; after it, both are the same fresh episode.
    assert torch.allclose(adv_term[2], adv_trunc[2])
    # Truncation with a zero final value is the same as termination.
    adv_trunc0, _ = compute_gae(REW, VAL, zeros(3), flag, zeros(3), GAMMA, LAMBDA)
    assert_close(adv_trunc0, adv_term)


def test_trunc_val_ignored_where_not_truncated():
    # A stray trunc_val on a step that did not truncate must not change anything.
    base, _ = compute_gae(REW, VAL, zeros(3), zeros(3), zeros(3), GAMMA, LAMBDA)
    noisy, _ = compute_gae(REW, VAL, zeros(3), zeros(3), col(5.0, -7.0, 9.0), GAMMA, LAMBDA)
    assert_close(noisy, base)


def test_lambda_zero_is_one_step_td():
    adv, _ = compute_gae(REW, VAL, zeros(3), zeros(3), zeros(3), GAMMA, 0.0)
    assert_close(adv, [1.4, 2.35, 3.3])


def test_termination_on_last_step_ignores_bootstrap_value():
    term = col(0.0, 0.0, 1.0)
    # d2 = 3 - 1.5 = 1.5 ; A1 = 2.35 + 0.72*1.5 = 3.43 ; A0 = 1.4 + 0.72*3.43 = 3.8696
    adv, _ = compute_gae(REW, VAL, term, zeros(3), zeros(3), GAMMA, LAMBDA)
    assert_close(adv, [3.8696, 3.43, 1.5])


# ----------------------------------------------------------------- two environments
def test_lambda_one_is_monte_carlo_minus_values_two_envs():
    gamma = 0.5
    # env 0: no episode end; bootstrapped with V = 8 after the last step.
    #   G3 = 1 + 0.5*8 = 5 ; G2 = 1 + 0.5*5 = 3.5 ; G1 = 1 + 0.5*3.5 = 2.75 ; G0 = 1 + 0.5*2.75 = 2.375
    #   values 1, 2, 3, 4 -> advantages 1.375, 0.75, 0.5, 1.0
    # env 1: terminates at step 1; the new episode is bootstrapped with V = 2.
    #   G3 = 3 + 0.5*2 = 4 ; G2 = 2 + 0.5*4 = 4 ; G1 = 1 (terminal) ; G0 = 0 + 0.5*1 = 0.5
    #   values 1, 1, 1, 1 -> advantages -0.5, 0, 3, 3
    rew = cols([1, 1, 1, 1], [0, 1, 2, 3])
    val = cols([1, 2, 3, 4, 8], [1, 1, 1, 1, 2])
    term = cols([0, 0, 0, 0], [0, 1, 0, 0])
    adv, ret = compute_gae(rew, val, term, zeros(4, 2), zeros(4, 2), gamma, 1.0)
    assert adv.shape == (4, 2, 1)
    assert_close(adv[:, 0], [1.375, 0.75, 0.5, 1.0])
    assert_close(adv[:, 1], [-0.5, 0.0, 3.0, 3.0])
    assert_close(ret[:, 0], [2.375, 2.75, 3.5, 5.0])
    assert_close(ret[:, 1], [0.5, 1.0, 4.0, 4.0])


def _monte_carlo(rew, val, term, trunc, trunc_val, gamma):
    """Reference: discounted returns computed backwards one env at a time, plainly."""
    T, N, _ = rew.shape
    ret = torch.zeros_like(rew)
    for n in range(N):
        g = float(val[T, n, 0])
        for t in reversed(range(T)):
            if term[t, n, 0]:
                g = 0.0
            elif trunc[t, n, 0]:
                g = float(trunc_val[t, n, 0])
            g = float(rew[t, n, 0]) + gamma * g
            ret[t, n, 0] = g
    return ret


@pytest.mark.parametrize("seed", range(5))
def test_lambda_one_matches_reference_monte_carlo_random(seed):
    g = torch.Generator().manual_seed(seed)
    T, N = 7, 3
    rew = torch.randn(T, N, 1, generator=g)
    val = torch.randn(T + 1, N, 1, generator=g)
    ends = torch.rand(T, N, 1, generator=g)
    term = (ends < 0.2).float()
    trunc = ((ends >= 0.2) & (ends < 0.35)).float()
    trunc_val = torch.randn(T, N, 1, generator=g) * trunc
    adv, ret = compute_gae(rew, val, term, trunc, trunc_val, 0.95, 1.0)
    expected = _monte_carlo(rew, val, term, trunc, trunc_val, 0.95)
    torch.testing.assert_close(ret, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(adv, expected - val[:-1], rtol=1e-5, atol=1e-5)


# ------------------------------------------------- storages compute the same targets
def _algo_and_actor(actor_builder, gamma):
    """A TablePPO (bootstrap values are the rollout's own ``val[T]`` and ``trunc_val``, see
    ``write_rollout``) whose ``batches()`` yield one mini-batch of everything."""
    obs_space = gym.spaces.Box(-np.inf, np.inf, shape=(1,), dtype=np.float32)
    actor = actor_builder(obs_space, gym.spaces.Discrete(2))
    algo = TablePPO.create_factory(gamma=gamma, num_mini_batch=1, num_epochs=1)[0]("cpu", actor, None)
    return actor, algo


def _fill(storage, rew, val, term, trunc, trunc_val):
    """Write a rollout through the collection-side API and return ``get_data()``. The
    observation of step t of env n is 10 t + n (unique, so that samples can be matched
    after shuffling); ``val[T]`` and ``trunc_val`` reach the storage through the
    algorithm's ``bootstrap``."""
    T, N, _ = rew.shape
    obs = torch.tensor([[[10.0 * t + n] for n in range(N)] for t in range(T + 1)])
    write_rollout(storage, obs, torch.zeros(T, N, 1, dtype=torch.int64), torch.zeros(T, N, 1), val,
                  rew[..., 0], term[..., 0], trunc[..., 0], trunc_val)
    return storage.get_data()


def _targets(storage_cls, storage_kwargs, actor_builder, gamma, rollout):
    actor, algo = _algo_and_actor(actor_builder, gamma)
    factory = storage_cls.create_factory(size=rollout[0].shape[0], **storage_kwargs)
    col_side, learner_side = factory("cpu", actor, algo, None), factory("cpu", actor, algo, None)
    data = _fill(col_side, *rollout)
    # the bootstrap values went through the storage: the last value and the truncated one
    torch.testing.assert_close(data[prl.VAL], rollout[1])
    torch.testing.assert_close(data[prl.TRUNC_VAL], rollout[4])
    learner_side.add_data(data)
    (batch,) = list(learner_side.batches())
    order = torch.argsort(batch[prl.OBS][:, 0])
    return {k: v[order] for k, v in batch.items()}


def _two_env_rollout():
    rew = cols([1, 1, 1, 1], [0, 1, 2, 3])
    val = cols([1, 2, 3, 4, 8], [1, 1, 1, 1, 2])
    term = cols([0, 0, 0, 0], [0, 1, 0, 0])
    trunc = cols([0, 0, 1, 0], [0, 0, 0, 0])
    trunc_val = cols([0, 0, 6, 0], [0, 0, 0, 0])
    return rew, val, term, trunc, trunc_val


def test_gae_buffer_uses_compute_gae_with_algorithm_gamma(actor_builder):
    rollout = _two_env_rollout()
    batch = _targets(GAEBuffer, {"gae_lambda": 0.8}, actor_builder, 0.9, rollout)
    adv, ret = compute_gae(*rollout, 0.9, 0.8)
    # samples sorted by obs = 10 t + n: order (t, n) row-major
    torch.testing.assert_close(batch[prl.ADV], adv.reshape(-1, 1))
    torch.testing.assert_close(batch[prl.RET], ret.reshape(-1, 1))


def test_vanilla_buffer_equals_gae_lambda_one(actor_builder):
    rollout = _two_env_rollout()
    vanilla = _targets(VanillaOnPolicyBuffer, {}, actor_builder, 0.5, rollout)
    gae1 = _targets(GAEBuffer, {"gae_lambda": 1.0}, actor_builder, 0.5, rollout)
    torch.testing.assert_close(vanilla[prl.ADV], gae1[prl.ADV])
    torch.testing.assert_close(vanilla[prl.RET], gae1[prl.RET])
    # and both are the discounted returns, by hand (env 0 is truncated at step 2 with V=6):
    # env 0: G3 = 1 + 0.5*8 = 5 ; G2 = 1 + 0.5*6 = 4 ; G1 = 1 + 0.5*4 = 3 ; G0 = 1 + 0.5*3 = 2.5
    # env 1: G3 = 4 ; G2 = 4 ; G1 = 1 ; G0 = 0.5
    expected_ret = torch.tensor([[2.5, 0.5], [3.0, 1.0], [4.0, 4.0], [5.0, 4.0]]).reshape(-1, 1)
    torch.testing.assert_close(vanilla[prl.RET], expected_ret)
    values = torch.tensor([[1, 1], [2, 1], [3, 1], [4, 1]], dtype=torch.float32).reshape(-1, 1)
    torch.testing.assert_close(vanilla[prl.ADV], expected_ret - values)
    # GAE with lambda < 1 differs on this rollout
    gae08 = _targets(GAEBuffer, {"gae_lambda": 0.8}, actor_builder, 0.5, rollout)
    assert not torch.allclose(gae08[prl.ADV], vanilla[prl.ADV])


def test_gamma_hot_swap_applies_to_next_targets(actor_builder):
    rollout = _two_env_rollout()
    actor, algo = _algo_and_actor(actor_builder, 0.9)
    factory = GAEBuffer.create_factory(size=4, gae_lambda=1.0)
    col_side, learner_side = factory("cpu", actor, algo, None), factory("cpu", actor, algo, None)
    data = _fill(col_side, *rollout)
    algo.update_algorithm_parameter("gamma", 0.5)
    learner_side.add_data(data)
    (batch,) = list(learner_side.batches())
    ret = batch[prl.RET][torch.argsort(batch[prl.OBS][:, 0])]
    torch.testing.assert_close(ret, compute_gae(*rollout, 0.5, 1.0)[1].reshape(-1, 1))
