"""A run spread over two real Ray nodes: ``ray start`` in two network namespaces joined by a
veth (see ``netns_cluster.py``), the driver in the head's namespace joining through
RAY_ADDRESS as a user's run would.

Skipped (with the reason) where network namespaces cannot be made: not root, or a kernel
or sandbox that refuses ``ip netns add``.
"""

import json
import os
import textwrap

import pytest

from netns_cluster import NetnsCluster

TESTS = os.path.dirname(os.path.abspath(__file__))

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

#: Collection rounds of the run; each gathers one rollout (VEC_ENV x ROLLOUT steps) from
#: every collection worker (synchronous collection, no preemption), which PPO then trains on
#: for several learner steps (epochs x mini-batches).
ROUNDS, VEC_ENV, ROLLOUT, COLLECTORS = 3, 8, 32, 2
TARGET = ROUNDS * COLLECTORS * VEC_ENV * ROLLOUT

# The driver: PPO on CartPole with two remote collection workers of 1 CPU each on a cluster
# whose two nodes have 1 CPU each, so Ray can only place one collector on each node. It
# prints the facts as one JSON line; the test judges them.
_DRIVER = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, {tests!r})
    import ray, torch
    from pytorchrl.learner import Learner
    from pytorchrl.scheme import Scheme
    from distributed_fixtures import factories, register_for_ray

    register_for_ray()
    torch.manual_seed(0)
    scheme = Scheme(**factories(vec_env_size={vec_env}, rollout_size={rollout}), num_col_workers={collectors},
                    col_workers_resources={{"num_cpus": 1}})
    try:
        # Joined through RAY_ADDRESS by the scheme itself (ensure_ray), not by this script.
        nodes = [{{"node_id": n["NodeID"], "ip": n["NodeManagerAddress"], "alive": n["Alive"],
                  "custom": sorted(k for k in n["Resources"] if k in ("node_a", "node_b"))}} for n in ray.nodes()]
        # Which network namespace each worker process is in, read from the kernel while it runs.
        workers = [{{"node_id": node, "pid": pid, "netns": os.stat(f"/proc/{{pid}}/ns/net").st_ino}}
                   for node, pid in scheme.process_info()]
        learner = Learner(scheme, target_steps={target})
        while not learner.done():
            learner.step()
        facts = dict(nodes=nodes, workers=workers, updates=learner.num_updates,
                     env_steps=learner.num_samples_collected, episodes=learner.num_episodes,
                     driver_netns=os.stat("/proc/self/ns/net").st_ino)
    finally:
        scheme.stop()
    # A joined cluster is left running by the scheme.
    facts["ray_still_initialized"] = ray.is_initialized()
    print("FACTS " + json.dumps(facts), flush=True)
""")


def _facts(stdout):
    lines = [ln for ln in stdout.splitlines() if ln.startswith("FACTS ")]
    assert len(lines) == 1, stdout[-3000:]
    return json.loads(lines[0][len("FACTS "):])


def test_ppo_run_spread_over_two_ray_nodes():
    with NetnsCluster(num_cpus=1) as cluster:
        script = _DRIVER.format(tests=TESTS, vec_env=VEC_ENV, rollout=ROLLOUT, collectors=COLLECTORS, target=TARGET)
        proc = cluster.run_driver(script, timeout=180)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
        facts = _facts(proc.stdout)
        inodes = cluster.netns_inodes()
        pids = cluster.pids()
    # Leaving the cluster killed its processes (checked by pid inside) and deleted the namespaces.
    assert not any(os.path.exists(f"/run/netns/{ns}") for ns in (cluster.ns_a, cluster.ns_b))
    assert pids and not [p for p in pids if os.path.exists(f"/proc/{p}/ns/net")]

    # The cluster: the two nodes made by ray start, at their veth addresses.
    nodes = {n["node_id"]: n for n in facts["nodes"]}
    assert all(n["alive"] for n in nodes.values()), nodes
    assert sorted(n["ip"] for n in nodes.values()) == sorted([cluster.ip_a, cluster.ip_b])
    assert facts["driver_netns"] == inodes["a"], "the driver did not run on node A"

    # One collection worker on each node, as Ray reports it (node ids) and as the kernel
    # does (the network namespace of each worker's process).
    workers = facts["workers"]
    assert len(workers) == COLLECTORS, workers
    assert sorted(nodes[w["node_id"]]["custom"][0] for w in workers) == ["node_a", "node_b"], (workers, nodes)
    for w in workers:
        expected = inodes["a"] if nodes[w["node_id"]]["custom"] == ["node_a"] else inodes["b"]
        assert w["netns"] == expected, f"worker {w} does not run in the namespace of its node"
    assert len({w["pid"] for w in workers}) == COLLECTORS

    # A real run: every round brought one rollout of each collector, and the policy trained on them.
    assert facts["env_steps"] == TARGET
    assert facts["updates"] >= ROUNDS
    assert facts["episodes"] > 0
    assert facts["ray_still_initialized"], "the scheme shut down a cluster it had joined"
