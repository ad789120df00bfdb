"""The learners the scheme benchmarks train and their measuring loop: a cheap PPO learner's
factories (scaling_latency, straggler, compression_images), a DDQN learner's on CartPole
(replay_server, seed_inference), one Scheme built, warmed up, timed over Learner steps
and stopped, and the return a Learner's training reached (every benchmark that reports a
speed reports it beside the speed: a faster run that learns worse is no speed-up)."""

import math
import statistics
import time

from .machine import LoadProbe, maybe_wait_idle
from .stats import median


#: The Learner's mean return of the last 100 training episodes.
TRAIN_RETURN = "Episodes/TrainReward"


def finite(value):
    """``value`` as a float, or None when it is missing or not a finite number (a mean over
    no episode is NaN, which a JSON record should not hold)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def episodes_ended(learner):
    """Training episodes that ``learner`` (a pytorchrl ``Learner``) has seen end so far; read
    at the start of a measured window, it is ``train_return_fields``' ``episodes_before``."""
    return int(learner.get_metrics(add_algo_metrics=False, add_episodes_metrics=True).get("Episodes/Episodes", 0))


def train_return_fields(learner, episodes_before=0):
    """The return the training of ``learner`` (a pytorchrl ``Learner``) reached, as a
    benchmark's record holds it:

    - ``train_return_last100``: the mean return of the last 100 training episodes
      (``Episodes/TrainReward``), None when no episode ended;
    - ``train_episodes``: the training episodes that ended since ``episodes_before``
      (``episodes_ended`` at the start of the measured window; 0: since the start). Fewer
      than 100 means that the mean also holds episodes that ended before the window.

    Reads only the episode metrics: the algorithm's and the scheme's interval metrics are
    left for the caller's own ``get_metrics``."""
    m = learner.get_metrics(add_algo_metrics=False, add_episodes_metrics=True)
    return {"train_return_last100": finite(m.get(TRAIN_RETURN)),
            "train_episodes": int(m.get("Episodes/Episodes", 0)) - episodes_before}


def ppo_factories(env_fn, env_kwargs, vec_env_size, rollout, hidden=(32, 32), shared=False, num_epochs=1,
                  num_mini_batch=1, seed=0, lr=3e-4):
    """Scheme keyword arguments for a cheap PPO learner (one pass over each round's data
    by default): the collectors, not the learner, should bound these benchmarks.

    env_fn, env_kwargs: the environment's function and keywords (``VecEnv.create_factory``);
    vec_env_size: environments per collector; rollout: steps per environment in a rollout;
    hidden: the MLP's layer sizes; shared: one network for policy and value; num_epochs,
    num_mini_batch, lr: PPO's; seed: the environments' seed."""
    from pytorchrl.agent.actors import OnPolicyActor
    from pytorchrl.agent.actors.feature_extractors.mlp import MLP
    from pytorchrl.agent.algorithms import PPO
    from pytorchrl.agent.env import VecEnv
    from pytorchrl.agent.storages import GAEBuffer
    train, action_space, obs_space = VecEnv.create_factory(env_fn=env_fn, env_kwargs=env_kwargs,
                                                           vec_env_size=vec_env_size, seed=seed)
    algo, name = PPO.create_factory(lr=lr, eps=1e-5, num_epochs=num_epochs, num_mini_batch=num_mini_batch, gamma=0.99,
                                    clip_param=0.2, entropy_coef=0.0, value_loss_coef=0.5, max_grad_norm=0.5,
                                    use_clipped_value_loss=False)
    actor = OnPolicyActor.create_factory(obs_space, action_space, name, feature_extractor_network=MLP,
                                         feature_extractor_kwargs={"hidden_sizes": list(hidden), "activation": "tanh"},
                                         shared_policy_value_network=shared)
    storage = GAEBuffer.create_factory(size=rollout, gae_lambda=0.95)
    return dict(algo_factory=algo, actor_factory=actor, storage_factory=storage, train_envs_factory=train)


def ddqn_cartpole_factories(vec_env_size, **ddqn_kwargs):
    """Scheme keyword arguments for a DDQN learner on CartPole-v1 (a 64x64 Q-network, a replay
    buffer of 100,000 transitions, lr 1e-3, a target copy every 100 updates, no test
    episodes), as the replay-server and SEED benchmarks train it.

    vec_env_size: environments per collector; ddqn_kwargs: more of ``DDQN.create_factory``'s
    (``update_every``, ``mini_batch_size``, ...)."""
    from pytorchrl.agent.actors import OffPolicyActor
    from pytorchrl.agent.algorithms import DDQN
    from pytorchrl.agent.env import VecEnv
    from pytorchrl.agent.storages import ReplayBuffer
    from pytorchrl.envs import make_gym_env
    train, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": "CartPole-v1"},
                                                           vec_env_size=vec_env_size, seed=0)
    ddqn_kwargs.setdefault("max_grad_norm", None)
    algo_factory, name = DDQN.create_factory(lr=1e-3, target_update_interval=100, test_every=10 ** 9, **ddqn_kwargs)
    actor_factory = OffPolicyActor.create_factory(obs_space, action_space, name,
                                                  common_feature_extractor_kwargs={"hidden_sizes": [64, 64]})
    return dict(algo_factory=algo_factory, actor_factory=actor_factory,
                storage_factory=ReplayBuffer.create_factory(size=100_000), train_envs_factory=train)


def measure_scheme(factories, scheme_kwargs, warmup_steps, measure_samples=0, args=None, seed=0, min_rounds=0):
    """Build a Scheme, step its Learner ``warmup_steps`` times (untimed), then until
    ``measure_samples`` more env steps are collected and at least ``min_rounds`` rounds
    were (timed); stop it.

    Returns a record: ``env_steps_per_s`` (env steps collected / wall time of the timed
    Learner steps), the return the training reached (``train_return_fields``:
    ``train_return_last100`` at the end of the timed steps, and ``train_episodes``, the
    episodes that ended during them), ``round_s`` (median wall time of one Learner step that collected a
    round: with one pass of one mini-batch per round, every step collects one), median
    ``collect_wait_s`` (time the learner waited for the round), samples and cut rollouts
    per round, policy lag, scheme metrics (bytes sent, compression ratio), build time,
    the CPU other processes used during the timed part.

    factories: ``ppo_factories``'s; scheme_kwargs: the layout (``Scheme``'s other keywords);
    args: the script's arguments (--wait-idle before the run; None: no wait); seed: torch's.
    """
    import torch
    from pytorchrl.learner import Learner
    from pytorchrl.scheme import Scheme
    idle = maybe_wait_idle(args) if args is not None else {}
    torch.manual_seed(seed)
    t = time.perf_counter()
    scheme = Scheme(**factories, **scheme_kwargs)
    build_s = time.perf_counter() - t
    learner = Learner(scheme, target_steps=10 ** 12)
    try:
        for _ in range(warmup_steps):
            learner.step()
        learner.get_metrics(add_scheme_metrics=True)   # drop the warm-up's scheme metrics
        s0, episodes0 = learner.num_samples_collected, episodes_ended(learner)
        step_s, waits, samples, cuts, lags, rollout_steps = [], [], [], [], [], []
        with LoadProbe() as probe:
            t0 = time.perf_counter()
            while learner.num_samples_collected - s0 < measure_samples or len(samples) < min_rounds:
                ts = time.perf_counter()
                infos = learner.step()
                dt = time.perf_counter() - ts
                for info in infos:
                    if "collected_samples" in info:
                        step_s.append(dt)
                        waits.append(info.get("collect_wait"))
                        samples.append(int(info["collected_samples"]))
                        cuts.append(int(info.get("cut_rollouts", 0)))
                        lags += list(info.get("policy_lags", []))
                        rollout_steps += [s for s in info.get("rollout_steps", []) if s is not None]
            wall = time.perf_counter() - t0
        metrics = learner.get_metrics(add_algo_metrics=False, add_scheme_metrics=True)
        returns = train_return_fields(learner, episodes0)
    finally:
        t = time.perf_counter()
        learner.stop()
        stop_s = time.perf_counter() - t
    collected = learner.num_samples_collected - s0
    rounds = len(samples)
    return {
        "env_steps": int(collected), "wall_s": round(wall, 4), "env_steps_per_s": round(collected / wall, 2),
        **returns, "rounds": rounds, "round_s": round(statistics.median(step_s), 4) if step_s else None,
        "round_s_mean": round(sum(step_s) / rounds, 4) if rounds else None,
        "round_s_max": round(max(step_s), 4) if step_s else None,
        "collect_wait_s": round(median(waits), 4) if waits else None,
        "samples_per_round": median(samples), "cut_rollouts_per_round": (sum(cuts) / rounds) if rounds else None,
        "rollout_steps_seen": sorted(set(rollout_steps))[:20],
        "policy_lag_mean": round(sum(lags) / len(lags), 3) if lags else None, "policy_lag_max": max(lags) if lags else None,
        "bytes_sent": metrics.get("Scheme/BytesSent"), "compression_ratio": metrics.get("Scheme/CompressionRatio"),
        "bytes_sent_per_round": (metrics["Scheme/BytesSent"] / rounds) if rounds and metrics.get("Scheme/BytesSent") else None,
        "build_s": round(build_s, 3), "stop_s": round(stop_s, 3), "remote": scheme.uses_ray,
        **probe.report(), **idle,
    }
