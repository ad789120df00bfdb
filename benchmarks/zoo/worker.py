"""One run of a zoo row: train a configuration with one seed (``pytorchrl train``, in this
process), then evaluate the saved model deterministically (``pytorchrl evaluate``), and
write ``result.json`` into the run directory. Run by ``run.py`` with the code under test
first on ``PYTHONPATH``.

    python benchmarks/zoo/worker.py CONFIG SEED RUN_DIR EPISODES [key=value ...]
"""

import json
import os
import sys
import time


def main(argv):
    config, seed, run_dir, episodes, overrides = argv[0], int(argv[1]), argv[2], int(argv[3]), argv[4:]
    import pytorchrl
    from pytorchrl import cli
    from pytorchrl.tools.evaluate import evaluate_run
    import yaml

    start = time.perf_counter()
    code = cli.main(["train", config, f"seed={seed}", "--run-dir", run_dir, "learner.tensorboard=false",
                     "learner.log_every=60", *overrides])
    train_wall = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"pytorchrl train exited with {code}")
    with open(os.path.join(run_dir, "summary.yaml")) as f:
        summary = yaml.safe_load(f)
    evaluation = evaluate_run(run_dir, episodes=episodes, seed=10_000 + seed) if episodes else None
    result = {"seed": seed, "env_steps": summary["env_steps"], "train_seconds": summary["seconds"],
              "wall_seconds": round(train_wall, 2),
              "steps_per_s": summary["env_steps"] / summary["seconds"] if summary["seconds"] else None,
              "train_return": summary.get("train_return"),
              "final": evaluation["mean"] if evaluation else summary.get("test_return"),
              "final_std": evaluation["std"] if evaluation else None,
              "eval_episodes": episodes, "pytorchrl": os.path.dirname(pytorchrl.__file__)}
    with open(os.path.join(run_dir, "result.json.tmp"), "w") as f:
        json.dump(result, f)
    os.replace(os.path.join(run_dir, "result.json.tmp"), os.path.join(run_dir, "result.json"))
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
