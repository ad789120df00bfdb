"""EXARL's base classes as users write them (seed 001): a DQN agent written only against
``ExaAgent`` and an environment written as an ``ExaEnv`` run unchanged in our schemes
(``ExaActor``, ``ExaAlgorithm``); the agent is asked ``has_data`` before its actor sends,
and saves into the run directory (``save(results_dir)``); an ``ExaData`` subclass is the
memory pool of the RMA queues. On Ray: tests/distributed/test_exarl_agents_ray.py (several
learners) and tests/learning/test_learning_exarl_agents.py (CartPole in EXARL's workflows)."""

import os

import gymnasium as gym
import numpy as np
import pytest

import pytorchrl as prl
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.exarl import ExaActor, ExaAgent, ExaAlgorithm
from pytorchrl.config import ConfigError, validate_config
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme
from pytorchrl.scheme.collection.c_worker import CWorker
from pytorchrl.scheme.servers.queues import OK, QueueServer


from exarl_helpers import CartPoleExaEnv, NewestFirst, TorchDQN, exa_factories, make_exa_env

# ------------------------------------------------- written against EXARL only


class RememberingDQN(TorchDQN):
    """The DQN with EXARL's actor-side memory: it remembers every step it is given and has
    data once it holds ``batch`` of them (what it sends is then forgotten)."""

    def __init__(self, env, batch=40, **kwargs):
        super().__init__(env, **kwargs)
        self.batch, self.memory, self.remembered = batch, [], 0

    def remember(self, state, action, reward, next_state, done):
        self.memory.append((state, action, reward, next_state, done))
        self.remembered += 1

    def has_data(self):
        if len(self.memory) >= self.batch:
            self.memory = []
            return True
        return False


# ------------------------------------------------------------------- helpers


# --------------------------------------------------------------------- tests
def test_the_base_classes_are_exarls():
    class Partial(ExaAgent):
        def action(self, state):
            return 0
    with pytest.raises(TypeError, match="abstract"):
        Partial()
    env = CartPoleExaEnv(foo=1)
    assert isinstance(env, gym.Wrapper) and env.kwargs == {"foo": 1}
    env.set_results_dir("/tmp/x")
    assert env.results_dir == "/tmp/x"
    with pytest.raises(TypeError, match="needs a subclass of ExaAgent"):
        ExaActor("cpu", dict, env.observation_space, env.action_space)


def test_the_agent_acts_trains_and_is_saved_through_the_adapters(tmp_path):
    scheme = Scheme(**exa_factories())
    learner = Learner(scheme, target_steps=1200, log_dir=str(tmp_path))
    try:
        while not learner.done():
            learner.step()
        gw = learner.update_worker.local_worker
        agent = gw.actor.agent
        assert agent.trained == learner.num_updates > 0      # every update was one call of train
        assert gw.actor.policy_counts[0] > 0 and gw.actor.policy_counts[1] > 0   # EXARL's policy types
        path = learner.save_model()
        # The run's save gave the agent's own save the run directory (EXARL's save(results_dir)).
        own_format = str(tmp_path)
        assert os.path.isfile(tmp_path / "exa_dqn.pt") and os.path.dirname(path) == own_format
    finally:
        learner.stop()
    probe = np.zeros(4, dtype=np.float32)
    expected = agent.action(probe, deterministic=True)
    for restart in (path, own_format):     # our saved model, and the agent's own file (its load)
        # (Another seed: the weights come from the file.)
        actor = ExaActor("cpu", TorchDQN, *_spaces(), agent_kwargs={"seed": 1}, restart_model=restart)
        assert all(np.array_equal(a, b) for a, b in zip(actor.agent.get_weights(), agent.get_weights()))
        assert actor.agent.action(probe, deterministic=True) == expected


def test_has_data_is_asked_before_an_actor_sends():
    """The agent remembers each step given to it and has data from 40 steps on: rollouts of
    16 steps are kept (held, nothing reported) until the third, which sends all three."""
    f = exa_factories()
    train, action_space, obs_space = VecEnv.create_factory(make_exa_env, vec_env_size=1, seed=0)
    actor = ExaActor.create_factory(RememberingDQN, obs_space, action_space, {"batch": 40})
    algo, _ = ExaAlgorithm.create_factory(update_every=16, num_updates=1, start_steps=0, mini_batch_size=8)
    worker = CWorker(1, 0, algo, actor, f["storage_factory"], train_envs_factory=train)
    try:
        reports = [worker.collect_data() for _ in range(3)]
        for data, info in reports[:2]:
            assert data is None and info["held"] and info["collected_samples"] == 0 and info["episodes"] == []
        data, info = reports[2]
        assert "held" not in info and info["collected_samples"] == info["steps"] == 48
        assert len(data[prl.OBS]) == 48 and worker.actor.agent.remembered == 48
    finally:
        worker.stop()


def test_an_exa_data_subclass_is_the_memory_pool_of_the_rma_queues():
    pool = NewestFirst(object, 4, comm_size=2, max_model_lag=2)
    assert pool.push(("x", 3), 1) == (1, 0)
    assert pool.get_data(4, 1, 2) == ("x", 1, 3)           # window 1, version 3: within the lag
    pool.push(("old", 1), 0)
    assert pool.get_data(4, 0, 1) == (None, -1, -1)        # 3 versions behind: dropped
    # The queue server pushes each rollout into its collector's window and pops with it.
    server = QueueServer({1: [1, 2]}, size=2, pop="one", kind=NewestFirst)
    for tag in "abc":
        assert server.put((1, 1), {"tag": tag}, 0, timeout=0) == OK     # never waits: the pool decides
    assert server.stats()["overwritten"] == 1 and server.sizes()[(1, 1)] == 2
    assert [server.pop(1, timeout=0)[1][0][0]["tag"] for _ in range(2)] == ["c", "b"]    # newest first
    # The configuration names one by its import path; another thing is refused in one line.
    base = {"env": {"id": "CartPole-v1"}, "algorithm": {"name": "DDQN"}, "storage": {"size": 1000},
            "learner": {"target_steps": 1000}}
    config = validate_config({**base, "scheme": {"preset": "exarl-rma", "queues": {"kind": f"{__name__}:NewestFirst"}}})
    assert config["scheme"]["queues"]["kind"] == f"{__name__}:NewestFirst"
    with pytest.raises(ConfigError, match="scheme.queues.kind: must be one of 'fifo', 'circular' or an ExaData"):
        validate_config({**base, "scheme": {"preset": "exarl-rma", "queues": {"kind": "collections:OrderedDict"}}})


def _spaces():
    env = make_exa_env()
    return env.observation_space, env.action_space
