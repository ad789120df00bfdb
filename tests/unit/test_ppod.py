"""PPO+D's storage (PPODBuffer) and the demonstration recorder (pytorchrl record-demos).

The storage is driven as a collector drives it (actor.act on ``current_obs``, the real
CartPole environments stepped, ``insert``, ``finish``), with demonstrations written by
``write_demo`` (tests/ppod_helpers.py) whose observations no CartPole state has (every
entry near 7 or -7), so that a lane replaying one is recognised by its observation.
"""

import io
import os

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.algorithms import PPO
from pytorchrl.agent.env import TorchVecEnv
from pytorchrl.agent.notices import forget_notices
from pytorchrl.agent.storages import STORAGES, PPODBuffer
from pytorchrl.agent.storages.base import FINAL_OBS
from pytorchrl.agent.storages.ppod import load_demo, save_demo
from pytorchrl.config import ConfigError, validate_config
from pytorchrl.tools.record_demos import record_demos

from _util import make_actor
from cli_helpers import tiny
from ppod_helpers import DEMO_ACTIONS, ppod_config, saved_run, train_and_read_saved_demos, write_demo

def cartpole_storage(num_envs, seed=0, **kwargs):
    envs = TorchVecEnv([lambda: gym.make("CartPole-v1")] * num_envs, seed=seed)
    torch.manual_seed(seed)
    actor = make_actor(envs.observation_space, envs.action_space)
    algo = PPO.create_factory()[0]("cpu", actor, envs)
    storage = PPODBuffer.create_factory(**{"size": 8, **kwargs})("cpu", actor, algo, envs)
    storage.rng = np.random.default_rng(seed)
    return storage, actor, envs


def collect(storage, actor, envs, steps, obs=None, before_step=None):
    """One rollout of ``steps`` steps, as CWorker._rollout takes it; returns the storage's
    rollout (get_data) and the observations each action was taken from."""
    storage.start(envs.reset_numpy().copy() if obs is None else obs)
    seen = []
    for t in range(steps):
        if before_step is not None:
            before_step(t)
        seen.append(storage.current_obs().copy())
        action, extras, _ = actor.act(storage.current_obs())
        o, r, te, tr, final = envs.step_numpy(action)
        storage.insert({prl.ACT: action, **extras, prl.REW: r, prl.TERM: te, prl.TRUNC: tr, prl.OBS2: o,
                        FINAL_OBS: final})
    storage.finish()
    return storage.get_data(), np.stack(seen)


def test_rho_and_phi_split_the_environments_between_reward_demos_value_demos_and_the_env(tmp_path):
    write_demo(tmp_path / "human", "h.npz", 7.0)
    write_demo(tmp_path / "value", "v.npz", -7.0, max_value=0.5)
    storage, _, envs = cartpole_storage(400, rho=0.5, phi=0.25, initial_human_demos_dir=str(tmp_path / "human"),
                                        initial_value_demos_dir=str(tmp_path / "value"))
    storage.start(envs.reset_numpy().copy())
    first = storage.current_obs()[:, 0]
    reward, value = np.isclose(first, 7.0).mean(), np.isclose(first, -7.0).mean()
    assert abs(reward - 0.5) < 0.08 and abs(value - 0.25) < 0.06
    assert abs((1 - reward - value) - 0.25) < 0.06
    # With rho = 0 and phi = 0 nothing is replayed.
    storage, _, envs = cartpole_storage(50, rho=0.0, phi=0.0, initial_human_demos_dir=str(tmp_path / "human"))
    storage.start(envs.reset_numpy().copy())
    assert np.abs(storage.current_obs()).max() < 1.0


def test_a_replayed_demo_stores_its_actions_rewards_and_the_current_policys_log_probs(tmp_path):
    demo_obs, demo_rew = write_demo(tmp_path / "human", "h.npz", 7.0)
    storage, actor, envs = cartpole_storage(2, rho=1.0, phi=0.0, initial_human_demos_dir=str(tmp_path / "human"))

    def back_to_the_env(t):
        if t == 3:   # the lanes return to their environments when the demo ends
            storage.update_storage_parameter("rho", 0.0)

    data, seen = collect(storage, actor, envs, 8, before_step=back_to_the_env)
    n = len(DEMO_ACTIONS)
    for i in range(2):
        np.testing.assert_allclose(seen[:n, i], demo_obs[:n])
        assert data[prl.ACT][:n, i, 0].tolist() == DEMO_ACTIONS
        np.testing.assert_allclose(data[prl.REW][:n, i, 0].numpy(), demo_rew)
        assert data[prl.TERM][:n, i, 0].tolist() == [0, 0, 0, 0, 1]
    with torch.no_grad():
        obs = torch.as_tensor(demo_obs[:n])
        logp, _, value = actor.evaluate_actions(obs, torch.tensor(DEMO_ACTIONS)[:, None], entropy_grad=False)
    for i in range(2):
        np.testing.assert_allclose(data[prl.LOGP][:n, i].numpy(), logp.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(data[prl.VAL][:n, i].numpy(), value.numpy(), rtol=1e-4, atol=1e-5)
    # After the demo the lanes play their environments again, from a fresh episode, and
    # the environments' episodes behind the demo are not counted.
    assert np.abs(seen[n:]).max() < 1.0
    assert np.abs(seen[n]).max() <= 0.05   # CartPole starts within +-0.05
    assert envs.pop_finished_episodes() == []


def test_agent_episodes_become_demos_by_return_and_the_weakest_are_dropped(tmp_path):
    write_demo(tmp_path / "human", "h.npz", 7.0, rewards=[1.0] * 5)   # return 5
    storage, _, _ = cartpole_storage(1, total_buffer_demo_capacity=3, initial_human_demos_dir=str(tmp_path / "human"))
    human = storage.reward_demos[0]

    def episode(ret):
        return {"obs": np.zeros((2, 4), np.float32), "act": np.zeros((2, 1), np.int64),
                "rew": np.array([ret, 0.0], np.float32), "length": 2, "total_reward": ret, "id": str(ret),
                "max_value": None}

    assert storage.reward_threshold == 5.0
    assert storage.offer_demo(episode(1.0), max_value=0.1) == "value"
    assert storage.offer_demo(episode(10.0), max_value=0.0) == "reward"
    # Full: a value demo goes first to make room for a better episode.
    assert storage.offer_demo(episode(7.0), max_value=0.0) == "reward"
    assert storage.value_demos == []
    assert storage.offer_demo(episode(8.0), max_value=0.0) == "reward"
    assert sorted(d["total_reward"] for d in storage.reward_demos) == [5.0, 8.0, 10.0]
    assert storage.reward_demos[0] is human      # human demos are never dropped
    assert storage.offer_demo(episode(2.0), max_value=9.0) is None   # below 5, and no room
    # Value demos: kept while there is room, the lowest MaxValue dropped beyond it.
    storage, _, _ = cartpole_storage(1, total_buffer_demo_capacity=3, initial_human_demos_dir=str(tmp_path / "human"))
    for v in (0.1, 0.5, 0.3):
        storage.offer_demo(episode(0.0), max_value=v)
    assert sorted(d["max_value"] for d in storage.value_demos) == [0.3, 0.5]


def test_the_collector_offers_finished_episodes_and_saves_the_best_in_the_demo_format(tmp_path):
    write_demo(tmp_path / "human", "h.npz", 7.0, rewards=[0.5] * 5)   # return 2.5: CartPole beats it
    target = tmp_path / "saved"
    storage, actor, envs = cartpole_storage(2, rho=0.0, phi=0.0, initial_human_demos_dir=str(tmp_path / "human"),
                                            target_agent_demos_dir=str(target), save_demos_every=4,
                                            num_agent_demos_to_save=2, size=10)
    # Four rollouts of 10 steps: episodes run across rollouts, and are kept whole.
    obs, seen, acts = None, [], []
    for _ in range(4):
        data, rollout_seen = collect(storage, actor, envs, 10, obs=obs)
        obs = storage.next_rollout_obs()
        seen.append(rollout_seen)
        acts.append(data[prl.ACT].numpy())
    seen, acts = np.concatenate(seen), np.concatenate(acts)
    agent = storage.reward_demos[1:]
    assert agent and all(d["total_reward"] >= 2.5 for d in agent)
    for d in agent:   # each is a run of consecutive steps of one environment
        runs = [(t, i) for t in range(len(seen) - d["length"] + 1) for i in range(2)
                if np.array_equal(seen[t:t + d["length"], i], d["obs"])]
        assert len(runs) == 1
        t, i = runs[0]
        np.testing.assert_array_equal(acts[t:t + d["length"], i], d["act"])
        assert d["total_reward"] == d["length"]   # CartPole: 1 per step
    assert any(d["length"] > 10 for d in agent)
    files = sorted(os.listdir(target))
    assert files == ["reward_demo_1.npz", "reward_demo_2.npz"][:len(agent)]
    best = max(agent, key=lambda d: d["total_reward"])
    loaded = load_demo(str(target / "reward_demo_1.npz"))
    assert loaded["total_reward"] == best["total_reward"]
    np.testing.assert_array_equal(loaded["obs"], best["obs"])
    np.testing.assert_array_equal(loaded["act"], best["act"])
    with pytest.raises(ValueError, match="frame_skip=0"):
        load_demo(str(target / "reward_demo_1.npz"), frame_skip=4)


def test_a_folder_of_several_collectors_demos_is_read_up_to_the_capacity_keeping_the_best(tmp_path, caplog):
    """A remote collector's files carry its indices; a later run reading a folder that
    holds two collectors' sets keeps the best up to total_buffer_demo_capacity and says so."""
    folder = tmp_path / "agent"
    for c, returns in ((1, (3.0, 9.0)), (2, (6.0, 1.0))):
        storage, _, _ = cartpole_storage(1, target_agent_demos_dir=str(folder), num_agent_demos_to_save=2)
        storage.envs.collector = (0, c)
        for ret in returns:
            storage.reward_demos.append({"obs": np.full((2, 4), ret, np.float32), "act": np.zeros((1, 1), np.int64),
                                         "rew": np.array([ret], np.float32), "length": 1, "total_reward": ret,
                                         "id": str(ret), "max_value": None})
        storage.save_demos()
    assert sorted(os.listdir(folder)) == ["reward_demo_g0_c1_1.npz", "reward_demo_g0_c1_2.npz",
                                          "reward_demo_g0_c2_1.npz", "reward_demo_g0_c2_2.npz"]
    assert load_demo(str(folder / "reward_demo_g0_c2_1.npz"))["total_reward"] == 6.0
    forget_notices()
    with caplog.at_level("WARNING", logger="pytorchrl"):
        storage, _, _ = cartpole_storage(1, total_buffer_demo_capacity=3, initial_agent_demos_dir=str(folder))
    assert sorted(d["total_reward"] for d in storage.reward_demos) == [3.0, 6.0, 9.0]
    assert "4 initial demonstrations exceed total_buffer_demo_capacity=3" in caplog.text
    # Human demonstrations are never left out: too many is an error naming the folder.
    for k in range(3):
        write_demo(tmp_path / "human", f"h{k}.npz", 7.0)
    with pytest.raises(ValueError, match="3 human demonstrations in .*human exceed total_buffer_demo_capacity=2"):
        cartpole_storage(1, total_buffer_demo_capacity=2, initial_human_demos_dir=str(tmp_path / "human"))


def test_the_configuration_names_the_storage_ppod_and_checks_its_folders(tmp_path):
    assert STORAGES["ppod"] is PPODBuffer
    write_demo(tmp_path / "human", "h.npz", 7.0)
    human = str(tmp_path / "human")
    config = validate_config(tiny(storage={"name": "ppod", "size": 16, "initial_human_demos_dir": human,
                                           "rho": 0.2, "phi": 0.0}))
    assert config["storage"]["initial_human_demos_dir"] == str(tmp_path / "human")
    with pytest.raises(ConfigError, match="storage.initial_agent_demos_dir: no such demonstrations folder"):
        validate_config(tiny(storage={"name": "ppod", "size": 16, "initial_agent_demos_dir": str(tmp_path / "x")}))
    with pytest.raises(ConfigError, match="rho \\+ phi must be at most 1"):
        validate_config(tiny(storage={"name": "ppod", "size": 16, "rho": 0.7, "phi": 0.5}))


def test_record_demos_from_a_saved_policy_keeps_the_episodes_above_the_threshold(tmp_path):
    actor = saved_run(tmp_path / "run")
    out = tmp_path / "demos"
    result = record_demos(str(tmp_path / "run"), str(out), demos=2, min_return=10.0, seed=3, max_episodes=40)
    assert len(result["kept"]) == 2 and sorted(os.listdir(out)) == ["demo_1.npz", "demo_2.npz"]
    kept = [r for r in result["returns"] if r >= 10.0]
    assert len(kept) == 2 and len(result["returns"]) - 2 == sum(r < 10.0 for r in result["returns"])
    demo = load_demo(str(out / "demo_1.npz"))
    assert demo["total_reward"] == kept[0] and len(demo["obs"]) == demo["length"] + 1
    # The actions are the saved policy's deterministic ones at the recorded observations.
    with torch.no_grad():
        mode = actor.act(demo["obs"][:-1], deterministic=True)[0]
    np.testing.assert_array_equal(demo["act"].reshape(-1), np.asarray(mode).reshape(-1))


def test_record_demos_reads_a_humans_keys_on_stdin(tmp_path):
    saved_run(tmp_path / "run")
    keys = "0\n1\nnope\n" + "1\n" * 300
    shown = io.StringIO()
    result = record_demos(str(tmp_path / "run" / "config.yaml"), str(tmp_path / "h"), demos=1, human=True, seed=0,
                          stdin=io.StringIO(keys), stdout=shown)
    demo = load_demo(str(tmp_path / "h" / "human_demo_1.npz"))
    assert demo["act"].reshape(-1).tolist() == [0, 1] + [1] * (demo["length"] - 2)
    assert "action keys: 0=0, 1=1" in shown.getvalue() and "unknown action 'nope'" in shown.getvalue()
    # q quits: the episode in progress is not kept, and the next file continues the numbering.
    result = record_demos(str(tmp_path / "run"), str(tmp_path / "h"), demos=1, human=True, stdin=io.StringIO("1\nq\n"),
                          stdout=io.StringIO())
    assert result["quit"] and result["kept"] == []
    result = record_demos(str(tmp_path / "run"), str(tmp_path / "h"), demos=1, human=True,
                          stdin=io.StringIO("1\n" * 300), stdout=io.StringIO())
    assert [os.path.basename(p) for p in result["kept"]] == ["human_demo_2.npz"]


def test_ppo_trains_with_ppod_from_the_configuration_and_saves_agent_demos(tmp_path):
    _, _, saved = train_and_read_saved_demos(ppod_config(tmp_path), tmp_path)
    assert len(saved) == 3 and all(d["total_reward"] >= 2.5 for d in saved)
    assert [d["total_reward"] for d in saved] == sorted((d["total_reward"] for d in saved), reverse=True)



def test_saving_over_a_demo_replaces_it_whole_and_leaves_no_temporary_file(tmp_path):
    # Several Ray collectors save the same names into one folder: each save is a rename of a
    # finished file, so a reader meets the old demonstration or the new one, never a torn one.
    path = str(tmp_path / "reward_demo_1")
    save_demo(path, np.zeros((4, 2), np.float32), np.zeros((3, 1)), [0.0, 0.0, 1.0])
    save_demo(path + ".npz", np.ones((6, 2), np.float32), np.ones((5, 1)), [1.0] * 5)
    assert os.listdir(tmp_path) == ["reward_demo_1.npz"]
    demo = load_demo(path + ".npz")
    assert demo["obs"].shape == (6, 2) and demo["rew"].sum() == 5.0
