"""A run's configuration from a file: read it (``loader``), then validate it (``validate``).

The two steps stay apart so that neither imports the other; this module is where they meet.
"""

import os

from pytorchrl.config.errors import ConfigError
from pytorchrl.config.loader import apply_agent_preset, apply_overrides, load_yaml
from pytorchrl.config.schema import TOP_LEVEL
from pytorchrl.config.validate import check_config
from pytorchrl.config.values import check_value


def validate_config(raw):
    """Validate a loaded configuration and return it resolved (its agent preset expanded,
    defaults filled in).

    Parameters
    ----------
    raw : dict
        The configuration as loaded from YAML (and after overrides).

    Returns and raises as ``pytorchrl.config.validate.check_config``; an error in a value
    that the preset, not the file, wrote says so.
    """
    name = raw.get("preset") if isinstance(raw, dict) else None
    if name is None:
        return check_config(raw)
    check_value(TOP_LEVEL["preset"], name, "preset")
    expanded = apply_agent_preset(raw)
    try:
        return check_config(expanded)
    except ConfigError as exc:
        # A value the file did not write came from the preset: say so, the user did not write it.
        if exc.path and _has_key(expanded, exc.path) and not _has_key(raw, exc.path):
            raise ConfigError(exc.path, f"{exc.problem} (the value of preset {name}; write the key in the file to "
                                        f"change it)", exc.source) from None
        raise


def _has_key(config, path):
    """Whether the dotted ``path`` (``algorithm.lr``, ``schedules.0.end``) is written in ``config``."""
    node = config
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True


def _override_source(error, overrides):
    """The override that set the key ``error`` is about, or None."""
    for text in reversed(overrides):
        key = text.partition("=")[0].strip()
        if error.path == key or error.path.startswith(key + ".") or key.startswith(error.path + "."):
            return f"override {text}"
    return None


def load_config(path, overrides=(), drop_overridden_schedules=True, notes=None):
    """Load, override and validate a configuration file.

    Parameters
    ----------
    path : str
        YAML file.
    overrides : list of str
        ``"key=value"`` strings applied after loading (see ``apply_overrides``).
    drop_overridden_schedules : bool
        An override of a scheduled algorithm or storage parameter (``algorithm.lr=3e-4``
        where ``schedules`` drives ``lr``) drops that schedule: the value given holds for the
        run, as written (see ``overridden_schedules``). False keeps every schedule (a resumed
        run, whose checkpoint holds its schedules' places, stops them instead).
    notes : list or None
        Receives one line per schedule dropped, for the user.

    Returns
    -------
    dict
        The resolved configuration (see ``validate_config``).

    Raises
    ------
    ConfigError
        Naming the key, the value and where it came from (the file or the override).
    """
    raw = apply_overrides(load_yaml(path), list(overrides))
    try:
        config = validate_config(raw)
    except ConfigError as exc:
        raise exc.with_source(_override_source(exc, list(overrides)) or os.path.basename(str(path))) from None
    if drop_overridden_schedules:
        dropped = overridden_schedules(config, overrides)
        config["schedules"] = [s for i, s in enumerate(config["schedules"]) if i not in dropped]
        if notes is not None:
            notes.extend(dropped.values())
    return config


def overridden_schedules(config, overrides):
    """The schedules of resolved ``config`` whose parameter ``overrides`` set.

    A schedule sets its parameter from the first update on, so a value given on the
    command line for it would hold for no update at all while config.yaml recorded it:
    the value given wins, and the schedule is dropped.

    Returns
    -------
    dict
        Index in ``config["schedules"]`` -> the line saying which override replaces it.

    Raises
    ------
    ConfigError
        The overrides set a parameter and also the schedule that drives it
        (``algorithm.lr=3e-4 schedules.0.end=0``): one of them would be ignored.
    """
    values, edited = {}, set()
    for text in overrides:
        key, _, value = text.partition("=")
        parts = key.strip().split(".")
        if parts[0] == "schedules":
            edited.add(parts[1] if len(parts) > 1 else "*")
        elif len(parts) == 2 and parts[0] in ("algorithm", "storage"):
            values[tuple(parts)] = value.strip()
    dropped = {}
    for i, sched in enumerate(config["schedules"]):
        key = (sched["target"], sched["name"])
        if key not in values:
            continue
        target = ".".join(key)
        if edited & {str(i), "*"}:
            raise ConfigError(target, f"is set by the override {target}={values[key]} and driven by schedules.{i}, "
                                      f"which the overrides change too: give one of them (schedules.{i}.start sets "
                                      f"where the schedule starts)", "overrides")
        dropped[i] = (f"{target}={values[key]} replaces schedules.{i} ({sched['kind']} schedule of {target}): "
                      f"the schedule is dropped, {target} is {config[key[0]][key[1]]!r} for the whole run")
    return dropped


__all__ = ["validate_config", "load_config", "overridden_schedules"]
