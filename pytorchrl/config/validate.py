"""Validation of a configuration dict against the schema, before anything starts.

Reading files and expanding agent presets is the loader's part (``pytorchrl.config.loader``);
``pytorchrl.config.validate_config`` joins the two. ``check_config`` returns the resolved
configuration: every key present, defaults
filled in, numbers normalised (an integer given for a float parameter becomes a float).
Any problem raises :class:`ConfigError` with a one-line message naming the key path and
the value, e.g. ``config error: algorithm.lr: expected a number, got 'fast'``.

The checks are split by role: single values and mappings (``values``), the agent's
sections together (``validate_agent``), the scheme section (``validate_scheme``) and the
``pbt`` section (``validate_pbt``); this module checks the environment, the schedules,
W&B and the device, and runs them all in order.
"""

import importlib

from pytorchrl.config import schema
from pytorchrl.config.errors import ConfigError
from pytorchrl.config.schema import (ENV_FAMILY_OPTION_KEYS, OPTIONAL_SECTIONS, SCHEDULE_KEYS, SECTION_ORDER,
                                     SECTIONS, TOP_LEVEL)
from pytorchrl.config.validate_agent import (check_demo_folders, check_families, check_normalization,
                                             check_policy_loss_addons, check_recurrent, refuse_addons_without_support,
                                             with_default_storage)
from pytorchrl.config.validate_pbt import check_pbt, resolve_parameter  # noqa: F401  (public here before)
from pytorchrl.config.validate_scheme import (check_batching, check_data_path_options, check_ineffective,
                                              check_inference_server_options, check_replay_pace,
                                              check_weight_options, expand_preset, refuse_broken_layout)
from pytorchrl.config.values import (check_mapping, check_named_section, check_value, join_path, show_value,
                                     strict_key, suggestion)
from pytorchrl.config.wandb_options import import_wandb, wandb_wanted
from pytorchrl.envs.families import ENV_FAMILIES


def check_env_id(env_id, path="env.id"):
    """Refuse an environment id that gymnasium cannot make.

    Parameters
    ----------
    env_id : str
        A registered id ("CartPole-v1"), or "module:Id" whose module registers it on import.
    path : str
        Key path for messages.
    """
    import gymnasium

    name = env_id
    if ":" in env_id:
        module, _, name = env_id.partition(":")
        try:
            importlib.import_module(module)
        except Exception as exc:  # any import failure means the id cannot be made
            raise ConfigError(path, f"cannot import module {module!r} for environment {env_id!r}: "
                                    f"{type(exc).__name__}: {exc}") from None
    if name not in gymnasium.envs.registry:
        hint = suggestion(name, gymnasium.envs.registry.keys()) or \
            " (an environment registered by a package is written 'package:Id')"
        raise ConfigError(path, f"unknown gymnasium environment {name!r}{hint}")


def check_env_family(env):
    """Refuse what the family of ``env`` (a resolved ``env`` section) cannot build: an option
    of another family, gymnasium.make arguments outside the gym family, an id of another
    family or none, and a family whose package is not installed."""
    family = ENV_FAMILIES[env["family"]]
    for name in ENV_FAMILY_OPTION_KEYS:
        if env[name] is not None and name not in family.options:
            owners = [f.name for f in ENV_FAMILIES.values() if name in f.options]
            raise ConfigError(f"env.{name}", f"is an option of the {' and '.join(owners)} "
                                             f"famil{'ies' if len(owners) > 1 else 'y'}; env.family is "
                                             f"{family.name!r}, which has "
                                             f"{'options ' + ', '.join(family.options) if family.options else 'none'}")
    for name, refused in family.option_checks.items():
        problem = refused(env[name]) if env[name] is not None else None
        if problem is not None:
            raise ConfigError(f"env.{name}", problem)
    if family.name == "gym":
        check_env_id(env["id"])
        return
    if env["kwargs"]:
        raise ConfigError("env.kwargs", f"the {family.name} family takes no gymnasium.make arguments; its options "
                                        f"are env keys: {', '.join(family.options)}")
    try:
        ids = family.ids()
    except ImportError as exc:
        raise ConfigError("env.family", f"{family.name}: {exc}") from None
    if env["id"] not in ids:
        import gymnasium
        spec = gymnasium.envs.registry.get(env["id"])
        if spec is not None:
            raise ConfigError("env.id", f"{env['id']!r} is not an environment of the {family.name} family "
                                        f"(entry point {spec.entry_point})")
        raise ConfigError("env.id", f"unknown {family.name} environment {env['id']!r}{suggestion(env['id'], ids)}")


def _check_schedules(items, config):
    if items is None:
        return []
    if not isinstance(items, list):
        raise ConfigError("schedules", f"expected a list of schedules, got {show_value(items)}")
    params = {"algorithm": schema.algorithm_keys(config["algorithm"]["name"]),
              "storage": schema.storage_keys(config["storage"]["name"])}
    out = []
    for i, item in enumerate(items):
        path = f"schedules.{i}"
        sched = check_mapping(item, SCHEDULE_KEYS, path)
        valid = params[sched["target"]]
        if sched["name"] not in valid:
            raise ConfigError(join_path(path, "name"), f"{sched['target']} {config[sched['target']]['name']} has no "
                                                   f"parameter {sched['name']!r}{suggestion(sched['name'], valid)}; "
                                                   f"valid: {', '.join(valid)}")
        # A schedule's values obey the parameter's own type and range (null is never one).
        key = strict_key(valid[sched["name"]])
        sched["start"] = check_value(key, sched["start"], join_path(path, "start"))
        if sched["kind"] == "constant":
            if sched["end"] is not None:
                raise ConfigError(join_path(path, "end"), f"a constant schedule has no end value, got {show_value(sched['end'])}")
        else:
            if sched["end"] is None:
                raise ConfigError(join_path(path, "end"), f"missing: a {sched['kind']} schedule needs an end value")
            sched["end"] = check_value(key, sched["end"], join_path(path, "end"))
        if sched["kind"] == "linear":
            end_step = sched["end_step"] if sched["end_step"] is not None else config["learner"]["target_steps"]
            if end_step <= sched["start_step"]:
                raise ConfigError(join_path(path, "end_step"), f"must be greater than start_step "
                                                           f"({sched['start_step']}), got {end_step}")
        out.append(sched)
    return out


def _check_wandb(config):
    """Resolve ``learner.wandb`` and refuse it when it asks for a W&B run and the wandb package
    is missing (said before anything starts, with the line that installs it)."""
    learner = config["learner"]
    if learner["wandb"] is None:
        return
    learner["wandb"] = check_mapping(learner["wandb"], schema.WANDB_KEYS, "learner.wandb")
    if wandb_wanted(learner["wandb"]):
        try:
            import_wandb()
        except ImportError as exc:
            raise ConfigError("learner.wandb", str(exc).replace("learner.wandb ", "", 1)) from None


def _check_device(device, path):
    """Refuse a device torch cannot parse, or a GPU this machine does not have."""
    if device in (None, "auto"):
        return
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(path, f"not a device to train on: {device!r} (e.g. cpu, cuda, cuda:1, auto)")
    if dev.type == "cuda":
        count = torch.cuda.device_count()
        if count == 0 or (dev.index is not None and dev.index >= count):
            raise ConfigError(path, f"{device!r} asked for, but this machine has {count} CUDA device(s)")


def _check_consistency(config):
    scheme_cfg = config["scheme"]
    refuse_broken_layout(scheme_cfg)
    check_ineffective(scheme_cfg)
    check_normalization(config)
    check_batching(config)
    check_weight_options(config)
    check_recurrent(config)
    check_data_path_options(config)
    check_inference_server_options(config)
    if "env_id" in config["env"]["kwargs"]:
        raise ConfigError("env.kwargs.env_id", "the environment is set by env.id")
    _check_device(scheme_cfg["local_device"], "scheme.local_device")


def check_config(raw):
    """Validate a configuration whose agent preset is expanded and return it resolved
    (defaults filled in); the top-level ``preset`` key, if any, is only checked to name a
    preset (``pytorchrl.config.validate_config`` expands it first).

    Parameters
    ----------
    raw : dict
        The configuration as loaded from YAML (after overrides and the agent preset).

    Returns
    -------
    dict
        Top-level keys, then one mapping per section in ``SECTION_ORDER``
        (``schedules``: a list of mappings).

    Raises
    ------
    ConfigError
        For the first problem found.
    """
    if not isinstance(raw, dict):
        raise ConfigError("", f"expected a mapping of sections at the top level, got {show_value(raw)}")
    valid = list(TOP_LEVEL) + list(SECTION_ORDER) + list(OPTIONAL_SECTIONS)
    for name in raw:
        if name not in valid:
            raise ConfigError(str(name), f"unknown key{suggestion(name, valid)}; valid: {', '.join(valid)}")
    config = check_mapping({k: raw[k] for k in TOP_LEVEL if k in raw}, TOP_LEVEL, "")
    for section in SECTION_ORDER:
        data = raw.get(section)
        if section == "algorithm":
            refuse_addons_without_support(data)
            config[section] = check_named_section(data, SECTIONS[section]["name"], schema.algorithm_keys, section)
            check_policy_loss_addons(config[section])
        elif section == "storage":
            data = with_default_storage(data, config["algorithm"]["name"],
                                         config["actor"].get("recurrent_net") is not None)
            config[section] = check_named_section(data, SECTIONS[section]["name"], schema.storage_keys, section)
            check_demo_folders(config[section])
        elif section == "scheme":
            config[section] = check_mapping(expand_preset(data), SECTIONS[section], section)
        elif section != "schedules":
            config[section] = check_mapping(data, SECTIONS[section], section)
    config["schedules"] = _check_schedules(raw.get("schedules"), config)
    check_families(config, raw)
    _check_wandb(config)
    _check_consistency(config)
    check_replay_pace(config, raw)
    check_env_family(config["env"])
    if "pbt" in raw:
        config["pbt"] = check_pbt(raw["pbt"], config)
    return config
