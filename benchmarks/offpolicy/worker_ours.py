"""Benchmark worker: pytorchrl DDQN on CartPole-v1, SAC on Pendulum-v1 or HalfCheetah-v5 with rl-zoo's hyperparameters.

Run by offpolicy/run.py with the interpreter where pytorchrl is installed. Uses the public
Python API only (VecEnv, DDQN/SAC, OffPolicyActor, ReplayBuffer, Scheme, Learner, Schedule);
one collector in the learner's process, no test environments during training. Prints ONE
JSON line (the last line of stdout) with the same fields as worker_sb3.py.

``PYTORCHRL_UPDATE_THREADS=1`` in the environment keeps the numpy update on one thread (the
orchestrator's "ours-1t" system); the record states the threads used (``update_threads``).

Usage: python worker_ours.py --algo {dqn,sac,sac-mujoco} [--steps N] [--seed 0] [--eval-episodes 10]
                                [--learning-starts N] [--precision {fp32,bf16}]
"""

import time

T_START = time.perf_counter()

import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # benchmarks/: workerlib
from workerlib import common as W  # noqa: E402
from workerlib.memsampler import PeakRSS  # noqa: E402
from workerlib.ours import greedy_returns_of  # noqa: E402

HYPERPARAMETERS = W.OFFPOLICY_HYPERPARAMETERS   # the same as worker_sb3.py's


def build(algo, seed, steps, hp, precision="fp32"):
    """The Learner of ``algo`` ("dqn", "sac" or "sac-mujoco") for ``steps`` env steps with the
    hyperparameters ``hp`` (``W.offpolicy_hyperparameters``: the zoo's) and the actor's
    ``precision`` ("fp32" or "bf16")."""
    from pytorchrl.agent.actors import OffPolicyActor
    from pytorchrl.agent.algorithms import DDQN, SAC
    from pytorchrl.agent.env import VecEnv
    from pytorchrl.agent.storages import ReplayBuffer
    from pytorchrl.envs import make_gym_env
    from pytorchrl.learner import Learner
    from pytorchrl.schedules import Schedule
    from pytorchrl.scheme import Scheme

    train_envs, action_space, obs_space = VecEnv.create_factory(
        env_fn=make_gym_env, env_kwargs={"env_id": hp["env_id"]}, vec_env_size=1, seed=seed)
    schedules = []
    if algo == "dqn":
        algo_factory, name = DDQN.create_factory(
            lr=hp["lr"], eps=hp["adam_eps"], gamma=hp["gamma"], polyak=0.0, num_updates=hp["gradient_steps"],
            update_every=hp["train_freq"], start_steps=hp["learning_starts"], mini_batch_size=hp["batch_size"],
            target_update_interval=hp["target_update_interval_updates"], max_grad_norm=hp["max_grad_norm"],
            initial_epsilon=hp["exploration_initial_eps"], epsilon_decay=1.0,
            min_epsilon=hp["exploration_final_eps"], loss="huber", double_q=False)   # SB3's DQN targets
        # SB3: linear from 1.0 to 0.04 over the first exploration_fraction of the run's steps.
        schedules.append(Schedule("initial_epsilon", kind="linear", start=hp["exploration_initial_eps"],
                                  end=hp["exploration_final_eps"],
                                  end_step=int(round(hp["exploration_fraction"] * steps))))
    else:
        algo_factory, name = SAC.create_factory(
            lr_q=hp["lr"], lr_pi=hp["lr"], lr_alpha=hp["lr"], gamma=hp["gamma"], polyak=1.0 - hp["tau"],
            num_updates=hp["gradient_steps"], update_every=hp["train_freq"], start_steps=hp["learning_starts"],
            mini_batch_size=hp["batch_size"], target_update_interval=1, initial_alpha=1.0,
            max_grad_norm=None)   # SB3's SAC clips no gradient
    actor_factory = OffPolicyActor.create_factory(obs_space, action_space, name,
                                                  common_feature_extractor_kwargs={"hidden_sizes": hp["net"]},
                                                  num_critics=hp.get("n_critics", 2), precision=precision)
    scheme = Scheme(algo_factory=algo_factory, actor_factory=actor_factory,
                    storage_factory=ReplayBuffer.create_factory(size=hp["buffer_size"]),
                    train_envs_factory=train_envs, num_col_workers=1, num_grad_workers=1)
    return Learner(scheme, target_steps=steps, schedules=schedules)


def main():
    args = W.parse_cartpole_args(__doc__, algos=HYPERPARAMETERS, ours=True)

    with PeakRSS() as mem:
        import gymnasium as gym
        import numpy as np
        import torch

        import pytorchrl
        from pytorchrl.agent.accel.threads import update_threads
        t_imported = time.perf_counter()

        torch.manual_seed(args.seed)
        np.random.seed(args.seed)
        hp = W.offpolicy_hyperparameters(args)
        learner = build(args.algo, args.seed, args.steps, hp, args.precision)
        algo = learner.update_worker.local_worker.algo
        t_built = time.perf_counter()

        # ------------------------------------------------------------ training (timed)
        t0 = time.perf_counter()
        c0 = time.process_time()
        solve = W.SolveTracker(t0, **W.OFFPOLICY_SOLVE[args.algo])
        while not learner.done():
            for info in learner.step():
                solve.add(ret for ret, _length in info.get("episodes", ()))
            solve.check(learner.num_samples_collected)   # acts on a collection round's episodes only
        # The round that reached the budget granted a stage of updates: SB3 trains on its last
        # rollout too, so the updates already granted are done (Learner.step collects only
        # when none is left), and both sides do the same number (DQN: 24,704 in 50k steps).
        storage = learner.update_worker.local_worker.storage
        while storage.ready():
            learner.step()
        t1 = time.perf_counter()
        c1 = time.process_time()
        steps = int(learner.num_samples_collected)

        # ---------------------------------------------- greedy evaluation (timed apart)
        with torch.inference_mode():
            returns = greedy_returns_of(learner.update_worker.local_worker.actor, args.eval_episodes,
                                        hp["env_id"])
        t_eval = time.perf_counter()
        engine = getattr(algo, "update_engine", None)
        phases = {k.split("/", 1)[1]: round(v, 3) for k, v in learner.get_metrics(
            add_algo_metrics=False, add_episodes_metrics=False, add_scheme_metrics=False,
            add_time_metrics=True).items() if k.startswith("Time/") and k.endswith("_time")}
        learner.stop()

    res = {
        "system": "ours", "algo": args.algo, "framework_version": pytorchrl.__version__, "seed": args.seed,
        "precision": args.precision,
        **W.cartpole_run_fields(args.steps, steps, start=T_START, imported=t_imported, built=t_built,
                                train=(t0, t1), cpu=(c0, c1), eval_end=t_eval, solve=(solve.steps, solve.seconds),
                                train_returns=list(solve.returns), eval_returns=returns,
                                checked="after every collection round", **W.OFFPOLICY_SOLVE[args.algo]),
        **mem.report(),
        "episodes": solve.episodes, "updates": int(algo.updates_applied), "learner_phase_s": phases,
        "numpy_update": engine is not None, "update_engine": type(engine).__name__ if engine is not None else None,
        "update_threads": getattr(engine, "threads", 1) if engine is not None else None,
        "update_threads_env": os.environ.get("PYTORCHRL_UPDATE_THREADS"), "update_threads_default": update_threads(),
        "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "gymnasium": gym.__version__,
        "python": platform.python_version(), "hyperparameters": hp,
        "pytorchrl_path": os.path.dirname(pytorchrl.__file__),
    }
    if args.algo == "dqn":
        res["final_epsilon"] = round(float(algo.epsilon), 4)
        res["double_q"] = algo.double_q
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
