"""The worker proxy's configuration: the layouts it cannot serve are refused, and
``drl-actor-model`` draws it as the seed does (the proxy on Ray:
tests/distributed/test_worker_proxy.py)."""

import pytest

import pytorchrl as prl
from pytorchrl.config import ConfigError, validate_config
from pytorchrl.scheme import Scheme

from cli_helpers import tiny
from distributed_fixtures import factories


@pytest.mark.parametrize("scheme,words", [
    ({"col_worker_proxy": True}, "needs remote collectors: with scheme.num_col_workers: 1 the one collector runs"),
    ({"preset": "async-collectors", "col_weights": "pull", "col_worker_proxy": True},
     "has nothing to share: with scheme.col_weights: pull the collectors pull their weights from the weight board"),
    ({"preset": "sync-collectors-preemptive", "col_worker_proxy": True}, "does not cut stragglers"),
])
def test_layouts_the_proxy_cannot_serve_are_refused(scheme, words):
    with pytest.raises(ConfigError) as info:
        validate_config(tiny(scheme=scheme))
    assert str(info.value).startswith("config error: scheme.col_worker_proxy: true ") and words in str(info.value)
    with pytest.raises(ValueError, match="col_worker_proxy=True has nothing to share"):
        Scheme(**factories(vec_env_size=2, rollout_size=8), num_col_workers=2, col_workers_communication=prl.ASYNC,
               col_weights="pull", col_worker_proxy=True)


def test_the_proxy_serves_drl_actor_model_as_the_seed_draws_it():
    """The configuration of DistributedReinforcementLearning.jl's own layout (asynchronous
    workers feeding a replay server) takes the proxy (refused before)."""
    config = tiny(storage={"name": "ReplayBuffer", "size": 1000},
                  scheme={"preset": "drl-actor-model", "col_worker_proxy": True})
    config["algorithm"] = {"name": "DDQN"}
    config = validate_config(config)
    assert config["scheme"]["col_worker_proxy"] and config["scheme"]["data_path"] == "replay_server"
