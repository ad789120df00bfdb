"""Helpers of the agent preset tests (tests/unit/test_agent_presets.py, and
tests/distributed/test_agent_presets_ray.py for the agents whose example layout has remote
workers): each agent's example configuration, a tiny budget for it, and its tiny run."""

import importlib.util
import os

import numpy as np
import pytest

from pytorchrl.config import build_learner, load_config
from pytorchrl.config.agent_presets import AGENT_PRESETS
from pytorchrl.config.loader import resolve_agent_preset

from _util import needs_extra
from cli_helpers import REPO
from distributed_fixtures import LayoutProbe


EXAMPLES = os.path.join(REPO, "examples", "configs")


#: Overrides that make each agent's run tiny: a few hundred steps, at least one update
#: (off-policy agents start learning after start_steps), no evaluation games.
TINY_RUNS = {
    "A2C": ["learner.target_steps=400"],
    "PPO": ["learner.target_steps=512", "algorithm.num_epochs=4"],
    "A3C": ["learner.target_steps=400"],
    "IMPALA": ["learner.target_steps=400"],
    "DD-PPO": ["learner.target_steps=512", "algorithm.num_epochs=2"],
    "DQN": ["learner.target_steps=400", "algorithm.start_steps=100", "algorithm.update_every=100",
            "algorithm.num_updates=10"],
    "Ape-X": ["learner.target_steps=400", "algorithm.start_steps=100", "algorithm.update_every=100",
              "algorithm.num_updates=10"],
    "R2D2-Lite": ["learner.target_steps=400", "algorithm.start_steps=100", "algorithm.update_every=100",
                  "algorithm.num_updates=10"],
    "SAC": ["learner.target_steps=300", "algorithm.start_steps=100"],
    "TD3": ["learner.target_steps=300", "algorithm.start_steps=100"],
    "PPO-Atari": ["learner.target_steps=64", "env.vec_env_size=2", "storage.size=32"],
    "SAC-MuJoCo": ["learner.target_steps=200", "algorithm.start_steps=100"],
}


def example_config(agent):
    return os.path.join(EXAMPLES, agent.file)


#: The package of each environment family that needs one, and the extra that installs it.
FAMILY_PACKAGES = {"atari": ("ale_py", "atari"), "mujoco": ("mujoco", "mujoco")}


def family_of(agent):
    return resolve_agent_preset(agent)["env"].get("family", "gym")


def skip_unless_loadable(agent):
    """Skip when the agent's simulator cannot load here (ale-py, MuJoCo), naming its extra."""
    family = family_of(agent)
    if family in FAMILY_PACKAGES:
        needs_extra(*FAMILY_PACKAGES[family])
    if family == "mujoco":
        try:
            from pytorchrl.envs import mujoco_train_env_factory
            mujoco_train_env_factory(resolve_agent_preset(agent)["env"]["id"], 0, 0).close()
        except Exception as exc:  # no mujoco package, no OpenGL-free build, ...
            pytest.skip(f"MuJoCo cannot load: {type(exc).__name__}: {exc}")


def uses_ray(name):
    agent = AGENT_PRESETS[name]
    if family_of(agent) in FAMILY_PACKAGES and importlib.util.find_spec(FAMILY_PACKAGES[family_of(agent)][0]) is None:
        # Its configuration does not load without the simulator (a ConfigError at collection):
        # test_agent_preset_trains skips it, naming the extra. (The examples with a
        # simulator run in one process.)
        return False
    scheme = load_config(example_config(agent))["scheme"]
    return scheme["num_col_workers"] > 1 or scheme["num_grad_workers"] > 1


#: Agents whose example layout has remote workers train on the session's Ray instance,
#: in a test of their own (what a test uses decides its markers: tests/conftest.py).
ON_RAY = [name for name in AGENT_PRESETS if uses_ray(name)]


def train_tiny(name, check_layout=False):
    """The example configuration with a tiny budget on the command line's overrides (and on
    until each of several gradient workers reported a round: ``LayoutProbe.train``). With
    ``check_layout`` the probe checks that the run had the layout of the configuration's
    scheme preset."""
    agent = AGENT_PRESETS[name]
    skip_unless_loadable(agent)
    config = load_config(example_config(agent), TINY_RUNS[name] + ["env.test_env=false"])
    learner = build_learner(config)
    try:
        probe = LayoutProbe(learner)
        before = {k: v.clone() for k, v in learner.update_worker.get_weights().items()}
        probe.train()
        metrics = learner.get_metrics(add_scheme_metrics=True)
        after = learner.update_worker.get_weights()
        if check_layout:
            probe.check(config["scheme"]["preset"], metrics)
    finally:
        learner.stop()
    assert metrics["Scheme/EnvSteps"] >= config["learner"]["target_steps"]
    assert any(not np.array_equal(after[k].numpy(), v.numpy()) for k, v in before.items()), "no update happened"
