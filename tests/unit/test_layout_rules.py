"""The table of layout rules (pytorchrl.scheme.layout_rules): each rule refuses the layouts it
names and no other, and the configuration and CWorkerSet refuse a layout by the same rule
object (each spelling the options its own way)."""

import copy

import pytest

import pytorchrl as prl
from pytorchrl.config import ConfigError, validate_config
from pytorchrl.config.validate_scheme import layout_error
from pytorchrl.scheme.collection.c_worker_set import CWorkerSet
from pytorchrl.scheme.layout_rules import (LAYOUT_DEFAULTS, LAYOUT_RULES, RULES_BY_NAME, LayoutRule, broken_rules,
                                           layout_settings, settings_of_scheme_section)

from cli_helpers import TINY

pytestmark = pytest.mark.usefixtures("no_ray_import")

ASYNC = {"col_workers_communication": "async"}

#: rule name -> (a layout it refuses, the nearest layout it lets run, the configuration's
#: scheme section and CWorkerSet's keyword arguments of the refused layout).
CASES = {
    "requests_in_flight_need_async": (
        dict(col_requests_in_flight=2), dict(col_requests_in_flight=2, **ASYNC),
        {"col_requests_in_flight": 2}, dict(num_workers=2, requests_in_flight=2)),
    "episode_block_needs_async": (
        dict(episode_block=2), dict(episode_block=2, **ASYNC),
        {"episode_block": 2}, dict(num_workers=2, block_rounds=True)),
    "episode_block_needs_one_request": (
        dict(episode_block=2, col_requests_in_flight=2, **ASYNC), dict(episode_block=2, **ASYNC),
        {"num_col_workers": 2, "episode_block": 2, "col_requests_in_flight": 2, **ASYNC},
        dict(num_workers=2, block_rounds=True, requests_in_flight=2, communication=prl.ASYNC)),
    "worker_proxy_cuts_no_stragglers": (
        dict(col_worker_proxy=True, remote_col_workers=2, fraction_workers=0.5),
        dict(col_worker_proxy=True, remote_col_workers=2),
        {"num_col_workers": 2, "col_worker_proxy": True, "fraction_workers": 0.5},
        dict(num_workers=2, worker_proxy=True, fraction_workers=0.5)),
    "pull_needs_async": (
        dict(col_weights="pull", remote_col_workers=2), dict(col_weights="pull", remote_col_workers=2, **ASYNC),
        {"num_col_workers": 2, "col_weights": "pull"}, dict(num_workers=2, weights="pull")),
    "replay_server_needs_async": (
        dict(data_path="replay_server", remote_col_workers=2), dict(data_path="replay_server"),
        {"num_col_workers": 2, "data_path": "replay_server"}, dict(num_workers=2, replay_server=object())),
    "queues_need_async": (
        dict(data_path="queues", remote_col_workers=2), dict(data_path="queues", remote_col_workers=2, **ASYNC),
        {"num_col_workers": 2, "data_path": "queues"}, dict(num_workers=2, queues=object())),
    "pull_with_inference_server": (
        dict(col_weights="pull", col_policy="server", remote_col_workers=2, **ASYNC),
        dict(col_policy="server", remote_col_workers=2, **ASYNC),
        {"num_col_workers": 2, "col_weights": "pull", "col_policy": "server", **ASYNC},
        dict(num_workers=2, weights="pull", inference_server=object(), communication=prl.ASYNC)),
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


def test_every_rule_has_a_case_and_a_unique_name():
    assert list(CASES) == [rule.name for rule in LAYOUT_RULES]
    assert len(RULES_BY_NAME) == len(LAYOUT_RULES)


@pytest.mark.parametrize("name", list(CASES))
def test_a_rule_refuses_its_bad_layout_and_not_the_good_one(name):
    rule = RULES_BY_NAME[name]
    bad, good, _, _ = CASES[name]
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
def test_the_configuration_and_the_worker_set_refuse_by_the_same_rule(name, monkeypatch):
    rule = RULES_BY_NAME[name]
    _, _, scheme, kwargs = CASES[name]
    error = config_error(scheme)
    assert error.path == f"scheme.{rule.blames}"
    defaults = validate_config(ddqn_config({}))["scheme"]
    settings = settings_of_scheme_section({**defaults, **scheme})
    assert str(error) == str(layout_error(rule, settings))
    assert "{" not in str(error) and "{" not in str(worker_set_error(kwargs))
    # The message is the rule's: changed there, both errors change.
    monkeypatch.setattr(rule, "message", "{" + rule.blames + "} breaks the rule under test")
    assert str(config_error(scheme)).endswith(" breaks the rule under test")
    assert str(worker_set_error(kwargs)).endswith(" breaks the rule under test")


def test_messages_spell_options_as_their_readers_write_them():
    error = config_error({"num_col_workers": 2, "data_path": "queues"})
    assert str(error) == ("config error: scheme.data_path: queues needs scheme.col_workers_communication: async (a "
                          "synchronous round would wait for puts that only the waiting learner's pops admit)")
    assert str(worker_set_error(dict(num_workers=2, weights="pull"))) == (
        "weights='pull': pulled weights need asynchronous collection (communication=prl.ASYNC): a synchronous "
        "round collects every rollout with the same weights")
    assert str(worker_set_error(dict(num_workers=2, block_rounds=True))).startswith(
        "block_rounds=True needs asynchronous collection (communication=prl.ASYNC)")


def test_the_worker_set_without_remote_workers_may_pull_or_use_a_server_synchronously():
    """A set whose local worker collects has no round to wait on: the rules about remote
    collectors do not apply (its gradient worker feeds the server itself)."""
    for settings in (dict(col_weights="pull"), dict(data_path="replay_server"), dict(data_path="queues")):
        assert broken_rules(layout_settings(**settings)) == []


def test_a_misspelt_setting_or_a_message_blaming_another_option_is_refused():
    with pytest.raises(KeyError, match="unknown layout settings \\['col_weight'\\]"):
        layout_settings(col_weight="pull")
    with pytest.raises(ValueError, match="must start with {data_path}"):
        LayoutRule("x", "data_path", lambda s: False, "{col_weights} ...")
    assert set(LAYOUT_DEFAULTS) >= {rule.blames for rule in LAYOUT_RULES}
