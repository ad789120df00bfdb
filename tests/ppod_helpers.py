"""Helpers of the PPO+D tests (tests/unit/test_ppod.py, tests/distributed/test_ppod_ray.py,
tests/cli/test_cli_record_demos.py): demonstrations no CartPole state looks like, a tiny PPO+D
configuration, and a saved run to record demonstrations from."""

import os

import gymnasium as gym
import numpy as np
import torch

from pytorchrl.agent.storages.ppod import load_demo, save_demo
from pytorchrl.config import build_actor_factory, build_learner, dump_config, validate_config

from cli_helpers import tiny

DEMO_ACTIONS = [1, 0, 1, 1, 0]


def write_demo(folder, name, value, actions=DEMO_ACTIONS, rewards=None, max_value=None):
    """Write a demonstration of ``actions`` into ``folder``: observation k is ``value + k /
    100`` in every entry, rewards 1, 2, ... unless given; returns (observations, rewards)."""
    os.makedirs(folder, exist_ok=True)
    n = len(actions)
    obs = np.full((n + 1, 4), value, dtype=np.float32) + np.arange(n + 1, dtype=np.float32)[:, None] / 100
    rew = np.arange(1, n + 1, dtype=np.float32) if rewards is None else np.asarray(rewards, np.float32)
    save_demo(os.path.join(folder, name), obs, np.array(actions, np.int64)[:, None], rew, max_value=max_value)
    return obs, rew


def ppod_config(tmp_path, **scheme):
    """TINY with PPO+D reading one demonstration (return 2.5, which CartPole episodes beat)
    and saving the agent's best episodes after every rollout."""
    write_demo(tmp_path / "human", "h.npz", 7.0, rewards=[0.5] * 5)
    storage = {"name": "ppod", "size": 16, "rho": 0.5, "phi": 0.2, "initial_human_demos_dir": str(tmp_path / "human"),
               "target_agent_demos_dir": str(tmp_path / "saved"), "save_demos_every": 1, "num_agent_demos_to_save": 3}
    return validate_config(tiny(storage=storage, env={"test_env": False},
                                learner={"target_steps": 512, "tensorboard": False, "final_eval": False},
                                **({"scheme": scheme} if scheme else {})))


def train_and_read_saved_demos(config, tmp_path):
    """Train ``config`` (from ``ppod_config``) to its target; returns (the learner, its
    final metrics, the saved agent demonstrations in file order)."""
    learner = build_learner(config)
    try:
        while not learner.done():
            learner.step()
        metrics = learner.get_metrics(add_episodes_metrics=True)
    finally:
        learner.stop()
    assert learner.num_samples_collected >= 512 and np.isfinite(metrics["Algorithm/PolicyLoss"])
    # *.npz only: a collector stopped while saving leaves its unfinished temporary file beside them.
    saved = [load_demo(str(tmp_path / "saved" / f)) for f in sorted(os.listdir(tmp_path / "saved"))
             if f.endswith(".npz")]
    return learner, metrics, saved


def saved_run(directory):
    """A run directory as a run leaves it: config.yaml and the actor's model.state_dict."""
    os.makedirs(directory, exist_ok=True)
    config = validate_config(tiny())
    with open(os.path.join(directory, "config.yaml"), "w") as f:
        f.write(dump_config(config))
    env = gym.make("CartPole-v1")
    torch.manual_seed(0)
    actor = build_actor_factory(config, env.observation_space, env.action_space, "PPO")("cpu")
    torch.save(actor.state_dict(), os.path.join(directory, "model.state_dict"))
    return actor
