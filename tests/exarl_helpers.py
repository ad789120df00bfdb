"""EXARL's base classes as users write them, shared by tests/unit/test_exarl_agents.py,
tests/distributed/test_exarl_agents_ray.py and tests/learning/test_learning_exarl_agents.py:
a small torch DQN written only against ``ExaAgent``, an ``ExaData`` pool, a CartPole
``ExaEnv``, the factories of a scheme over them and the layout of an EXARL workflow."""

import copy
import os

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

import pytorchrl as prl
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.exarl import ExaActor, ExaAgent, ExaAlgorithm, ExaData, ExaEnv
from pytorchrl.agent.storages import ReplayBuffer
from pytorchrl.scheme.presets import PRESETS


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


def exa_factories(seed=0):
    train, action_space, obs_space = VecEnv.create_factory(make_exa_env, vec_env_size=1, seed=seed)
    test, _, _ = VecEnv.create_factory(make_exa_env, vec_env_size=1, seed=seed + 100)
    actor = ExaActor.create_factory(TorchDQN, obs_space, action_space, {"lr": 1e-3, "seed": seed})
    algo, _ = ExaAlgorithm.create_factory(gamma=0.99, num_updates=32, update_every=64, start_steps=500,
                                          mini_batch_size=64, test_every=10 ** 9)
    return dict(algo_factory=algo, actor_factory=actor, storage_factory=ReplayBuffer.create_factory(size=50000),
                train_envs_factory=train, test_envs_factory=test)


def exa_layout(preset):
    """A preset's ``scheme:`` values as ``Scheme`` arguments."""
    words = {"sync": prl.SYNC, "async": prl.ASYNC}
    return {k: words.get(v, v) if isinstance(v, str) else v for k, v in PRESETS[preset].scheme.items()}
