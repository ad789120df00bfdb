"""AttractionKL or RepulsionKL on CartPole: the KL to a saved policy after training PPO with
and without the add-on.

For each seed a behaviour policy is saved as a run saves its model (``model.state_dict``): an
actor of the run's actor section, drawn at random and made decisive and biased to the left
(far from the near-uniform policy PPO starts from and from what it learns). PPO then trains twice from scratch with that seed, through the configuration
layer (``algorithm.policy_loss_addons``), once with ``AttractionKL`` towards the saved
policy and once without, for ``--steps`` env steps. The figure is the mean
KL(saved policy || trained policy) over a fixed set of CartPole observations (states visited
by uniformly random actions), and the mean training return of the last episodes.

    python benchmarks/attraction_kl/run.py              # 3 seeds, 16384 steps, weights 0.5 and 5 (~30 s)
    python benchmarks/attraction_kl/run.py --addon RepulsionKL --steps 4096 --loss-term-weights 1
    python benchmarks/attraction_kl/run.py --quick      # 1 seed, 1024 steps

tests/learning/test_learning_policy_loss_addons.py runs ``kl_with_and_without`` on one seed.
"""

import argparse
import os
import sys
import tempfile
import time

import gymnasium as gym
import numpy as np
import torch
from torch.distributions import kl_divergence

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

from harness.report import md_table  # noqa: E402

from pytorchrl.config import build_actor_factory, build_env_factories, build_learner, validate_config  # noqa: E402

#: The runs' configuration (the add-on entry is added for the run with it).
CONFIG = {
    "env": {"id": "CartPole-v1", "vec_env_size": 8, "monitor": False},
    "algorithm": {"name": "PPO", "lr": 1e-3, "num_epochs": 4, "mini_batch_size": 64, "gamma": 0.98},
    "actor": {"hidden_sizes": [32, 32], "shared_policy_value_network": False},
    "storage": {"name": "GAEBuffer", "size": 32, "gae_lambda": 0.8},
    "learner": {"target_steps": 4096, "tensorboard": False},
}


def _config(seed, steps, addons=()):
    return validate_config({**CONFIG, "seed": seed, "algorithm": {**CONFIG["algorithm"], "policy_loss_addons": list(addons)},
                            "learner": {**CONFIG["learner"], "target_steps": steps}})


def save_behaviour(path, seed, head_scale=300.0, push=1.5):
    """Save, as a run saves its model, a random actor of the runs' actor section made
    decisive and biased: its policy head's weights scaled by ``head_scale`` and its logits
    shifted by ``push`` towards pushing left (a poor CartPole policy, far from what PPO
    learns and from the uniform one it starts from); returns the actor."""
    config = _config(seed, 1)
    _, _, action_space, obs_space = build_env_factories(config)
    torch.manual_seed(10_000 + seed)
    actor = build_actor_factory(config, obs_space, action_space, "PPO")("cpu")
    with torch.no_grad():
        actor.dist.linear.weight.mul_(head_scale)
        actor.dist.linear.bias.copy_(torch.tensor([push, -push]))
    torch.save(actor.state_dict(), path)
    return actor


def probe_observations(n=512, seed=12345):
    """``n`` CartPole observations visited by uniformly random actions (a fixed set)."""
    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    rows = []
    for _ in range(n):
        rows.append(obs)
        obs, _, terminated, truncated, _ = env.step(int(rng.integers(2)))
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    return torch.as_tensor(np.array(rows), dtype=torch.float32)


def mean_kl(behaviour, actor, obs):
    """Mean KL(behaviour || actor) over ``obs``."""
    with torch.no_grad():
        return float(kl_divergence(behaviour.action_distribution(obs), actor.action_distribution(obs)).mean())


def train(config):
    """Train a learner of ``config`` to its budget; returns (its actor, the mean training
    return of its last episodes)."""
    learner = build_learner(config)
    try:
        while not learner.done():
            learner.step()
        ret = learner.get_metrics(add_episodes_metrics=True)["Episodes/TrainReward"]
        return learner.update_worker.local_worker.actor, ret
    finally:
        learner.stop()


def kl_with_and_without(seed, steps=4096, loss_term_weights=(5.0,), workdir=None, addon="AttractionKL"):
    """The measurement of one seed: a dict ``{"kl_start": KL of the untrained policy, None:
    (KL, train return) of the run without the add-on, w: (KL, train return) of the run with
    the add-on ``addon`` (AttractionKL or RepulsionKL) of loss_term_weight w, for each of
    loss_term_weights}``."""
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        path = os.path.join(tmp, "model.state_dict")
        behaviour = save_behaviour(path, seed)
        obs = probe_observations()
        out = {}
        for weight in (None, *loss_term_weights):
            addons = [] if weight is None else [{"name": addon, "checkpoints": [path],
                                                 "loss_term_weight": weight}]
            config = _config(seed, steps, addons)
            actor, ret = train(config)
            out[weight] = (mean_kl(behaviour, actor, obs), ret)
        torch.manual_seed(seed)
        _, _, action_space, obs_space = build_env_factories(config)
        fresh = build_actor_factory(config, obs_space, action_space, "PPO")("cpu")
        out["kl_start"] = mean_kl(behaviour, fresh, obs)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1")
    ap.add_argument("--steps", type=int, default=16384, help="env steps of each training run")
    ap.add_argument("--loss-term-weights", type=float, nargs="+", default=[0.5, 5.0],
                    help="AttractionKL's loss_term_weight, one run with each")
    ap.add_argument("--addon", choices=("AttractionKL", "RepulsionKL"), default="AttractionKL",
                    help="the add-on of the runs with one")
    ap.add_argument("--quick", action="store_true", help="1 seed, 1024 steps")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.steps = 1, 1024
    torch.set_num_threads(1)
    rows = []
    for seed in range(args.seeds):
        t0 = time.perf_counter()
        r = kl_with_and_without(seed, args.steps, args.loss_term_weights, addon=args.addon)
        kl_without, ret_without = r[None]
        for weight in args.loss_term_weights:
            kl, ret = r[weight]
            rows.append([seed, f"{weight:g}", f"{r['kl_start']:.3f}", f"{kl_without:.3f}", f"{kl:.3f}",
                         f"{kl / kl_without:.3f}", f"{ret_without:.1f}", f"{ret:.1f}"])
        print(f"seed {seed}: {r} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    print(f"PPO on CartPole-v1, {args.steps} env steps per run: mean KL(saved policy || policy) over 512 fixed "
          f"observations, without and with {args.addon}\n")
    print(md_table(["seed", "loss_term_weight", "KL untrained", "KL without", "KL with", "with / without",
                    "return without", "return with"], rows))


def zoo_measure(seed, run_dir, quick, addon, steps, weight):
    """A zoo row of a policy-loss add-on (benchmarks/zoo/worker.py ``--measure``): one seed
    of ``kl_with_and_without``; the score is KL(saved || trained) with the add-on over the
    same without it (``quick``: 512 steps)."""
    steps = 512 if quick else steps
    measured = kl_with_and_without(seed, steps, (weight,), workdir=run_dir, addon=addon)
    (kl_without, ret_without), (kl_with, ret_with) = measured[None], measured[weight]
    return {"final": kl_with / kl_without, "env_steps": steps, "kl_with": kl_with, "kl_without": kl_without,
            "kl_start": measured["kl_start"], "train_return": ret_with, "train_return_without": ret_without}


def zoo_attraction(seed, run_dir, quick):
    """The zoo row ``ppo_attraction_kl``: AttractionKL of weight 5, 4,096 steps."""
    return zoo_measure(seed, run_dir, quick, "AttractionKL", 4096, 5.0)


def zoo_repulsion(seed, run_dir, quick):
    """The zoo row ``ppo_repulsion_kl``: RepulsionKL of weight 1, 4,096 steps."""
    return zoo_measure(seed, run_dir, quick, "RepulsionKL", 4096, 1.0)


if __name__ == "__main__":
    main()
