"""Helpers of the RND-PPO tests (tests/unit/test_rnd_ppo.py, tests/distributed/test_rnd_ppo_ray.py,
tests/cli/test_cli_rnd_ppo.py): the example configuration, a short run of it and the
normalisation statistics a resumed run must start from."""

import numpy as np

from pytorchrl.config import build_learner, load_config

from cli_helpers import REPO


EXAMPLE = f"{REPO}/examples/configs/rnd_ppo_mountaincar.yaml"


def short_config(*overrides):
    return load_config(EXAMPLE, ["learner.target_steps=128", "env.vec_env_size=2", "storage.size=32",
                                 "algorithm.pre_normalization_steps=1", "algorithm.pre_normalization_length=8",
                                 "algorithm.num_mini_batch=2",
                                 "env.monitor=false", "learner.tensorboard=false", *overrides])


def train_rnd(config, log_dir=None):
    learner = build_learner(config, log_dir=log_dir)
    infos = []
    try:
        while not learner.done():
            infos += [i.get("algo", {}) for i in learner.step()]
    finally:
        learner.stop()
    return learner, [i for i in infos if i]


def assert_same_statistics(a, b):
    """Two ``RND_PPO.collector_state`` (arrays or the tensors a checkpoint reads back) are equal."""
    for key in ("obs_rms", "int_return_rms"):
        for field in ("mean", "var", "count"):
            np.testing.assert_array_equal(np.asarray(a[key][field]), np.asarray(b[key][field]))
    np.testing.assert_array_equal(np.asarray(a["int_returns"]), np.asarray(b["int_returns"]))


def train_and_save(config, path):
    """Train ``config`` to its end, save a checkpoint to ``path``; returns the statistics saved."""
    learner = build_learner(config)
    try:
        while not learner.done():
            learner.step()
        learner.save_checkpoint(str(path))
        return learner.update_worker.collector_state()
    finally:
        learner.stop()


# 2 environments, rollouts of 32 steps, a warm-up of 1 x 8 steps.
WARM_UP, ROLLOUT = 1 * 8 * 2, 32 * 2
