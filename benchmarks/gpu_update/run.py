"""The learner's update on a CUDA device: milliseconds per update, eager against the captured
CUDA graph update (``pytorchrl/agent/accel/cuda_graph.py``).

What runs, in one process on ``cuda``: the library's actors and algorithms with their default
networks, one update = ``compute_gradients`` + ``apply_gradients`` on a fixed-size mini-batch
(fresh random values each update, copied to the device beforehand), timed with the device
synchronised around each block of updates:

- ``sac``/``td3``: HalfCheetah-sized (17 observations, 6 actions), 256x256 critics and policy,
  mini-batches of 256 (rl-zoo's MuJoCo settings);
- ``dqn``: CartPole-sized (4 observations, 2 actions), mini-batches of 64;
- ``ppo-mlp``: CartPole-sized, mini-batches of 64 (our PPO CartPole defaults);
- ``ppo-cnn``: the Nature CNN on 4x84x84 uint8 frames, 4 actions, mini-batches of 256.

Each case is built twice from the same seed: once with ``PYTORCHRL_CUDA_GRAPHS=0`` (eager) and
once with the graph update on; the report gives each one's median milliseconds per update
over ``--repeats`` interleaved passes, the speed-up, and the graph engine's own account
(captures, replays, and ``off``: the reason it stepped aside, None when it ran throughout).

Exempt from reporting a return: it times a kernel (updates on random mini-batches), no training.

Usage (on a machine with a CUDA device; nothing else in the project needs one):
    python benchmarks/gpu_update/run.py                 # every case, 3 passes of 200 updates
    python benchmarks/gpu_update/run.py --quick         # 1 pass of 30 updates
    python benchmarks/gpu_update/run.py --json out.json
"""

import argparse
import json
import os
import statistics
import sys
import time

CASES = ("sac", "td3", "dqn", "ppo-mlp", "ppo-cnn")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {CASES}")
    ap.add_argument("--updates", type=int, default=200, help="timed updates per case, mode and pass (default 200)")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved passes (default 3)")
    ap.add_argument("--warmup", type=int, default=8, help="untimed updates first: the capture, cuBLAS set-up (default 8)")
    ap.add_argument("--quick", action="store_true", help="1 pass of 30 updates")
    ap.add_argument("--json", default=None, help="also write the records to this file")
    ap.add_argument("--device", default="cuda", help="torch device (default cuda; cpu only checks the script runs)")
    args = ap.parse_args(argv)
    if args.quick:
        args.updates, args.repeats = 30, 1
    args.case_list = [c for c in args.cases.split(",") if c]
    unknown = [c for c in args.case_list if c not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; valid: {list(CASES)}")
    return args


def build(case, graphs, dev="cuda"):
    """(algorithm, make_batch) of ``case`` on ``dev``, its graph update on or off."""
    import gymnasium as gym
    import numpy as np
    import torch

    import pytorchrl as prl
    from pytorchrl.agent.actors import OffPolicyActor, OnPolicyActor
    from pytorchrl.agent.actors.feature_extractors import CNN
    from pytorchrl.agent.algorithms import DDQN, PPO, SAC, TD3

    os.environ["PYTORCHRL_CUDA_GRAPHS"] = "1" if graphs else "0"
    torch.manual_seed(0)
    if case in ("sac", "td3"):
        obs, act, n = gym.spaces.Box(-np.inf, np.inf, (17,), np.float32), gym.spaces.Box(-1, 1, (6,), np.float32), 256
        cls = SAC if case == "sac" else TD3
        actor = OffPolicyActor(dev, obs, act, cls.name)
        algo = cls(dev, actor, None, lr_q=3e-4, lr_pi=3e-4, mini_batch_size=n)
    elif case == "dqn":
        obs, act, n = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2), 64
        actor = OffPolicyActor(dev, obs, act, DDQN.name)
        algo = DDQN(dev, actor, None, lr=1e-3, mini_batch_size=n)
    elif case == "ppo-mlp":
        obs, act, n = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2), 64
        actor = OnPolicyActor(dev, obs, act, PPO.name)
        algo = PPO(dev, actor, lr=3e-4, mini_batch_size=n, entropy_coef=0.01)
    else:
        obs, act, n = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), gym.spaces.Discrete(4), 256
        actor = OnPolicyActor(dev, obs, act, PPO.name, feature_extractor_network=CNN)
        algo = PPO(dev, actor, lr=2.5e-4, mini_batch_size=n, clip_param=0.1, entropy_coef=0.01,
                   max_grad_norm=0.5)
    gen = torch.Generator(device=dev).manual_seed(1)

    def make_batch():
        if isinstance(obs, gym.spaces.Box) and obs.dtype == np.uint8:
            o = torch.randint(0, 256, (n, *obs.shape), dtype=torch.uint8, device=dev, generator=gen)
        else:
            o = torch.randn(n, *obs.shape, device=dev, generator=gen)
        if isinstance(act, gym.spaces.Discrete):
            a = torch.randint(0, act.n, (n, 1), device=dev, generator=gen)
        else:
            a = torch.rand(n, act.shape[0], device=dev, generator=gen) * 2 - 1
        col = (n, 1)
        if case in ("sac", "td3", "dqn"):
            return {prl.OBS: o, prl.OBS2: o.roll(1, 0), prl.ACT: a, prl.REW: torch.randn(col, device=dev, generator=gen),
                    prl.DISCOUNT: torch.full(col, 0.99, device=dev)}
        return {prl.OBS: o, prl.ACT: a, prl.LOGP: torch.randn(col, device=dev, generator=gen) - 1.0,
                prl.ADV: torch.randn(col, device=dev, generator=gen), prl.RET: torch.randn(col, device=dev, generator=gen),
                prl.VAL: torch.randn(col, device=dev, generator=gen)}

    return algo, make_batch


def timed_updates(algo, batches):
    """Wall milliseconds per update over ``batches`` (the device synchronised before and after)."""
    import torch

    sync = torch.cuda.synchronize if algo.device.type == "cuda" else (lambda: None)
    sync()
    t = time.perf_counter()
    for batch in batches:
        algo.compute_gradients(batch, return_grads=False)
        algo.apply_gradients()
    sync()
    return 1000 * (time.perf_counter() - t) / len(batches)


def main(argv=None):
    args = parse_args(argv)
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("error: no CUDA device: this benchmark measures the CUDA update", file=sys.stderr)
        return 2
    records = []
    built = {}
    for case in args.case_list:
        for graphs in (False, True):
            algo, make_batch = build(case, graphs, args.device)
            warm = [make_batch() for _ in range(args.warmup)]
            timed_updates(algo, warm)            # the capture (graph) or cuBLAS set-up (eager)
            built[case, graphs] = (algo, [make_batch() for _ in range(args.updates)])
    for rep in range(args.repeats):
        for case in args.case_list:
            for graphs in (False, True):
                algo, batches = built[case, graphs]
                records.append({"case": case, "graphs": graphs, "pass": rep,
                                "ms_per_update": timed_updates(algo, batches)})
    rows = []
    for case in args.case_list:
        ms = {g: statistics.median(r["ms_per_update"] for r in records if r["case"] == case and r["graphs"] == g)
              for g in (False, True)}
        engine = built[case, True][0].graph_update
        account = {"captures": getattr(engine, "captures", None), "replays": getattr(engine, "replays", None),
                   "off": getattr(engine, "off", "no engine") if engine is not None else "not built"}
        rows.append({"case": case, "eager_ms": round(ms[False], 3), "graph_ms": round(ms[True], 3),
                     "speedup": round(ms[False] / ms[True], 2), **account})
    dev = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else args.device
    print(f"device: {dev}; torch {torch.__version__}; {args.updates} updates x {args.repeats} pass(es)")
    print("| case | eager ms/update | graph ms/update | speed-up | captures | replays | stepped aside |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        print(f"| {r['case']} | {r['eager_ms']} | {r['graph_ms']} | {r['speedup']}x | {r['captures']} | "
              f"{r['replays']} | {r['off']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev, "torch": torch.__version__, "rows": rows, "records": records}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
