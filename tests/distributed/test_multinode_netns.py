"""A run spread over two real Ray nodes: ``ray start`` in two network namespaces joined by a
veth (see ``netns_cluster.py``), the driver in the head's namespace joining through
RAY_ADDRESS as a user's run would.

Skipped (with the reason) where network namespaces cannot be made: not root, or a kernel
or sandbox that refuses ``ip netns add``.
"""

import itertools
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time

import pytest

from cli_helpers import REPO, TESTS
from netns_cluster import CLUSTER_MD, NetnsCluster, documented_cluster


pytestmark = [pytest.mark.timeout(240)]

#: Environments per collection worker and steps per environment in one rollout; the
#: learner steps (synchronous collection rounds) before node B is lost.
VEC_ENV, ROLLOUT, COLLECTORS, ROUNDS = 8, 32, 2, 3


def _facts(stdout):
    lines = [ln for ln in stdout.splitlines() if ln.startswith("FACTS ")]
    assert len(lines) == 1, stdout[-3000:]
    return json.loads(lines[0][len("FACTS "):])


# ------------------------------------------------------------------ losing node B
#: Ray declares a node dead after 3 missed health checks 0.5 s apart (about 1.5 s) instead
#: of its default of about 15 s.
FAST_HEALTH_CHECKS = {"health_check_period_ms": 500, "health_check_failure_threshold": 3}

# A driver whose run loses node B. With ``hold_a_cpu`` it holds one CPU of node A with a
# placeholder actor while the scheme starts (so that one worker of each pair goes to node
# B), and frees it; without, the nodes have 1 CPU each and the scheme joins the cluster
# through RAY_ADDRESS by itself (ensure_ray), as a user's run does. It trains ROUNDS
# updates, prints READY with where everything runs (the nodes as Ray reports them, each
# worker's node and the network namespace of its process, read from the kernel) and waits
# for a line on stdin: the test kills node B meanwhile. Then it trains to the target and
# prints the facts as one JSON line (or the one-line error that ended the run).
_NODE_LOSS_DRIVER = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, {tests!r})
    import ray, torch
    from pytorchrl.learner import Learner
    from pytorchrl.scheme import Scheme
    from pytorchrl.scheme.base.faults import WorkerFailure
    from distributed_fixtures import factories, register_for_ray

    register_for_ray()
    torch.manual_seed(0)
    layout = {layout!r}
    hold = None
    if {hold_a_cpu}:
        ray.init()
        Hold = type("Hold", (), {{"ping": lambda self: 1}})
        hold = ray.remote(num_cpus=1, resources={{"node_a": 0.001}})(Hold).remote()
        ray.get(hold.ping.remote())
    kwargs = dict(num_col_workers=2, col_workers_resources={{"num_cpus": 1}}) if layout == "collectors" else \\
        dict(num_grad_workers=2, grad_workers_resources={{"num_cpus": 1}}, decentralized_update_execution=True)
    scheme = Scheme(**factories(vec_env_size={vec_env}, rollout_size={rollout}), **kwargs)
    scheme.fault_policy.start_timeout_s = 20   # (the driver's worker sets share this policy)
    learner = Learner(scheme, target_steps={target})
    events = []
    learner.on_worker_event = events.append
    node_of = {{n["NodeID"]: ("a" if "node_a" in n["Resources"] else "b") for n in ray.nodes()}}
    def placement():
        return [node_of.get(node, "?") for node, _ in scheme.process_info()]
    try:
        if hold is not None:
            ray.kill(hold)
        for _ in range({rounds}):
            learner.step()
        nodes = [{{"node_id": n["NodeID"], "ip": n["NodeManagerAddress"], "alive": n["Alive"],
                  "custom": sorted(k for k in n["Resources"] if k in ("node_a", "node_b"))}} for n in ray.nodes()]
        workers = [{{"node_id": node, "pid": pid, "netns": os.stat(f"/proc/{{pid}}/ns/net").st_ino}}
                   for node, pid in scheme.process_info()]
        print("READY " + json.dumps(dict(placement=placement(), nodes=nodes, workers=workers,
                                         driver_netns=os.stat("/proc/self/ns/net").st_ino,
                                         updates=learner.num_updates, env_steps=learner.num_samples_collected,
                                         episodes=learner.num_episodes)), flush=True)
        sys.stdin.readline()   # node B is killed meanwhile
        error = None
        try:
            while not learner.done():
                learner.step()
        except WorkerFailure as exc:
            error = str(exc)
        facts = dict(error=error, events=events, env_steps=learner.num_samples_collected,
                     restarts=learner.get_metrics(add_scheme_metrics=True)["Scheme/WorkerRestarts"])
        if error is None:
            facts["placement"] = placement()
            if layout == "dd-ppo":
                w0, w1 = ray.get([w.get_weights.remote() for w in scheme.update_worker.grad_workers.remote_workers()])
                facts["identical_weights"] = all(torch.equal(w0[k], w1[k]) for k in w0)
    finally:
        scheme.stop()
    # A joined cluster is left running by the scheme.
    facts["ray_still_initialized"] = ray.is_initialized()
    print("FACTS " + json.dumps(facts), flush=True)
""")


def _lose_node_b(cluster, layout, hold_a_cpu, target):
    """Run the node-loss driver on ``cluster``; kill node B once it is READY. Returns what
    the driver printed with READY (``placement``: the node of each remote worker, and
    where everything ran: see ``_assert_spread_over_both_nodes``) and the facts."""
    script = _NODE_LOSS_DRIVER.format(tests=TESTS, layout=layout, hold_a_cpu=hold_a_cpu, vec_env=VEC_ENV,
                                      rollout=ROLLOUT, target=target, rounds=ROUNDS)
    proc = cluster.start_driver(script)
    seen = []
    for line in proc.stdout:           # blocks on the driver's output, line by line
        seen.append(line)
        if line.startswith("READY "):
            break
    else:
        out = cluster.finish_driver(proc)
        pytest.fail("the driver ended before it was ready:\n" + "".join(seen)[-3000:] + out[-3000:])
    ready = json.loads(line[len("READY "):])
    ready["netns_inodes"] = cluster.netns_inodes()
    cluster.kill_node_b()
    proc.stdin.write("go\n")
    proc.stdin.flush()
    out = cluster.finish_driver(proc, timeout=180)
    assert proc.returncode == 0, "".join(seen)[-3000:] + out[-6000:]
    ready["cluster_pids"] = cluster.pids()
    return ready, _facts(out)


def _assert_spread_over_both_nodes(cluster, ready, rounds_of_two_collectors=True):
    """The run before node B was lost: the two nodes made by ``ray start``, at their veth
    addresses; the driver on node A; one worker on each node, as Ray reports it (node ids)
    and as the kernel does (the network namespace of each worker's process); a real run
    (trained on; with ``rounds_of_two_collectors``: whole synchronous rounds of one rollout of
    each of the two collection workers)."""
    nodes = {n["node_id"]: n for n in ready["nodes"]}
    assert all(n["alive"] for n in nodes.values()), nodes
    assert sorted(n["ip"] for n in nodes.values()) == sorted([cluster.ip_a, cluster.ip_b])
    inodes = ready["netns_inodes"]
    assert ready["driver_netns"] == inodes["a"], "the driver did not run on node A"
    workers = ready["workers"]
    assert len(workers) == 2 and len({w["pid"] for w in workers}) == 2, workers
    assert sorted(nodes[w["node_id"]]["custom"][0] for w in workers) == ["node_a", "node_b"], (workers, nodes)
    for w in workers:
        expected = inodes["a"] if nodes[w["node_id"]]["custom"] == ["node_a"] else inodes["b"]
        assert w["netns"] == expected, f"worker {w} does not run in the namespace of its node"
    assert sorted(ready["placement"]) == ["a", "b"], ready["placement"]
    if rounds_of_two_collectors:    # whole rounds (the learner may train on one while the next is out)
        assert ready["env_steps"] > 0 and ready["env_steps"] % (2 * VEC_ENV * ROLLOUT) == 0, ready
    assert ready["updates"] >= ROUNDS and ready["episodes"] > 0


def _assert_left(cluster, ready):
    """Leaving the cluster killed its processes (checked by pid inside) and deleted the
    namespaces."""
    assert not any(os.path.exists(f"/run/netns/{ns}") for ns in (cluster.ns_a, cluster.ns_b))
    pids = ready["cluster_pids"]
    assert pids and not [p for p in pids if os.path.exists(f"/proc/{p}/ns/net")]


@pytest.mark.parametrize("layout", ["collectors", "dd-ppo"])
def test_run_survives_the_loss_of_node_b(layout):
    """Node A has 2 CPUs, node B 1; one of the two workers (collection workers, or DD-PPO
    gradient workers) runs on each node. Node B is killed mid-run: its worker is replaced on
    node A and the run reaches its target steps (DD-PPO: the group formed again, identical
    weights)."""
    target = 8 * COLLECTORS * VEC_ENV * ROLLOUT
    with NetnsCluster(num_cpus=1, num_cpus_a=2, system_config=FAST_HEALTH_CHECKS) as cluster:
        ready, facts = _lose_node_b(cluster, layout, hold_a_cpu=True, target=target)
    _assert_left(cluster, ready)
    _assert_spread_over_both_nodes(cluster, ready, rounds_of_two_collectors=layout == "collectors")
    placement = ready["placement"]
    assert facts["error"] is None, facts
    assert facts["env_steps"] >= target
    worker = "collection worker" if layout == "collectors" else "gradient worker"
    lost = placement.index("b") + 1
    assert facts["restarts"] == 1 and len(facts["events"]) == 1, facts
    assert facts["events"][0].startswith(f"{worker} {lost} died (") and \
        facts["events"][0].endswith("; replaced (restart 1 of 3)"), facts["events"]
    assert facts["placement"] == ["a", "a"], facts
    if layout == "dd-ppo":
        assert facts["identical_weights"]


def test_ppo_run_spread_over_two_ray_nodes_ends_with_one_line_when_it_no_longer_fits():
    """Both nodes have 1 CPU, so Ray can only place one of the two collection workers of 1
    CPU on each; the driver runs on node A, and the scheme joins the cluster through
    RAY_ADDRESS and leaves it running when it stops. Once node B is lost the cluster cannot
    hold two, and the run ends with one line saying so (at once, or once the replacement's
    start times out) instead of waiting for ever."""
    with NetnsCluster(num_cpus=1, system_config=FAST_HEALTH_CHECKS) as cluster:
        ready, facts = _lose_node_b(cluster, "collectors", hold_a_cpu=False, target=10 ** 6)
    _assert_left(cluster, ready)
    _assert_spread_over_both_nodes(cluster, ready)
    assert facts["ray_still_initialized"], "the scheme shut down a cluster it had joined"
    placement = ready["placement"]
    error = facts["error"]
    assert error and "\n" not in error, facts
    lost = placement.index("b") + 1
    assert error.startswith(f"collection worker {lost} died ("), error
    assert ("it cannot be replaced: impossible resource request: 2 collection workers x 1 = 2 CPU, but the Ray "
            "cluster has 1 CPU" in error) or "its replacement did not start within 20 s" in error, error
    assert facts["restarts"] == 0


# ------------------------------------------------------------- docs/cluster.md
def _documented_runs():
    """The commands of docs/cluster.md's section 2 (pointing a run at the cluster), and the
    line its refusal without the token prints."""
    with open(CLUSTER_MD) as f:
        text = f.read()
    section = text[text.index("## 2. Point the run at it"):text.index("## 3.")]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    commands = [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
    refusal = re.search(r"```\n(error: cannot join the Ray cluster at .*?)\n```", text).group(1)
    return commands, refusal


def test_a_token_protected_cluster_started_as_docs_cluster_md_says(tmp_path):
    """docs/cluster.md's commands, as written but for the head's address: the head made a
    token and turned token authentication on, the second node joined with it
    (NetnsCluster starts both with the page's commands); ``ray status`` lists both; only
    the ports the page says to open are listened on; a run without the token is refused
    with the page's line; with it, the page's ways of pointing a run at the cluster train
    there (the test adds a step budget and 2 workers, what the two 1-CPU nodes hold)."""
    commands, refusal = _documented_runs()
    (tmp_path / "examples").symlink_to(os.path.join(REPO, "examples"))
    budget = {"PYTORCHRL_STEP_LIMIT": "256"}
    with NetnsCluster(num_cpus=1) as cluster:
        head = cluster.ip_a
        deadline = time.monotonic() + 60
        while True:      # (the autoscaler's report, refreshed every few seconds)
            # (RAY_ADDRESS: other Ray instances of this machine are found too, unlike on a node)
            status = cluster.run_in("a", ["ray", *documented_cluster()["status"]], env={"RAY_ADDRESS": cluster.address})
            active = status.stdout.split("Active:")[-1].split("Pending:")[0]
            if status.returncode == 0 and active.count("node_") == 2 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert status.returncode == 0 and active.count("node_") == 2, status.stdout[-2000:] + status.stderr[-2000:]
        for which in "ab":
            assert cluster.listening_ports(which) <= cluster.documented["ports"], which

        def run(command, env, unset=()):
            """The page's ``command`` in namespace A, from ``tmp_path`` (``examples/`` linked
            there), with ``env`` added and ``unset`` removed."""
            words = shlex.split(command.replace("HEAD_IP", head))
            variables = dict(w.split("=", 1) for w in itertools.takewhile(lambda w: "=" in w, words))
            words = words[len(variables):]
            if words[0] == "pytorchrl":
                words = [sys.executable, "-m", "pytorchrl.cli", *words[1:], "scheme.num_col_workers=2",
                         "--progress", "quiet"]
            elif words[0] == "python":
                words = [sys.executable, *words[1:]]
            variables = cluster._env({**env, **variables})
            for key in unset:
                variables.pop(key, None)
            return subprocess.run(["ip", "netns", "exec", cluster.ns_a, *words], capture_output=True, text=True,
                                  cwd=tmp_path, timeout=180, env=variables)

        # Without the token (a home without one, no RAY_AUTH_MODE): the page's line, exit 2.
        refused = run(commands[0], {"HOME": str(tmp_path)}, unset=["RAY_AUTH_MODE"])
        assert refused.returncode == 2 and refused.stderr.strip() == refusal.replace("HEAD_IP", head), refused.stderr
        assert not (tmp_path / "runs").exists() or not os.listdir(tmp_path / "runs")
        for command in commands[1:]:
            done = run(command, budget)
            assert done.returncode == 0, command + "\n" + done.stdout[-2000:] + done.stderr[-3000:]
        assert "'CPU': 2.0" in done.stdout, done.stdout
        (run_dir,) = os.listdir(tmp_path / "runs")
        assert (tmp_path / "runs" / run_dir / "model.state_dict").is_file()
