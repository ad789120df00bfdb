"""Hot-swaps travel as one ``ControlRequest``: validated once, at the Learner, then handed
unchanged down every level of the worker tree (``handle_control``); the methods users call
are written once (``ControlEntries``)."""

import ast
import os
import pickle

import pytest

import pytorchrl
from pytorchrl.config import build_learner, validate_config
from pytorchrl.scheme.collection.c_worker import CWorker
from pytorchrl.scheme.collection.c_worker_set import CWorkerSet
from pytorchrl.scheme.control_request import TARGETS, ControlRequest
from pytorchrl.scheme.gradients.g_worker import GWorker
from pytorchrl.scheme.updates.u_worker import UWorker

pytestmark = pytest.mark.usefixtures("no_ray_import")

ROOT = os.path.dirname(os.path.abspath(pytorchrl.__file__))
LEVELS = {"update worker": UWorker, "gradient worker": GWorker, "collector set": CWorkerSet,
          "collection worker": CWorker}


def definitions(name):
    """Paths (relative to the package) of every definition of a function ``name``."""
    found = []
    for folder, _, files in os.walk(ROOT):
        for fname in files:
            if fname.endswith(".py"):
                path = os.path.join(folder, fname)
                tree = ast.parse(open(path).read())
                found += [os.path.relpath(path, ROOT) for node in ast.walk(tree)
                          if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name]
    return found


def test_update_algorithm_parameter_is_written_at_most_three_times():
    # The hot-swap entries of the Learner and of every worker level are one mixin
    # (ControlEntries); the others are the algorithms' own setter.
    found = definitions("update_algorithm_parameter")
    assert len(found) <= 3, found
    assert [p for p in found if not p.startswith("agent" + os.sep)] == [os.path.join("scheme", "control_request.py")]


def _learner():
    return build_learner(validate_config({"seed": 0, "env": {"id": "CartPole-v1"}, "algorithm": {"name": "PPO"},
                                          "storage": {"name": "GAEBuffer", "size": 8},
                                          "learner": {"target_steps": 10_000, "tensorboard": False}}))


@pytest.fixture
def learner():
    learner = _learner()
    yield learner
    learner.stop()


@pytest.fixture
def received(monkeypatch):
    """(level, request) of every ``handle_control`` call of each worker level, in order."""
    calls = []
    for level, cls in LEVELS.items():
        def spy(self, request, _original=cls.handle_control, _level=level):
            calls.append((_level, request))
            return _original(self, request)
        monkeypatch.setattr(cls, "handle_control", spy)
    return calls


def test_a_request_names_what_it_changes_and_survives_pickling():
    with pytest.raises(ValueError, match=r"unknown control target 'optimizer'; valid: \['algorithm', "):
        ControlRequest("optimizer", "lr", 1e-3)
    assert TARGETS == ("algorithm", "storage", "component", "collector_state")
    request = ControlRequest("algorithm", "clip_param", 0.1)
    # Remote workers get it through Ray, which pickles it.
    assert pickle.loads(pickle.dumps(request)) == request


def test_one_request_reaches_every_level_unchanged(learner, received):
    assert learner.update_algorithm_parameter("clip_param", 0.15) == 0.15
    assert [level for level, _ in received] == list(LEVELS)
    first = received[0][1]
    assert first == ControlRequest("algorithm", "clip_param", 0.15)
    assert all(request is first for _, request in received)
    for group in learner.update_worker.get_hyperparameters():
        assert all(worker["algorithm"]["clip_param"] == 0.15 for worker in group)
    assert learner.hot_swaps == [(0, "algorithm", "clip_param", 0.15)]


def test_the_workers_get_the_value_the_learner_converted(learner, received):
    # Validated once, at the Learner: the request that travels holds the parameter's type.
    assert learner.update_storage_parameter("gae_lambda", 1) == 1.0
    assert {type(request.value) for _, request in received} == {float}
    assert {request.target for _, request in received} == {"storage"}
    assert learner.update_worker.local_worker.storage.gae_lambda == 1.0


@pytest.mark.parametrize("call, words", [
    (lambda lr: lr.update_algorithm_parameter("clip_parameter", 0.1), r"unknown PPO hyperparameter 'clip_parameter'; "
                                                                      r"valid: \[.*'clip_param'"),
    (lambda lr: lr.update_storage_parameter("gae", 0.9), r"unknown GAEBuffer parameter 'gae'; valid: \[.*'gae_lambda'"),
    (lambda lr: lr.replace_agent_component("optimizer", None), r"unknown agent component 'optimizer'; valid: "
                                                                r"\['actor', 'algo'"),
])
def test_an_unknown_name_is_refused_at_the_learner_before_any_worker(learner, received, call, words):
    before = learner.update_worker.get_hyperparameters()
    with pytest.raises(ValueError, match=words):
        call(learner)
    assert received == [] and learner.hot_swaps == []
    assert learner.update_worker.get_hyperparameters() == before


def test_a_wrong_type_is_refused_at_the_learner(learner, received):
    with pytest.raises(TypeError, match="PPO hyperparameter 'num_epochs' expects int, got 'four'"):
        learner.update_algorithm_parameter("num_epochs", "four")
    assert received == []


def test_a_collector_state_is_no_hot_swap_but_travels_the_same_way(learner, received):
    with pytest.raises(ValueError, match="'collector_state' is not a hot-swap"):
        learner.handle_control(ControlRequest("collector_state", value=None))
    assert received == []
    assert learner.update_worker.set_collector_state(None) is True
    assert [level for level, _ in received] == list(LEVELS)
    assert {request.target for _, request in received} == {"collector_state"}


def test_the_worker_entries_apply_here_and_below(learner, received):
    # Public on every worker level as in pytorchrl: the same request from where it is called.
    gworker = learner.update_worker.local_worker
    assert gworker.update_algorithm_parameter("entropy_coef", 0.02) == 0.02
    assert [level for level, _ in received] == ["gradient worker", "collector set", "collection worker"]
    collector = gworker.col_workers.local_worker()
    received.clear()
    assert collector.update_storage_parameter("gae_lambda", 0.9) == 0.9
    assert received == [("collection worker", ControlRequest("storage", "gae_lambda", 0.9))]
    assert collector.replace_agent_component("envs_test", collector._env_factories["envs_test"]) == "envs_test"
