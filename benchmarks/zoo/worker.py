"""One run of a zoo row: train a configuration with one seed (``pytorchrl train``, in this
process), then evaluate the saved model deterministically (``pytorchrl evaluate``), and
write ``result.json`` into the run directory. Run by ``run.py`` with the code under test
first on ``PYTHONPATH``.

    python benchmarks/zoo/worker.py CONFIG SEED RUN_DIR EPISODES [--prepare HOOK] [key=value ...]
    python benchmarks/zoo/worker.py CONFIG SEED RUN_DIR games [key=value ...]
    python benchmarks/zoo/worker.py --measure HOOK SEED RUN_DIR [--quick]

With ``games`` for EPISODES the score is the mean of the last 100 real games of training
(the episode logs' ``game_return``: Atari, where an episode is one life), not an evaluation.
A hook is ``FILE:FUNCTION``, FILE relative to benchmarks/: ``--prepare`` calls
``FUNCTION(run_dir, seed)`` before training, which returns more ``key=value`` overrides (a
row's demonstrations recorded first); ``--measure`` calls ``FUNCTION(seed, run_dir, quick)``
instead of training, which returns the result's fields (a row whose score is not a return).
"""

import csv
import glob
import importlib.util
import json
import os
import sys
import time

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def hook(spec):
    """The function ``FILE:FUNCTION`` names (FILE relative to benchmarks/)."""
    path, _, name = spec.partition(":")
    if BENCH not in sys.path:
        sys.path.insert(0, BENCH)
    module_spec = importlib.util.spec_from_file_location("zoo_hook_" + path.replace("/", "_")[:-3],
                                                         os.path.join(BENCH, path))
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, name)


def last_games(run_dir, n=100):
    """Scores of the last ``n`` real games of a run's training (episode-log rows whose
    ``game_return`` is set), oldest first."""
    rows = []
    for path in glob.glob(os.path.join(run_dir, "monitor", "train_monitor_*.csv")):
        with open(path, newline="") as f:
            rows += [r for r in csv.DictReader(f) if r.get("game_return") not in (None, "")]
    return [float(r["game_return"]) for r in sorted(rows, key=lambda r: float(r["t"]))][-n:]


def write_result(run_dir, result):
    """``result.json`` in ``run_dir``, written whole or not at all."""
    with open(os.path.join(run_dir, "result.json.tmp"), "w") as f:
        json.dump(result, f)
    os.replace(os.path.join(run_dir, "result.json.tmp"), os.path.join(run_dir, "result.json"))
    print(json.dumps(result))


def measure(argv):
    spec, seed, run_dir, quick = argv[0], int(argv[1]), argv[2], "--quick" in argv[3:]
    import pytorchrl
    os.makedirs(run_dir, exist_ok=True)
    start = time.perf_counter()
    result = {"seed": seed, **hook(spec)(seed, run_dir, quick)}
    result.setdefault("train_seconds", round(time.perf_counter() - start, 2))
    result["pytorchrl"] = os.path.dirname(pytorchrl.__file__)
    write_result(run_dir, result)


def main(argv):
    if argv[0] == "--measure":
        return measure(argv[1:])
    config, seed, run_dir, overrides = argv[0], int(argv[1]), argv[2], argv[4:]
    games = argv[3] == "games"
    episodes = 0 if games else int(argv[3])
    import pytorchrl
    from pytorchrl import cli
    from pytorchrl.tools.evaluate import evaluate_run
    import yaml

    if overrides[:1] == ["--prepare"]:
        os.makedirs(run_dir, exist_ok=True)
        overrides = overrides[2:] + list(hook(overrides[1])(run_dir, seed))
    start = time.perf_counter()
    code = cli.main(["train", config, f"seed={seed}", "--run-dir", run_dir, "learner.tensorboard=false",
                     "learner.log_every=60", *overrides])
    train_wall = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"pytorchrl train exited with {code}")
    with open(os.path.join(run_dir, "summary.yaml")) as f:
        summary = yaml.safe_load(f)
    evaluation = evaluate_run(run_dir, episodes=episodes, seed=10_000 + seed) if episodes else None
    scores = last_games(run_dir) if games else None
    result = {"seed": seed, "env_steps": summary["env_steps"], "train_seconds": summary["seconds"],
              "wall_seconds": round(train_wall, 2),
              "steps_per_s": summary["env_steps"] / summary["seconds"] if summary["seconds"] else None,
              "train_return": summary.get("train_return"),
              "final": (sum(scores) / len(scores) if scores else float("nan")) if games else
              (evaluation["mean"] if evaluation else summary.get("test_return")),
              "final_std": evaluation["std"] if evaluation else None, "games": len(scores) if games else None,
              "eval_episodes": episodes, "pytorchrl": os.path.dirname(pytorchrl.__file__)}
    write_result(run_dir, result)


if __name__ == "__main__":
    main(sys.argv[1:])
