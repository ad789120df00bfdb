"""Benchmark worker: Stable-Baselines3's SAC with HerReplayBuffer on a goal task (FetchReach-v4 or PointReach-v0).

The same hyperparameters as worker_ours.py (common.HYPERPARAMETERS), MultiInputPolicy, one
environment. Every ``--eval-every`` env steps the greedy success rate is measured on fresh
environments (time not counted as training). Prints ONE JSON line (the last line of stdout).

Usage: python worker_sb3.py --task {fetch-reach,point-reach} [--steps N] [--seed 0] [--no-her]
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402


def main():
    args = C.parse_args(__doc__)
    import stable_baselines3
    from stable_baselines3 import SAC, HerReplayBuffer
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv

    hp = dict(C.HYPERPARAMETERS)
    env = make_vec_env(lambda: C.make_env(args.env_id), n_envs=1, seed=args.seed, vec_env_cls=DummyVecEnv)
    her = {} if args.no_her else dict(replay_buffer_class=HerReplayBuffer, replay_buffer_kwargs=dict(
        n_sampled_goal=hp["n_sampled_goal"], goal_selection_strategy=hp["goal_selection_strategy"]))
    model = SAC("MultiInputPolicy", env, learning_rate=hp["lr"], buffer_size=hp["buffer_size"],
                batch_size=hp["batch_size"], gamma=hp["gamma"], tau=hp["tau"], learning_starts=hp["learning_starts"],
                train_freq=hp["train_freq"], gradient_steps=hp["gradient_steps"], ent_coef="auto",
                policy_kwargs=dict(net_arch=hp["net"], n_critics=hp["n_critics"]), seed=args.seed, device="cpu",
                verbose=0, **her)
    clock, curve = C.Clock(), []

    def act(obs):
        return model.predict(obs, deterministic=True)[0]

    class Evaluate(BaseCallback):
        def _on_step(self):
            if self.num_timesteps % args.eval_every == 0:
                curve.append(C.evaluation(clock, int(self.num_timesteps), act, args))
            return True

    c0 = time.process_time()
    clock.__init__()
    model.learn(total_timesteps=args.steps, callback=Evaluate())
    wall, cpu = clock.training_s(), time.process_time() - c0
    steps = int(model.num_timesteps)
    print(json.dumps({"system": "sb3" + ("-noher" if args.no_her else ""), "task": args.task, "seed": args.seed,
                      "framework_version": stable_baselines3.__version__, "env_steps": steps,
                      "updates": int(model._n_updates), "learn_wall_s": round(wall, 2),
                      "env_steps_per_s": round(steps / wall, 1), "learn_cpu_s_incl_eval": round(cpu, 2),
                      "curve": curve, "final_success": curve[-1][1] if curve else None, "hyperparameters": hp}),
          flush=True)


if __name__ == "__main__":
    main()
