"""PPO on CartPole-v1, built from factories with the Python API.

This is the same agent as ``examples/configs/ppo_cartpole.yaml`` (rl-baselines3-zoo's tuned
hyperparameters), written out step by step: environment factory, algorithm, actor,
storage, scheme, learner loop. The learning rate and the clipping range decay linearly to
0 by hot-swapping them with ``learner.update_algorithm_parameter`` while training.

    python examples/ppo_cartpole.py                  # 100k steps, ~30 s on one CPU core
    python examples/ppo_cartpole.py --steps 2000     # quick smoke run
    python examples/ppo_cartpole.py --col-workers 2  # two collection workers (Ray actors)
"""

import argparse
import os
import tempfile

import pytorchrl as prl
from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.actors.feature_extractors.mlp import MLP
from pytorchrl.agent.algorithms import PPO
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import GAEBuffer
from pytorchrl.envs import make_gym_env
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme

LR = 1e-3
CLIP_PARAM = 0.2


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100_000, help="environment steps to train for")
    parser.add_argument("--log-dir", default=None, help="where the model is saved (default: a new temporary directory)")
    parser.add_argument("--col-workers", type=int, default=1,
                        help="collection workers (1: everything in this process; more: Ray actors)")
    parser.add_argument("--seed", type=int, default=0, help="base seed of the environments")
    args = parser.parse_args(argv)
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="ppo_cartpole_")

    # 1. Environments: 8 CartPole-v1 per collection worker for training, 10 for evaluation.
    train_envs_factory, action_space, obs_space = VecEnv.create_factory(
        env_fn=make_gym_env, env_kwargs={"env_id": "CartPole-v1"}, vec_env_size=8,
        log_dir=os.path.join(log_dir, "monitor"), seed=args.seed)
    test_envs_factory, _, _ = VecEnv.create_factory(
        env_fn=make_gym_env, env_kwargs={"env_id": "CartPole-v1"}, vec_env_size=10, seed=args.seed)

    # 2. Algorithm: 20 epochs over each 256-sample rollout, one mini-batch per epoch.
    algo_factory, algo_name = PPO.create_factory(
        lr=LR, eps=1e-5, num_epochs=20, clip_param=CLIP_PARAM, entropy_coef=0.0, value_loss_coef=0.5,
        max_grad_norm=0.5, mini_batch_size=256, gamma=0.98, test_every=50, num_test_episodes=10,
        use_clipped_value_loss=False)  # as rl-zoo's SB3 set (clip_range_vf None)

    # 3. Actor: separate policy and value MLPs with two hidden layers of 64 tanh units.
    actor_factory = OnPolicyActor.create_factory(
        obs_space, action_space, algo_name, feature_extractor_network=MLP,
        feature_extractor_kwargs={"hidden_sizes": [64, 64], "activation": "tanh"},
        shared_policy_value_network=False)

    # 4. Storage: rollouts of 32 steps per environment, advantages by GAE(0.8).
    storage_factory = GAEBuffer.create_factory(size=32, gae_lambda=0.8)

    # 5. Scheme: how the work is spread. One worker at each level runs in this process.
    scheme = Scheme(
        algo_factory=algo_factory, actor_factory=actor_factory, storage_factory=storage_factory,
        train_envs_factory=train_envs_factory, test_envs_factory=test_envs_factory,
        num_col_workers=args.col_workers, col_workers_communication=prl.SYNC,
        num_grad_workers=1, grad_workers_communication=prl.SYNC)

    # 6. Learner: the training loop.
    learner = Learner(scheme, target_steps=args.steps, log_dir=log_dir)
    try:
        sent_fraction = 1.0
        while not learner.done():
            learner.step()
            # Hot-swap: linear decay of lr and clip_param, sent when it moved by 1% or more
            # (each swap reaches every worker, so it is not sent after every update).
            fraction = max(0.0, 1.0 - learner.num_samples_collected / args.steps)
            if sent_fraction - fraction >= 0.01 or (fraction == 0.0 and sent_fraction > 0.0):
                learner.update_algorithm_parameter("lr", LR * fraction)
                learner.update_algorithm_parameter("clip_param", CLIP_PARAM * fraction)
                sent_fraction = fraction
            if learner.num_updates % 1000 == 0:
                learner.print_info(add_time_info=False)
        learner.print_info()
        metrics = learner.get_metrics(add_episodes_metrics=True)
        print(f"mean training return over the last episodes: {metrics['Episodes/TrainReward']:.1f}")
        print(f"model saved to {learner.save_model()}")
        print(f"deterministic test return: {learner.evaluate():.1f} (10 episodes)")
    finally:
        learner.stop()


if __name__ == "__main__":
    main()
