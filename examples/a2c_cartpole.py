"""A2C on CartPole-v1 written as pytorchrl's training scripts are: ``A2C.create_factory``
with pytorchrl's arguments (``lr_v``, ``lr_pi``, ``gamma``, ``test_every``,
``max_grad_norm``, ``num_test_episodes``), an ``OnPolicyActor`` with separate policy and
value networks (pytorchrl's ``policy_net`` and ``value_net1``: one optimizer each), and the
learner loop. The hyperparameters it passes are rl-baselines3-zoo's for A2C on CartPole (8
envs, 5 steps per rollout, learning rate 7e-4, no entropy bonus, GAE lambda 1); the others
are pytorchrl's defaults, as for a pytorchrl script (Adam's eps 1e-8, the value loss
unweighted, normalised advantages). Measured: a deterministic return of 500 on seeds 0-5.

    python examples/a2c_cartpole.py                  # 200k steps, ~10 s on one CPU core
    python examples/a2c_cartpole.py --steps 2000     # quick smoke run
"""

import argparse
import tempfile

import torch.nn as nn

import pytorchrl as prl
from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.actors.feature_extractors.mlp import MLP
from pytorchrl.agent.algorithms import A2C
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import GAEBuffer
from pytorchrl.envs import make_gym_env
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme


def main(argv=None):
    """Train, save the model and return the deterministic test return (10 episodes)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200_000, help="environment steps to train for")
    parser.add_argument("--log-dir", default=None, help="where the model is saved (default: a new temporary directory)")
    parser.add_argument("--seed", type=int, default=0, help="seed of torch and of the environments")
    args = parser.parse_args(argv)
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="a2c_cartpole_")
    import torch
    torch.manual_seed(args.seed)

    train_envs_factory, action_space, obs_space = VecEnv.create_factory(
        env_fn=make_gym_env, env_kwargs={"env_id": "CartPole-v1"}, vec_env_size=8, seed=args.seed)
    test_envs_factory, _, _ = VecEnv.create_factory(
        env_fn=make_gym_env, env_kwargs={"env_id": "CartPole-v1"}, vec_env_size=10, seed=args.seed + 100)

    algo_factory, algo_name = A2C.create_factory(
        lr_v=7e-4, lr_pi=7e-4, gamma=0.99, test_every=5000, max_grad_norm=0.5, num_test_episodes=10)

    actor_factory = OnPolicyActor.create_factory(
        obs_space, action_space, algo_name, feature_extractor_network=MLP,
        feature_extractor_kwargs={"hidden_sizes": [64, 64], "activation": nn.Tanh},
        shared_policy_value_network=False)

    storage_factory = GAEBuffer.create_factory(size=5, gae_lambda=1.0)

    scheme = Scheme(
        algo_factory=algo_factory, actor_factory=actor_factory, storage_factory=storage_factory,
        train_envs_factory=train_envs_factory, test_envs_factory=test_envs_factory,
        num_col_workers=1, col_workers_communication=prl.SYNC,
        num_grad_workers=1, grad_workers_communication=prl.SYNC)

    learner = Learner(scheme, target_steps=args.steps, log_dir=log_dir)
    try:
        while not learner.done():
            learner.step()
            if learner.num_updates % 1000 == 0:
                learner.get_metrics(add_episodes_metrics=True)
                learner.print_info(add_time_info=False)
        print(f"model saved to {learner.save_model()}")
        test_return = learner.evaluate(10)
        print(f"deterministic test return: {test_return:.1f} (10 episodes)")
        return test_return
    finally:
        learner.stop()


if __name__ == "__main__":
    main()
