"""Weight versions as publications, episode work units and budgets, collection-only schemes."""

import csv
import json

import pytest

from pytorchrl.agent.algorithms import A2C, PPO
from pytorchrl.learner import Learner

from episodes_helpers import build, run

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
