"""Validation of a configuration dict against the schema, before anything starts.

Reading files and expanding agent presets is the loader's part (``pytorchrl.config.loader``);
``pytorchrl.config.validate_config`` joins the two. ``check_config`` returns the resolved
configuration: every key present, defaults
filled in, numbers normalised (an integer given for a float parameter becomes a float).
Any problem raises :class:`ConfigError` with a one-line message naming the key path and
the value, e.g. ``config error: algorithm.lr: expected a number, got 'fast'``.
"""

import copy
import difflib
import importlib
import math
import os

from pytorchrl.config import schema
from pytorchrl.config.errors import ConfigError
from pytorchrl.config.schema import (ENV_FAMILY_OPTION_KEYS, MUTATION_KEYS, OPTIONAL_SECTIONS, RESOURCE_KEYS,
                                     SCHEDULE_KEYS, SECTION_ORDER, SECTIONS, TOP_LEVEL, Key, hot_swappable_keys)
from pytorchrl.envs.families import ENV_FAMILIES
from pytorchrl.agent.factory import ComponentFactory
from pytorchrl.scheme.base.checks import batching_refused, ineffective_options
from pytorchrl.scheme.collection.c_worker import episodes_per_rollout
from pytorchrl.scheme.workflows.queues import pool_class, steal_refused
from pytorchrl.scheme.workflows.weight_board import PullRefused, check_weight_mode
from pytorchrl.scheme.workflows.worker_proxy import proxy_refused
from pytorchrl.scheme.workflows.presets import resolve_scheme_section


def suggestion(word, candidates):
    """" (did you mean 'x'?)" for the closest of ``candidates`` to ``word``, or ""."""
    close = difflib.get_close_matches(str(word), [str(c) for c in candidates], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _join(path, key):
    return f"{path}.{key}" if path else str(key)


def _show(value):
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: Kinds of keys holding a non-empty list, and the kind of their items.
LIST_KINDS = {"int_list": "int", "number_list": "number", "str_list": "str"}


def check_value(key, value, path):
    """Check ``value`` against ``key`` and return it normalised.

    Parameters
    ----------
    key : Key
        Description of the key.
    value : object
        Value read from the configuration.
    path : str
        Dotted path of the key, for messages.

    Raises
    ------
    ConfigError
        Wrong type, value not allowed, or out of range.
    """
    if value is None:
        if key.nullable:
            return None
        raise ConfigError(path, f"expected {key.expected}, got null")
    kind = key.kind
    bad = ConfigError(path, f"expected {key.expected}, got {_show(value)}")
    if key.choices is not None:
        value = key.aliases.get(value, value) if isinstance(value, str) else value
        if value not in key.choices:
            raise ConfigError(path, f"expected {key.expected}, got {_show(value)}"
                                    f"{suggestion(value, key.choices)}")
        return value
    if kind == "int":
        # 1e5 reads as a float in YAML; an integral float is the integer the user meant.
        if not _is_number(value) or not float(value).is_integer():
            raise bad
        value = int(value)
    elif kind == "number":
        if not _is_number(value) or math.isnan(value):
            raise bad
        value = float(value)
    elif kind == "bool":
        if not isinstance(value, bool):
            raise bad
    elif kind == "str":
        if not isinstance(value, str):
            raise bad
    elif kind == "dict":
        if not isinstance(value, dict):
            raise bad
        value = copy.deepcopy(value)
    elif kind in LIST_KINDS:
        if not isinstance(value, (list, tuple)) or not value:
            raise ConfigError(path, f"expected a non-empty {schema.KINDS[kind].replace('a list', 'list', 1)}, got "
                                    f"{_show(value)}")
        item = Key(LIST_KINDS[kind], low=key.low, high=key.high, low_inclusive=key.low_inclusive)
        return [check_value(item, v, _join(path, i)) for i, v in enumerate(value)]
    elif kind == "bool_or_auto":
        if not (isinstance(value, bool) or value == "auto"):
            raise bad
    elif kind == "resources":
        return _check_resources(value, path)
    _check_range(key, value, path)
    return value


def _check_range(key, value, path):
    if not _is_number(value) or not key.range_text:
        return
    too_low = key.low is not None and (value < key.low if key.low_inclusive else value <= key.low)
    too_high = key.high is not None and value > key.high
    if too_low or too_high:
        raise ConfigError(path, f"must be {key.range_text}, got {_show(value)}")


def _check_resources(value, path):
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected a mapping of Ray resources, got {_show(value)}")
    for name, amount in value.items():
        where = _join(path, name)
        if name not in RESOURCE_KEYS:
            raise ConfigError(where, f"unknown resource{suggestion(name, RESOURCE_KEYS)}; "
                                     f"valid: {', '.join(RESOURCE_KEYS)}")
        if name == "resources":
            if not isinstance(amount, dict):
                raise ConfigError(where, f"expected a mapping of custom resources, got {_show(amount)}")
            for custom, n in amount.items():
                check_value(Key("number", low=0.0), n, _join(where, custom))
        elif amount is not None:
            check_value(Key("number", low=0.0), amount, where)
    return copy.deepcopy(value)


def check_mapping(data, keys, path, owner=None):
    """Check a mapping against ``keys`` (name -> Key) and return it resolved.

    Unknown keys are refused with the closest valid name; missing keys take their
    default, or are refused when required.

    Parameters
    ----------
    data : dict or None
        The mapping read from the configuration (None reads as empty).
    keys : dict
        name -> Key of every valid key, in the order of the result.
    path : str
        Dotted path of the mapping, for messages ("" for the top level).
    owner : str or None
        Name of the component the keys belong to, for messages ("PPO").
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(path, f"expected a mapping of keys, got {_show(data)}")
    for name in data:
        if name not in keys:
            what = f"unknown key of {owner}" if owner else "unknown key"
            raise ConfigError(_join(path, name), f"{what}{suggestion(name, keys)}; valid: "
                                                 f"{', '.join(map(str, keys))}")
    out = {}
    for name, key in keys.items():
        if name in data:
            out[name] = check_value(key, data[name], _join(path, name))
        elif key.required:
            raise ConfigError(_join(path, name), "missing required key")
        else:
            out[name] = copy.deepcopy(key.default)
    return out


def _check_named_section(data, name_key, keys_of, path):
    """A section whose valid keys depend on its ``name`` (algorithm, storage)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(path, f"expected a mapping of keys, got {_show(data)}")
    name = check_value(name_key, data["name"], _join(path, "name")) if "name" in data \
        else check_mapping({}, {"name": name_key}, path)["name"]
    return check_mapping(data, {"name": name_key, **keys_of(name)}, path, owner=name)


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
        raise ConfigError("schedules", f"expected a list of schedules, got {_show(items)}")
    params = {"algorithm": schema.algorithm_keys(config["algorithm"]["name"]),
              "storage": schema.storage_keys(config["storage"]["name"])}
    out = []
    for i, item in enumerate(items):
        path = f"schedules.{i}"
        sched = check_mapping(item, SCHEDULE_KEYS, path)
        valid = params[sched["target"]]
        if sched["name"] not in valid:
            raise ConfigError(_join(path, "name"), f"{sched['target']} {config[sched['target']]['name']} has no "
                                                   f"parameter {sched['name']!r}{suggestion(sched['name'], valid)}; "
                                                   f"valid: {', '.join(valid)}")
        # A schedule's values obey the parameter's own type and range (null is never one).
        key = strict_key(valid[sched["name"]])
        sched["start"] = check_value(key, sched["start"], _join(path, "start"))
        if sched["kind"] == "constant":
            if sched["end"] is not None:
                raise ConfigError(_join(path, "end"), f"a constant schedule has no end value, got {_show(sched['end'])}")
        else:
            if sched["end"] is None:
                raise ConfigError(_join(path, "end"), f"missing: a {sched['kind']} schedule needs an end value")
            sched["end"] = check_value(key, sched["end"], _join(path, "end"))
        if sched["kind"] == "linear":
            end_step = sched["end_step"] if sched["end_step"] is not None else config["learner"]["target_steps"]
            if end_step <= sched["start_step"]:
                raise ConfigError(_join(path, "end_step"), f"must be greater than start_step "
                                                           f"({sched['start_step']}), got {end_step}")
        out.append(sched)
    return out


def strict_key(key):
    """``key`` without null: the type and range a value set while training must have (null is
    never one to switch to)."""
    return Key(key.kind, doc=key.doc, choices=key.choices, aliases=key.aliases, low=key.low, high=key.high,
               low_inclusive=key.low_inclusive)


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
    from pytorchrl.tools.control import TARGETS, resolve_key
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
        raise ConfigError(_join(path, "log_uniform"), "a parameter is resampled from values or from log_uniform, "
                                                      "not both")
    if factors is not None:
        if not numeric:
            raise ConfigError(_join(path, "factors"), f"multiply numbers; this parameter is {key.expected}")
        if not isinstance(factors, list) or not factors or not all(_is_number(f) and f > 0 for f in factors):
            raise ConfigError(_join(path, "factors"), f"expected a non-empty list of positive numbers, got "
                                                      f"{_show(factors)}")
        spec["factors"] = [float(f) for f in factors]
        if base is None:
            raise ConfigError(_join(path, "factors"), "multiply the copied value, and this parameter is null: set "
                                                      "it (or its pbt.initial values) to a number")
    if values is not None:
        if not isinstance(values, list) or not values:
            raise ConfigError(_join(path, "values"), f"expected a non-empty list, got {_show(values)}")
        spec["values"] = [check_value(strict_key(key), v, _join(_join(path, "values"), i)) for i, v in enumerate(values)]
    if log_uniform is not None:
        where = _join(path, "log_uniform")
        if key.kind != "number":
            raise ConfigError(where, f"is for real-valued parameters; this one is {key.expected} (use values)")
        if not (isinstance(log_uniform, list) and len(log_uniform) == 2 and all(_is_number(v) for v in log_uniform)
                and 0 < log_uniform[0] < log_uniform[1]):
            raise ConfigError(where, f"expected [low, high] with 0 < low < high, got {_show(log_uniform)}")
        spec["log_uniform"] = [check_value(strict_key(key), v, _join(where, i)) for i, v in enumerate(log_uniform)]
    both = factors is not None and (values is not None or log_uniform is not None)
    if "resample_probability" in given and not both \
            and spec["resample_probability"] != MUTATION_KEYS["resample_probability"].default:
        raise ConfigError(_join(path, "resample_probability"), "chooses between factors and a distribution (values "
                                                               "or log_uniform); with one of them it has no effect")
    return spec


def _check_pbt(data, config):
    """Resolve the ``pbt`` section (population-based training) of a configuration whose
    other sections are resolved: every perturbed or initial parameter is a hot-swappable
    algorithm or storage parameter, with values of its type and range."""
    pbt = check_mapping(data, SECTIONS["pbt"], "pbt")
    population = pbt["population"]
    resolved = {}
    initial = pbt["initial"]
    for key, values in initial.items():
        path = _join("pbt.initial", key)
        target, name = resolve_parameter(config, key, path)
        if (target, name) in resolved.values():
            raise ConfigError(path, f"{target}.{name} is named twice")
        resolved[key] = (target, name)
        if not isinstance(values, list) or len(values) != population:
            raise ConfigError(path, f"expected a list of one value per member ({population}, pbt.population), got "
                                    f"{_show(values)}")
        param = schema.algorithm_keys(config[target]["name"]) if target == "algorithm" else \
            schema.storage_keys(config[target]["name"])
        initial[key] = [check_value(strict_key(param[name]), v, _join(path, i)) for i, v in enumerate(values)]
    mutations = pbt["mutations"]
    seen = {}
    for key, spec in mutations.items():
        path = _join("pbt.mutations", key)
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
            raise ConfigError(_join("pbt.initial", key), f"write the parameter as in pbt.mutations "
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


def _refuse_addons_without_support(data):
    """Refuse ``algorithm.policy_loss_addons`` for an algorithm that takes none (the
    off-policy ones), saying so rather than "unknown key"."""
    from pytorchrl.agent.algorithms import ALGORITHMS
    if not isinstance(data, dict) or "policy_loss_addons" not in data:
        return
    cls = ALGORITHMS.get(data.get("name")) if isinstance(data.get("name"), str) else None
    if cls is not None and "policy_loss_addons" not in cls.hyperparameter_names():
        takers = [n for n, c in ALGORITHMS.items() if "policy_loss_addons" in c.hyperparameter_names()]
        raise ConfigError("algorithm.policy_loss_addons", f"policy-loss add-ons are for {', '.join(takers[:-1])} and {takers[-1]} "
                                                          f"(terms added to an on-policy policy loss); "
                                                          f"{cls.name} takes none: remove the key")


def _check_policy_loss_addons(algorithm):
    """Resolve ``algorithm.policy_loss_addons`` in place (``schema.POLICY_LOSS_ADDON_KEYS``):
    each entry a mapping naming an add-on, its checkpoints existing files (made absolute:
    workers and resumed runs may start elsewhere) and one non-negative weight per
    checkpoint, not all 0 (null: equal weights)."""
    if "policy_loss_addons" not in algorithm:
        return
    path = "algorithm.policy_loss_addons"
    entries = algorithm["policy_loss_addons"] or []
    if not isinstance(entries, (list, tuple)):
        raise ConfigError(path, f"expected a list of add-ons ({{name: AttractionKL, checkpoints: [...]}}), got "
                                f"{_show(entries)}")
    resolved = []
    for i, entry in enumerate(entries):
        where = _join(path, i)
        addon = check_mapping(entry, schema.POLICY_LOSS_ADDON_KEYS, where, owner="a policy-loss add-on")
        files = []
        for j, name in enumerate(addon["checkpoints"]):
            if not os.path.isfile(name):
                raise ConfigError(_join(_join(where, "checkpoints"), j),
                                  f"no such file {name!r} (a model.state_dict or checkpoint.pt of an earlier run; "
                                  f"relative paths are read from {os.getcwd()})")
            files.append(os.path.abspath(name))
        addon["checkpoints"] = files
        weights = addon["weights"]
        if weights is None:
            addon["weights"] = [1.0] * len(files)
        elif len(weights) != len(files):
            raise ConfigError(_join(where, "weights"), f"{len(weights)} weight(s) for {len(files)} checkpoint(s): "
                                                       f"give one weight per checkpoint")
        elif sum(weights) <= 0:
            raise ConfigError(_join(where, "weights"), "all weights are 0: give at least one checkpoint a positive "
                                                       "weight")
        resolved.append(addon)
    algorithm["policy_loss_addons"] = resolved


#: PPODBuffer's folders that must exist when given (the target ones are created).
_DEMO_FOLDERS = ("initial_human_demos_dir", "initial_agent_demos_dir", "initial_value_demos_dir")


def _check_demo_folders(storage):
    """PPODBuffer: refuse an initial demonstrations folder that does not exist and
    probabilities rho + phi above 1, and make every demonstrations folder absolute (Ray
    collectors may start elsewhere)."""
    if "rho" in storage and "phi" in storage and storage["rho"] + storage["phi"] > 1.0:
        raise ConfigError("storage.phi", f"rho + phi must be at most 1 (probabilities of replaying a reward or a "
                                         f"value demonstration), got {storage['rho']} + {storage['phi']}")
    for key in _DEMO_FOLDERS + ("target_agent_demos_dir", "target_value_demos_dir"):
        folder = storage.get(key)
        if folder is None:
            continue
        if key in _DEMO_FOLDERS and not os.path.isdir(folder):
            raise ConfigError(f"storage.{key}", f"no such demonstrations folder {folder!r} (relative paths are "
                                                f"read from {os.getcwd()}; 'pytorchrl record-demos' writes one)")
        storage[key] = os.path.abspath(folder)


def _expand_preset(data):
    """The ``scheme`` section with the values of its ``preset`` filled in (explicit keys win)."""
    if not isinstance(data, dict) or data.get("preset") is None:
        return data
    check_value(SECTIONS["scheme"]["preset"], data["preset"], "scheme.preset")
    return resolve_scheme_section(data)


def _with_default_storage(data, algorithm_name, recurrent=False):
    """The ``storage`` section with its name filled in when absent: the storage family
    the algorithm learns from (on-policy rollouts, replay, or sequence replay for a
    recurrent off-policy actor)."""
    if isinstance(data, dict) and data.get("name") is not None:
        return data
    from pytorchrl.agent.algorithms import ALGORITHMS
    if ALGORITHMS[algorithm_name].on_policy:
        name = "GAEBuffer"
    else:
        name = "RecurrentReplayBuffer" if recurrent else "ReplayBuffer"
    return {**(data or {}), "name": name} if isinstance(data, dict) or data is None else data


def _check_families(config, raw):
    """Refuse a storage of the other family than the algorithm's, and actor keys that the
    algorithm's actor does not have (they would have no effect)."""
    from pytorchrl.agent.algorithms import ALGORITHMS
    from pytorchrl.agent.storages import STORAGES, ReplayBuffer
    algo = config["algorithm"]["name"]
    on_policy = ALGORITHMS[algo].on_policy
    storage = config["storage"]["name"]
    if issubclass(STORAGES[storage], ReplayBuffer) == on_policy:
        wanted = "an on-policy storage (GAEBuffer, VanillaOnPolicyBuffer, VTraceBuffer)" if on_policy else \
            "a replay storage (ReplayBuffer, NStepReplayBuffer, PERBuffer)"
        raise ConfigError("storage.name", f"{algo} learns from {wanted}, got {storage!r}")
    given = raw.get("actor") if isinstance(raw.get("actor"), dict) else {}
    other = schema.OFF_POLICY_ACTOR_KEYS if on_policy else schema.ON_POLICY_ACTOR_KEYS
    for key in other:
        # A resolved configuration (config.yaml of a run) holds every key at its default:
        # only a value that would change something is refused.
        if key in given and given[key] != SECTIONS["actor"][key].default:
            family = "off-policy algorithms (DDQN, DDPG, TD3, SAC)" if on_policy else "PPO and A2C"
            raise ConfigError(f"actor.{key}", f"applies to {family}; {algo} has no use for it")
    if config["learner"]["checkpoint_replay"] and on_policy:
        raise ConfigError("learner.checkpoint_replay", f"{algo} keeps no replay to save (on-policy)")
    if not on_policy and config["actor"]["feature_extractor"] == "dict":
        raise ConfigError("actor.feature_extractor", f"dict (the Dict/Tuple observation network) serves PPO and A2C; {algo} "
                                                     f"reads Dict or Tuple observations as one flat vector "
                                                     f"(mlp)")
    if on_policy and config["actor"]["feature_extractor"] == "mlp" and config["actor"]["precision"] != "fp32":
        raise ConfigError("actor.precision", f"{config['actor']['precision']} applies to the image feature "
                                             f"extractors (cnn, fixup) and to the off-policy algorithms' MLP "
                                             f"networks, not to {algo}'s actor.feature_extractor mlp")
    if config["actor"]["dueling"] and algo != "DDQN":
        raise ConfigError("actor.dueling", f"a dueling Q-network is for DDQN, not {algo}")
    if given.get("noise") is not None and algo not in ("DDPG", "TD3"):
        raise ConfigError("actor.noise", f"exploration noise is for DDPG and TD3; {algo} explores otherwise")
    _check_sde_keys(config, given, algo)


def _check_sde_keys(config, given, algo):
    """Refuse gSDE (``actor.use_sde``) for another algorithm than SAC, and its settings
    (``actor.sde_*``) given a value of their own without it: they would have no effect."""
    if config["actor"]["use_sde"] and algo != "SAC":
        raise ConfigError("actor.use_sde", f"gSDE is served for SAC's Gaussian policy, not for {algo}")
    if config["actor"]["sde_sample_freq"] == 0:
        raise ConfigError("actor.sde_sample_freq", "must be -1 (new exploration weights with each rollout) or >= 1")
    if not config["actor"]["use_sde"]:
        for key in schema.SDE_ACTOR_KEYS[1:]:
            if key in given and given[key] != SECTIONS["actor"][key].default:
                raise ConfigError(f"actor.{key}", "configures gSDE; it has no effect without actor.use_sde: true")


def _check_normalization(config):
    """Refuse an observation clip without normalisation (it would have no effect), and
    normalisation with decentralized updates (every gradient worker would keep statistics
    of its own)."""
    actor = config["actor"]
    if not actor["normalize_observations"]:
        if actor["observation_clip"] != SECTIONS["actor"]["observation_clip"].default:
            raise ConfigError("actor.observation_clip", "has no effect without actor.normalize_observations: true")
        return
    if config["scheme"]["decentralized_update_execution"]:
        raise ConfigError("actor.normalize_observations", "true is not supported with "
                                                          "scheme.decentralized_update_execution (each gradient "
                                                          "worker would keep statistics of its own)")


def _check_consistency(config):
    scheme_cfg = config["scheme"]
    if scheme_cfg["decentralized_update_execution"] and scheme_cfg["grad_workers_communication"] != "sync":
        raise ConfigError("scheme.decentralized_update_execution",
                          "true needs scheme.grad_workers_communication: sync, got 'async'")
    if scheme_cfg["col_requests_in_flight"] > 1 and scheme_cfg["col_workers_communication"] != "async":
        raise ConfigError("scheme.col_requests_in_flight",
                          f"{scheme_cfg['col_requests_in_flight']} needs scheme.col_workers_communication: async "
                          "(a synchronous round sends each collector one request)")
    _check_ineffective(scheme_cfg)
    _check_normalization(config)
    _check_batching(config)
    _check_weight_mode(config)
    _check_recurrent(config)
    _check_data_path(config)
    _check_inference_server(config)
    if "env_id" in config["env"]["kwargs"]:
        raise ConfigError("env.kwargs.env_id", "the environment is set by env.id")
    _check_device(scheme_cfg["local_device"], "scheme.local_device")


def _check_recurrent(config):
    """Refuse what a recurrent actor cannot train with: on-policy, more mini-batches than a
    collector has environments (a mini-batch is whole environment sequences); off-policy,
    another algorithm than DDQN, another storage than RecurrentReplayBuffer, collector-side
    targets and the replay server. Refuse the sequence settings without a recurrent actor."""
    from pytorchrl.agent.algorithms import ALGORITHMS
    actor, storage, algo = config["actor"], config["storage"]["name"], config["algorithm"]
    if actor["recurrent_net"] is None:
        if storage == "RecurrentReplayBuffer":
            raise ConfigError("storage.name", "RecurrentReplayBuffer stores sequences for a recurrent actor: set "
                                              "actor.recurrent_net (GRU or LSTM), or use ReplayBuffer")
        for key in ("recurrent_hidden_size", "sequence_overlap"):
            if actor[key] != SECTIONS["actor"][key].default:
                raise ConfigError(f"actor.{key}", "applies to recurrent actors (actor.recurrent_net); remove it")
        return
    if not ALGORITHMS[algo["name"]].on_policy:
        _check_recurrent_replay(config)
        return
    algo = config["algorithm"]
    num_mini_batch, vec_env_size = algo.get("num_mini_batch", 1), config["env"]["vec_env_size"]
    if algo.get("mini_batch_size") is None and num_mini_batch > vec_env_size:
        raise ConfigError("algorithm.num_mini_batch",
                          f"{num_mini_batch} with a recurrent actor: mini-batches are subsets of the "
                          f"environments (whole sequences) and env.vec_env_size is {vec_env_size}; set "
                          f"num_mini_batch <= {vec_env_size}")


def _check_recurrent_replay(config):
    """A recurrent off-policy actor: DDQN learning from RecurrentReplayBuffer sequences."""
    actor, storage, algo = config["actor"], config["storage"]["name"], config["algorithm"]
    if algo["name"] != "DDQN":
        raise ConfigError("actor.recurrent_net", f"recurrent off-policy actors are supported for DDQN only "
                                                 f"(R2D2-style); {algo['name']} actors are feed-forward")
    if storage != "RecurrentReplayBuffer":
        raise ConfigError("storage.name", f"a recurrent DDQN (actor.recurrent_net) learns from sequences: "
                                          f"RecurrentReplayBuffer, got {storage!r}")
    if not actor["sequence_overlap"] < 1.0:
        raise ConfigError("actor.sequence_overlap", f"must be in [0, 1), got {actor['sequence_overlap']}")
    if algo["targets_on_collector"]:
        raise ConfigError("algorithm.targets_on_collector", "computes targets of single transitions; a recurrent "
                                                            "DDQN trains on sequences: set it to false")
    if config["scheme"]["data_path"] == "replay_server":
        raise ConfigError("scheme.data_path", "replay_server holds single transitions; a recurrent DDQN "
                                              "(RecurrentReplayBuffer) uses data_path direct or queues")


def _check_ineffective(scheme_cfg):
    """Refuse a scheme option set to a value the layout never uses (``fraction_samples``
    with asynchronous collection, ``max_grad_lag`` with synchronous gradients, ...): it
    would be silently ignored. Options left at their defaults are never refused, so a
    resolved configuration (a run's config.yaml) passes."""
    s = scheme_cfg
    for item in ineffective_options(s["num_col_workers"], s["col_workers_communication"] == "async",
                                    s["num_grad_workers"], s["grad_workers_communication"] == "async",
                                    s["fraction_samples"], s["fraction_workers"], s["max_policy_lag"],
                                    s["max_grad_lag"], s["col_compress_data"], s["grad_compress_data"],
                                    s["decentralized_update_execution"], s["col_workers_resources"],
                                    s["grad_workers_resources"]):
        value = _yaml_word(item.value) if isinstance(item.value, bool) else repr(item.value)
        raise ConfigError(f"scheme.{item.option}",
                          f"{value} has no effect with scheme.{item.setting}: {_yaml_word(item.current)} "
                          f"({item.reason}); remove it, or set scheme.{item.setting}: {_yaml_word(item.needed)}")


def _yaml_word(value):
    """``value`` as a configuration file writes it: true/false for a boolean."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _check_batching(config):
    """Refuse EXARL's batching options where they cannot run (``batching_refused``), a
    ``batch_step_frequency`` longer than the storage's rollout (which its buffers hold),
    and the worker proxy where it cannot run (``proxy_refused``)."""
    from pytorchrl.agent.algorithms import ALGORITHMS
    s = config["scheme"]
    refused = batching_refused(s["batch_episode_frequency"], s["episode_block"],
                               s["col_workers_communication"] == "async", s["col_requests_in_flight"])
    if refused is not None:
        raise ConfigError(f"scheme.{refused[0]}", f"{s['episode_block']} {refused[1]}")
    if s["col_worker_proxy"]:
        refused = proxy_refused(s["num_col_workers"], s["col_workers_communication"] == "async",
                                min(s["fraction_samples"], s["fraction_workers"]) < 1.0, s["data_path"],
                                s["col_policy"], s["col_weights"])
        if refused is not None:
            raise ConfigError("scheme.col_worker_proxy", f"true {refused[1]} (see scheme.{refused[0]})")
    steps = s["batch_step_frequency"]
    if steps is None:
        return
    algo = config["algorithm"]
    if ALGORITHMS[algo["name"]].on_policy:
        fits, words = config["storage"]["size"], "storage.size"
    else:
        fits = max(1, math.ceil(algo["update_every"] / config["env"]["vec_env_size"]))
        words = "algorithm.update_every per environment"
    if steps > fits:
        raise ConfigError("scheme.batch_step_frequency", f"{steps} steps do not fit a collector's rollout of {fits} "
                                                         f"steps ({words}); raise that, or lower this")


def _check_weight_mode(config):
    """Refuse pulled weights where they cannot work (synchronous collection, an on-policy
    algorithm) and the weight options the layout never uses (the rules of
    ``check_weight_mode``, which the Scheme applies with warnings)."""
    from pytorchrl.agent.algorithms import ALGORITHMS
    s = config["scheme"]
    algo = config["algorithm"]["name"]
    episodes = episodes_per_rollout(s["col_rollout_unit"], s["episode_block"] or s["batch_episode_frequency"])
    try:
        ineffective = check_weight_mode(s["col_weights"], s["col_weight_pull_every"], s["num_col_workers"],
                                        s["col_workers_communication"] == "async",
                                        ComponentFactory(ALGORITHMS[algo]), episodes)
    except PullRefused as exc:
        raise ConfigError("scheme.col_weights", f"pull: pulled weights {exc}") from None
    except ValueError as exc:
        raise ConfigError("scheme.col_weight_pull_every", str(exc).replace("col_weight_pull_every ", "", 1)) from None
    for option, value, reason in ineffective:
        raise ConfigError(f"scheme.{option}", f"{value!r} has no effect with {reason}; remove it")


def _check_data_path(config):
    """Resolve ``scheme.replay_server`` and ``scheme.queues`` and refuse what their data
    paths cannot do, or options of one data path given with another."""
    from pytorchrl.agent.algorithms import ALGORITHMS
    s = config["scheme"]
    if s["data_path"] != "queues" and s["queues"] is not None:
        raise ConfigError("scheme.queues", f"has no effect with scheme.data_path: {s['data_path']}; remove it, or "
                                           f"set scheme.data_path: queues")
    if s["data_path"] == "queues":
        _check_queue_path(config)
        return
    if s["data_path"] == "direct":
        if s["replay_server"] is not None:
            raise ConfigError("scheme.replay_server", "has no effect with scheme.data_path: direct; remove it, or "
                                                      "set scheme.data_path: replay_server")
        return
    s["replay_server"] = check_mapping(s["replay_server"], schema.REPLAY_SERVER_KEYS, "scheme.replay_server")
    algo = config["algorithm"]["name"]
    if ALGORITHMS[algo].on_policy:
        raise ConfigError("scheme.data_path", f"replay_server is for off-policy algorithms (DDQN, DDPG, TD3, SAC); "
                                              f"{algo} learns from its own fresh rollouts")
    if s["num_col_workers"] > 1 and s["col_workers_communication"] != "async":
        raise ConfigError("scheme.data_path", "replay_server with several collection workers needs "
                                              "scheme.col_workers_communication: async (a synchronous round would "
                                              "wait for inserts that only the waiting learner's samples admit)")
    min_size, target = s["replay_server"]["min_size_to_sample"], config["learner"]["target_steps"]
    if min_size > target:
        raise ConfigError("scheme.replay_server.min_size_to_sample", f"{min_size} exceeds learner.target_steps "
                                                                     f"({target}): training would never start")
    if s["max_policy_lag"] is not None:
        raise ConfigError("scheme.max_policy_lag", "has no effect with scheme.data_path: replay_server (rollouts "
                                                   "are in the server before their lag is known); remove it")


def _check_inference_server(config):
    """Resolve ``scheme.inference_server`` and refuse what a central inference server
    (``scheme.col_policy: server``) cannot do, or its options given without it."""
    s = config["scheme"]
    if s["col_policy"] != "server":
        if s["inference_server"] is not None:
            raise ConfigError("scheme.inference_server", f"has no effect with scheme.col_policy: {s['col_policy']}; "
                                                         f"remove it, or set scheme.col_policy: server")
        return
    s["inference_server"] = check_mapping(s["inference_server"], schema.INFERENCE_SERVER_KEYS,
                                          "scheme.inference_server")
    if s["num_grad_workers"] > 1:
        raise ConfigError("scheme.col_policy", f"server needs scheme.num_grad_workers: 1 (the server acts with one "
                                               f"learner's weights), got {s['num_grad_workers']}")
    if config["actor"]["recurrent_net"] is not None:
        raise ConfigError("scheme.col_policy", "server acts on observations only: a recurrent actor "
                                               "(actor.recurrent_net) needs its memory state at every step")
    if config["actor"].get("noise") == "OU":
        raise ConfigError("scheme.col_policy", "server acts on observations only: OU noise keeps a state per "
                                               "environment; use actor.noise: Gauss")
    if config["algorithm"].get("targets_on_collector"):
        raise ConfigError("algorithm.targets_on_collector", "needs the target network on the collectors, which "
                                                            "hold no weights with scheme.col_policy: server")
    if s["col_weights"] == "pull":
        raise ConfigError("scheme.col_weights", "pull: with scheme.col_policy: server the collectors act through "
                                                "the inference server and load no weights; remove it")
    if s["data_path"] == "queues":
        raise ConfigError("scheme.col_policy", "server with scheme.data_path: queues is not supported; use "
                                               "scheme.data_path: direct with the inference server (preset exarl-seed)")


def _check_queue_path(config):
    """Resolve ``scheme.queues`` and refuse layouts the queue data path cannot run."""
    s = config["scheme"]
    if s["replay_server"] is not None:
        raise ConfigError("scheme.replay_server", "has no effect with scheme.data_path: queues; remove it, or set "
                                                  "scheme.data_path: replay_server")
    s["queues"] = check_mapping(s["queues"], schema.QUEUE_KEYS, "scheme.queues")
    try:
        pool_class(s["queues"]["kind"])
    except ValueError as exc:
        raise ConfigError("scheme.queues.kind", str(exc).replace("queues kind must be", "must be")) from None
    if s["num_grad_workers"] == 0:
        raise ConfigError("scheme.data_path", "queues with scheme.num_grad_workers: 0 (collection only): nothing "
                                              "pops the queues; use scheme.data_path: direct")
    if s["num_col_workers"] < 2:
        raise ConfigError("scheme.data_path", "queues needs remote collectors (scheme.num_col_workers >= 2): one "
                                              "collector runs in its gradient worker's process")
    if s["col_workers_communication"] != "async":
        raise ConfigError("scheme.data_path", "queues needs scheme.col_workers_communication: async (a synchronous "
                                              "round would wait for puts that only the waiting learner's pops "
                                              "admit)")
    if s["queues"]["route"] == "learner" and s["queues"]["selection"] != "binned":
        raise ConfigError("scheme.queues.selection", "random reads collectors' queues; with route: learner each "
                                                     "gradient worker reads its own queue (set selection: binned, "
                                                     "and steal: true to read the others')")
    refused = steal_refused(s["queues"], s["num_grad_workers"], s["grad_workers_communication"] == "async")
    if refused is not None:
        raise ConfigError("scheme.queues.steal", f"true has no effect: {refused}; remove it")


#: Algorithm keys that set the pace of training on the direct data path only: on the
#: replay-server path the rate limiter does.
REPLAY_PACED_KEYS = ("num_updates", "start_steps")


def _check_replay_pace(config, raw):
    """Refuse ``algorithm.num_updates``/``start_steps`` written with a value of their own on
    the replay-server data path, where they have no effect (a resolved configuration holds
    them at their defaults and passes)."""
    if config["scheme"]["data_path"] != "replay_server":
        return
    given = raw.get("algorithm") if isinstance(raw.get("algorithm"), dict) else {}
    keys = schema.algorithm_keys(config["algorithm"]["name"])
    for key in REPLAY_PACED_KEYS:
        if key in given and key in keys and config["algorithm"][key] != keys[key].default:
            raise ConfigError(f"algorithm.{key}", "has no effect with scheme.data_path: replay_server (the "
                                                  "replay server's rate limiter sets the pace: "
                                                  "scheme.replay_server.min_size_to_sample, samples_per_insert); "
                                                  "remove it")


def _check_wandb(config):
    """Resolve ``learner.wandb`` and refuse it when it asks for a W&B run and the wandb package
    is missing (said before anything starts, with the line that installs it)."""
    from pytorchrl.tools.tracking import import_wandb, wandb_wanted
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
        raise ConfigError("", f"expected a mapping of sections at the top level, got {_show(raw)}")
    valid = list(TOP_LEVEL) + list(SECTION_ORDER) + list(OPTIONAL_SECTIONS)
    for name in raw:
        if name not in valid:
            raise ConfigError(str(name), f"unknown key{suggestion(name, valid)}; valid: {', '.join(valid)}")
    config = check_mapping({k: raw[k] for k in TOP_LEVEL if k in raw}, TOP_LEVEL, "")
    for section in SECTION_ORDER:
        data = raw.get(section)
        if section == "algorithm":
            _refuse_addons_without_support(data)
            config[section] = _check_named_section(data, SECTIONS[section]["name"], schema.algorithm_keys, section)
            _check_policy_loss_addons(config[section])
        elif section == "storage":
            data = _with_default_storage(data, config["algorithm"]["name"],
                                         config["actor"].get("recurrent_net") is not None)
            config[section] = _check_named_section(data, SECTIONS[section]["name"], schema.storage_keys, section)
            _check_demo_folders(config[section])
        elif section == "scheme":
            config[section] = check_mapping(_expand_preset(data), SECTIONS[section], section)
        elif section != "schedules":
            config[section] = check_mapping(data, SECTIONS[section], section)
    config["schedules"] = _check_schedules(raw.get("schedules"), config)
    _check_families(config, raw)
    _check_wandb(config)
    _check_consistency(config)
    _check_replay_pace(config, raw)
    check_env_family(config["env"])
    if "pbt" in raw:
        config["pbt"] = _check_pbt(raw["pbt"], config)
    return config
