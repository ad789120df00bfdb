"""Measuring loop shared by the in-process scheme benchmarks (scaling_latency.py,
straggler.py, compression_images.py).

Each of those scripts measures several scheme configurations in ONE process sharing one
local Ray instance (started here with ``ray.init(num_cpus=<machine's CPUs>)``; a scheme
joins an initialised Ray instead of starting its own), repeated and interleaved. The script
runs in two steps: the parent prepares the measured code (a snapshot of the working tree by
default, see _common.prepared_source) and runs itself again in a child process that imports
it (``main``).
"""

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import _common as C  # noqa: E402

IN_SOURCE_FLAG = "--_in-source"


def base_parser(description):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--repeats", type=int, default=3, help="passes over all configurations (interleaved; default 3)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 pass, few rounds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--torch-threads", type=int, default=1, help="OMP_NUM_THREADS (default 1)")
    ap.add_argument("--out-dir", default=C.RESULTS_DIR)
    ap.add_argument(IN_SOURCE_FLAG, dest="in_source", action="store_true", help=argparse.SUPPRESS)
    C.add_source_args(ap)
    C.add_load_args(ap)
    return ap


def main(parse_args, run, argv=None):
    """Parent: prepare the measured code and run the script again in a child importing it.
    Child (``--_in-source``): ``run(args)``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.in_source:
        args.source = C.source_from_env()
        return run(args)
    with C.prepared_source(args):
        child_argv = [a for a in argv if a not in ("--clean-head", "--live-tree")]
        if "--ours-src" in child_argv:   # the child gets the code through PYTHONPATH
            i = child_argv.index("--ours-src")
            del child_argv[i:i + 2]
        return C.reexec_in_source(args, child_argv, IN_SOURCE_FLAG)


class OwnedRay:
    """Context manager: a local Ray instance for the benchmark (or the one already running,
    e.g. a test session's, which is then left running)."""

    def __init__(self, num_cpus=None):
        self.num_cpus = num_cpus or os.cpu_count()
        self.started = False

    def __enter__(self):
        import ray
        if not ray.is_initialized():
            # address="local": a new instance even if another user's cluster on this machine
            # is recorded in /tmp/ray/ray_current_cluster (a plain ray.init() would join it).
            ray.init(address="local", num_cpus=self.num_cpus, include_dashboard=False, configure_logging=False,
                     log_to_driver=True)
            self.started = True
        import _envs
        _envs.register_with_ray()
        return ray

    def __exit__(self, *exc):
        if self.started:
            import ray
            ray.shutdown()
        return False


def ppo_factories(env_fn, env_kwargs, vec_env_size, rollout, hidden=(32, 32), shared=False, num_epochs=1,
                  num_mini_batch=1, seed=0, lr=3e-4):
    """Scheme keyword arguments for a cheap PPO learner (one pass over each round's data
    by default): the collectors, not the learner, should bound these benchmarks."""
    from pytorchrl.agent.actors import OnPolicyActor
    from pytorchrl.agent.actors.feature_extractors.mlp import MLP
    from pytorchrl.agent.algorithms import PPO
    from pytorchrl.agent.env import VecEnv
    from pytorchrl.agent.storages import GAEBuffer
    train, action_space, obs_space = VecEnv.create_factory(env_fn=env_fn, env_kwargs=env_kwargs,
                                                           vec_env_size=vec_env_size, seed=seed)
    algo, name = PPO.create_factory(lr=lr, num_epochs=num_epochs, num_mini_batch=num_mini_batch, gamma=0.99,
                                    clip_param=0.2, entropy_coef=0.0, value_loss_coef=0.5, max_grad_norm=0.5,
                                    use_clipped_value_loss=False)
    actor = OnPolicyActor.create_factory(obs_space, action_space, name, feature_extractor_network=MLP,
                                         feature_extractor_kwargs={"hidden_sizes": list(hidden), "activation": "tanh"},
                                         shared_policy_value_network=shared)
    storage = GAEBuffer.create_factory(size=rollout, gae_lambda=0.95)
    return dict(algo_factory=algo, actor_factory=actor, storage_factory=storage, train_envs_factory=train)


def measure_scheme(factories, scheme_kwargs, warmup_steps, measure_samples=0, args=None, seed=0, min_rounds=0):
    """Build a Scheme, step its Learner ``warmup_steps`` times (untimed), then until
    ``measure_samples`` more env steps are collected and at least ``min_rounds`` rounds
    were (timed); stop it.

    Returns a record: ``env_steps_per_s`` (env steps collected / wall time of the timed
    Learner steps), ``round_s`` (median wall time of one Learner step that collected a
    round: with one pass of one mini-batch per round, every step collects one), median
    ``collect_wait_s`` (time the learner waited for the round), samples and cut rollouts
    per round, policy lag, scheme metrics (bytes sent, compression ratio), build time,
    the CPU other processes used during the timed part.
    """
    import torch
    from pytorchrl.learner import Learner
    from pytorchrl.scheme import Scheme
    idle = C.maybe_wait_idle(args) if args is not None else {}
    torch.manual_seed(seed)
    t = time.perf_counter()
    scheme = Scheme(**factories, **scheme_kwargs)
    build_s = time.perf_counter() - t
    learner = Learner(scheme, target_steps=10 ** 12)
    try:
        for _ in range(warmup_steps):
            learner.step()
        learner.get_metrics(add_scheme_metrics=True)   # drop the warm-up's scheme metrics
        s0 = learner.num_samples_collected
        step_s, waits, samples, cuts, lags, rollout_steps = [], [], [], [], [], []
        with C.LoadProbe() as probe:
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
    finally:
        t = time.perf_counter()
        learner.stop()
        stop_s = time.perf_counter() - t
    collected = learner.num_samples_collected - s0
    rounds = len(samples)
    return {
        "env_steps": int(collected), "wall_s": round(wall, 4), "env_steps_per_s": round(collected / wall, 2),
        "rounds": rounds, "round_s": round(statistics.median(step_s), 4) if step_s else None,
        "round_s_mean": round(sum(step_s) / rounds, 4) if rounds else None,
        "round_s_max": round(max(step_s), 4) if step_s else None,
        "collect_wait_s": round(C.median(waits), 4) if waits else None,
        "samples_per_round": C.median(samples), "cut_rollouts_per_round": (sum(cuts) / rounds) if rounds else None,
        "rollout_steps_seen": sorted(set(rollout_steps))[:20],
        "policy_lag_mean": round(sum(lags) / len(lags), 3) if lags else None, "policy_lag_max": max(lags) if lags else None,
        "bytes_sent": metrics.get("Scheme/BytesSent"), "compression_ratio": metrics.get("Scheme/CompressionRatio"),
        "bytes_sent_per_round": (metrics["Scheme/BytesSent"] / rounds) if rounds and metrics.get("Scheme/BytesSent") else None,
        "build_s": round(build_s, 3), "stop_s": round(stop_s, 3), "remote": scheme.uses_ray,
        **probe.report(), **idle,
    }


def interleaved(configs, repeats):
    """(repeat, config) in the order they run: every pass covers every configuration; odd
    passes run in reverse so that slow drift of the machine does not favour one end."""
    for r in range(repeats):
        for cfg in (configs if r % 2 == 0 else list(reversed(configs))):
            yield r, cfg


def measure_passes(jsonl, configs, repeats, measure, error_fields, label, progress):
    """Measure every configuration ``repeats`` times, interleaved; returns the records, each
    with its ``pass`` and appended to ``jsonl`` as soon as it is in.

    configs: the configurations, in the order of the first pass. measure(cfg): the record of
    one run; an exception is a result too (a layout that fails): the run's record is then
    ``error_fields(cfg)`` (the fields that name the configuration) with the ``error``, and the
    passes go on. One line is printed per run: ``label(cfg)`` (padded to line the runs up;
    stripped on a failed run's line) then ``FAILED`` and the error, or ``progress(record)``
    and the CPU share other processes used during the run.
    """
    records = []
    for rep, cfg in interleaved(configs, repeats):
        try:
            rec = measure(cfg)
        except Exception as exc:  # a failing layout is a result: record it and go on
            rec = dict(error_fields(cfg), error=f"{type(exc).__name__}: {exc}"[:2000])
        rec["pass"] = rep
        records.append(rec)
        C.append_jsonl(jsonl, rec)
        if "error" in rec:
            print(f"  pass {rep} {label(cfg).rstrip()}: FAILED {rec['error']}", flush=True)
        else:
            print(f"  pass {rep} {label(cfg)}: {progress(rec)}  "
                  f"(others used {C.fmt_share(rec.get('others_cpu_share_during'))} of the CPU)", flush=True)
    return records


def torch_versions():
    import gymnasium
    import ray
    import torch
    import pytorchrl
    return {"pytorchrl": pytorchrl.__version__, "torch": torch.__version__, "ray": ray.__version__,
            "gymnasium": gymnasium.__version__, "torch_threads": torch.get_num_threads(),
            "pytorchrl_path": os.path.dirname(pytorchrl.__file__)}


def print_json(obj):
    print(json.dumps(obj, default=str), flush=True)
