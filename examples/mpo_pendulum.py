#!/usr/bin/env python3
"""MPO on Pendulum-v1, written as pytorchrl's own training scripts are
(train_pybullet/mpo/train.py's structure: ``MPO.create_factory``,
``OffPolicyActor.create_factory``, ``ReplayBuffer.create_factory``, the collection and
gradient workers of a ``Scheme``, the ``Learner`` loop).

The defaults are examples/configs/mpo_pendulum.yaml's (greedy return about -150 after
4-7k steps); the algorithm's other keywords are pytorchrl's.

    python examples/mpo_pendulum.py                            # one process, 10k steps
    python examples/mpo_pendulum.py --num-col-workers 2        # two collection workers (Ray)
    python examples/mpo_pendulum.py --env-id CartPole-v1       # Discrete actions: a categorical policy
    python examples/mpo_pendulum.py --conf my_args.yaml        # arguments from a YAML file
"""

import argparse
import os
import sys
import time

from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.algorithms import MPO
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import ReplayBuffer
from pytorchrl.envs import make_gym_env
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme
from pytorchrl.utils import LoadFromFile, cleanup_log_dir, save_argparse


def main(argv=None):
    args = get_args(argv)
    cleanup_log_dir(args.log_dir)
    save_argparse(args, os.path.join(args.log_dir, "conf.yaml"), ["conf"])

    # 1. Train and test vectors of environments.
    train_envs_factory, action_space, obs_space = VecEnv.create_factory(
        vec_env_size=args.num_env_processes, log_dir=args.log_dir, env_fn=make_gym_env,
        env_kwargs={"env_id": args.env_id}, seed=args.seed)
    test_envs_factory, _, _ = VecEnv.create_factory(
        vec_env_size=args.num_env_processes, log_dir=args.log_dir, env_fn=make_gym_env,
        env_kwargs={"env_id": args.env_id}, seed=args.seed + 100)

    # 2. Algorithm (every keyword of pytorchrl's MPO.create_factory).
    algo_factory, algo_name = MPO.create_factory(
        lr_q=args.lr, lr_pi=args.lr, gamma=args.gamma, polyak=args.polyak, num_updates=args.num_updates,
        test_every=args.test_every, update_every=args.update_every, start_steps=args.start_steps,
        mini_batch_size=args.mini_batch_size, num_test_episodes=args.num_test_episodes,
        target_update_interval=args.target_update_interval, dual_constraint=args.dual_constraint,
        kl_mean_constraint=args.kl_mean_constraint, kl_var_constraint=args.kl_var_constraint,
        kl_constraint=args.kl_constraint, alpha_scale=10.0, alpha_mean_scale=1.0, alpha_var_scale=100.0,
        alpha_mean_max=0.1, alpha_var_max=10.0, alpha_max=1.0, mstep_iterations=args.mstep_iterations,
        sample_action_num=args.sample_action_num, max_grad_norm=args.max_grad_norm, policy_loss_addons=[])

    # 3. Actor: a Gaussian (Box) or categorical (Discrete) policy and one critic.
    actor_factory = OffPolicyActor.create_factory(
        obs_space, action_space, algo_name, restart_model=args.restart_model,
        common_feature_extractor_kwargs={"hidden_sizes": args.hidden_sizes})

    # 4. Storage.
    storage_factory = ReplayBuffer.create_factory(size=args.buffer_size)

    # 5. Scheme: collection workers feeding gradient workers feeding the update worker.
    scheme = Scheme(algo_factory=algo_factory, actor_factory=actor_factory, storage_factory=storage_factory,
                    train_envs_factory=train_envs_factory, test_envs_factory=test_envs_factory,
                    num_col_workers=args.num_col_workers, col_workers_communication=args.com_col_workers,
                    col_workers_resources={"num_cpus": 0.5, "num_gpus": 0},
                    num_grad_workers=args.num_grad_workers, grad_workers_communication=args.com_grad_workers,
                    grad_workers_resources={"num_cpus": 0.5, "num_gpus": 0})

    # 6. Learner and training loop.
    learner = Learner(scheme, target_steps=args.num_env_steps, log_dir=args.log_dir)
    iterations, start_time = 0, time.time()
    try:
        while not learner.done():
            learner.step()
            if iterations % args.log_interval == 0:
                learner.print_info()
            if iterations % args.save_interval == 0:
                learner.save_model()
            if args.max_time != -1 and (time.time() - start_time) > args.max_time:
                break
            iterations += 1
        print(f"model saved to {learner.save_model()}")
        print(f"deterministic test return: {learner.evaluate(args.num_test_episodes):.1f}")
    finally:
        learner.stop()
    print("Finished!")


def get_args(argv=None):
    parser = argparse.ArgumentParser(description="MPO on Pendulum-v1")
    parser.add_argument("--conf", "-c", type=open, action=LoadFromFile, help="YAML file of arguments")
    parser.add_argument("--env-id", default="Pendulum-v1", help="gymnasium environment id")
    parser.add_argument("--seed", type=int, default=0, help="base seed of the environments")
    parser.add_argument("--lr", type=float, default=1e-3, help="learning rate of the critic and the policy")
    parser.add_argument("--gamma", type=float, default=0.99, help="discount factor")
    parser.add_argument("--polyak", type=float, default=0.995, help="target networks' averaging")
    parser.add_argument("--start-steps", type=int, default=200, help="random steps before learning")
    parser.add_argument("--buffer-size", type=int, default=1_000_000, help="replay capacity (transitions)")
    parser.add_argument("--update-every", type=int, default=1, help="env steps between update stages")
    parser.add_argument("--num-updates", type=int, default=1, help="updates per stage")
    parser.add_argument("--mini-batch-size", type=int, default=128, help="transitions per mini-batch")
    parser.add_argument("--target-update-interval", type=int, default=1, help="updates between target updates")
    parser.add_argument("--dual-constraint", type=float, default=0.1, help="E-step KL bound")
    parser.add_argument("--kl-mean-constraint", type=float, default=0.01, help="M-step KL bound of the mean")
    parser.add_argument("--kl-var-constraint", type=float, default=1e-4, help="M-step KL bound of the deviations")
    parser.add_argument("--kl-constraint", type=float, default=0.01, help="M-step KL bound (Discrete actions)")
    parser.add_argument("--mstep-iterations", type=int, default=5, help="multiplier steps per update")
    parser.add_argument("--sample-action-num", type=int, default=16, help="actions sampled per state")
    parser.add_argument("--max-grad-norm", type=float, default=None, help="gradient clipping (default: none)")
    parser.add_argument("--hidden-sizes", type=int, nargs="+", default=[64, 64], help="MLP hidden layers")
    parser.add_argument("--test-every", type=int, default=2000, help="collection rounds between evaluations")
    parser.add_argument("--num-test-episodes", type=int, default=5, help="episodes per evaluation")
    parser.add_argument("--restart-model", default=None, help="continue from this saved model")
    parser.add_argument("--num-env-processes", type=int, default=1, help="environments per collection worker")
    parser.add_argument("--num-col-workers", type=int, default=1, help="collection workers")
    parser.add_argument("--com-col-workers", default="synchronous", help="synchronous or asynchronous")
    parser.add_argument("--num-grad-workers", type=int, default=1, help="gradient workers")
    parser.add_argument("--com-grad-workers", default="synchronous", help="synchronous or asynchronous")
    parser.add_argument("--num-env-steps", type=int, default=10_000, help="environment steps to train for")
    parser.add_argument("--max-time", type=int, default=-1, help="stop after this many seconds (-1: no limit)")
    parser.add_argument("--log-interval", type=int, default=1000, help="updates between progress lines")
    parser.add_argument("--save-interval", type=int, default=5000, help="updates between saved models")
    parser.add_argument("--log-dir", default="/tmp/pytorchrl_mpo_pendulum", help="directory of the run")
    args = parser.parse_args(argv)
    args.log_dir = os.path.expanduser(args.log_dir)
    return args


if __name__ == "__main__":
    sys.exit(main())
