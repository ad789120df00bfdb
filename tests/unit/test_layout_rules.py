"""The table of layout rules (pytorchrl.scheme.layout_rules): each rule refuses the layouts it
names and no other, and the configuration, Scheme and CWorkerSet refuse a layout by the same
rule object (each spelling the options its own way); no other module writes the rules'
conditions."""

import ast
import copy
import inspect
import pathlib

import pytest

import pytorchrl as prl
from pytorchrl.config import ConfigError, validate_config
from pytorchrl.config.validate_scheme import layout_error
from pytorchrl.scheme import Scheme
from pytorchrl.scheme.collection.c_worker_set import CWorkerSet
from pytorchrl.scheme.layout_rules import (LAYOUT_DEFAULTS, LAYOUT_RULES, RULES_BY_NAME, LayoutRule, broken_rules,
                                           layout_settings, settings_of_scheme_section)

from cli_helpers import TINY
from exarl_batching_helpers import ddqn_agent

pytestmark = pytest.mark.usefixtures("no_ray_import")

ASYNC = {"col_workers_communication": "async"}
PY_ASYNC = {"col_workers_communication": prl.ASYNC}

#: rule name -> (a layout it refuses, the nearest layout it lets run, the configuration's
#: scheme section, CWorkerSet's keyword arguments (None: a rule the set is not given the
#: settings of) and Scheme's keyword arguments of the refused layout).
CASES = {
    "decentralized_updates_need_sync_gradients": (
        dict(decentralized_update_execution=True, grad_workers_communication="async"),
        dict(decentralized_update_execution=True),
        {"decentralized_update_execution": True, "grad_workers_communication": "async"}, None,
        dict(decentralized_update_execution=True, grad_workers_communication=prl.ASYNC)),
    "requests_in_flight_need_async": (
        dict(col_requests_in_flight=2), dict(col_requests_in_flight=2, **ASYNC),
        {"col_requests_in_flight": 2}, dict(num_workers=2, requests_in_flight=2),
        dict(col_requests_in_flight=2)),
    "episode_block_or_batch_episode_frequency": (
        dict(episode_block=2, batch_episode_frequency=3, **ASYNC), dict(episode_block=2, **ASYNC),
        {"num_col_workers": 2, "episode_block": 2, "batch_episode_frequency": 3, **ASYNC}, None,
        dict(num_col_workers=2, episode_block=2, batch_episode_frequency=3, **PY_ASYNC)),
    "episode_block_needs_async": (
        dict(episode_block=2), dict(episode_block=2, **ASYNC),
        {"episode_block": 2}, dict(num_workers=2, block_rounds=True), dict(episode_block=2)),
    "episode_block_needs_one_request": (
        dict(episode_block=2, col_requests_in_flight=2, **ASYNC), dict(episode_block=2, **ASYNC),
        {"num_col_workers": 2, "episode_block": 2, "col_requests_in_flight": 2, **ASYNC},
        dict(num_workers=2, block_rounds=True, requests_in_flight=2, communication=prl.ASYNC),
        dict(num_col_workers=2, episode_block=2, col_requests_in_flight=2, **PY_ASYNC)),
    "worker_proxy_needs_remote_collectors": (
        dict(col_worker_proxy=True), dict(col_worker_proxy=True, remote_col_workers=2),
        {"col_worker_proxy": True}, dict(num_workers=0, worker_proxy=True), dict(col_worker_proxy=True)),
    "worker_proxy_cuts_no_stragglers": (
        dict(col_worker_proxy=True, remote_col_workers=2, fraction_workers=0.5),
        dict(col_worker_proxy=True, remote_col_workers=2),
        {"num_col_workers": 2, "col_worker_proxy": True, "fraction_workers": 0.5},
        dict(num_workers=2, worker_proxy=True, fraction_workers=0.5),
        dict(num_col_workers=2, col_worker_proxy=True, col_preemption_thresholds={"fraction_workers": 0.5})),
    "worker_proxy_with_inference_server": (
        dict(col_worker_proxy=True, remote_col_workers=2, col_policy="server", **ASYNC),
        dict(col_worker_proxy=True, remote_col_workers=2, col_policy="server", data_path="replay_server", **ASYNC),
        {"num_col_workers": 2, "col_worker_proxy": True, "col_policy": "server", **ASYNC},
        dict(num_workers=2, worker_proxy=True, inference_server=object(), communication=prl.ASYNC),
        dict(num_col_workers=2, col_worker_proxy=True, col_policy="server", **PY_ASYNC)),
    "worker_proxy_with_pulled_weights": (
        dict(col_worker_proxy=True, remote_col_workers=2, col_weights="pull", **ASYNC),
        dict(col_worker_proxy=True, remote_col_workers=2, col_weights="pull", data_path="queues", **ASYNC),
        {"num_col_workers": 2, "col_worker_proxy": True, "col_weights": "pull", **ASYNC},
        dict(num_workers=2, worker_proxy=True, weights="pull", communication=prl.ASYNC),
        dict(num_col_workers=2, col_worker_proxy=True, col_weights="pull", **PY_ASYNC)),
    "pull_needs_async": (
        dict(col_weights="pull", remote_col_workers=2), dict(col_weights="pull", remote_col_workers=2, **ASYNC),
        {"num_col_workers": 2, "col_weights": "pull"}, dict(num_workers=2, weights="pull"),
        dict(num_col_workers=2, col_weights="pull")),
    "data_server_needs_training": (
        dict(data_path="replay_server", num_grad_workers=0), dict(data_path="replay_server"),
        {"num_grad_workers": 0, "data_path": "replay_server"}, None,
        dict(num_grad_workers=0, data_path="replay_server")),
    "queues_need_remote_collectors": (
        dict(data_path="queues"), dict(data_path="queues", remote_col_workers=2, **ASYNC),
        {"data_path": "queues"}, None, dict(data_path="queues")),
    "replay_server_needs_async": (
        dict(data_path="replay_server", remote_col_workers=2), dict(data_path="replay_server"),
        {"num_col_workers": 2, "data_path": "replay_server"}, dict(num_workers=2, replay_server=object()),
        dict(num_col_workers=2, data_path="replay_server")),
    "queues_need_async": (
        dict(data_path="queues", remote_col_workers=2), dict(data_path="queues", remote_col_workers=2, **ASYNC),
        {"num_col_workers": 2, "data_path": "queues"}, dict(num_workers=2, queues=object()),
        dict(num_col_workers=2, data_path="queues")),
    "pull_with_inference_server": (
        dict(col_weights="pull", col_policy="server", remote_col_workers=2, **ASYNC),
        dict(col_policy="server", remote_col_workers=2, **ASYNC),
        {"num_col_workers": 2, "col_weights": "pull", "col_policy": "server", **ASYNC},
        dict(num_workers=2, weights="pull", inference_server=object(), communication=prl.ASYNC),
        dict(num_col_workers=2, col_weights="pull", col_policy="server", **PY_ASYNC)),
    "inference_server_needs_one_learner": (
        dict(col_policy="server", num_grad_workers=2), dict(col_policy="server"),
        {"col_policy": "server", "num_grad_workers": 2}, None, dict(col_policy="server", num_grad_workers=2)),
    "inference_server_with_queues": (
        dict(col_policy="server", data_path="queues", remote_col_workers=2, **ASYNC),
        dict(col_policy="server", remote_col_workers=2, **ASYNC),
        {"num_col_workers": 2, "col_policy": "server", "data_path": "queues", **ASYNC},
        dict(num_workers=2, inference_server=object(), queues=object(), communication=prl.ASYNC),
        dict(num_col_workers=2, col_policy="server", data_path="queues", **PY_ASYNC)),
}


def ddqn_config(scheme):
    """TINY learning with DDQN (every data path takes it) and the scheme section ``scheme``."""
    config = copy.deepcopy(TINY)
    config.update(algorithm={"name": "DDQN"}, storage={"name": "ReplayBuffer", "size": 1000}, scheme=scheme)
    return config


def config_error(scheme):
    with pytest.raises(ConfigError) as info:
        validate_config(ddqn_config(scheme))
    return info.value


def worker_set_error(kwargs):
    kwargs = dict(kwargs)
    # Refused before anything is built: no factory is called.
    with pytest.raises(ValueError) as info:
        CWorkerSet(kwargs.pop("num_workers"), 1, None, None, None, **kwargs)
    return info.value


def scheme_error(kwargs):
    # Refused before anything starts: no worker, no Ray.
    with pytest.raises(ValueError) as info:
        Scheme(**ddqn_agent(), **kwargs)
    return info.value


def test_every_rule_has_a_case_and_a_unique_name():
    assert list(CASES) == [rule.name for rule in LAYOUT_RULES]
    assert len(RULES_BY_NAME) == len(LAYOUT_RULES)
    # A rule the worker set does not check is one whose settings it is not given.
    assert [name for name, case in CASES.items() if case[3] is None] == [
        rule.name for rule in LAYOUT_RULES if not rule.worker_set]


@pytest.mark.parametrize("name", list(CASES))
def test_a_rule_refuses_its_bad_layout_and_not_the_good_one(name):
    rule = RULES_BY_NAME[name]
    bad, good = CASES[name][:2]
    assert rule.refuses(layout_settings(**bad)) and rule in broken_rules(layout_settings(**bad))
    assert not rule.refuses(layout_settings(**good))
    assert broken_rules(layout_settings(**good)) == []


def test_the_default_layout_and_every_preset_break_no_rule():
    from pytorchrl.config.schema import SECTIONS
    from pytorchrl.scheme.presets import PRESETS, resolve_scheme_section
    assert broken_rules(layout_settings()) == []
    defaults = {name: key.default for name, key in SECTIONS["scheme"].items()}
    assert PRESETS
    for name in PRESETS:
        section = {**defaults, **resolve_scheme_section({"preset": name})}
        assert broken_rules(settings_of_scheme_section(section)) == [], name


@pytest.mark.parametrize("name", list(CASES))
def test_the_configuration_the_scheme_and_the_worker_set_refuse_by_the_same_rule(name, monkeypatch):
    rule = RULES_BY_NAME[name]
    _, _, scheme, set_kwargs, scheme_kwargs = CASES[name]
    error = config_error(scheme)
    assert error.path == f"scheme.{rule.blames}"
    defaults = validate_config(ddqn_config({}))["scheme"]
    settings = settings_of_scheme_section({**defaults, **scheme})
    assert str(error) == str(layout_error(rule, settings))
    errors = [lambda: config_error(scheme), lambda: scheme_error(scheme_kwargs)]
    if set_kwargs is not None:
        errors.append(lambda: worker_set_error(set_kwargs))
    for make in errors:
        assert "{" not in str(make())
    # The message is the rule's: changed there, every error changes.
    monkeypatch.setattr(rule, "message", "{" + rule.blames + "} breaks the rule under test")
    for make in errors:
        assert str(make()).endswith(" breaks the rule under test")


def test_messages_spell_options_as_their_readers_write_them():
    error = config_error({"num_col_workers": 2, "data_path": "queues"})
    assert str(error) == ("config error: scheme.data_path: queues needs asynchronous collection "
                          "(scheme.col_workers_communication: async): a synchronous round would wait for puts that "
                          "only the waiting learner's pops admit")
    assert str(worker_set_error(dict(num_workers=2, weights="pull"))) == (
        "weights='pull': pulled weights need asynchronous collection (communication=prl.ASYNC): a synchronous "
        "round collects every rollout with the same weights")
    assert str(worker_set_error(dict(num_workers=2, block_rounds=True))).startswith(
        "block_rounds=True needs asynchronous collection (communication=prl.ASYNC)")
    assert str(scheme_error(dict(num_col_workers=2, col_worker_proxy=True,
                                 col_preemption_thresholds={"fraction_samples": 0.5}))) == (
        "col_worker_proxy=True does not cut stragglers (the proxy hands a node's rollouts over together): leave "
        "col_preemption_thresholds['fraction_samples'] and col_preemption_thresholds['fraction_workers'] at 1")
    assert str(scheme_error(dict(data_path="queues"))).startswith(
        "data_path='queues' needs remote collectors: with num_col_workers=1 the one collector runs")


def test_the_worker_set_without_remote_workers_may_pull_or_use_a_server_synchronously():
    """A set whose local worker collects has no round to wait on: the rules about remote
    collectors do not apply (its gradient worker feeds the server itself)."""
    for settings in (dict(col_weights="pull"), dict(data_path="replay_server"), dict(data_path="queues")):
        assert broken_rules(layout_settings(**settings), worker_set=True) == []
    # The Scheme refuses the queue path without remote collectors, by a rule the set does not check.
    assert broken_rules(layout_settings(data_path="queues")) == [RULES_BY_NAME["queues_need_remote_collectors"]]


def test_a_misspelt_setting_or_a_message_blaming_another_option_is_refused():
    with pytest.raises(KeyError, match="unknown layout settings \\['col_weight'\\]"):
        layout_settings(col_weight="pull")
    with pytest.raises(ValueError, match="must start with {data_path}"):
        LayoutRule("x", "data_path", lambda s: False, "{col_weights} ...")
    assert set(LAYOUT_DEFAULTS) >= {rule.blames for rule in LAYOUT_RULES}


#: Words of the rules' messages: a module other than layout_rules that raises with one of
#: them writes a rule's condition again.
RULE_WORDS = ("asynchronous collection", "needs remote collectors", "nothing to share", "both set the episodes",
              "does not cut stragglers", "load no weights", "needs one gradient worker",
              "needs col_workers_communication", "needs scheme.col_workers_communication", "is not supported: use",
              "needs grad_workers_communication", "needs scheme.grad_workers_communication")


def test_no_other_module_writes_a_rule():
    root = pathlib.Path(prl.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "layout_rules.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Raise):
                for const in ast.walk(node):
                    if isinstance(const, ast.Constant) and isinstance(const.value, str):
                        found += [(str(path.relative_to(root)), w) for w in RULE_WORDS if w in const.value]
    assert found == []
    # The checks that held copies of the rules are gone, or no longer read the layout.
    from pytorchrl.scheme.base import checks
    from pytorchrl.scheme.servers import queue_options, replay_server, weight_board, worker_proxy
    assert not hasattr(checks, "batching_refused") and not hasattr(worker_proxy, "proxy_refused")
    for check in (replay_server.check_data_path, queue_options.check_queue_path, weight_board.check_weight_mode):
        assert not {"async_collection", "collect_only"} & set(inspect.signature(check).parameters), check
