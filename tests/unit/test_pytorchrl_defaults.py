"""pytorchrl's defaults: a script that leaves a keyword of ``create_factory`` out gets
pytorchrl's value (read from its ``create_factory`` methods and, where it has no keyword, its
code), the configuration file's default is the same, and docs/agents.md's table says so."""

import inspect
import os
import re

import gymnasium as gym
import pytest

from pytorchrl.agent.actors import OffPolicyActor, OnPolicyActor
from pytorchrl.agent.algorithms import ALGORITHMS, A2C, SAC
from pytorchrl.config.schema import algorithm_keys

from cli_helpers import REPO

pytestmark = pytest.mark.usefixtures("no_ray_import")

#: pytorchrl's value of every keyword whose default was ours before (the rest already was).
PYTORCHRL = {
    "PPO": {"lr": 1e-4, "eps": 1e-8, "entropy_coef": 0.01, "test_every": 1000, "num_test_episodes": 5,
            "gamma": 0.99, "num_epochs": 4, "clip_param": 0.2, "num_mini_batch": 1, "max_grad_norm": 0.5,
            "value_loss_coef": 0.5, "use_clipped_value_loss": True},
    "A2C": {"lr": 1e-4, "eps": 1e-8, "value_loss_coef": 1.0, "normalize_advantages": True, "test_every": 5000,
            "num_test_episodes": 5, "gamma": 0.99, "max_grad_norm": 0.5},
    "DDQN": {"max_grad_norm": 0.5, "test_every": 5000, "lr": 1e-4, "gamma": 0.99, "polyak": 0.995,
             "num_updates": 50, "update_every": 50, "start_steps": 20000, "mini_batch_size": 64,
             "num_test_episodes": 5, "epsilon_decay": 0.999, "initial_epsilon": 1.0, "target_update_interval": 1},
    "DDPG": {"lr_q": 1e-3, "lr_pi": 1e-4, "num_updates": 50, "update_every": 50, "mini_batch_size": 64,
             "max_grad_norm": 0.5, "test_every": 5000, "start_steps": 1000, "num_test_episodes": 5,
             "target_update_interval": 1, "polyak": 0.995},
    "TD3": {"lr_q": 1e-4, "lr_pi": 1e-4, "num_updates": 50, "update_every": 50, "mini_batch_size": 100,
            "target_update_interval": 1, "max_grad_norm": 0.5, "test_every": 5000, "start_steps": 1000,
            "num_test_episodes": 5},
    "SAC": {"lr_q": 1e-4, "lr_pi": 1e-4, "lr_alpha": 1e-4, "num_updates": 50, "update_every": 50,
            "mini_batch_size": 64, "max_grad_norm": 0.5, "test_every": 5000, "start_steps": 1000,
            "initial_alpha": 1.0, "num_test_episodes": 5, "target_update_interval": 1},
    "RND_PPO": {"predictor_proportion": 2.0, "use_clipped_value_loss": True, "test_every": 1000,
                "num_test_episodes": 5, "lr": 1e-4, "eps": 1e-8, "entropy_coef": 0.01, "gamma_intrinsic": 0.99,
                "ext_adv_coeff": 2.0, "int_adv_coeff": 1.0, "pre_normalization_steps": 50,
                "pre_normalization_length": 128},
}


#: The keywords whose default was ours before (the rows of docs/agents.md's table).
CHANGED = {("PPO", n) for n in ("lr", "eps", "entropy_coef", "test_every", "num_test_episodes")} | \
    {("A2C", n) for n in ("lr", "eps", "value_loss_coef", "normalize_advantages", "test_every", "num_test_episodes")} | \
    {("DDQN", "max_grad_norm"), ("DDQN", "test_every")} | \
    {("DDPG", n) for n in ("lr_pi", "num_updates", "update_every", "mini_batch_size", "max_grad_norm", "test_every")} | \
    {("TD3", n) for n in ("lr_q", "lr_pi", "num_updates", "update_every", "mini_batch_size", "target_update_interval",
                         "max_grad_norm", "test_every")} | \
    {("SAC", n) for n in ("lr_q", "lr_pi", "lr_alpha", "num_updates", "update_every", "mini_batch_size",
                         "max_grad_norm", "test_every")} | \
    {("RND_PPO", n) for n in ("predictor_proportion", "use_clipped_value_loss", "test_every", "num_test_episodes")}


def _default(cls, name):
    return inspect.signature(cls.__init__).parameters[name].default


@pytest.mark.parametrize("algorithm", sorted(PYTORCHRL))
def test_every_keyword_left_out_gets_pytorchrls_value_from_python_and_from_yaml(algorithm):
    cls, keys = ALGORITHMS[algorithm], algorithm_keys(algorithm)
    for name, value in PYTORCHRL[algorithm].items():
        assert _default(cls, name) == value, (algorithm, name, _default(cls, name))
        assert keys[name].default == value, (algorithm, name, "the configuration file's default")


def test_a_factory_called_without_keywords_builds_pytorchrls_algorithm():
    env = gym.make("CartPole-v1")
    factory, name = A2C.create_factory()
    a2c = factory("cpu", OnPolicyActor.create_factory(env.observation_space, env.action_space, name,
                                                      shared_policy_value_network=False)("cpu"), None)
    # Two Adam optimizers of rate 1e-4 and Adam's own eps, as pytorchrl's A2C builds them.
    groups = [g for opt in a2c.optimizers.values() for g in opt.param_groups]
    assert len(a2c.optimizers) == 2 and {g["lr"] for g in groups} == {1e-4} and {g["eps"] for g in groups} == {1e-8}
    assert (a2c.lr_v, a2c.lr_pi, a2c.test_every, a2c.num_test_episodes) == (1e-4, 1e-4, 5000, 5)
    pendulum = gym.make("Pendulum-v1")
    factory, name = SAC.create_factory()
    sac = factory("cpu", OffPolicyActor.create_factory(pendulum.observation_space, pendulum.action_space,
                                                       name)("cpu"), None)
    assert (sac.num_updates, sac.update_every, sac.mini_batch_size, sac.max_grad_norm) == (50, 50, 64, 0.5)
    assert {g["lr"] for opt in sac.optimizers.values() for g in opt.param_groups} == {1e-4}


def _value(text):
    """A value as the table writes it (1e-4, true, none)."""
    text = text.strip()
    words = {"true": True, "false": False, "none": None}
    return words[text] if text in words else float(text)


def test_the_table_of_docs_agents_md_is_the_classes():
    with open(os.path.join(REPO, "docs", "agents.md")) as f:
        doc = f.read()
    section = doc[doc.index("## pytorchrl's defaults"):doc.index("## Algorithms (")]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \| ([^|]+) \| ([^|]+) \|", section, flags=re.M)
    assert len(rows) >= 30, rows
    seen = set()
    for algorithm, keywords, value, before in rows:
        names = re.findall(r"`(\w+)`", re.sub(r"\(.*?\)", "", keywords))
        for name in names:
            assert _default(ALGORITHMS[algorithm], name) == _value(value), (algorithm, name, value)
            assert _value(before) != _value(value), (algorithm, name, "listed but unchanged")
            seen.add((algorithm, name))
    # Every default that changed is in the table, and nothing else.
    assert seen == CHANGED, (seen ^ CHANGED)
