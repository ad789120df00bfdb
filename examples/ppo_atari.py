#!/usr/bin/env python3
"""PPO on Atari, written like pytorchrl's own Atari PPO training script.

pytorchrl's code_examples/train_atari/ppo/train.py with its conf.yaml (Pong) as the
defaults: ``atari_train_env_factory`` environments (4 stacked 84x84 frames), PPO, an
``OnPolicyActor`` with its default feature extractor for images (the Nature-DQN CNN),
``GAEBuffer`` rollouts, a ``Scheme`` and a ``Learner`` loop in which the learning rate and
the clipping range decay linearly to 0 by hot-swapping them. What differs from the
original:

- the workers' resource requests ask for no GPU (``num_gpus: 0``), so that it runs on a
  CPU machine, and ``--num-env-steps`` (the budget) can be small for a smoke run;
- Ray is started by the Scheme when a level has several workers (``--cluster`` joins a
  running cluster, as before), not unconditionally;
- the annealing fraction follows the environment steps collected (the original's update
  counter never advanced, so its rates stayed constant), and the run ends with
  ``learner.stop()`` and a saved model;
- ``--nn``, ``--recurrent-policy``, ``--episodic-life``, ``--clip-rewards`` and
  ``--max-episode-steps`` (which bounds the test games of a smoke run) act (the
  original accepted and ignored the first two); ``--frame-skip`` is gone: the Atari
  factory always skips 4 frames.

The same agent from a configuration file: ``pytorchrl train examples/configs/ppo_atari.yaml``.

    python examples/ppo_atari.py                                  # Pong, 10M steps
    python examples/ppo_atari.py --env-id BreakoutNoFrameskip-v4
    python examples/ppo_atari.py --num-env-steps 256 --num-env-processes 2 --num-steps 32 \
        --max-episode-steps 100 --log-dir /tmp/atari_smoke                         # smoke run, seconds
"""

import argparse
import os
import time

import ray

from pytorchrl.agent.actors import OnPolicyActor, get_feature_extractor
from pytorchrl.agent.algorithms import PPO
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import GAEBuffer
from pytorchrl.envs import atari_test_env_factory, atari_train_env_factory
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme
from pytorchrl.utils import LoadFromFile, cleanup_log_dir, save_argparse


def main(argv=None):
    args = get_args(argv)
    cleanup_log_dir(args.log_dir)
    save_argparse(args, os.path.join(args.log_dir, "conf.yaml"), ["conf"])

    if args.cluster:
        ray.init(address="auto")
        print(", ".join(f"{k} {v}" for k, v in ray.cluster_resources().items()), flush=True)

    # 1. Training environments: the real game score is recorded in the episode logs.
    env_kwargs = {"env_id": args.env_id, "frame_stack": args.frame_stack, "max_episode_steps": args.max_episode_steps}
    train_envs_factory, action_space, obs_space = VecEnv.create_factory(
        env_fn=atari_train_env_factory,
        env_kwargs={**env_kwargs, "episodic_life": args.episodic_life, "clip_rewards": args.clip_rewards},
        vec_env_size=args.num_env_processes, log_dir=os.path.join(args.log_dir, "monitor"),
        info_keywords=("game_return", "game_length", "lives"))

    # 2. Test environments (whole games, unclipped rewards).
    test_envs_factory, _, _ = VecEnv.create_factory(
        env_fn=atari_test_env_factory, env_kwargs=env_kwargs, vec_env_size=args.num_env_processes)

    # 3. Algorithm.
    algo_factory, algo_name = PPO.create_factory(
        lr=args.lr, num_epochs=args.ppo_epoch, clip_param=args.clip_param, entropy_coef=args.entropy_coef,
        value_loss_coef=args.value_loss_coef, max_grad_norm=args.max_grad_norm,
        num_mini_batch=args.num_mini_batch, use_clipped_value_loss=args.use_clipped_value_loss,
        gamma=args.gamma)

    # 4. Policy: with the CNN (the default for these image observations) or the extractor --nn names.
    actor_factory = OnPolicyActor.create_factory(
        obs_space, action_space, algo_name, restart_model=args.restart_model,
        feature_extractor_network=get_feature_extractor(args.nn),
        recurrent_net="GRU" if args.recurrent_policy else None)

    # 5. Rollout storage.
    storage_factory = GAEBuffer.create_factory(size=args.num_steps, gae_lambda=args.gae_lambda)

    # 6. Scheme. The original asks for half a GPU per worker; here for none.
    scheme = Scheme(
        algo_factory=algo_factory, actor_factory=actor_factory, storage_factory=storage_factory,
        train_envs_factory=train_envs_factory, test_envs_factory=test_envs_factory,
        num_col_workers=args.num_col_workers, col_workers_communication=args.com_col_workers,
        col_workers_resources={"num_cpus": 1, "num_gpus": 0},
        num_grad_workers=args.num_grad_workers, grad_workers_communication=args.com_grad_workers,
        grad_workers_resources={"num_cpus": 1.0, "num_gpus": 0})

    # 7. Learner.
    learner = Learner(scheme, target_steps=args.num_env_steps, log_dir=args.log_dir)

    # 8. Training loop.
    iterations = 0
    start_time = time.time()
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
            # Hot-swap: lr and clip_param decay linearly to 0 over the budget.
            alpha = max(0.0, 1.0 - learner.num_samples_collected / args.num_env_steps)
            learner.update_algorithm_parameter("lr", alpha * args.lr)
            learner.update_algorithm_parameter("clip_param", alpha * args.clip_param)
        print(f"model saved to {learner.save_model()}")
        print("Finished!")
    finally:
        learner.stop()


def get_args(argv=None):
    parser = argparse.ArgumentParser(description="PPO on Atari (pytorchrl's Atari PPO training script)")

    # Configuration file, keep first: arguments given after it win.
    parser.add_argument("--conf", "-c", type=open, action=LoadFromFile,
                        help="YAML file of argument values (keys: the argument names with underscores)")

    # Environment specs
    parser.add_argument("--env-id", type=str, default="PongNoFrameskip-v4", help="Atari game id")
    parser.add_argument("--frame-stack", type=int, default=4, help="frames stacked in an observation")
    parser.add_argument("--episodic-life", action=argparse.BooleanOptionalAction, default=True,
                        help="end a training episode at every life lost")
    parser.add_argument("--max-episode-steps", type=int, default=4500,
                        help="truncate a game after this many agent steps (0: no limit)")
    parser.add_argument("--clip-rewards", action=argparse.BooleanOptionalAction, default=False,
                        help="clip training rewards to their sign")

    # PPO specs
    parser.add_argument("--lr", type=float, default=2.5e-4, help="learning rate at the start")
    parser.add_argument("--gamma", type=float, default=0.99, help="discount factor")
    parser.add_argument("--gae-lambda", type=float, default=0.95, help="GAE lambda")
    parser.add_argument("--entropy-coef", type=float, default=0.01, help="entropy term coefficient")
    parser.add_argument("--value-loss-coef", type=float, default=1.0, help="value loss coefficient")
    parser.add_argument("--max-grad-norm", type=float, default=0.5, help="max norm of gradients")
    parser.add_argument("--use_clipped_value_loss", action="store_true", default=False, help="clip value loss")
    parser.add_argument("--num-steps", type=int, default=128, help="rollout steps per environment")
    parser.add_argument("--ppo-epoch", type=int, default=3, help="PPO epochs per rollout")
    parser.add_argument("--num-mini-batch", type=int, default=4, help="mini-batches per epoch")
    parser.add_argument("--clip-param", type=float, default=0.1, help="PPO clip parameter at the start")

    # Feature extractor model specs
    parser.add_argument("--nn", default="CNN", help="feature extractor: MLP, CNN or Fixup")
    parser.add_argument("--restart-model", default=None, help="start from the weights of this saved model")
    parser.add_argument("--recurrent-policy", action="store_true", default=False,
                        help="a GRU after the feature extractor")

    # Scheme specs
    parser.add_argument("--num-env-processes", type=int, default=8, help="environments per collection worker")
    parser.add_argument("--num-grad-workers", type=int, default=1, help="gradient workers")
    parser.add_argument("--com-grad-workers", default="synchronous", help="synchronous or asynchronous")
    parser.add_argument("--num-col-workers", type=int, default=1, help="collection workers per gradient worker")
    parser.add_argument("--com-col-workers", default="synchronous", help="synchronous or asynchronous")
    parser.add_argument("--cluster", action="store_true", default=False, help="join a running Ray cluster")

    # General training specs
    parser.add_argument("--num-env-steps", type=int, default=10_000_000, help="environment steps to train for")
    parser.add_argument("--max-time", type=int, default=-1, help="stop after this many seconds (-1: no limit)")
    parser.add_argument("--log-interval", type=int, default=1, help="print progress every this many updates")
    parser.add_argument("--save-interval", type=int, default=100, help="save the model every this many updates")
    parser.add_argument("--log-dir", default="/tmp/atari_ppo", help="directory of the logs and the model "
                                                                     "(emptied first)")

    args = parser.parse_args(argv)
    args.log_dir = os.path.expanduser(args.log_dir)
    return args


if __name__ == "__main__":
    main()
