"""The protocols the scheme depends on (``pytorchrl.agent.protocols``): every shipped
algorithm, actor and storage class has every member its protocol declares, and the
scheme imports no concrete algorithm class (it names the protocols only)."""

import gymnasium as gym
import pytest

from pytorchrl.agent.actors import OffPolicyActor, OnPolicyActor
from pytorchrl.agent.algorithms import ALGORITHMS
from pytorchrl.agent.exarl import ExaActor, ExaAgent, ExaAlgorithm
from pytorchrl.agent.protocols import (ActorProtocol, AlgorithmProtocol, ReplayStorageProtocol, StorageProtocol,
                                       members, provides)
from pytorchrl.agent.storages import STORAGES, HERBuffer, RecurrentReplayBuffer, ReplayBuffer
from pytorchrl.scheme.presets import PRESETS

from test_architecture import _inside, import_graph

CARTPOLE = gym.make("CartPole-v1")
PENDULUM = gym.make("Pendulum-v1")
#: Algorithms of discrete actions (the others are built on Pendulum).
DISCRETE = ("PPO", "A2C", "DDQN", "RND_PPO")


def _actor(name, **kwargs):
    env = CARTPOLE if name in DISCRETE else PENDULUM
    cls = OnPolicyActor if ALGORITHMS[name].on_policy else OffPolicyActor
    return cls.create_factory(env.observation_space, env.action_space, name, **kwargs)("cpu")


def _agent(name, **actor_kwargs):
    actor = _actor(name, **actor_kwargs)
    return actor, ALGORITHMS[name].create_factory()[0]("cpu", actor, None)


class _Agent(ExaAgent):
    """The smallest EXARL agent: an ExaActor and an ExaAlgorithm are built around it."""

    def get_weights(self):
        return []

    def set_weights(self, weights):
        pass

    def train(self, batch):
        return 0.0

    def action(self, state):
        return 0

    def has_data(self):
        return True

    def load(self, filename):
        pass

    def save(self, results_dir):
        pass


def _missing(obj, protocol):
    return [m for m in members(protocol) if not hasattr(obj, m)]


def test_the_protocols_declare_what_the_scheme_uses():
    assert "compute_gradients" in members(AlgorithmProtocol) and "preprocess_rollout" in members(AlgorithmProtocol)
    assert {"act", "obs_norm"} <= set(members(ActorProtocol))
    assert {"insert", "batches", "actor", "step"} <= set(members(StorageProtocol))
    assert set(members(StorageProtocol)) < set(members(ReplayStorageProtocol))


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_algorithm_and_its_actor_satisfy_their_protocols(name):
    actor, algo = _agent(name)
    assert _missing(algo, AlgorithmProtocol) == [] and isinstance(algo, AlgorithmProtocol)
    assert _missing(actor, ActorProtocol) == [] and isinstance(actor, ActorProtocol)


def test_exarl_adapters_satisfy_the_protocols():
    actor = ExaActor.create_factory(_Agent, CARTPOLE.observation_space, CARTPOLE.action_space)("cpu")
    algo = ExaAlgorithm.create_factory()[0]("cpu", actor, None)
    assert _missing(actor, ActorProtocol) == [] and isinstance(actor, ActorProtocol)
    assert _missing(algo, AlgorithmProtocol) == [] and isinstance(algo, AlgorithmProtocol)


def _storage(cls):
    """An instance of the storage class ``cls``, with an agent it accepts."""
    if cls is HERBuffer:
        # (Goal-conditioned observations: its instance is checked by class, see below.)
        return None
    if cls is RecurrentReplayBuffer:
        actor, algo = _agent("DDQN", recurrent_net="GRU", recurrent_net_kwargs={"hidden_size": 8})
        return cls.create_factory(size=100, sequence_length=4, burn_in=2)("cpu", actor, algo, None)
    actor, algo = _agent("DDQN" if issubclass(cls, ReplayBuffer) else "PPO")
    return cls.create_factory(size=64)("cpu", actor, algo, None)


@pytest.mark.parametrize("name", sorted(set(STORAGES) - {"ppod"}))
def test_every_storage_satisfies_its_protocol(name):
    cls = STORAGES[name]
    replay = issubclass(cls, ReplayBuffer)
    protocol = ReplayStorageProtocol if replay else StorageProtocol
    assert provides(cls, protocol)
    assert provides(cls, ReplayStorageProtocol) == replay   # what a replay server accepts
    storage = _storage(cls)
    if storage is None:
        return
    assert _missing(storage, protocol) == [] and isinstance(storage, protocol)
    assert isinstance(storage, ReplayStorageProtocol) == replay


def test_a_missing_member_fails_the_check():
    actor, algo = _agent("PPO")
    del actor.obs_norm
    assert _missing(actor, ActorProtocol) == ["obs_norm"] and not isinstance(actor, ActorProtocol)

    class NoGradients:
        name = "none"
    assert not isinstance(NoGradients(), AlgorithmProtocol)


def test_the_scheme_imports_no_concrete_algorithm_class():
    graph = import_graph()

    def reached(module):
        seen, todo = set(), [module]
        while todo:
            for target in graph[todo.pop()]:
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        return seen

    concrete = ("pytorchrl.agent.algorithms", "pytorchrl.agent.exarl")
    scheme = [m for m in graph if _inside(m, "pytorchrl.scheme")]
    assert "pytorchrl.scheme.collection.c_worker" in scheme
    found = {(m, t) for m in scheme for t in reached(m) if any(_inside(t, c) for c in concrete)}
    assert found == set()


def test_the_presets_say_truly_whether_their_algorithm_is_off_policy():
    for preset in PRESETS.values():
        name = (preset.algorithm or {}).get("name")
        expected = name is not None and not ALGORITHMS[name].on_policy
        assert preset.off_policy_algorithm == expected, preset.name

