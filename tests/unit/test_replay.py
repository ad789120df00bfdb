"""Replay storages (ReplayBuffer, NStepReplayBuffer, PERBuffer): the collector side turns
recorded steps into n-step transitions, the learner side keeps them in a ring, grants
mini-batches on the algorithm's schedule and (PER) samples them by priority.

Expected values are computed here by hand (a plain per-environment loop for n-step
returns, numpy for priorities and importance weights), never by the code under test.
"""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.algorithms import DDQN
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import NStepReplayBuffer, PERBuffer, ReplayBuffer
from pytorchrl.agent.storages.base import FINAL_OBS
from pytorchrl.scheme.collection.c_worker import CWorker

from _util import make_actor

OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, (3,), dtype=np.float32)
ACT_SPACE = gym.spaces.Discrete(2)


# ------------------------------------------------------------------------ helpers
def make_algo(gamma=0.9, update_every=4, num_updates=1, start_steps=0, mini_batch_size=4, **kw):
    actor = OffPolicyActor.create_factory(OBS_SPACE, ACT_SPACE, "DDQN",
                                          common_feature_extractor_kwargs={"hidden_sizes": [8]})("cpu")
    return DDQN("cpu", actor, gamma=gamma, update_every=update_every, num_updates=num_updates,
                start_steps=start_steps, mini_batch_size=mini_batch_size, **kw)


def make_storage(cls=NStepReplayBuffer, size=100, algo=None, **kw):
    algo = algo or make_algo()
    return cls("cpu", algo.actor, algo, None, size=size, **kw)


def synthetic(T, N, seed=0):
    """Observations with unique first coordinates (obs[t, n, 0] = 100 t + n), random
    actions and rewards; ends are set by each test."""
    g = np.random.default_rng(seed)
    obs = g.standard_normal((T + 1, N, 3)).astype(np.float32)
    obs[..., 0] = 100.0 * np.arange(T + 1)[:, None] + np.arange(N)[None, :]
    return dict(obs=obs, act=g.integers(0, 2, (T, N, 1)), rew=g.standard_normal((T, N)).astype(np.float32),
                term=np.zeros((T, N), bool), trunc=np.zeros((T, N), bool))


def final_of(obs, t, n):
    """The final observation of env n's episode ended at step t (distinct from obs[t + 1, n],
    which is then the first observation of the next episode)."""
    return obs[t + 1, n] + np.float32(0.5)


def record(storage, seq, t0, t1):
    """Write steps t0 .. t1 - 1 of ``seq`` as one rollout (start/insert/finish), as CWorker does."""
    storage.start(seq["obs"][t0])
    for t in range(t0, t1):
        ended = np.flatnonzero(seq["term"][t] | seq["trunc"][t])
        storage.insert({prl.ACT: seq["act"][t], prl.REW: seq["rew"][t], prl.TERM: seq["term"][t],
                        prl.TRUNC: seq["trunc"][t], prl.OBS2: seq["obs"][t + 1],
                        FINAL_OBS: {int(n): final_of(seq["obs"], t, n) for n in ended}})
    storage.finish()
    return {k: v.numpy() for k, v in storage.get_data().items()}


def next_obs_of(seq):
    """(T, N, *obs_shape): the observation after each step, the final one where an episode ended."""
    obs, ended = seq["obs"], seq["term"] | seq["trunc"]
    nxt = obs[1:].copy()
    for t, n in zip(*np.nonzero(ended)):
        nxt[t, n] = final_of(obs, t, n)
    return nxt


def reference(seq, gamma, n, starts, nxt=None):
    """Hand-computed n-step transitions of steps ``starts`` (each env), env-minor like the
    storage's output (step-major flattening). ``nxt``: observations after each step
    (default ``next_obs_of(seq)``)."""
    obs, act, rew, term, trunc = seq["obs"], seq["act"], seq["rew"], seq["term"], seq["trunc"]
    nxt = next_obs_of(seq) if nxt is None else nxt
    N = rew.shape[1]
    out = {k: [] for k in (prl.OBS, prl.ACT, prl.REW, prl.OBS2, prl.DISCOUNT)}
    for t in starts:
        for e in range(N):
            ret, discount = 0.0, gamma ** n
            for j in range(n):
                s = t + j
                ret += gamma ** j * float(rew[s, e])
                if term[s, e]:
                    discount = 0.0
                    break
                if trunc[s, e]:
                    discount = gamma ** (j + 1)
                    break
            out[prl.OBS].append(obs[t, e])
            out[prl.ACT].append(act[t, e])
            out[prl.REW].append([ret])
            out[prl.OBS2].append(nxt[s, e])
            out[prl.DISCOUNT].append([discount])
    return {k: np.array(v) for k, v in out.items()}


def assert_transitions(data, ref):
    assert data[prl.REW].shape[0] == ref[prl.REW].shape[0], (data[prl.REW].shape, ref[prl.REW].shape)
    np.testing.assert_array_equal(data[prl.OBS], ref[prl.OBS])
    np.testing.assert_array_equal(data[prl.ACT], ref[prl.ACT])
    np.testing.assert_allclose(data[prl.REW], ref[prl.REW], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(data[prl.OBS2], ref[prl.OBS2])
    np.testing.assert_allclose(data[prl.DISCOUNT], ref[prl.DISCOUNT], rtol=1e-6, atol=0)


def transitions(m, first=0, obs_dim=3):
    """m learner-side transitions whose reward is their serial number ``first .. first+m-1``."""
    r = torch.arange(first, first + m, dtype=torch.float32).reshape(m, 1)
    return {prl.OBS: r.repeat(1, obs_dim), prl.ACT: (torch.arange(first, first + m) % 2).reshape(m, 1),
            prl.REW: r, prl.OBS2: r.repeat(1, obs_dim) + 0.5, prl.DISCOUNT: torch.full((m, 1), 0.9)}


def serials(storage, idx=None):
    """The serial numbers (rewards) of the transitions held, by sampling them through ``_batch``."""
    idx = np.arange(storage.num_items) if idx is None else idx
    return sorted(storage._batch(idx)[prl.REW].reshape(-1).int().tolist())


# ------------------------------------------------------------- collector side: n-step
def test_nstep_termination_stops_the_window_and_zeroes_the_discount():
    gamma, n = 0.9, 3
    seq = synthetic(8, 1)
    seq["term"][2, 0] = True                    # episode ends at step 2; steps 3.. are a new one
    storage = make_storage(n_step=n, algo=make_algo(gamma=gamma, update_every=8))
    data = record(storage, seq, 0, 8)
    r = seq["rew"][:, 0].astype(np.float64)
    # Hand values of the windows that touch the end.
    assert data[prl.REW][0, 0] == pytest.approx(r[0] + gamma * r[1] + gamma ** 2 * r[2], rel=1e-6, abs=1e-6)
    assert data[prl.REW][1, 0] == pytest.approx(r[1] + gamma * r[2], rel=1e-6, abs=1e-6)
    assert data[prl.REW][2, 0] == pytest.approx(r[2], rel=1e-6, abs=1e-6)
    assert data[prl.DISCOUNT][:3, 0].tolist() == [0.0, 0.0, 0.0]
    for t in range(3):
        np.testing.assert_array_equal(data[prl.OBS2][t], final_of(seq["obs"], 2, 0))
    # The next episode's first window: three steps, bootstrapped with gamma^3.
    assert data[prl.REW][3, 0] == pytest.approx(r[3] + gamma * r[4] + gamma ** 2 * r[5], rel=1e-6, abs=1e-6)
    assert data[prl.DISCOUNT][3, 0] == pytest.approx(gamma ** 3)
    np.testing.assert_array_equal(data[prl.OBS2][3], seq["obs"][6, 0])
    assert_transitions(data, reference(seq, gamma, n, range(6)))


def test_nstep_truncation_bootstraps_from_the_final_observation():
    gamma, n = 0.8, 3
    seq = synthetic(8, 1, seed=1)
    seq["trunc"][2, 0] = True
    storage = make_storage(n_step=n, algo=make_algo(gamma=gamma, update_every=8))
    data = record(storage, seq, 0, 8)
    r = seq["rew"][:, 0].astype(np.float64)
    assert data[prl.REW][1, 0] == pytest.approx(r[1] + gamma * r[2], rel=1e-6, abs=1e-6)
    assert data[prl.DISCOUNT][1, 0] == pytest.approx(gamma ** 2)   # two steps taken, then bootstrap
    assert data[prl.DISCOUNT][2, 0] == pytest.approx(gamma)
    assert data[prl.DISCOUNT][0, 0] == pytest.approx(gamma ** 3)
    for t in (0, 1, 2):
        np.testing.assert_array_equal(data[prl.OBS2][t], final_of(seq["obs"], 2, 0))
    assert_transitions(data, reference(seq, gamma, n, range(6)))


def test_nstep_several_envs_with_mixed_ends():
    gamma, n = 0.95, 4
    seq = synthetic(12, 3, seed=2)
    seq["term"][[1, 7], [0, 2]] = True
    seq["trunc"][[4, 5, 9], [1, 1, 0]] = True
    storage = make_storage(n_step=n, algo=make_algo(gamma=gamma, update_every=36))
    data = record(storage, seq, 0, 12)
    assert_transitions(data, reference(seq, gamma, n, range(12 - n + 1)))


def test_windows_complete_across_two_rollouts():
    gamma, n = 0.9, 3
    seq = synthetic(8, 2, seed=3)
    seq["term"][4, 1] = True
    seq["trunc"][3, 0] = True
    storage = make_storage(n_step=n, algo=make_algo(gamma=gamma, update_every=8))   # 4 steps x 2 envs
    first = record(storage, seq, 0, 4)
    assert_transitions(first, reference(seq, gamma, n, range(0, 2)))
    second = record(storage, seq, 4, 8)
    # The last n - 1 = 2 steps of the first rollout complete their windows here.
    assert_transitions(second, reference(seq, gamma, n, range(2, 6)))


def test_a_broken_chain_drops_the_tail():
    gamma, n = 0.9, 3
    seq = synthetic(8, 2, seed=4)
    storage = make_storage(n_step=n, algo=make_algo(gamma=gamma, update_every=8))
    record(storage, seq, 0, 4)
    # The environments were replaced: the next rollout starts elsewhere.
    other = synthetic(4, 2, seed=5)
    other["obs"][..., 0] += 10_000.0
    data = record(storage, other, 0, 4)
    assert_transitions(data, reference(other, gamma, n, range(0, 2)))
    # clear() (a component was replaced) forgets the window as well.
    data = record(storage, seq, 0, 4)
    storage.clear()
    data = record(storage, seq, 4, 8)
    assert_transitions(data, reference(seq, gamma, n, range(4, 6)))


def test_one_step_transitions_are_the_raw_steps():
    gamma = 0.97
    seq = synthetic(6, 2, seed=6)
    seq["term"][1, 0] = True
    seq["trunc"][3, 1] = True
    storage = make_storage(ReplayBuffer, algo=make_algo(gamma=gamma, update_every=12))
    data = record(storage, seq, 0, 6)
    assert data[prl.REW].shape == (12, 1)
    np.testing.assert_array_equal(data[prl.OBS], seq["obs"][:6].reshape(12, 3))
    np.testing.assert_array_equal(data[prl.ACT], seq["act"].reshape(12, 1))
    np.testing.assert_array_equal(data[prl.REW], seq["rew"].reshape(12, 1))
    obs2 = seq["obs"][1:].copy()
    obs2[1, 0] = final_of(seq["obs"], 1, 0)
    obs2[3, 1] = final_of(seq["obs"], 3, 1)
    np.testing.assert_array_equal(data[prl.OBS2], obs2.reshape(12, 3))
    discount = np.full((6, 2), gamma, np.float32)
    discount[1, 0] = 0.0                         # terminated; the truncated step keeps gamma
    np.testing.assert_array_equal(data[prl.DISCOUNT], discount.reshape(12, 1))
    # dtypes the learner side relies on
    assert data[prl.REW].dtype == np.float32 and data[prl.DISCOUNT].dtype == np.float32
    assert data[prl.ACT].dtype == np.int64


@pytest.mark.parametrize("rew_dtype", [np.float32, np.float64])
def test_one_step_windows_match_the_hand_reference_and_dtypes(rew_dtype):
    # n = 1 has its own short path in nstep_transitions: same values and dtypes as the
    # windows computed by hand, a step both terminated and truncated included.
    from pytorchrl.agent.storages.replay import nstep_transitions
    gamma = 0.95
    seq = synthetic(7, 3, seed=11)
    seq["rew"] = seq["rew"].astype(rew_dtype)
    seq["term"][2, 1] = seq["term"][5, 0] = True
    seq["trunc"][4, 2] = seq["trunc"][5, 0] = True
    nxt = next_obs_of(seq)
    out = nstep_transitions(seq["obs"][:7], nxt, seq["act"], seq["rew"], seq["term"], seq["trunc"], gamma, 1)
    assert_transitions(out, reference(seq, gamma, 1, range(7)))
    assert out[prl.REW].dtype == np.float32 and out[prl.DISCOUNT].dtype == np.float32
    assert out[prl.REW].shape == out[prl.DISCOUNT].shape == (21, 1)
    assert out[prl.DISCOUNT][5 * 3 + 0, 0] == 0.0 and out[prl.DISCOUNT][4 * 3 + 2, 0] == np.float32(gamma)


def test_cut_rollouts_hand_over_their_steps_and_keep_the_chain():
    gamma, n = 0.9, 2
    seq = synthetic(10, 2, seed=7)
    seq["term"][5, 0] = True
    storage = make_storage(n_step=n, algo=make_algo(gamma=gamma, update_every=8))   # 4 steps per rollout
    a = record(storage, seq, 0, 3)            # cut after 3 of 4 steps
    assert_transitions(a, reference(seq, gamma, n, range(0, 2)))
    b = record(storage, seq, 3, 3)            # cut before its first step: nothing, chain kept
    assert b[prl.REW].shape == (0, 1) and b[prl.OBS].shape == (0, 3) and b[prl.DISCOUNT].shape == (0, 1)
    c = record(storage, seq, 3, 7)
    assert_transitions(c, reference(seq, gamma, n, range(2, 6)))


def test_a_rollout_cut_before_any_step_on_a_fresh_storage_is_empty():
    storage = make_storage(ReplayBuffer)
    seq = synthetic(2, 2)
    data = record(storage, seq, 0, 0)
    assert all(v.shape[0] == 0 for v in data.values())
    assert data[prl.OBS].shape == (0, 3) and data[prl.ACT].shape == (0, 1)
    learner = make_storage(ReplayBuffer)
    learner.add_data({k: torch.from_numpy(v) for k, v in data.items()})
    assert learner.num_items == 0 and not learner.ready()


_LOG = {}


class _Recorder(gym.Wrapper):
    """Records every step (obs acted from, action, reward, ends, final observation)."""

    def __init__(self, env, log):
        super().__init__(env)
        self.log = log

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.last = obs
        return obs, info

    def step(self, action):
        obs, r, te, tr, info = self.env.step(action)
        self.log.append((self.last, np.array(action).reshape(-1), r, te, tr, obs))
        self.last = obs
        return obs, r, te, tr, info


def recorded_cartpole(index_env=0, max_episode_steps=16):
    return _Recorder(gym.make("CartPole-v1", max_episode_steps=max_episode_steps), _LOG.setdefault(index_env, []))


def test_nstep_transitions_of_real_cartpole_collected_by_a_cworker():
    """CartPole (terminations, and truncations at 16 steps) collected by a real CWorker
    with random warm-up actions, 2 envs, rollouts of 5 steps: every n-step transition the
    collector hands over matches one computed from the recorded steps, and every window
    that fits in the steps taken is handed over exactly once."""
    _LOG.clear()
    gamma, n, T, rounds = 0.9, 3, 5, 20
    train, act_space, obs_space = VecEnv.create_factory(recorded_cartpole, vec_env_size=2, seed=3)
    _LOG.clear()                                   # the probe env built by create_factory
    algo_f, name = DDQN.create_factory(gamma=gamma, update_every=2 * T, start_steps=10 ** 6)
    actor_f = OffPolicyActor.create_factory(obs_space, act_space, name,
                                            common_feature_extractor_kwargs={"hidden_sizes": [8]})
    worker = CWorker(0, 0, algo_f, actor_f, NStepReplayBuffer.create_factory(size=1000, n_step=n),
                     train_envs_factory=train)
    try:
        got = [worker.collect_data()[0] for _ in range(rounds)]
    finally:
        worker.stop()
    data = {k: torch.cat([g[k] for g in got]).numpy() for k in got[0]}
    L = T * rounds
    assert sorted(_LOG) == [0, 1] and all(len(v) == L for v in _LOG.values())
    seq = {"obs": np.zeros((L + 1, 2, 4), np.float32), "act": np.zeros((L, 2, 1), np.int64),
           "rew": np.zeros((L, 2)), "term": np.zeros((L, 2), bool), "trunc": np.zeros((L, 2), bool)}
    nxt = np.zeros((L, 2, 4), np.float32)
    for e in (0, 1):
        for t, (o, a, r, te, tr, o2) in enumerate(_LOG[e]):
            seq["obs"][t, e], seq["act"][t, e], seq["rew"][t, e] = o, a, r
            seq["term"][t, e], seq["trunc"][t, e], nxt[t, e] = te, tr, o2
    assert seq["term"].any() and seq["trunc"].any(), "the run should see both kinds of episode end"

    ref = reference(seq, gamma, n, range(L - n + 1), nxt=nxt)

    def rows(d):
        m = np.concatenate([d[prl.OBS], d[prl.ACT], d[prl.REW], d[prl.OBS2], d[prl.DISCOUNT]], 1).astype(np.float64)
        return m[np.lexsort(m.T[::-1])]
    assert data[prl.REW].shape[0] == 2 * (L - n + 1)
    np.testing.assert_allclose(rows(data), rows(ref), rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------------ learner side
def test_ring_keeps_the_newest_transitions():
    storage = make_storage(ReplayBuffer, size=5)
    storage.add_data(transitions(3, 0))
    assert storage.num_items == 3 and serials(storage) == [0, 1, 2]
    storage.add_data(transitions(4, 3))         # wraps: 0 and 1 overwritten
    assert storage.num_items == 5 and serials(storage) == [2, 3, 4, 5, 6]
    storage.add_data(transitions(12, 7))        # more than fits: only the newest 5 survive
    assert storage.num_items == 5 and serials(storage) == [14, 15, 16, 17, 18]
    assert storage.num_inserted == 19
    # Every slot keeps its transition together (obs, obs2 and reward of the same step).
    b = storage._batch(np.arange(5))
    np.testing.assert_array_equal(b[prl.OBS][:, 0], b[prl.REW][:, 0])
    np.testing.assert_array_equal(b[prl.OBS2][:, 0], b[prl.REW][:, 0] + 0.5)
    np.testing.assert_array_equal(b[prl.ACT][:, 0], b[prl.REW][:, 0].long() % 2)


def count_batches(storage):
    return sum(1 for _ in storage.batches())


def test_replay_schedule_grants_num_updates_per_update_every_after_start_steps():
    algo = make_algo(start_steps=10, update_every=4, num_updates=3, mini_batch_size=2)
    storage = make_storage(ReplayBuffer, algo=algo)
    storage.add_data(transitions(6))
    assert not storage.ready() and count_batches(storage) == 0
    storage.add_data(transitions(4))            # 10 in: the first stage
    assert storage.ready()
    batches = list(storage.batches())
    assert len(batches) == 3 and all(b[prl.REW].shape == (2, 1) for b in batches)
    assert not storage.ready()
    storage.add_data(transitions(3))            # 13: no stage
    assert count_batches(storage) == 0
    storage.add_data(transitions(1))            # 14: one stage
    assert count_batches(storage) == 3
    storage.add_data(transitions(8))            # 22: two stages at once
    assert count_batches(storage) == 6
    # A hot-swap of num_updates applies to the next stage, never to one already granted.
    storage.add_data(transitions(4))            # 26: granted with 3
    algo.update_algorithm_parameter("num_updates", 5)
    assert count_batches(storage) == 3
    storage.add_data(transitions(4))            # 30: granted with 5
    assert count_batches(storage) == 5
    # Mini-batch size is read when a batch is drawn.
    algo.update_algorithm_parameter("mini_batch_size", 7)
    storage.add_data(transitions(4))
    assert [b[prl.REW].shape[0] for b in storage.batches()] == [7] * 5


def test_batches_are_drawn_lazily_and_can_be_left_for_later():
    algo = make_algo(start_steps=4, update_every=4, num_updates=3)
    storage = make_storage(ReplayBuffer, algo=algo)
    storage.add_data(transitions(4))
    it = storage.batches()
    next(it)
    assert storage.ready()                      # two left
    assert count_batches(storage) == 2 and not storage.ready()


def test_without_warm_up_the_first_stage_waits_for_update_every_transitions():
    """start_steps=0: num_updates mini-batches per update_every transitions from the start
    (not an extra stage for the zero transitions before the first rollout)."""
    algo = make_algo(start_steps=0, update_every=4, num_updates=3)
    storage = make_storage(ReplayBuffer, algo=algo)
    storage.add_data(transitions(3))
    assert count_batches(storage) == 0
    storage.add_data(transitions(1))
    assert count_batches(storage) == 3
    storage.add_data(transitions(8))
    assert count_batches(storage) == 6
    # start_steps below update_every: the same.
    storage = make_storage(ReplayBuffer, algo=make_algo(start_steps=2, update_every=4, num_updates=3))
    storage.add_data(transitions(4))
    assert count_batches(storage) == 3


def test_a_rollout_larger_than_the_ring_counts_in_full_for_the_schedule():
    algo = make_algo(start_steps=0, update_every=4, num_updates=1)
    storage = make_storage(ReplayBuffer, size=5, algo=algo)
    storage.add_data(transitions(12))
    assert storage.num_inserted == 12 and storage.num_items == 5
    assert count_batches(storage) == 3


def test_hot_swap_of_update_every_applies_from_the_next_stage():
    """Changing update_every neither grants the past stages again (a burst of updates)
    nor withholds updates until the total catches up with the new spacing."""
    algo = make_algo(start_steps=10, update_every=4, num_updates=1)
    storage = make_storage(ReplayBuffer, algo=algo)
    storage.add_data(transitions(22))           # stages at 10, 14, 18, 22
    assert count_batches(storage) == 4
    algo.update_algorithm_parameter("update_every", 2)
    storage.add_data(transitions(1))            # 23: no stage boundary passed
    assert count_batches(storage) <= 1
    storage.add_data(transitions(9))            # 32: 4 to 5 more stages at the new spacing
    first = count_batches(storage)
    algo.update_algorithm_parameter("update_every", 100)
    storage.add_data(transitions(10))           # 42
    storage.add_data(transitions(100))          # 142: one stage of 100 passed
    later = count_batches(storage)
    assert 4 <= first <= 6, first
    assert 1 <= later <= 2, later


def test_uniform_sampling_covers_the_buffer():
    storage = make_storage(ReplayBuffer, size=50)
    storage.add_data(transitions(50))
    counts = np.zeros(50)
    for _ in range(400):
        b = storage.sample(50)
        idx = np.asarray(b[prl.INDEX])
        # A batch holds the transitions of the slots it names.
        np.testing.assert_array_equal(b[prl.REW][:, 0].numpy(), idx.astype(np.float32))
        counts += np.bincount(idx, minlength=50)
    expected = 400.0                            # 20_000 draws over 50 slots
    assert counts.min() > expected - 5 * math.sqrt(expected), counts.min()
    assert counts.max() < expected + 5 * math.sqrt(expected), counts.max()
    assert prl.WEIGHT not in storage.sample(4)   # uniform replay: no importance weights


def test_uniform_sampling_draws_only_filled_slots():
    storage = make_storage(ReplayBuffer, size=1000)
    storage.add_data(transitions(7))
    idx = np.concatenate([np.asarray(storage.sample(64)[prl.INDEX]) for _ in range(20)])
    assert set(idx.tolist()) == set(range(7))


# --------------------------------------------------------------------------------- PER
ERRORS = np.array([0.1, 0.5, 1.0, 2.0, 3.0, 0.0, 4.0, 0.2])


def per_with_errors(alpha=0.7, epsilon=0.01, beta=0.6, size=8, default_error=1e6, errors=ERRORS):
    storage = make_storage(PERBuffer, size=size, alpha=alpha, epsilon=epsilon, beta=beta,
                           default_error=default_error)
    storage.add_data(transitions(len(errors)))
    info = {prl.TD_ERROR: errors.copy(), "Loss": 1.0}
    storage.after_update({prl.INDEX: np.arange(len(errors))}, info)
    assert prl.TD_ERROR not in info and info == {"Loss": 1.0}
    return storage


def test_per_samples_in_proportion_to_priorities():
    alpha, eps = 0.7, 0.01
    storage = per_with_errors(alpha, eps)
    p = (np.abs(ERRORS) + eps) ** alpha
    np.testing.assert_allclose(storage.tree.get(np.arange(8)), p, rtol=1e-12)
    counts = np.zeros(8)
    draws = 0
    for _ in range(2000):
        idx = np.asarray(storage.sample(16)[prl.INDEX])
        counts += np.bincount(idx, minlength=8)
        draws += len(idx)
    expected = draws * p / p.sum()
    # Stratified sampling has less variance than independent draws: a binomial 5-sigma
    # band is a safe bound.
    sigma = np.sqrt(expected * (1 - p / p.sum()))
    assert np.all(np.abs(counts - expected) < 5 * sigma + 1), (counts, expected)


def test_per_alpha_zero_is_uniform():
    storage = per_with_errors(alpha=0.0, epsilon=0.0)
    np.testing.assert_array_equal(storage.tree.get(np.arange(8)), np.ones(8))
    b = storage.sample(8)
    np.testing.assert_array_equal(b[prl.WEIGHT].numpy(), np.ones((8, 1), np.float32))


def test_per_importance_weights_against_hand_computation():
    alpha, eps, beta = 0.6, 0.05, 0.4
    storage = per_with_errors(alpha, eps, beta)
    p = (np.abs(ERRORS) + eps) ** alpha
    P = p / p.sum()
    N = 8
    w_all = (N * P) ** -beta
    for _ in range(5):
        b = storage.sample(32)
        idx = np.asarray(b[prl.INDEX])
        expected = w_all[idx] / w_all.max()
        assert b[prl.WEIGHT].shape == (32, 1) and b[prl.WEIGHT].dtype == torch.float32
        np.testing.assert_allclose(b[prl.WEIGHT].numpy()[:, 0], expected, rtol=1e-5)
        # the batch holds the named transitions
        np.testing.assert_array_equal(b[prl.REW][:, 0].numpy(), idx.astype(np.float32))
    # beta hot-swap: applies to the next mini-batch
    storage.update_storage_parameter("beta", 0.0)
    np.testing.assert_array_equal(storage.sample(16)[prl.WEIGHT].numpy(), np.ones((16, 1), np.float32))
    storage.update_storage_parameter("beta", 1.0)
    b = storage.sample(16)
    idx = np.asarray(b[prl.INDEX])
    w = (N * P) ** -1.0
    np.testing.assert_allclose(b[prl.WEIGHT].numpy()[:, 0], w[idx] / w.max(), rtol=1e-5)
    with pytest.raises(ValueError, match="beta"):
        storage.update_storage_parameter("beta", 1.5)
    assert storage.beta == 1.0


def test_per_new_transitions_get_the_default_error_priority():
    alpha, eps = 0.5, 0.01
    storage = per_with_errors(alpha, eps, size=10, default_error=3.0)
    storage.add_data(transitions(4, 100))       # slots 8, 9, then 0, 1 (overwritten)
    p = storage.tree.get(np.arange(10))
    default = (3.0 + eps) ** alpha
    np.testing.assert_allclose(p[[8, 9, 0, 1]], default, rtol=1e-12)
    np.testing.assert_allclose(p[2:8], (np.abs(ERRORS[2:8]) + eps) ** alpha, rtol=1e-12)
    assert serials(storage, np.array([0, 1, 8, 9])) == [100, 101, 102, 103]


def test_per_default_priority_dominates_so_new_transitions_are_replayed_soon():
    storage = per_with_errors(size=20)          # default_error 1e6
    storage.add_data(transitions(2, 50))
    idx = np.asarray(storage.sample(64)[prl.INDEX])
    assert set(idx.tolist()) == {8, 9}


def test_per_priorities_follow_the_algorithms_td_errors():
    """One real DDQN gradient on a PER mini-batch: the algorithm reports |TD errors|, the
    storage turns them into priorities of the sampled slots and removes them from the info."""
    alpha, eps = 0.6, 0.02
    algo = make_algo(gamma=0.9, mini_batch_size=16)
    storage = make_storage(PERBuffer, size=64, algo=algo, alpha=alpha, epsilon=eps)
    g = torch.Generator().manual_seed(0)
    data = {prl.OBS: torch.randn(40, 3, generator=g), prl.ACT: torch.randint(0, 2, (40, 1), generator=g),
            prl.REW: torch.randn(40, 1, generator=g), prl.OBS2: torch.randn(40, 3, generator=g),
            prl.DISCOUNT: torch.full((40, 1), 0.9)}
    storage.add_data(data)
    batch = storage.sample(16)
    _, info = algo.compute_gradients(batch)
    td = np.array(info[prl.TD_ERROR])
    with torch.no_grad():
        q = algo.actor.q_values(batch[prl.OBS])[0].gather(1, batch[prl.ACT])
        a2 = algo.actor.q_values(batch[prl.OBS2])[0].argmax(1, keepdim=True)
        y = batch[prl.REW] + batch[prl.DISCOUNT] * algo.target.q_values(batch[prl.OBS2])[0].gather(1, a2)
    np.testing.assert_allclose(td, (q - y).abs().numpy()[:, 0], rtol=1e-5, atol=1e-6)
    storage.after_update(batch, info)
    assert prl.TD_ERROR not in info and "Loss" in info
    idx = np.asarray(batch[prl.INDEX])
    np.testing.assert_allclose(storage.tree.get(idx), (td + eps) ** alpha, rtol=1e-6)
    untouched = np.setdiff1d(np.arange(40), idx)
    np.testing.assert_allclose(storage.tree.get(untouched), (1e6 + eps) ** alpha, rtol=1e-12)
    # Without per-sample errors, PER says what is missing.
    with pytest.raises(KeyError, match="TD errors"):
        storage.after_update(batch, {"Loss": 0.0})


def test_uniform_replay_after_update_drops_td_errors():
    storage = make_storage(ReplayBuffer)
    info = {prl.TD_ERROR: np.ones(3), "Loss": 0.5}
    storage.after_update({prl.INDEX: np.arange(3)}, info)
    assert info == {"Loss": 0.5}


# ------------------------------------------------------------------------------ errors
@pytest.mark.parametrize("size", [0, -3, 2.5, True, "10"])
def test_bad_sizes_are_refused(size):
    with pytest.raises(ValueError, match="size"):
        make_storage(ReplayBuffer, size=size)


@pytest.mark.parametrize("n_step", [0, -1, 1.5, True])
def test_bad_n_step_is_refused(n_step):
    with pytest.raises(ValueError, match="n_step"):
        make_storage(NStepReplayBuffer, n_step=n_step)


@pytest.mark.parametrize("name,value", [("alpha", -0.1), ("epsilon", -1.0), ("default_error", -2.0),
                                        ("beta", 1.2), ("beta", -0.5)])
def test_bad_per_parameters_are_refused(name, value):
    with pytest.raises(ValueError, match=name):
        make_storage(PERBuffer, **{name: value})


def test_fixed_parameters_are_refused_on_hot_swap_with_a_clear_message():
    storage = make_storage(PERBuffer, size=32, n_step=3)
    with pytest.raises(ValueError, match=r"'size' is fixed once the buffer is built \(it is 32\)"):
        storage.update_storage_parameter("size", 64)
    with pytest.raises(ValueError, match=r"'n_step' is fixed once the buffer is built \(it is 3\)"):
        storage.update_storage_parameter("n_step", 1)
    storage.update_storage_parameter("size", 32)       # repeating the value is fine
    storage.update_storage_parameter("alpha", 0.5)
    assert storage.alpha == 0.5 and storage.size == 32 and storage.n_step == 3
    with pytest.raises(ValueError, match="unknown"):
        storage.update_storage_parameter("gamma", 0.5)
    with pytest.raises(TypeError):
        storage.update_storage_parameter("alpha", "big")
    with pytest.raises(ValueError, match="'size' is fixed"):
        make_storage(ReplayBuffer, size=10).update_storage_parameter("size", 11)


def test_replay_needs_an_off_policy_algorithm():
    from pytorchrl.agent.algorithms import PPO
    actor = make_actor(OBS_SPACE, ACT_SPACE)
    ppo = PPO("cpu", actor)
    with pytest.raises(ValueError, match="off-policy algorithm"):
        ReplayBuffer("cpu", actor, ppo, None, size=10)


# ------------------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("cls", [ReplayBuffer, PERBuffer])
def test_state_dict_round_trip(cls):
    algo = make_algo(start_steps=5, update_every=4, num_updates=2)
    kw = {"alpha": 0.7, "epsilon": 0.01} if cls is PERBuffer else {}
    a = make_storage(cls, size=16, algo=algo, **kw)
    a.add_data(transitions(11))
    a.add_data(transitions(9, 11))              # wrapped: pos 4, 16 held
    next(a.batches())                           # one credit used, some left
    if cls is PERBuffer:
        a.after_update({prl.INDEX: np.arange(16)}, {prl.TD_ERROR: np.linspace(0, 3, 16)})
    state = a.state_dict()
    b = make_storage(cls, size=16, algo=algo, **kw)
    b.load_state_dict(state)
    for attr in ("pos", "num_items", "num_inserted"):
        assert getattr(b, attr) == getattr(a, attr)
    assert serials(b) == serials(a)
    for k in a._arrays:
        np.testing.assert_array_equal(a._arrays[k], b._arrays[k])
    assert count_batches(b) == count_batches(a)
    if cls is PERBuffer:
        np.testing.assert_array_equal(b.tree.get(np.arange(16)), a.tree.get(np.arange(16)))
        assert b.tree.total() == pytest.approx(a.tree.total())
    # The restored buffer follows the same schedule from here on.
    for s in (a, b):
        s.add_data(transitions(8, 100))
    assert count_batches(a) == count_batches(b) == 4
    assert serials(a) == serials(b)
    # An empty buffer round-trips too.
    empty = make_storage(cls, size=4, algo=algo, **kw)
    c = make_storage(cls, size=4, algo=algo, **kw)
    c.load_state_dict(empty.state_dict())
    assert c.num_items == 0 and not c.ready()
