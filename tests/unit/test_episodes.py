"""Weight versions as publications, episode work units and budgets, collection-only schemes."""

import csv
import json

import gymnasium as gym
import numpy as np
import pytest

import pytorchrl as prl
from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.actors.feature_extractors.mlp import MLP
from pytorchrl.agent.algorithms import A2C, PPO
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import GAEBuffer
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme

#: Sent to Ray workers by value (tests/conftest.py's ray_for_module): this module's functions.
RAY_BY_VALUE = (__name__,)


class RandomLengthEnv(gym.Env):
    """Reward 1 per step; episodes of 3 to 7 steps (drawn at reset), whatever the actions."""

    observation_space = gym.spaces.Box(-1.0, 10.0, shape=(2,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.length = 0, int(self.np_random.integers(3, 8))
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t, 0.0], dtype=np.float32), 1.0, self.t >= self.length, False, {}


def random_length_env():
    return RandomLengthEnv()


def build(algo_cls=PPO, envs=1, size=16, **scheme_kwargs):
    train, action_space, obs_space = VecEnv.create_factory(env_fn=random_length_env, vec_env_size=envs, seed=0)
    params = dict(lr=1e-3, num_epochs=2, num_mini_batch=2) if algo_cls is PPO else dict(lr=1e-3)
    algo_factory, name = algo_cls.create_factory(**params)
    actor_factory = OnPolicyActor.create_factory(obs_space, action_space, name, feature_extractor_network=MLP,
                                                 feature_extractor_kwargs={"hidden_sizes": [8]})
    return Scheme(algo_factory=algo_factory, actor_factory=actor_factory,
                  storage_factory=GAEBuffer.create_factory(size=size), train_envs_factory=train, **scheme_kwargs)


def run(learner, limit=10_000):
    infos = []
    for _ in range(limit):
        if learner.done():
            return infos
        infos += learner.step()
    raise AssertionError("the run did not end")


# ------------------------------------------------------------------- versions
def test_a_version_is_one_publication_per_update_round():
    # PPO takes 2 epochs x 2 mini-batches = 4 optimizer steps per rollout: one new version.
    with Learner(build(), target_steps=10 ** 6) as learner:
        for _ in range(4 * 5):
            infos = learner.step()
        assert learner.num_updates == 20 and learner.update_worker.local_worker.algo.updates_applied == 20
        assert {i["version"] for i in infos} == {4}   # round 5 trains the weights published 4 times
        m = learner.get_metrics()
        assert m["Scheme/Updates"] == 20 and m["Scheme/PolicyVersion"] == 4
        state = learner.update_worker.local_worker.get_state()
        assert state["version"] == 4 and state["unpublished"]   # round 5's steps: published before round 6


def test_the_version_is_saved_and_restored(tmp_path):
    with Learner(build(), target_steps=10 ** 6, log_dir=str(tmp_path)) as learner:
        for _ in range(4 * 3):
            learner.step()
        path = learner.save_checkpoint()
    with Learner(build(), target_steps=10 ** 6, log_dir=str(tmp_path)) as resumed:
        resumed.load_checkpoint(path)
        # Saved after round 3's updates, before their publication: it comes with round 4.
        assert resumed.update_worker.version == 2 and resumed.policy_version == 2
        assert resumed.update_worker.local_worker.algo.updates_applied == 12
        infos = resumed.step()
        assert infos[0]["version"] == 3 and resumed.update_worker.local_worker.col_workers.version == 3


def test_the_lag_bound_drops_stale_data(ray_for_module):
    # Two async collectors: when a round starts, the other collector's rollout was asked for
    # one publication ago. With a bound of 0 every such rollout is dropped.
    with Learner(build(num_col_workers=2, col_workers_communication=prl.ASYNC, max_policy_lag=0,
                       col_workers_resources={"num_cpus": 0.25}), target_steps=400) as learner:
        infos = run(learner)
        m = learner.get_metrics(add_scheme_metrics=True)
    lags = [lag for i in infos for lag in i.get("policy_lags", [])]
    assert lags and max(lags) == 0 and m["Scheme/MaxPolicyLag"] == 0
    assert m["Scheme/DroppedRollouts"] > 0
    assert m["Scheme/PolicyVersion"] >= 5     # training went on


# ------------------------------------------------------------- episode budgets
@pytest.mark.parametrize("algo_cls", [A2C, PPO])
def test_an_episode_budget_ends_with_all_n_episodes_used(algo_cls):
    with Learner(build(algo_cls, col_rollout_unit="episodes"), target_steps=10 ** 6, target_episodes=9,
                 record_episodes=True) as learner:
        infos = run(learner)
        storage = learner.update_worker.local_worker.storage
        # Exactly 9 episodes, every one handed over in a rollout of its own and trained on:
        # the run ends when the collector has nothing more to give, not when it is asked.
        assert learner.num_episodes == 9 and len(learner.episode_records) == 9
        rounds = [i for i in infos if "collected_samples" in i]
        assert [len(i["episodes"]) for i in rounds] == [1] * 9
        assert learner.num_samples_collected == sum(r["length"] for r in learner.episode_records)
        assert [i["rollout_steps"] for i in rounds] == [[r["length"]] for r in learner.episode_records]
        per_round = 1 if algo_cls is A2C else 4
        assert learner.num_updates == 9 * per_round and not storage.ready()
        assert infos[-1].get("budget_spent")


def test_a_resumed_run_runs_only_the_episodes_left(tmp_path):
    with Learner(build(A2C, col_rollout_unit="episodes"), target_steps=10 ** 6, target_episodes=9,
                 log_dir=str(tmp_path)) as learner:
        while learner.num_episodes < 4:
            learner.step()
        path = learner.save_checkpoint()
    with Learner(build(A2C, col_rollout_unit="episodes"), target_steps=10 ** 6, target_episodes=9,
                 log_dir=str(tmp_path)) as resumed:
        resumed.load_checkpoint(path)
        run(resumed)
        assert resumed.num_episodes == 9 and resumed.budget_spent


def test_an_episode_budget_over_async_collectors_runs_exactly_n(ray_for_module):
    with Learner(build(A2C, num_col_workers=2, col_workers_communication=prl.ASYNC, col_rollout_unit="episodes",
                       col_workers_resources={"num_cpus": 0.25}),
                 target_steps=10 ** 6, target_episodes=11, record_episodes=True) as learner:
        run(learner)
        assert learner.num_episodes == 11
        assert {r["col_worker"] for r in learner.episode_records} == {1, 2}
        assert learner.update_worker.local_worker.col_workers._in_flight == {}


def test_an_episode_budget_is_shared_by_gradient_workers(ray_for_module):
    # 2 gradient workers take 6 and 5 episodes; the one done first sends no gradient while
    # the other trains on, and the run ends once both are done.
    with Learner(build(A2C, num_grad_workers=2, grad_workers_resources={"num_cpus": 0.25},
                       col_rollout_unit="episodes"), target_steps=10 ** 6, target_episodes=11,
                 record_episodes=True) as learner:
        infos = run(learner)
        assert learner.num_episodes == 11
        per_worker = [sum(1 for r in learner.episode_records if r["grad_worker"] == g) for g in (1, 2)]
        assert per_worker == [6, 5]
        assert learner.budget_spent and sum(1 for i in infos if i.get("budget_spent")) == 1
    # The Learner refuses the scheme it is given, which stays the caller's to stop (its
    # gradient workers would hold their CPUs for the rest of the session).
    scheme = build(A2C, num_grad_workers=2, grad_workers_resources={"num_cpus": 0.25},
                   decentralized_update_execution=True)
    try:
        with pytest.raises(ValueError, match="needs a central update"):
            Learner(scheme, target_steps=100, target_episodes=5)
    finally:
        scheme.stop()


def test_the_cutoff_ends_a_run_whose_returns_stopped_changing():
    # Returns are episode lengths, 3 to 7 at random whatever the policy: the means of two
    # windows of 10 differ by far less than 5.
    with Learner(build(A2C, col_rollout_unit="episodes"), target_steps=10 ** 6, cutoff=5.0,
                 rolling_reward_length=10) as learner:
        run(learner)
        assert learner.plateau and learner.num_episodes == 20


def test_with_several_environments_an_episode_rollout_ends_with_the_first_episode():
    with Learner(build(A2C, envs=2, col_rollout_unit="episodes"), target_steps=10 ** 6) as learner:
        for _ in range(5):
            info, = learner.step()
            # Episodes last 3 to 7 steps: a rollout (size 16) ends when the first env ends one.
            assert 1 <= info["rollout_steps"][0] <= 7 and len(info["episodes"]) >= 1


# --------------------------------------------------------------- collection only
def test_random_writes_its_results(tmp_path):
    with Learner(build(A2C, num_grad_workers=0, col_policy="random", col_rollout_unit="episodes"),
                 target_steps=10 ** 6, target_episodes=6, log_dir=str(tmp_path), record_episodes=True) as learner:
        before = {k: v.clone() for k, v in learner.update_worker.get_weights().items()}
        run(learner)
        summary = learner.write_episode_records("results.csv", "random")
        after = learner.update_worker.get_weights()
    assert learner.num_updates == 0 and all((before[k] == v).all() for k, v in after.items())
    rows = list(csv.DictReader(open(tmp_path / "results.csv")))
    assert [int(r["episode"]) for r in rows] == list(range(1, 7))
    assert all(r["policy"] == "random" and 3 <= int(r["length"]) <= 7 and r["col_worker"] == "0" for r in rows)
    assert summary.startswith("6 episodes over 1 collectors, policy random: mean return")


# ------------------------------------------------------------------ per-step logs
def test_collectors_write_per_step_logs(tmp_path):
    with Learner(build(A2C, envs=2, col_step_log_dir=str(tmp_path / "steps")), target_steps=64) as learner:
        run(learner)
    rows = list(csv.DictReader(open(tmp_path / "steps" / "steps_g0_c0.csv")))
    assert len(rows) == 64 and set(rows[0]) == {"time", "env", "state", "action", "reward", "next_state",
                                                 "total_reward", "done", "episode", "step", "policy"}
    for env in ("0", "1"):
        mine = [r for r in rows if r["env"] == env]
        ended = [r for r in mine if r["done"] == "True"]
        assert ended and all(r["policy"] == "learned" for r in mine)
        # Reward 1 per step: the total is the step; an episode ends at its length (3 to 7),
        # its next state the final observation ([length, 0]), and the next one starts at 1.
        assert all(float(r["total_reward"]) == int(r["step"]) for r in mine)
        assert all(3 <= int(r["step"]) <= 7 and json.loads(r["next_state"])[0] == int(r["step"]) for r in ended)
        assert [int(r["episode"]) for r in ended] == list(range(1, len(ended) + 1))
