"""One run of a zoo row by rl-baselines3-zoo itself (rl-zoo3 and Stable-Baselines3, in the
peers' venv made by benchmarks/setup_peers.sh): ``python -m rl_zoo3.train`` with the zoo's
hyperparameters for the row's algorithm and environment and one seed, then the final model
evaluated deterministically, as ``worker.py`` evaluates ours; writes ``result.json`` and the
training episodes (``monitor/train_monitor_sb3.csv``, the curve) into the run directory.
The reference the published figure (one run) cannot give: the zoo's own spread over seeds
on this machine.

    benchmarks/.venv-peers/bin/python benchmarks/zoo/worker_rlzoo.py ALGO ENV_ID SEED RUN_DIR EPISODES [STEPS]
        [--hyperparams KEY:VALUE ...]

STEPS overrides the zoo's n_timesteps (a smoke run; 0 keeps them); ``--hyperparams`` goes
to ``rl_zoo3.train`` (e.g. ``use_sde:False``: the zoo's run without gSDE).
"""

import glob
import json
import os
import subprocess
import sys
import time


def main(argv):
    extra_hp = []
    if "--hyperparams" in argv:
        extra_hp = ["--hyperparams", *argv[argv.index("--hyperparams") + 1:]]
        argv = argv[:argv.index("--hyperparams")]
    algo, env_id, seed, run_dir, episodes = argv[0], argv[1], int(argv[2]), argv[3], int(argv[4])
    steps = ["-n", argv[5]] if len(argv) > 5 and int(argv[5]) > 0 else []
    import numpy as np
    import rl_zoo3
    from rl_zoo3 import ALGOS
    from rl_zoo3.utils import create_test_env, get_saved_hyperparams

    os.makedirs(run_dir, exist_ok=True)
    folder = os.path.join(run_dir, "rl_zoo3")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rl_zoo3.train", "--algo", algo, "--env", env_id, "--seed", str(seed),
                    "-f", folder, "--num-threads", "1", "--eval-freq", "-1", "--log-interval", "-1",
                    "--verbose", "0", "--device", "cpu", *steps, *extra_hp], check=True)
    train_seconds = time.perf_counter() - start
    exp = sorted(glob.glob(os.path.join(folder, algo, f"{env_id}_*")))[-1]
    stats_path = os.path.join(exp, env_id)
    hyperparams, stats_path = get_saved_hyperparams(stats_path, norm_reward=False, test_mode=True)
    env = create_test_env(env_id, n_envs=1, stats_path=stats_path, seed=10_000 + seed, should_render=False,
                          hyperparams=hyperparams)
    model = ALGOS[algo].load(os.path.join(exp, f"{env_id}.zip"), env=env, device="cpu")
    returns = []
    obs = env.reset()
    total = 0.0
    while len(returns) < episodes:
        action, _ = model.predict(obs, deterministic=True)
        obs, reward, done, _ = env.step(action)
        total += float(reward[0])
        if done[0]:
            returns.append(total)
            total = 0.0
    env.close()
    # The training episodes, as our monitor files hold them (r, l, t), for the curve.
    episodes_rows = []
    for path in glob.glob(os.path.join(exp, "*.monitor.csv")):
        with open(path) as f:
            lines = [ln for ln in f.read().splitlines()[2:] if ln]
        episodes_rows += [ln.split(",")[:3] for ln in lines]
    episodes_rows.sort(key=lambda r: float(r[2]))
    os.makedirs(os.path.join(run_dir, "monitor"), exist_ok=True)
    with open(os.path.join(run_dir, "monitor", "train_monitor_sb3.csv"), "w") as f:
        f.write("r,l,t\n" + "".join(",".join(r) + "\n" for r in episodes_rows))
    env_steps = sum(int(r[1]) for r in episodes_rows)
    n_timesteps = int(steps[1]) if steps else int(float(hyperparams.get("n_timesteps", env_steps)))
    result = {"seed": seed, "system": f"rl-zoo3 {rl_zoo3.__version__}", "env_steps": n_timesteps,
              "hyperparams": extra_hp[1:],
              "train_seconds": round(train_seconds, 2), "steps_per_s": n_timesteps / train_seconds,
              "final": float(np.mean(returns)), "final_std": float(np.std(returns)), "eval_episodes": episodes,
              "train_return": float(np.mean([float(r[0]) for r in episodes_rows[-20:]])) if episodes_rows else None}
    with open(os.path.join(run_dir, "result.json.tmp"), "w") as f:
        json.dump(result, f)
    os.replace(os.path.join(run_dir, "result.json.tmp"), os.path.join(run_dir, "result.json"))
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
