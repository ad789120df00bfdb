"""Hindsight experience replay (HERBuffer): which goals relabel which transitions, the
recomputed rewards, the relabelled fraction and episodes cut by rollout boundaries.

The storage runs on the real vector environment of PointReach-v0 (its packed layout and
its compute_reward) and records synthetic steps written here, whose achieved goals are
unique, so that every relabelled goal can be traced back to the step that achieved it.
Expected values are computed here, never by the code under test.
"""

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.algorithms import SAC
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import HERBuffer
from pytorchrl.agent.storages.base import FINAL_OBS
from pytorchrl.agent.storages.her import RELABELLED, select_goal_steps
from pytorchrl.envs import make_gym_env

# PointReach-v0 packed: achieved_goal 0:2, desired_goal 2:4, observation 4:6 (keys sorted).
ACH, DES, OB = slice(0, 2), slice(2, 4), slice(4, 6)
K = 3
T, N = 12, 2
ENDS = {0: [4, 11], 1: [7]}     # env -> steps whose step ends an episode (truncated)


def make_storage(envs_n=N, size=10_000, strategy="future", k=K, env_id="PointReach-v0"):
    train, act_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": env_id}, vec_env_size=envs_n)
    envs = train("cpu")
    actor = OffPolicyActor.create_factory(obs_space, act_space, "SAC",
                                          common_feature_extractor_kwargs={"hidden_sizes": [8]})("cpu")
    algo = SAC("cpu", actor, update_every=12, start_steps=0, mini_batch_size=4, num_updates=1)
    return HERBuffer("cpu", actor, algo, envs, size=size, strategy=strategy, n_sampled_goal=k), envs


def synthetic():
    """Packed observations (T + 1, N, 6) whose achieved goals are unique: (t + 100 n, n);
    random desired goals; the final observation of an episode ended at step t differs from
    the next episode's first (achieved goal shifted by 0.5)."""
    g = np.random.default_rng(0)
    obs = g.uniform(-1, 1, (T + 1, N, 6)).astype(np.float32)
    obs[..., 0] = np.arange(T + 1)[:, None] + 100.0 * np.arange(N)[None, :]
    obs[..., 1] = np.arange(N)[None, :]
    trunc = np.zeros((T, N), bool)
    for n, steps in ENDS.items():
        trunc[steps, n] = True
    return dict(obs=obs, act=g.uniform(-1, 1, (T, N, 2)).astype(np.float32),
                rew=g.uniform(-1, 1, (T, N)).astype(np.float32), term=np.zeros((T, N), bool), trunc=trunc)


def final_of(obs, t, n):
    out = obs[t + 1, n].copy()
    out[ACH] += 0.5
    return out


def record(storage, seq, t0, t1):
    """Steps t0 .. t1 - 1 as one rollout, as a collector writes them; the rollout's data."""
    storage.start(seq["obs"][t0])
    for t in range(t0, t1):
        ended = np.flatnonzero(seq["trunc"][t])
        storage.insert({prl.ACT: seq["act"][t], prl.REW: seq["rew"][t], prl.TERM: seq["term"][t],
                        prl.TRUNC: seq["trunc"][t], prl.OBS2: seq["obs"][t + 1],
                        FINAL_OBS: {int(n): final_of(seq["obs"], t, n) for n in ended}})
    storage.finish()
    return {k: v.numpy() for k, v in storage.get_data().items()}


def episodes_of(seq):
    """{(t, n): (episode number, first step, last step)} and the achieved goal after each step."""
    where, after = {}, {}
    for n in range(N):
        first = 0
        for e, last in enumerate(ENDS[n] + [T - 1]):
            for t in range(first, last + 1):
                where[(t, n)] = (e, first, last, last in ENDS[n])
                after[(t, n)] = final_of(seq["obs"], t, n)[ACH] if t == last and last in ENDS[n] \
                    else seq["obs"][t + 1, n, ACH]
            first = last + 1
    return where, after


def step_of(achieved, after):
    """The (t, n) whose achieved goal after the step is ``achieved``."""
    hits = [key for key, a in after.items() if np.array_equal(a, achieved)]
    assert len(hits) == 1, (achieved, hits)
    return hits[0]


@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_relabelled_goals_come_from_the_right_steps_of_the_same_episode(strategy):
    torch.manual_seed(1)
    storage, envs = make_storage(strategy=strategy)
    try:
        seq = synthetic()
        # Rollouts of 5 steps: env 0's first episode (steps 0-4) ends inside the first, env 1's
        # (steps 0-7) is cut by a rollout boundary.
        parts = [record(storage, seq, t0, min(t0 + 5, T)) for t0 in range(0, T, 5)]
    finally:
        envs.close()
    where, after = episodes_of(seq)
    data = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    real = data[RELABELLED][:, 0] == 0
    assert real.sum() == T * N      # every collected transition once, as collected
    rel = {key: v[~real] for key, v in data.items()}
    # Finished episodes: env 0's steps 0-4 and 5-11, env 1's steps 0-7; env 1's 8-11 still runs.
    finished = [key for key, w in where.items() if w[3]]
    assert len(rel[prl.REW]) == K * len(finished)
    seen = {}
    goal_steps = {key: [] for key in finished}
    for i in range(len(rel[prl.REW])):
        t, n = step_of(rel[prl.OBS2][i, ACH], after)     # the transition relabelled
        seen[(t, n)] = seen.get((t, n), 0) + 1
        goal = rel[prl.OBS][i, DES]
        np.testing.assert_array_equal(rel[prl.OBS2][i, DES], goal)
        gt, gn = step_of(goal, after)                     # the step that achieved the goal
        e, first, last, _ = where[(t, n)]
        assert gn == n and where[(gt, gn)][0] == e, "goal from another episode"
        goal_steps[(t, n)].append(gt)
        if strategy == "future":
            assert t <= gt <= last
        elif strategy == "final":
            assert gt == last
        else:
            assert first <= gt <= last
        # The reward is recomputed: 0 where the goal is the transition's own achieved goal.
        assert rel[prl.REW][i, 0] == (0.0 if gt == t else -1.0)
        # The rest of the transition is the one collected.
        np.testing.assert_array_equal(rel[prl.OBS][i, OB], seq["obs"][t, n, OB])
        np.testing.assert_array_equal(rel[prl.OBS][i, ACH], seq["obs"][t, n, ACH])
        np.testing.assert_array_equal(rel[prl.ACT][i], seq["act"][t, n])
        assert rel[prl.DISCOUNT][i, 0] == pytest.approx(storage.algorithm.gamma)
    assert seen == {key: K for key in finished}
    if strategy != "final":   # goals drawn at random: not always the last step
        assert any(len(set(v)) > 1 for v in goal_steps.values())


def test_relabelled_fraction_and_replay_schedule_count_collected_steps_only():
    storage, envs = make_storage()
    learner_side = HERBuffer("cpu", storage.actor, storage.algorithm, None, size=10_000, n_sampled_goal=K)
    try:
        seq = synthetic()
        for t0 in range(0, T, 4):
            learner_side.add_data({k: torch.from_numpy(v) for k, v in record(storage, seq, t0, t0 + 4).items()})
    finally:
        envs.close()
    finished = 5 + 7 + 8     # steps of the three finished episodes
    assert learner_side.num_inserted == T * N       # relabelled copies are not environment steps
    assert learner_side.num_items == T * N + K * finished
    assert learner_side.relabelled_fraction() == pytest.approx(K * finished / (T * N + K * finished))
    batch = next(learner_side.batches())
    assert RELABELLED not in batch and set(batch) >= {prl.OBS, prl.ACT, prl.REW, prl.OBS2, prl.DISCOUNT}


def test_replaced_environments_cut_the_unfinished_episodes():
    storage, envs = make_storage()
    try:
        seq = synthetic()
        record(storage, seq, 0, 6)            # env 1's first episode is unfinished (ends at step 7)
        other = synthetic()
        other["obs"][..., 0] += 1000.0        # a new start: not where the last rollout ended
        data = record(storage, other, 6, 8)   # env 1's episode "ends" at step 7 of the new stream
    finally:
        envs.close()
    rel = data[RELABELLED][:, 0] == 1
    # Only the 2 steps of the new stream are relabelled, not the 6 of the cut episode.
    assert rel.sum() == K * 2
    assert (data[prl.OBS][rel, 0] >= 1000.0).all()


def test_goal_selection_fraction_and_ranges():
    rng = np.random.default_rng(0)
    t, g = select_goal_steps("future", 50, 4, rng)
    assert len(t) == 200 and (g >= t).all() and (g < 50).all()
    assert (np.bincount(t) == 4).all()


def test_a_flat_observation_is_refused():
    with pytest.raises(ValueError, match="needs a goal environment"):
        make_storage(env_id="Pendulum-v1")


class ScaledGoals(gym.ObservationWrapper):
    """PointReach with its goals handed out 10 times larger: relabelling must reward goals
    in this scale, through this wrapper's compute_reward."""

    def __init__(self, env):
        super().__init__(env)
        spaces = dict(env.observation_space.spaces)
        for key in ("achieved_goal", "desired_goal"):
            s = spaces[key]
            spaces[key] = gym.spaces.Box(s.low * 10, s.high * 10, s.shape, s.dtype)
        self.observation_space = gym.spaces.Dict(spaces)

    def observation(self, obs):
        return {**obs, "achieved_goal": obs["achieved_goal"] * 10, "desired_goal": obs["desired_goal"] * 10}

    def compute_reward(self, achieved_goal, desired_goal, info):
        return self.env.unwrapped.compute_reward(achieved_goal / 10, desired_goal / 10, info)


def test_relabelling_asks_the_outermost_wrapper_that_computes_rewards():
    train, _, _ = VecEnv.create_factory(lambda: ScaledGoals(gym.make("PointReach-v0")), vec_env_size=1)
    envs = train("cpu")
    try:
        reward = envs.goal_reward_fn()
        near, far = np.array([[0.0, 0.0]]), np.array([[0.3, 0.0]])   # 0.03 and 0 apart in the env's scale
        # The unwrapped environment would call 0.3 apart a miss; in the wrapper's scale it is a hit.
        assert envs._vec.envs[0].unwrapped.compute_reward(near, far, None)[0] == -1.0
        assert reward(near, far, None)[0] == 0.0
        assert reward(near, far * 10, None)[0] == -1.0
    finally:
        envs.close()
