"""pytorchrl's scripts as they are written: the communication strings of their argparse
defaults, ``Scheme.get_agent_components()`` (which they log), and the positional order of
``OnPolicyActor.create_factory``."""

import gymnasium as gym
import pytest

import pytorchrl as prl
from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.scheme import Scheme
from pytorchrl.scheme.base.checks import check_communication
from pytorchrl.config import validate_config
from pytorchrl.scheme.collection.c_worker_set import CWorkerSet
from pytorchrl.scheme.presets import PRESETS

from cli_helpers import TINY, with_sections
from distributed_fixtures import factories

pytestmark = pytest.mark.usefixtures("no_ray_import")


def test_synchronised_is_the_synchronous_mode_and_other_spellings_are_refused():
    assert check_communication("x", "synchronised") == prl.SYNC
    assert check_communication("x", prl.ASYNC) == prl.ASYNC
    with pytest.raises(ValueError, match="col_workers_communication must be prl.SYNC"):
        Scheme(**factories(vec_env_size=2, rollout_size=8), col_workers_communication="synchronized")


@pytest.mark.parametrize("word, mode", [("sync", prl.SYNC), ("synchronous", prl.SYNC), ("synchronised", prl.SYNC),
                                        ("async", prl.ASYNC), ("asynchronous", prl.ASYNC)])
def test_the_scheme_and_the_configuration_take_the_same_words_for_a_mode(word, mode):
    assert check_communication("x", word) == mode
    config = validate_config(with_sections(TINY, scheme={"num_col_workers": 2, "col_workers_communication": word,
                                                         "num_grad_workers": 2, "grad_workers_communication": word}))
    assert config["scheme"]["col_workers_communication"] == config["scheme"]["grad_workers_communication"] == \
        ("sync" if mode == prl.SYNC else "async")


def test_a_preset_layout_is_a_scheme_s_arguments():
    # The presets are written in the configuration's words ("sync", "async"): the Scheme takes
    # them as they are, every preset's, and builds the single-process one here.
    for preset in PRESETS.values():
        for key in ("col_workers_communication", "grad_workers_communication"):
            if key in preset.scheme:
                check_communication(key, preset.scheme[key])
    scheme = Scheme(**factories(vec_env_size=2, rollout_size=8), **PRESETS["single-process"].scheme)
    try:
        assert scheme.update_worker.grad_communication == prl.SYNC
        scheme.update_worker.step()
    finally:
        scheme.stop()


def test_a_scheme_written_with_synchronised_runs_synchronously():
    scheme = Scheme(**factories(vec_env_size=2, rollout_size=8), col_workers_communication="synchronised",
                    grad_workers_communication="synchronised")
    try:
        assert scheme.get_agent_components()["col_workers_communication"] == prl.SYNC
        assert scheme.update_worker.grad_communication == prl.SYNC
        scheme.update_worker.step()
    finally:
        scheme.stop()
    kwargs = factories(vec_env_size=2, rollout_size=8)
    col_set = CWorkerSet(0, 0, kwargs["algo_factory"], kwargs["actor_factory"], kwargs["storage_factory"],
                         train_envs_factory=kwargs["train_envs_factory"], communication="synchronised")
    try:
        assert col_set.communication == prl.SYNC
    finally:
        col_set.stop()


def test_get_agent_components_names_every_component_and_the_layout():
    kwargs = factories(vec_env_size=2, rollout_size=8)
    scheme = Scheme(**kwargs)
    try:
        components = scheme.get_agent_components()
    finally:
        scheme.stop()
    assert components == {"actor": "OnPolicyActor", "algorithm": "PPO", "storage": "GAEBuffer",
                          "train_envs": "VecEnv(CartPole-v1, vec_env_size=2)", "test_envs": None,
                          "num_col_workers": 1, "col_workers_communication": prl.SYNC, "num_grad_workers": 1,
                          "grad_workers_communication": prl.SYNC, "decentralized_update_execution": False,
                          "data_path": "direct"}


def test_on_policy_actor_factory_takes_pytorchrl_positional_order():
    obs_space, action_space = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
    # input_space, action_space, algorithm_name, restart_model, recurrent_net, recurrent_net_kwargs,
    # feature_extractor_network, feature_extractor_kwargs, shared_policy_value_network
    factory = OnPolicyActor.create_factory(obs_space, action_space, "PPO", None, "GRU", {"hidden_size": 8}, None,
                                           {"hidden_sizes": [16]}, False)
    actor = factory("cpu")
    assert actor.memory is not None and actor.memory.state_size == 8
    assert actor.value_net is not None or actor.twin_net is not None   # separate policy and value networks
