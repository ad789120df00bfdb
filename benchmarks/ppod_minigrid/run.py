"""PPO+D against PPO on MiniGrid-DoorKey-5x5: env steps until the task is solved.

DoorKey is sparse: the agent must pick up a key, open a locked door and reach the goal
within 250 steps, for a return of ``1 - 0.9 * steps / 250``; PPO rarely gets there by
chance. Five demonstrations are recorded with ``pytorchrl record-demos --human``, the keys
typed by a script: a breadth-first search over copies of the environment finds the
shortest action sequence of the episode the recorder will play (the same seed), and it is
fed on the recorder's stdin. Then, per seed, PPO (``storage.name: GAEBuffer``) and PPO+D
(``storage.name: ppod`` reading the five demonstrations) train with the same configuration
(examples/configs/ppod_minigrid_doorkey.yaml) for ``--steps`` env steps. The figure is the
env steps at which the mean return of the last 20 training episodes (real episodes only:
replayed demonstrations are not episodes) first reaches ``--solved`` (0.8 by default), and
that mean at the end.

Needs the minigrid extra (installed with the test extras).

    python benchmarks/ppod_minigrid/run.py                 # 3 seeds, 100k steps per run
    python benchmarks/ppod_minigrid/run.py --quick         # 1 seed, 20k steps
"""

import argparse
import collections
import copy
import io
import os
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(BENCH)
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

from harness.report import md_table  # noqa: E402

from pytorchrl.config import build_learner, validate_config  # noqa: E402
from pytorchrl.config.loader import load_yaml  # noqa: E402
from pytorchrl.tools.evaluate import build_env  # noqa: E402
from pytorchrl.tools.record_demos import record_demos, recording_config  # noqa: E402

CONFIG = os.path.join(REPO, "examples", "configs", "ppod_minigrid_doorkey.yaml")
#: MiniGrid's actions the search tries (drop and done never help in DoorKey).
ACTIONS = (0, 1, 2, 3, 5)


def shortest_solution(env, seed):
    """The shortest action sequence that reaches the goal in the episode ``env.reset(seed=seed)``
    starts: breadth-first search over deep copies of the MiniGrid environment."""
    env.reset(seed=seed)
    root = copy.deepcopy(env.unwrapped)

    def state(u):
        doors = tuple((c.is_open, c.is_locked) for c in u.grid.grid if c is not None and c.type == "door")
        return tuple(u.agent_pos), u.agent_dir, u.carrying.type if u.carrying else None, doors

    queue, seen = collections.deque([(root, [])]), {state(root)}
    while queue:
        u, actions = queue.popleft()
        for a in ACTIONS:
            v = copy.deepcopy(u)
            _, reward, terminated, truncated, _ = v.step(a)
            if terminated and reward > 0:
                return actions + [a]
            if not (terminated or truncated) and state(v) not in seen:
                seen.add(state(v))
                queue.append((v, actions + [a]))
    raise RuntimeError(f"no solution found for seed {seed}")


def record_scripted_demos(config_path, out_dir, seeds, in_process=False):
    """One demonstration per seed of ``seeds`` into ``out_dir``, each recorded by
    ``pytorchrl record-demos --human`` with the shortest solution typed on its stdin
    (``in_process``: by the function behind it, ``record_demos``, in this process, the keys
    read from a string)."""
    env = build_env(recording_config(config_path))
    try:
        for seed in seeds:
            keys = "".join(f"{a}\n" for a in shortest_solution(env, seed))
            if in_process:
                record_demos(config_path, out_dir, demos=1, human=True, seed=seed, min_return=0.5,
                             stdin=io.StringIO(keys), stdout=io.StringIO())
                continue
            subprocess.run([sys.executable, "-m", "pytorchrl.cli", "record-demos", config_path, out_dir, "--human",
                            "--demos", "1", "--seed", str(seed), "--min-return", "0.5"],
                           input=keys, text=True, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env=dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])))
    finally:
        env.close()


def storages(demos_dir):
    """``(PPO's storage section, PPO+D's)``: the example's ``ppod`` section reading
    ``demos_dir``, and a ``GAEBuffer`` of the same size and lambda."""
    ppod = {**load_yaml(CONFIG)["storage"], "initial_human_demos_dir": demos_dir}
    return {"name": "GAEBuffer", "size": ppod["size"], "gae_lambda": ppod["gae_lambda"]}, ppod


def run_config(seed, steps, storage):
    """The example's configuration with this ``seed``, budget and ``storage`` section,
    quiet (no logs, monitor files, test environments or final evaluation)."""
    raw = load_yaml(CONFIG)
    raw.update(seed=seed, storage=storage)
    raw["env"].update(monitor=False, test_env=False)
    raw["learner"] = {"target_steps": steps, "log_every": 1000, "tensorboard": False, "final_eval": False}
    return validate_config(raw)


def train(config, solved, stop_when_solved=False):
    """Train one configuration; returns (env steps when the mean training return first
    reached ``solved`` or None, the mean at the end, seconds); ``stop_when_solved`` ends
    the run there."""
    learner = build_learner(config)
    t0, first = time.perf_counter(), None
    try:
        while not learner.done() and not (stop_when_solved and first is not None):
            learner.step()
            ret = learner.get_metrics(add_episodes_metrics=True).get("Episodes/TrainReward")
            if first is None and ret is not None and ret == ret and ret >= solved:
                first = learner.num_samples_collected
        return first, ret, time.perf_counter() - t0
    finally:
        learner.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3, help="training seeds 0 .. N-1")
    ap.add_argument("--steps", type=int, default=100_000, help="env steps of each training run")
    ap.add_argument("--demos", type=int, default=5, help="recorded demonstrations (layouts of seeds 100 ..)")
    ap.add_argument("--solved", type=float, default=0.8, help="mean training return that counts as solved")
    ap.add_argument("--quick", action="store_true", help="1 seed, 20k steps")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.steps = 1, 20_000
    import torch
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        demos = os.path.join(tmp, "demos")
        t0 = time.perf_counter()
        record_scripted_demos(CONFIG, demos, range(100, 100 + args.demos))
        print(f"recorded {len(os.listdir(demos))} demonstrations in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        gae, ppod = storages(demos)
        for seed in range(args.seeds):
            for name, storage in (("PPO", gae), ("PPO+D", ppod)):
                first, final, seconds = train(run_config(seed, args.steps, storage), args.solved)
                rows.append([seed, name, f"{first:,}" if first else f"> {args.steps:,}", f"{final:.3f}",
                             f"{seconds:.0f}"])
                print(f"seed {seed} {name}: solved at {first}, final {final:.3f} ({seconds:.0f} s)", file=sys.stderr)
    print(f"MiniGrid-DoorKey-5x5-v0, {args.steps:,} env steps per run, {args.demos} recorded demonstrations: env steps "
          f"until the mean return of the last 20 training episodes reaches {args.solved}\n")
    print(md_table(["seed", "agent", f"steps to {args.solved}", "final mean return", "seconds"], rows))


def zoo_prepare(run_dir, seed):
    """The zoo row ``ppod_minigrid_doorkey``'s preparation (benchmarks/zoo/worker.py
    ``--prepare``): the five demonstrations recorded in this process into
    ``<run_dir>-demos``; returns the override that makes the run read them."""
    demos = f"{run_dir}-demos"
    if not os.path.isdir(demos) or len(os.listdir(demos)) < 5:
        record_scripted_demos(CONFIG, demos, range(100, 105), in_process=True)
    return [f"storage.initial_human_demos_dir={demos}"]


if __name__ == "__main__":
    main()

