"""What users of Stable-Baselines3 look for first: a saved run loaded in Python and asked
for actions (``load_policy(run_dir).predict(obs, deterministic=True)``), a learner built
from a configuration file trained with ``learn(total_timesteps)`` and asked the same, and
TensorBoard installed with the package (the quick start's files)."""

import ast
import os

import numpy as np
import pytest

from pytorchrl import cli
from pytorchrl.config import build_learner, load_config
from pytorchrl.tools.evaluate import evaluate_run, load_policy

from cli_helpers import REPO, tiny, write_config


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A run directory of TINY trained for 640 env steps."""
    tmp_path = tmp_path_factory.mktemp("run")
    run_dir = tmp_path / "run"
    conf = write_config(tmp_path, tiny(learner={"target_steps": 640, "tensorboard": False}, env={"test_env": False}))
    assert cli.main(["train", conf, "--run-dir", str(run_dir), "--progress", "quiet"]) == 0
    return run_dir


def play(policy, env, seed):
    """Return of one episode of ``policy.predict(obs, deterministic=True)`` in ``env``."""
    obs, _ = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        action, _ = policy.predict(obs, deterministic=True)
        obs, reward, terminated, truncated, _ = env.step(action)
        total, done = total + reward, terminated or truncated
    return total


def test_a_saved_run_predicts_one_action_or_a_batch(saved_run):
    policy = load_policy(str(saved_run))
    env = policy.make_env()
    obs, _ = env.reset(seed=0)
    action, state = policy.predict(obs, deterministic=True)
    assert state is None and np.ndim(action) == 0 and env.action_space.contains(action)
    batch, _ = policy.predict(np.stack([obs, obs, obs]), deterministic=True)
    assert batch.shape == (3,) and (batch == action).all()
    # The episodes pytorchrl evaluate plays with the same seeds.
    expected = evaluate_run(str(saved_run), episodes=1, seed=5)["returns"]
    assert [play(policy, env, seed=5)] == expected
    env.close()


def test_a_recurrent_policy_carries_its_memory_and_resets_it_at_an_episode_start(tmp_path):
    run_dir = tmp_path / "run"
    config = tiny(learner={"target_steps": 64, "tensorboard": False}, env={"id": "MaskedCartPole-v1", "test_env": False},
                  actor={"recurrent_net": "GRU", "recurrent_hidden_size": 8})
    assert cli.main(["train", write_config(tmp_path, config), "--run-dir", str(run_dir), "--progress", "quiet"]) == 0
    policy = load_policy(str(run_dir))
    obs = np.ones(policy.observation_space.shape, dtype=np.float32)
    _, first = policy.predict(obs, deterministic=True)
    _, second = policy.predict(obs, first, deterministic=True)
    assert first is not None and not np.allclose(np.asarray(first), np.asarray(second))   # it remembers
    _, again = policy.predict(obs, second, episode_start=[True], deterministic=True)
    assert np.allclose(np.asarray(again), np.asarray(first))                                # and forgets


def test_learn_trains_a_learner_built_from_a_file_and_predict_acts(tmp_path):
    config = load_config(os.path.join(REPO, "examples", "configs", "ppo_cartpole.yaml"),
                         ["learner.tensorboard=false", "env.test_env=false"])
    learner = build_learner(config, log_dir=str(tmp_path))
    try:
        assert learner.learn(total_timesteps=512) is learner
        first = learner.num_samples_collected
        assert first >= 512 and learner.target_steps == 512
        learner.learn(256)                            # further, from where it is
        assert learner.num_samples_collected >= first + 256 and learner.target_steps == first + 256
        obs = np.zeros(4, dtype=np.float32)
        action, state = learner.predict(obs, deterministic=True)
        assert action in (0, 1) and state is None
    finally:
        learner.stop()
    with pytest.raises(ValueError, match="total_timesteps must be a positive integer"):
        learner.learn(0)


def test_tensorboard_is_installed_with_the_package():
    """The quick start's 'pip install -e .' installs what writes the TensorBoard files the
    README shows (a run without it warns and writes none)."""
    with open(os.path.join(REPO, "setup.py")) as f:
        tree = ast.parse(f.read())
    (requires,) = [kw.value for node in ast.walk(tree) if isinstance(node, ast.Call)
                   for kw in node.keywords if kw.arg == "install_requires"]
    names = [ast.literal_eval(item).split(">")[0].split("=")[0] for item in requires.elts]
    assert "tensorboard" in names
