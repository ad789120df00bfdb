"""Helpers of the off-policy layout tests (tests/distributed/test_off_policy_layouts.py,
tests/unit/test_off_policy_layouts_in_process.py): DDQN's and SAC's hyperparameters, the
factories of their agents and a run to the end of the budget."""

from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.algorithms import DDQN, SAC
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import ReplayBuffer
from pytorchrl.envs import make_gym_env


DDQN_KW = dict(lr=1e-3, gamma=0.99, polyak=0.0, num_updates=10, update_every=50, start_steps=200,
               mini_batch_size=32, target_update_interval=20, initial_epsilon=1.0, epsilon_decay=0.99,
               min_epsilon=0.05, test_every=10 ** 9, num_test_episodes=2)


SAC_KW = dict(lr_q=1e-3, lr_pi=1e-3, lr_alpha=1e-3, gamma=0.99, polyak=0.99, num_updates=20, update_every=20,
              start_steps=100, mini_batch_size=32, test_every=10 ** 9, num_test_episodes=1)


def factories(algo, restart_model=None, actor_kw=None, **overrides):
    env_id = "CartPole-v1" if algo == "DDQN" else "Pendulum-v1"
    train, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": env_id}, vec_env_size=1, seed=0)
    cls, kw = (DDQN, DDQN_KW) if algo == "DDQN" else (SAC, SAC_KW)
    algo_factory, name = cls.create_factory(**{**kw, **overrides})
    actor_factory = OffPolicyActor.create_factory(obs_space, action_space, name, restart_model=restart_model,
                                                  common_feature_extractor_kwargs={"hidden_sizes": [32, 32]},
                                                  **(actor_kw or {}))
    return dict(algo_factory=algo_factory, actor_factory=actor_factory,
                storage_factory=ReplayBuffer.create_factory(size=10_000), train_envs_factory=train)


def run(learner):
    """Train to the budget; return the algorithm infos of every update."""
    infos = []
    while not learner.done():
        infos += [i["algo"] for i in learner.step()]
    return infos
