"""V-trace (VTraceBuffer, compute_vtrace): targets against the paper's definition, the
on-policy case against GAE, the truncation thresholds, the collector/learner protocol,
the configuration (learning CartPole with A2C: tests/learning/test_learning_vtrace.py; the
IMPALA example with asynchronous collectors on Ray: tests/distributed/test_vtrace_ray.py).

Rollouts of the storage tests are synthetic (tests/_util.py) and valued by a real small
actor: the learner side evaluates that actor, and the references are computed from the
same actor's outputs.
"""


import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.algorithms import A2C
from pytorchrl.agent.storages import STORAGES, GAEBuffer, VTraceBuffer, compute_vtrace
from pytorchrl.agent.storages.vtrace import NEXT_OBS, TRUNC_INDEX, TRUNC_OBS
from pytorchrl.config import ConfigError, load_config, validate_config

from _util import TablePPO, final_obs_of, make_actor, random_rollout, write_rollout
from cli_helpers import IMPALA_CONF, tiny

OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float32)
DISCRETE = gym.spaces.Discrete(3)
T, N = 10, 3
GAMMA = 0.9


def build(storage_cls=VTraceBuffer, size=T, actor=None, **kwargs):
    """(collector-side storage, learner-side storage, actor, algorithm) sharing one actor."""
    actor = actor or make_actor(OBS_SPACE, DISCRETE)
    algo = TablePPO.create_factory(gamma=GAMMA)[0]("cpu", actor, None)
    factory = storage_cls.create_factory(size=size, **kwargs)
    return factory("cpu", actor, algo, None), factory("cpu", actor, algo, None), actor, algo


def rollout_with_ends(seed=0):
    """A random rollout (T x N) with at least two terminations and two truncations, one of
    them on the last step (where the rollout end and the time limit meet)."""
    r = random_rollout(T, N, obs_dim=3, action_space=DISCRETE, seed=seed)
    r["term"][2, 0] = r["term"][6, 1] = 1.0
    r["trunc"][4, 2] = r["trunc"][T - 1, 0] = 1.0
    for t, n in ((2, 0), (6, 1)):
        r["trunc"][t, n] = 0.0
    for t, n in ((4, 2), (T - 1, 0)):
        r["term"][t, n] = 0.0
    return r


def actor_outputs(actor, r, k):
    """The actor's log-probabilities (k, N) of the rollout's actions and values of every
    observation (k + 1, N) and of the final observations of truncated steps (k, N)."""
    with torch.no_grad():
        logp, _, val = actor.evaluate_actions(r["obs"][:k].reshape(k * N, 3), r["act"][:k].reshape(k * N, 1))
        last = actor.get_value(r["obs"][k])
        trunc_val = torch.zeros(k, N)
        for t, n in zip(*np.nonzero(r["trunc"][:k].numpy())):
            trunc_val[t, n] = actor.get_value(torch.as_tensor(final_obs_of(r["obs"], t, n))[None])[0, 0]
    val = torch.cat([val.reshape(k, N), last.reshape(1, N)])
    return logp.reshape(k, N), val, trunc_val


def paper_vtrace(rew, val, term, trunc, trunc_val, ratio, gamma, lam, rho_bar, pg_rho_bar, c_bar):
    """V-trace by its definition (Espeholt et al. 2018, eq. 1 and the policy gradient of
    section 4.2), one sum per target, in float64: O(T^2) per environment.

    v_s = V(x_s) + sum_{t=s}^{end} gamma^{t-s} (prod_{i=s}^{t-1} c_i) rho_t delta_t, where
    the sum stops at the episode's end within the rollout, and delta_t bootstraps with the
    next observation's value, the final observation's after a truncation, 0 after a
    termination."""
    rew, val, term, trunc, trunc_val, ratio = (np.asarray(x, dtype=np.float64).reshape(x.shape[0], -1)
                                               for x in (rew, val, term, trunc, trunc_val, ratio))
    steps, envs = rew.shape
    vs, adv = np.zeros((steps, envs)), np.zeros((steps, envs))

    def next_value(values_after, t, n):
        if term[t, n]:
            return 0.0
        if trunc[t, n]:
            return trunc_val[t, n]
        return values_after(t + 1, n)

    state_value = lambda t, n: val[t, n]
    for n in range(envs):
        for s in range(steps):
            total = val[s, n]
            for t in range(s, steps):
                traces = np.prod([lam * min(c_bar, ratio[i, n]) for i in range(s, t)])
                delta = min(rho_bar, ratio[t, n]) * (rew[t, n] + gamma * next_value(state_value, t, n) - val[t, n])
                total += gamma ** (t - s) * traces * delta
                if term[t, n] or trunc[t, n]:
                    break
            vs[s, n] = total
    target = lambda t, n: vs[t, n] if t < steps else val[steps, n]
    for n in range(envs):
        for s in range(steps):
            adv[s, n] = min(pg_rho_bar, ratio[s, n]) * (rew[s, n] + gamma * next_value(target, s, n) - val[s, n])
    return adv, vs


def learner_batch(learner, data):
    """Hand ``data`` to the learner side and take its one full batch (in step order)."""
    learner.add_data(data)
    learner.prepare()
    return dict(learner.flat)


# ------------------------------------------------------------------- the targets
@pytest.mark.parametrize("steps", [None, 7], ids=["full", "cut"])
def test_targets_follow_the_papers_definition(steps):
    """Off-policy data (behaviour log-probs far from the actor's), several terminations and
    truncations: RET and ADV are the paper's v_s and policy-gradient advantages computed
    with the learner's actor, whatever each threshold truncates."""
    kwargs = dict(vtrace_lambda=0.8, clip_rho_threshold=1.3, clip_pg_rho_threshold=0.9, clip_c_threshold=1.1)
    collector, learner, actor, _ = build(**kwargs)
    r = rollout_with_ends()
    k = steps or T
    logp, val, trunc_val = actor_outputs(actor, r, k)
    behaviour = logp + torch.randn(k, N, generator=torch.Generator().manual_seed(1)) * 0.8
    r["logp"] = torch.cat([behaviour, torch.zeros(T - k, N)]).unsqueeze(-1)
    ratio = (logp - behaviour).exp()
    # The ratios straddle every threshold, so that each truncation changes the result.
    for bar in (1.3, 0.9, 1.1):
        assert (ratio > bar).any() and (ratio < bar).any()
    write_rollout(collector, **r, steps=steps)
    batch = learner_batch(learner, collector.get_data())

    adv, vs = paper_vtrace(r["rew"][:k], val, r["term"][:k], r["trunc"][:k], trunc_val, ratio, GAMMA, **{
        "lam": 0.8, "rho_bar": 1.3, "pg_rho_bar": 0.9, "c_bar": 1.1})
    np.testing.assert_allclose(batch[prl.RET].reshape(k, N).numpy(), vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(batch[prl.ADV].reshape(k, N).numpy(), adv, rtol=1e-5, atol=1e-5)
    # The batch also carries the current policy's log-probs and values (for PPO's ratio
    # and value clipping), and the episode ends.
    torch.testing.assert_close(batch[prl.LOGP].reshape(k, N), logp)
    torch.testing.assert_close(batch[prl.VAL].reshape(k, N), val[:k])
    torch.testing.assert_close(batch[prl.DONE].reshape(k, N), torch.maximum(r["term"], r["trunc"])[:k])
    torch.testing.assert_close(batch[prl.OBS], r["obs"][:k].reshape(k * N, 3))
    # Each update's metrics describe the ratios of the data.
    info = {}
    learner.after_update(batch, info)
    assert info["VTraceAbsLogRatio"] == pytest.approx((logp - behaviour).abs().mean().item(), rel=1e-5)
    assert info["VTraceClippedRho"] == pytest.approx((ratio > 1.3).float().mean().item())


@pytest.mark.parametrize("lam", [1.0, 0.7])
def test_on_policy_data_gives_the_gae_targets(lam):
    """pi == mu: every ratio is 1 and no threshold acts; the V-trace targets are then the
    TD(lambda) returns, GAEBuffer's RET with gae_lambda = lambda, and with lambda = 1 the
    advantages are GAE's too (discounted returns bootstrapped at cuts and time limits)."""
    actor = make_actor(OBS_SPACE, DISCRETE)
    vtrace, vtrace_learner, _, _ = build(VTraceBuffer, actor=actor, vtrace_lambda=lam)
    gae, gae_learner, _, _ = build(GAEBuffer, actor=actor, gae_lambda=lam)
    r = rollout_with_ends(seed=3)
    logp, val, trunc_val = actor_outputs(actor, r, T)
    r.update(logp=logp.unsqueeze(-1), val=val.unsqueeze(-1), trunc_val=trunc_val.unsqueeze(-1))
    write_rollout(vtrace, **r)
    write_rollout(gae, **r)
    got = learner_batch(vtrace_learner, vtrace.get_data())
    expected = learner_batch(gae_learner, gae.get_data())
    torch.testing.assert_close(got[prl.RET], expected[prl.RET])
    if lam == 1.0:
        torch.testing.assert_close(got[prl.ADV], expected[prl.ADV])
    else:
        # With lambda < 1 V-trace's advantage uses the target v_{s+1}, not GAE's sum.
        assert not torch.allclose(got[prl.ADV], expected[prl.ADV])


def test_each_threshold_truncates_its_ratio():
    """One environment, two steps, no episode end, hand-computed: a ratio above a
    threshold is replaced by the threshold, one below it is kept."""
    rew = torch.tensor([1.0, 2.0]).reshape(2, 1, 1)
    val = torch.tensor([0.5, 1.0, 3.0]).reshape(3, 1, 1)
    zeros = torch.zeros(2, 1, 1)
    gamma = 0.5

    def targets(ratios, **kwargs):
        """[adv_0, adv_1, v_0, v_1] computed by compute_vtrace."""
        log_ratio = torch.tensor(ratios).log().reshape(2, 1, 1)
        adv, vs = compute_vtrace(rew, val, zeros, zeros, zeros, log_ratio, gamma, **kwargs)
        return adv.reshape(2).tolist() + vs.reshape(2).tolist()

    def expected(rho, c0, pg):
        """The same by hand from the truncated ratios rho_t, trace c_0 and pg ratios."""
        r, v = rew.reshape(2).tolist(), val.reshape(3).tolist()
        d = [r[t] + gamma * v[t + 1] - v[t] for t in range(2)]
        vs1 = v[1] + rho[1] * d[1]
        vs0 = v[0] + rho[0] * d[0] + gamma * c0 * rho[1] * d[1]
        return [pg[0] * (r[0] + gamma * vs1 - v[0]), pg[1] * (r[1] + gamma * v[2] - v[1]), vs0, vs1]

    ratios = [3.0, 0.5]
    # Default thresholds (1): the ratio 3 becomes 1 everywhere, 0.5 stays.
    got = targets(ratios)
    assert got == pytest.approx(expected(rho=[1.0, 0.5], c0=1.0, pg=[1.0, 0.5]))
    # Each threshold alone: only its own use of the ratio changes.
    assert targets(ratios, clip_rho_threshold=2.0) == pytest.approx(expected(rho=[2.0, 0.5], c0=1.0, pg=[1.0, 0.5]))
    assert targets(ratios, clip_c_threshold=2.5) == pytest.approx(expected(rho=[1.0, 0.5], c0=2.5, pg=[1.0, 0.5]))
    assert targets(ratios, clip_pg_rho_threshold=1.5) == pytest.approx(expected(rho=[1.0, 0.5], c0=1.0, pg=[1.5, 0.5]))
    # None: no truncation; lambda scales the traces only.
    assert targets(ratios, clip_rho_threshold=None, clip_pg_rho_threshold=None, clip_c_threshold=None) == \
        pytest.approx(expected(rho=[3.0, 0.5], c0=3.0, pg=[3.0, 0.5]))
    assert targets(ratios, vtrace_lambda=0.5) == pytest.approx(expected(rho=[1.0, 0.5], c0=0.5, pg=[1.0, 0.5]))
    assert got != pytest.approx(expected(rho=[3.0, 0.5], c0=3.0, pg=[3.0, 0.5]))


# ------------------------------------------------------------------- the protocol
def test_collector_sends_observations_not_values():
    """The collector asks nothing of the algorithm (its critic would be stale by the time
    the learner trains): it sends the behaviour log-probs, the observation after the last
    step and the final observations of the truncated episodes, where they ended."""
    collector, _, _, algo = build()
    r = rollout_with_ends()
    write_rollout(collector, **r)
    data = collector.get_data()
    assert algo.bootstrap_calls == []
    assert prl.VAL not in data and prl.TRUNC_VAL not in data
    torch.testing.assert_close(data[prl.LOGP].reshape(T, N), r["logp"].reshape(T, N))
    torch.testing.assert_close(data[NEXT_OBS], r["obs"][T])
    ends = [(t, n) for t, n in zip(*np.nonzero(r["trunc"].numpy()))]
    assert data[TRUNC_INDEX].tolist() == [[t, n] for t, n in ends] and len(ends) >= 2
    for row, (t, n) in zip(data[TRUNC_OBS], ends):
        np.testing.assert_array_equal(row.numpy(), final_obs_of(r["obs"], t, n))


def test_learner_trains_every_rollout_once_and_reports_the_ratios():
    """Rollouts of several collectors are prepared together, yielded as the algorithm's
    mini-batches, then forgotten; each update's metrics gain the ratio statistics."""
    collector, learner, actor, algo = build()
    for seed in (0, 1):
        write_rollout(collector, **rollout_with_ends(seed))
        learner.add_data(collector.get_data())
    algo.num_epochs, algo.num_mini_batch = 2, 3
    batches = list(learner.batches())
    assert len(batches) == 6 and sum(len(b[prl.RET]) for b in batches) == 2 * 2 * T * N
    assert not learner.ready()
    info = {"Loss": 1.0}
    learner.after_update(batches[0], info)
    # The behaviour log-probs of random_rollout are not the actor's: off-policy data.
    assert info["VTraceAbsLogRatio"] > 0.1 and 0.0 <= info["VTraceClippedRho"] <= 1.0 and info["Loss"] == 1.0


def test_parameters_are_checked_and_hot_swappable():
    collector, _, _, _ = build()
    assert collector.hyperparameters == {"size": T, "vtrace_lambda": 1.0, "clip_rho_threshold": 1.0,
                                         "clip_pg_rho_threshold": 1.0, "clip_c_threshold": 1.0}
    collector.update_storage_parameter("clip_rho_threshold", 2.0)
    assert collector.clip_rho_threshold == 2.0
    with pytest.raises(ValueError, match="vtrace_lambda must be in"):
        collector.update_storage_parameter("vtrace_lambda", 1.5)
    with pytest.raises(ValueError, match="clip_c_threshold must be > 0"):
        build(clip_c_threshold=0.0)


def test_configuration_names_and_checks_the_storage():
    assert "VTraceBuffer" in STORAGES
    config = validate_config(tiny(algorithm={"name": "A2C"}, storage={"name": "VTraceBuffer", "size": 8,
                                                                       "clip_rho_threshold": None}))
    assert config["storage"] == {"name": "VTraceBuffer", "size": 8, "vtrace_lambda": 1.0,
                                 "clip_rho_threshold": None, "clip_pg_rho_threshold": 1.0, "clip_c_threshold": 1.0}
    with pytest.raises(ConfigError, match="storage.vtrace_lambda"):
        validate_config(tiny(storage={"name": "VTraceBuffer", "vtrace_lambda": 2.0}))
    with pytest.raises(ConfigError, match="storage.clip_c_threshold"):
        validate_config(tiny(storage={"name": "VTraceBuffer", "clip_c_threshold": 0}))
    off_policy = tiny(storage={"name": "VTraceBuffer"})
    off_policy["algorithm"] = {"name": "DDQN"}
    with pytest.raises(ConfigError, match="storage.name: DDQN learns from a replay storage"):
        validate_config(off_policy)
    example = load_config(IMPALA_CONF)
    assert example["algorithm"]["name"] == "A2C" and example["storage"]["name"] == "VTraceBuffer"
    assert example["scheme"]["col_workers_communication"] == "async" and example["scheme"]["num_col_workers"] == 2
