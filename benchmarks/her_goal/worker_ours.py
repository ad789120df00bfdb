"""Benchmark worker: pytorchrl's SAC with HERBuffer on a goal task (FetchReach-v4 or PointReach-v0).

Public Python API only (VecEnv with the task's family, SAC, OffPolicyActor, HERBuffer, Scheme,
Learner); one collector in the learner's process. Every ``--eval-every`` env steps the greedy
success rate is measured on fresh environments (time not counted as training). Prints ONE JSON
line (the last line of stdout) with the same fields as worker_sb3.py.

Usage: python worker_ours.py --task {fetch-reach,point-reach} [--steps N] [--seed 0] [--no-her] [--normalize]

``--normalize``: the actor normalises its observations (``normalize_observations``: running
mean and variance, clipped at 10), as rl-baselines3-zoo's ``normalize: true`` for FetchReach.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402


def build(args, hp):
    from pytorchrl.agent.actors import OffPolicyActor
    from pytorchrl.agent.algorithms import SAC
    from pytorchrl.agent.env import VecEnv
    from pytorchrl.agent.storages import HERBuffer, ReplayBuffer
    from pytorchrl.envs.families import ENV_FAMILIES
    from pytorchrl.learner import Learner
    from pytorchrl.scheme import Scheme

    family = ENV_FAMILIES[args.family]
    family.ids()   # registers the family's ids
    train, action_space, obs_space = VecEnv.create_factory(family.train_factory, {"env_id": args.env_id},
                                                           vec_env_size=1, seed=args.seed)
    algo_factory, name = SAC.create_factory(
        lr_q=hp["lr"], lr_pi=hp["lr"], lr_alpha=hp["lr"], gamma=hp["gamma"], polyak=1.0 - hp["tau"],
        num_updates=hp["gradient_steps"], update_every=hp["train_freq"], start_steps=hp["learning_starts"],
        mini_batch_size=hp["batch_size"], initial_alpha=1.0, max_grad_norm=None)   # SB3's SAC clips none
    actor_factory = OffPolicyActor.create_factory(obs_space, action_space, name,
                                                  common_feature_extractor_kwargs={"hidden_sizes": hp["net"]},
                                                  num_critics=hp["n_critics"],
                                                  normalize_observations=args.normalize)
    her_size = (hp["n_sampled_goal"] + 1) * hp["buffer_size"]    # the relabelled copies are stored
    storage = (ReplayBuffer.create_factory(size=hp["buffer_size"]) if args.no_her else
               HERBuffer.create_factory(size=her_size, strategy=hp["goal_selection_strategy"],
                                        n_sampled_goal=hp["n_sampled_goal"]))
    scheme = Scheme(algo_factory=algo_factory, actor_factory=actor_factory, storage_factory=storage,
                    train_envs_factory=train)
    return Learner(scheme, target_steps=args.steps), obs_space


def main():
    args = C.parse_args(__doc__, extra=lambda ap: ap.add_argument(
        "--normalize", action="store_true", help="normalise the observations (running mean and variance)"))
    import numpy as np
    import torch

    import pytorchrl
    torch.manual_seed(args.seed)
    hp = dict(C.HYPERPARAMETERS)
    learner, obs_space = build(args, hp)
    actor = learner.update_worker.local_worker.actor
    packing = obs_space.packing

    def act(obs):
        with torch.inference_mode():
            return np.asarray(actor.act(packing.pack(obs)[None], deterministic=True)[0])[0]

    clock, curve, next_eval = C.Clock(), [], args.eval_every
    c0 = time.process_time()
    while not learner.done():
        learner.step()
        if learner.num_samples_collected >= next_eval:
            curve.append(C.evaluation(clock, int(learner.num_samples_collected), act, args))
            while next_eval <= learner.num_samples_collected:
                next_eval += args.eval_every
    wall, cpu = clock.training_s(), time.process_time() - c0
    steps = int(learner.num_samples_collected)
    updates = int(learner.update_worker.local_worker.algo.updates_applied)
    learner.stop()
    system = "ours" + ("-noher" if args.no_her else "") + ("-norm" if args.normalize else "")
    print(json.dumps({"system": system, "task": args.task, "seed": args.seed,
                      "framework_version": pytorchrl.__version__, "env_steps": steps, "updates": updates,
                      "learn_wall_s": round(wall, 2), "env_steps_per_s": round(steps / wall, 1),
                      "learn_cpu_s_incl_eval": round(cpu, 2), "curve": curve,
                      "final_success": curve[-1][1] if curve else None, "hyperparameters": hp}), flush=True)


if __name__ == "__main__":
    main()
