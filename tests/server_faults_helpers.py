"""Helpers of the data server fault tests (tests/distributed/test_server_faults.py,
tests/unit/test_server_faults_in_process.py): the factories of exarl-seed's DDQN agent."""

import os

from pytorchrl.config import load_config, validate_config
from pytorchrl.config.build import (build_actor_factory, build_algorithm_factory, build_env_factories,
                                    build_storage_factory)

from cli_helpers import EXARL


def seed_agent(*overrides):
    """(algo, actor, storage, train envs) factories of exarl-seed's DDQN on CartPole."""
    config = validate_config(load_config(os.path.join(EXARL, "exarl-seed.yaml"),
                                         ["learner.tensorboard=false", *overrides]))
    train, _, action_space, obs_space = build_env_factories(config)
    algo, name = build_algorithm_factory(config)
    return algo, build_actor_factory(config, obs_space, action_space, name), build_storage_factory(config), train
