"""Validation of the ``pbt`` section (population-based training): which parameters a
population may perturb, and how (``pytorchrl.config.validate.check_config`` calls
``check_pbt``; ``pytorchrl.pbt`` resolves parameter names with ``resolve_parameter``).
"""

from pytorchrl.config import schema
from pytorchrl.config.errors import ConfigError
from pytorchrl.config.schema import MUTATION_KEYS, SECTIONS, hot_swappable_keys
from pytorchrl.config.targets import TARGETS, resolve_key
from pytorchrl.config.values import check_mapping, check_value, is_number, join_path, show_value, strict_key


def resolve_parameter(config, key, path):
    """``(target, name)`` of a hot-swappable parameter named in the ``pbt`` section (``lr``,
    ``algorithm.lr``, ``storage.gae_lambda``) of a configuration whose algorithm and storage
    sections are resolved.

    Parameters
    ----------
    config : dict
        The configuration (its ``algorithm`` and ``storage`` names are read).
    key : str
        The parameter as written.
    path : str
        Dotted path of the key, for messages.

    Raises
    ------
    ConfigError
        An unknown or ambiguous name, a key of another section, a parameter fixed once its
        component is built, or one that a schedule drives.
    """
    parts = str(key).split(".")
    if len(parts) > 1 and parts[0] not in TARGETS:
        raise ConfigError(path, f"only algorithm and storage parameters can change while training; "
                                f"{key!r} cannot be perturbed")
    names = {t: config[t]["name"] for t in TARGETS}
    params = {"algorithm": schema.algorithm_keys(names["algorithm"]), "storage": schema.storage_keys(names["storage"])}
    try:
        target, name = resolve_key(str(key), params["algorithm"], params["storage"])
    except ValueError as exc:
        raise ConfigError(path, str(exc)) from None
    if name not in hot_swappable_keys(target, names[target]):
        raise ConfigError(path, f"{target}.{name} is fixed once {names[target]} is built: it cannot change while "
                                f"training, so it cannot be perturbed")
    for i, sched in enumerate(config.get("schedules") or []):
        if (sched["target"], sched["name"]) == (target, name):
            raise ConfigError(path, f"{target}.{name} is driven by schedules.{i}, which would overwrite every "
                                    f"perturbed value; remove the schedule or this entry")
    return target, name


def _check_mutation(spec, key, base, path):
    """Resolve one entry of ``pbt.mutations`` for the parameter described by ``key`` (its
    Key; ``base``: the value it starts from, None when members start from ``pbt.initial``)."""
    given = spec if isinstance(spec, dict) else {}
    spec = check_mapping(spec, MUTATION_KEYS, path)
    numeric = key.kind in ("int", "number")
    factors, values, log_uniform = spec["factors"], spec["values"], spec["log_uniform"]
    if factors is None and values is None and log_uniform is None:
        raise ConfigError(path, "says nothing: give factors, values or log_uniform")
    if values is not None and log_uniform is not None:
        raise ConfigError(join_path(path, "log_uniform"), "a parameter is resampled from values or from log_uniform, "
                                                      "not both")
    if factors is not None:
        if not numeric:
            raise ConfigError(join_path(path, "factors"), f"multiply numbers; this parameter is {key.expected}")
        if not isinstance(factors, list) or not factors or not all(is_number(f) and f > 0 for f in factors):
            raise ConfigError(join_path(path, "factors"), f"expected a non-empty list of positive numbers, got "
                                                      f"{show_value(factors)}")
        spec["factors"] = [float(f) for f in factors]
        if base is None:
            raise ConfigError(join_path(path, "factors"), "multiply the copied value, and this parameter is null: set "
                                                      "it (or its pbt.initial values) to a number")
    if values is not None:
        if not isinstance(values, list) or not values:
            raise ConfigError(join_path(path, "values"), f"expected a non-empty list, got {show_value(values)}")
        spec["values"] = [check_value(strict_key(key), v, join_path(join_path(path, "values"), i)) for i, v in enumerate(values)]
    if log_uniform is not None:
        where = join_path(path, "log_uniform")
        if key.kind != "number":
            raise ConfigError(where, f"is for real-valued parameters; this one is {key.expected} (use values)")
        if not (isinstance(log_uniform, list) and len(log_uniform) == 2 and all(is_number(v) for v in log_uniform)
                and 0 < log_uniform[0] < log_uniform[1]):
            raise ConfigError(where, f"expected [low, high] with 0 < low < high, got {show_value(log_uniform)}")
        spec["log_uniform"] = [check_value(strict_key(key), v, join_path(where, i)) for i, v in enumerate(log_uniform)]
    both = factors is not None and (values is not None or log_uniform is not None)
    if "resample_probability" in given and not both \
            and spec["resample_probability"] != MUTATION_KEYS["resample_probability"].default:
        raise ConfigError(join_path(path, "resample_probability"), "chooses between factors and a distribution (values "
                                                               "or log_uniform); with one of them it has no effect")
    return spec


def check_pbt(data, config):
    """Resolve the ``pbt`` section (population-based training) of a configuration whose
    other sections are resolved: every perturbed or initial parameter is a hot-swappable
    algorithm or storage parameter, with values of its type and range. ``data``: the
    section as written; ``config``: the configuration with its other sections resolved."""
    pbt = check_mapping(data, SECTIONS["pbt"], "pbt")
    population = pbt["population"]
    resolved = {}
    initial = pbt["initial"]
    for key, values in initial.items():
        path = join_path("pbt.initial", key)
        target, name = resolve_parameter(config, key, path)
        if (target, name) in resolved.values():
            raise ConfigError(path, f"{target}.{name} is named twice")
        resolved[key] = (target, name)
        if not isinstance(values, list) or len(values) != population:
            raise ConfigError(path, f"expected a list of one value per member ({population}, pbt.population), got "
                                    f"{show_value(values)}")
        param = schema.algorithm_keys(config[target]["name"]) if target == "algorithm" else \
            schema.storage_keys(config[target]["name"])
        initial[key] = [check_value(strict_key(param[name]), v, join_path(path, i)) for i, v in enumerate(values)]
    mutations = pbt["mutations"]
    seen = {}
    for key, spec in mutations.items():
        path = join_path("pbt.mutations", key)
        target, name = resolve_parameter(config, key, path)
        if (target, name) in seen:
            raise ConfigError(path, f"{target}.{name} is named twice (also as {seen[(target, name)]!r})")
        seen[(target, name)] = key
        param = (schema.algorithm_keys if target == "algorithm" else schema.storage_keys)(config[target]["name"])[name]
        starts = [v for k, vs in initial.items() if resolved[k] == (target, name) for v in vs]
        base = starts[0] if starts else config[target][name]
        mutations[key] = _check_mutation(spec, param, None if base is None else base, path)
    for key in initial:
        if resolved[key] not in seen:
            continue
        if seen[resolved[key]] != key:
            raise ConfigError(join_path("pbt.initial", key), f"write the parameter as in pbt.mutations "
                                                         f"({seen[resolved[key]]!r})")
    if pbt["metric"] == "test_return" and not config["env"]["test_env"]:
        raise ConfigError("pbt.metric", "test_return evaluates on the test environments: set env.test_env: true")
    if pbt["member_resources"] is not None and pbt["execution"] == "interleaved":
        raise ConfigError("pbt.member_resources", "has no effect with pbt.execution: interleaved (members run in "
                                                  "this process); remove it, or set pbt.execution: ray")
    learner = config["learner"]
    if pbt["interval"] >= learner["target_steps"]:
        raise ConfigError("pbt.interval", f"{pbt['interval']} is not below learner.target_steps "
                                          f"({learner['target_steps']}): no decision would ever be made")
    for option in ("target_episodes", "cutoff"):
        if learner[option] is not None:
            raise ConfigError(f"learner.{option}", "members of a population train to the same env steps "
                                                   "(learner.target_steps); remove it")
    if config["scheme"]["num_grad_workers"] == 0:
        raise ConfigError("scheme.num_grad_workers", "0 trains nothing (collection only): a population has "
                                                     "nothing to perturb")
    return pbt
