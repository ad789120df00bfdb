"""YAML configuration: schema, validation, overrides and building a Learner from a file.

Typical use::

    from pytorchrl.config import load_config, build_learner
    config = load_config("examples/configs/ppo_cartpole.yaml", ["algorithm.lr=1e-4"])
    learner = build_learner(config, log_dir="runs/demo")
"""

from pytorchrl.config.build import (build_actor_factory, build_algorithm_factory, build_env_factories,
                                    build_learner, build_schedules, build_scheme, build_storage_factory)
from pytorchrl.config.errors import ConfigError
from pytorchrl.config.loader import apply_overrides, dump_config, load_yaml, parse_yaml
from pytorchrl.config.resolve import load_config, validate_config
from pytorchrl.config.schema import SECTIONS, describe_schema

__all__ = ["ConfigError", "load_config", "load_yaml", "parse_yaml", "apply_overrides", "validate_config",
           "dump_config", "describe_schema", "SECTIONS", "build_env_factories", "build_algorithm_factory",
           "build_actor_factory", "build_storage_factory", "build_schedules", "build_scheme", "build_learner"]
