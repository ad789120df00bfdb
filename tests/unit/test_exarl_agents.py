"""EXARL's base classes as users write them (seed 001): a DQN agent written only against
``ExaAgent`` and an environment written as an ``ExaEnv`` run unchanged in our schemes
(``ExaActor``, ``ExaAlgorithm``); the agent learns CartPole in the ``exarl-async`` and
``exarl-rma`` layouts, trains with several learners (central and decentralized updates),
is asked ``has_data`` before its actor sends, and saves into the run directory
(``save(results_dir)``); an ``ExaData`` subclass is the memory pool of the RMA queues."""

import copy
import os

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn

import pytorchrl as prl
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.exarl import ExaActor, ExaAgent, ExaAlgorithm, ExaData, ExaEnv
from pytorchrl.agent.storages import ReplayBuffer
from pytorchrl.config import ConfigError, validate_config
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme
from pytorchrl.scheme.collection.c_worker import CWorker
from pytorchrl.scheme.workflows.presets import PRESETS
from pytorchrl.scheme.workflows.queues import OK, QueueServer

from learning_helpers import greedy_returns_along_run

#: Sent to Ray workers by value (tests/conftest.py's ray_for_module): this module's functions.
RAY_BY_VALUE = (__name__,)


# ------------------------------------------------- written against EXARL only
class TorchDQN(ExaAgent):
    """A small DQN as an EXARL user writes it: its own networks, optimizer, exploration and
    target network; nothing of pytorchrl but the base class."""

    def __init__(self, env, lr=1e-3, epsilon=1.0, epsilon_min=0.05, epsilon_decay=0.999, hidden=64,
                 target_every=100, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        obs_dim, self.num_actions = env.observation_space.shape[0], int(env.action_space.n)
        self.model = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                   nn.Linear(hidden, self.num_actions))
        self.target = copy.deepcopy(self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.epsilon, self.epsilon_min, self.epsilon_decay = epsilon, epsilon_min, epsilon_decay
        self.target_every, self.trained = target_every, 0
        self.rng = np.random.default_rng(seed)

    def action(self, state, deterministic=False):
        if not deterministic:
            self.epsilon = max(self.epsilon_min, self.epsilon * self.epsilon_decay)
            if self.rng.random() < self.epsilon:
                return int(self.rng.integers(self.num_actions)), 0
        with torch.no_grad():
            q = self.model(torch.as_tensor(np.asarray(state, dtype=np.float32)[None]))
        return int(q.argmax(1)), 1

    def train(self, batch):
        s = torch.as_tensor(batch["state"], dtype=torch.float32)
        a = torch.as_tensor(batch["action"], dtype=torch.int64).reshape(-1, 1)
        r = torch.as_tensor(batch["reward"], dtype=torch.float32).reshape(-1, 1)
        s2 = torch.as_tensor(batch["next_state"], dtype=torch.float32)
        discount = torch.as_tensor(batch["discount"], dtype=torch.float32).reshape(-1, 1)
        with torch.no_grad():
            y = r + discount * self.target(s2).max(1, keepdim=True).values
        loss = nn.functional.smooth_l1_loss(self.model(s).gather(1, a), y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.trained += 1
        if self.trained % self.target_every == 0:
            self.target.load_state_dict(self.model.state_dict())
        return loss.item()

    def get_weights(self):
        return [v.detach().numpy().copy() for v in self.model.state_dict().values()]

    def set_weights(self, weights):
        self.model.load_state_dict({k: torch.as_tensor(w) for k, w in zip(self.model.state_dict(), weights)})

    def has_data(self):
        return True

    def load(self, filename):
        if os.path.isdir(filename):        # what save wrote
            filename = os.path.join(filename, "exa_dqn.pt")
        self.model.load_state_dict(torch.load(filename, weights_only=True))

    def save(self, results_dir):
        torch.save(self.model.state_dict(), os.path.join(results_dir, "exa_dqn.pt"))


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


class NewestFirst(ExaData):
    """A memory pool written against EXARL's ExaData only: each window is a stack of at most
    ``size`` items that serves the newest first and drops its oldest when full (EXARL's
    distributed stack)."""

    def __init__(self, dataType, size, comm_size=1, max_model_lag=None, name=None):  # noqa: N803
        super().__init__(dataType, size, comm_size, max_model_lag, name)
        self.windows = [[] for _ in range(comm_size)]

    def push(self, data, rank=None):
        window = self.windows[rank]
        window.append(data)
        lost = 0
        if len(window) > self.dataSize:
            window.pop(0)
            lost = 1
        return len(window), lost

    def pop(self, rank, count=1):
        window = self.windows[rank]
        return window.pop() if window else None


class CartPoleExaEnv(ExaEnv):
    """CartPole written as an EXARL environment."""

    def __init__(self, **kwargs):
        super().__init__(gym.make("CartPole-v1"), **kwargs)


def make_exa_env(**kwargs):
    return CartPoleExaEnv()


# ------------------------------------------------------------------- helpers
def _factories(seed=0):
    train, action_space, obs_space = VecEnv.create_factory(make_exa_env, vec_env_size=1, seed=seed)
    test, _, _ = VecEnv.create_factory(make_exa_env, vec_env_size=1, seed=seed + 100)
    actor = ExaActor.create_factory(TorchDQN, obs_space, action_space, {"lr": 1e-3, "seed": seed})
    algo, _ = ExaAlgorithm.create_factory(gamma=0.99, num_updates=32, update_every=64, start_steps=500,
                                          mini_batch_size=64, test_every=10 ** 9)
    return dict(algo_factory=algo, actor_factory=actor, storage_factory=ReplayBuffer.create_factory(size=50000),
                train_envs_factory=train, test_envs_factory=test)


def _layout(preset):
    """A preset's ``scheme:`` values as ``Scheme`` arguments."""
    words = {"sync": prl.SYNC, "async": prl.ASYNC}
    return {k: words.get(v, v) if isinstance(v, str) else v for k, v in PRESETS[preset].scheme.items()}


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
    scheme = Scheme(**_factories())
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
    f = _factories()
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


@pytest.mark.timeout(300)
@pytest.mark.parametrize("preset", ["exarl-ml-rma-queue", "exarl-multi-learner-async"])
def test_an_exa_agent_trains_with_several_learners(ray_for_module, preset):
    """Two learners (EXARL's multi-learner workflows: a central update of the averaged weight
    changes, or their all-reduce), each with its own agent: every agent trains, and all
    hold the same weights, moved from where they started. The RMA queues' memory pool is an
    ExaData subclass of the user's."""
    layout = _layout(preset)
    if preset == "exarl-ml-rma-queue":
        layout["queues"] = dict(layout["queues"], kind=NewestFirst)
    else:
        # (Each learner's own collector, in its process: the all-reduce is what is shown.)
        layout.update(num_col_workers=1, col_workers_communication=prl.SYNC)
        del layout["col_workers_resources"]
    f = _factories()
    start = [w.copy() for w in TorchDQN(make_exa_env(), seed=0).get_weights()]
    f["algo_factory"], _ = ExaAlgorithm.create_factory(gamma=0.99, num_updates=4, update_every=16, start_steps=32,
                                                       mini_batch_size=32, test_every=10 ** 9)
    learner = Learner(Scheme(**f, **layout), target_steps=192)
    try:
        while not learner.done():
            learner.step()
        uw = learner.update_worker
        remotes = uw.grad_workers.remote_workers()
        weights = [ray_for_module.get(w.get_weights.remote()) for w in remotes] + [uw.get_weights()]
        trained = ray_for_module.get([w.get_hyperparameters.remote() for w in remotes])
    finally:
        learner.stop()
    assert learner.num_updates > 0 and all(g[0]["version"] > 0 for g in trained)
    for w in weights[1:]:
        assert all(torch.equal(w[k], weights[0][k]) for k in weights[0])
    assert not all(np.array_equal(a, weights[0][str(i)].numpy()) for i, a in enumerate(start))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("preset", ["exarl-async", "exarl-rma"])
def test_an_exa_agent_learns_cartpole_in_exarls_workflows(ray_for_module, preset):
    # Random play scores about 22, an untrained greedy policy less; this agent reached 137-178
    # by 3-4k steps in both layouts.
    learner = Learner(Scheme(**_factories(), **_layout(preset)), target_steps=20_000)
    try:
        returns = greedy_returns_along_run(learner, first=1000, every=1000, episodes=5, stop_at=120)
        agent = learner.update_worker.local_worker.actor.agent
    finally:
        learner.stop()
    assert max(returns) >= 120, returns
    assert agent.trained == learner.num_updates > 0
    print(preset, learner.num_samples_collected, [round(r) for r in returns])
