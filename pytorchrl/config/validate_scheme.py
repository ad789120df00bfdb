"""Validation of the ``scheme`` section against the rest of the configuration: the layout
rules shared with the worker sets (``pytorchrl.scheme.layout_rules``), options the layout
never uses, EXARL's batching, pulled weights, and the data paths (replay server, queues)
and inference server with their options (``pytorchrl.config.validate.check_config`` calls
these with the configuration whose sections are resolved).
"""

import math

from pytorchrl.agent.factory import ComponentFactory
from pytorchrl.config import schema
from pytorchrl.config.errors import ConfigError
from pytorchrl.config.schema import SECTIONS
from pytorchrl.config.values import check_mapping, check_value
from pytorchrl.scheme.base.checks import ineffective_options
from pytorchrl.scheme.collection.c_worker import episodes_per_rollout
from pytorchrl.scheme.layout_rules import broken_rules, settings_of_scheme_section
from pytorchrl.scheme.presets import resolve_scheme_section
from pytorchrl.scheme.servers.queues import pool_class, steal_refused
from pytorchrl.scheme.servers.weight_board import PullRefused, check_weight_mode


def expand_preset(data):
    """The ``scheme`` section ``data`` (as read) with the values of its ``preset`` filled in
    (explicit keys win)."""
    if not isinstance(data, dict) or data.get("preset") is None:
        return data
    check_value(SECTIONS["scheme"]["preset"], data["preset"], "scheme.preset")
    return resolve_scheme_section(data)


def refuse_broken_layout(scheme_cfg):
    """Refuse a collection layout that breaks a rule of ``pytorchrl.scheme.layout_rules``
    (the rules ``CWorkerSet`` refuses by), at the key the rule blames. ``scheme_cfg``: the
    resolved ``scheme`` section."""
    settings = settings_of_scheme_section(scheme_cfg)
    for rule in broken_rules(settings):
        raise layout_error(rule, settings)


def layout_error(rule, settings):
    """The ConfigError of the broken layout rule ``rule`` (a ``LayoutRule``) in the layout
    ``settings`` (``layout_settings``): at ``scheme.<the key it blames>``, its message with
    every option written as in a configuration file (``scheme.col_workers_communication:
    async``)."""
    path = f"scheme.{rule.blames}"
    text = rule.explain(settings, lambda option, value: f"{_key(option)}: {yaml_word(_value(option, value))}", _key)
    return ConfigError(path, text[len(path) + len(": "):])


def _key(option):
    """The configuration key of the layout setting ``option``."""
    return "scheme.num_col_workers" if option == "remote_col_workers" else f"scheme.{option}"


def _value(option, value):
    """The configuration value of the layout setting ``option`` set to ``value`` (no remote
    collection worker: one collector, in the gradient worker's process)."""
    return value or 1 if option == "remote_col_workers" else value


def check_ineffective(scheme_cfg):
    """Refuse a scheme option set to a value the layout never uses (``fraction_samples``
    with asynchronous collection, ``max_grad_lag`` with synchronous gradients, ...): it
    would be silently ignored. Options left at their defaults are never refused, so a
    resolved configuration (a run's config.yaml) passes. ``scheme_cfg``: the resolved
    ``scheme`` section."""
    s = scheme_cfg
    for item in ineffective_options(s["num_col_workers"], s["col_workers_communication"] == "async",
                                    s["num_grad_workers"], s["grad_workers_communication"] == "async",
                                    s["fraction_samples"], s["fraction_workers"], s["max_policy_lag"],
                                    s["max_grad_lag"], s["col_compress_data"], s["grad_compress_data"],
                                    s["decentralized_update_execution"], s["col_workers_resources"],
                                    s["grad_workers_resources"]):
        value = yaml_word(item.value) if isinstance(item.value, bool) else repr(item.value)
        raise ConfigError(f"scheme.{item.option}",
                          f"{value} has no effect with scheme.{item.setting}: {yaml_word(item.current)} "
                          f"({item.reason}); remove it, or set scheme.{item.setting}: {yaml_word(item.needed)}")


def yaml_word(value):
    """``value`` as a configuration file writes it: true/false for a boolean."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def check_batching(config):
    """Refuse a ``batch_step_frequency`` longer than the storage's rollout (which its
    buffers hold); the layouts EXARL's batching and the worker proxy cannot run in are
    rules of ``pytorchrl.scheme.layout_rules`` (``refuse_broken_layout``)."""
    from pytorchrl.agent.algorithms import ALGORITHMS
    s = config["scheme"]
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


def check_weight_options(config):
    """Refuse pulled weights for an on-policy algorithm and the weight options the layout
    never uses (the rules of ``check_weight_mode``, which the Scheme applies with
    warnings)."""
    from pytorchrl.agent.algorithms import ALGORITHMS
    s = config["scheme"]
    algo = config["algorithm"]["name"]
    episodes = episodes_per_rollout(s["col_rollout_unit"], s["episode_block"] or s["batch_episode_frequency"])
    try:
        ineffective = check_weight_mode(s["col_weights"], s["col_weight_pull_every"], s["num_col_workers"],
                                        ComponentFactory(ALGORITHMS[algo]), episodes)
    except PullRefused as exc:
        raise ConfigError("scheme.col_weights", f"pull: pulled weights {exc}") from None
    except ValueError as exc:
        raise ConfigError("scheme.col_weight_pull_every", str(exc).replace("col_weight_pull_every ", "", 1)) from None
    for option, value, reason in ineffective:
        raise ConfigError(f"scheme.{option}", f"{value!r} has no effect with {reason}; remove it")


def check_data_path_options(config):
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
    min_size, target = s["replay_server"]["min_size_to_sample"], config["learner"]["target_steps"]
    if min_size > target:
        raise ConfigError("scheme.replay_server.min_size_to_sample", f"{min_size} exceeds learner.target_steps "
                                                                     f"({target}): training would never start")
    if s["max_policy_lag"] is not None:
        raise ConfigError("scheme.max_policy_lag", "has no effect with scheme.data_path: replay_server (rollouts "
                                                   "are in the server before their lag is known); remove it")


def check_inference_server_options(config):
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


def _check_queue_path(config):
    """Resolve ``scheme.queues`` and refuse what its options cannot do (the layouts the
    queue data path cannot run are rules of ``pytorchrl.scheme.layout_rules``)."""
    s = config["scheme"]
    if s["replay_server"] is not None:
        raise ConfigError("scheme.replay_server", "has no effect with scheme.data_path: queues; remove it, or set "
                                                  "scheme.data_path: replay_server")
    s["queues"] = check_mapping(s["queues"], schema.QUEUE_KEYS, "scheme.queues")
    try:
        pool_class(s["queues"]["kind"])
    except ValueError as exc:
        raise ConfigError("scheme.queues.kind", str(exc).replace("queues kind must be", "must be")) from None
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


def check_replay_pace(config, raw):
    """Refuse ``algorithm.num_updates``/``start_steps`` written with a value of their own on
    the replay-server data path, where they have no effect (a resolved configuration holds
    them at their defaults and passes). ``config``: the configuration with its sections
    resolved; ``raw``: as written (what was given)."""
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
