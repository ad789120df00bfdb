"""DistributedReinforcementLearning.jl's WorkerProxy (``Scheme(col_worker_proxy=True)``): one
proxy per node receives each weight version once for its node's collectors and gathers their
rollouts into one message. Measured on two real Ray nodes (network namespaces, see
``netns_cluster.py``): the bytes node B receives per weight publication with 3 collectors
on it, with and without the proxy. Also on a local Ray: what the proxy does, a collector
killed in a proxied round, and the layouts it is refused in."""

import json
import textwrap

import pytest

import pytorchrl as prl
from pytorchrl.config import ConfigError, validate_config
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme

from cli_helpers import TESTS, tiny
from distributed_fixtures import SMALL, factories, wait_gone
from netns_cluster import NetnsCluster


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize("scheme,words", [
    ({"col_worker_proxy": True}, "needs remote collectors (num_col_workers >= 2)"),
    ({"preset": "async-collectors", "col_worker_proxy": True}, "needs synchronous collection"),
    ({"preset": "sync-collectors-preemptive", "col_worker_proxy": True}, "does not cut stragglers"),
])
def test_layouts_the_proxy_cannot_serve_are_refused(scheme, words):
    with pytest.raises(ConfigError) as info:
        validate_config(tiny(scheme=scheme))
    assert str(info.value).startswith("config error: scheme.col_worker_proxy: true ") and words in str(info.value)
    with pytest.raises(ValueError, match="col_worker_proxy needs synchronous collection"):
        Scheme(**factories(vec_env_size=2, rollout_size=8), num_col_workers=2, col_workers_communication=prl.ASYNC,
               col_worker_proxy=True)


# ------------------------------------------------------------------ local Ray


@pytest.mark.timeout(300)
def test_a_proxy_per_node_gets_each_version_once_and_survives_a_collector_killed(ray_for_module):
    ray = ray_for_module
    scheme = Scheme(**factories(vec_env_size=2, rollout_size=8, num_epochs=1, num_mini_batch=1, mini_batch_size=None),
                    num_col_workers=4, col_workers_resources=SMALL, col_worker_proxy=True)
    learner = Learner(scheme, target_steps=10 ** 6)
    try:
        col_set = learner.update_worker.local_worker.col_workers
        for _ in range(3):
            infos = learner.step()
        assert len(infos[0]["rollout_steps"]) == 4      # every collector's rollout, each round
        proxies = list(col_set.proxies._proxies.values())
        assert len(proxies) == 1                         # one node here: one proxy
        stats = ray.get(proxies[0].get_stats.remote())
        # One weight version per round went to the node, and every collector loaded it.
        nbytes = col_set.weights.broadcast.nbytes
        assert stats["rounds"] == 3 and stats["versions"] == 3 and stats["weight_bytes"] == 3 * nbytes
        assert col_set.stats["proxy_weight_bytes"] == 3 * nbytes and col_set.stats["weight_bytes"] == 12 * nbytes
        victim = col_set.remote_workers()[1]
        node, pid = ray.get(victim.process_info.remote())
        ray.kill(victim)
        assert not wait_gone([pid])
        infos = learner.step()
        # The killed collector was replaced and asked again: the round still holds 4 rollouts.
        assert len(infos[0]["rollout_steps"]) == 4
        assert learner.worker_restarts == 1
    finally:
        learner.stop()


# ------------------------------------------------------------- two real nodes
COLLECTORS, ROUNDS, WARMUP = 3, 12, 3

# The driver: PPO on CartPole, 3 remote collectors all on node B (a custom resource), an
# actor of about 70 KB (MLP 128x128: small enough to ride inside the requests), one update
# and one weight publication per round. For each setting it counts the bytes node B's veth
# receives over ROUNDS rounds (after WARMUP), read from the kernel (``ip -s``), and prints
# them with the size of the weights as one JSON line.
_DRIVER = textwrap.dedent("""
    import json, subprocess, sys
    sys.path.insert(0, {tests!r})
    import torch
    from pytorchrl.learner import Learner
    from pytorchrl.scheme import Scheme
    from distributed_fixtures import factories, register_for_ray

    def rx_bytes():
        out = subprocess.run(["ip", "-n", {ns_b!r}, "-s", "-j", "link", "show", {veth_b!r}], capture_output=True,
                             text=True, check=True).stdout
        return json.loads(out)[0]["stats64"]["rx"]["bytes"]

    register_for_ray()
    facts = {{}}
    for proxy in (False, True):
        torch.manual_seed(0)
        kwargs = factories(vec_env_size=2, rollout_size=16, num_epochs=1, num_mini_batch=1, mini_batch_size=None)
        kwargs["actor_factory"].kwargs["feature_extractor_kwargs"] = {{"hidden_sizes": [128, 128]}}
        scheme = Scheme(**kwargs, num_col_workers={collectors},
                        col_workers_resources={{"num_cpus": 0.25, "resources": {{"node_b": 0.25}}}},
                        col_worker_proxy=proxy)
        learner = Learner(scheme, target_steps=10 ** 9)
        try:
            nodes = sorted({{n for n, _ in scheme.process_info()}})
            for _ in range({warmup}):
                learner.step()
            before, updates = rx_bytes(), learner.num_updates
            for _ in range({rounds}):
                learner.step()
            received = rx_bytes() - before
            col_set = learner.update_worker.local_worker.col_workers
            facts[str(proxy)] = dict(rx_per_round=received / {rounds}, updates=learner.num_updates - updates,
                                     weight_bytes=col_set.weights.broadcast.nbytes, nodes=len(nodes),
                                     proxies=len(col_set.proxies._proxies) if col_set.proxies else 0)
        finally:
            scheme.stop()
    print("FACTS " + json.dumps(facts), flush=True)
""")


@pytest.mark.timeout(300)
def test_the_proxy_brings_each_weight_version_to_a_node_once():
    with NetnsCluster(num_cpus=1) as cluster:
        script = _DRIVER.format(tests=TESTS, ns_b=cluster.ns_b, veth_b=cluster.veth_b, collectors=COLLECTORS,
                                rounds=ROUNDS, warmup=WARMUP)
        proc = cluster.run_driver(script, timeout=240)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("FACTS ")]
    assert len(lines) == 1, proc.stdout[-3000:]
    facts = json.loads(lines[0][len("FACTS "):])
    direct, proxied = facts["False"], facts["True"]
    print("bytes received by node B per weight publication, 3 collectors:", facts)
    for f in (direct, proxied):
        assert f["nodes"] == 1 and f["updates"] == ROUNDS    # all collectors on node B; one publication a round
        assert 50_000 < f["weight_bytes"] < 100 * 1024          # sent inside the requests
    assert proxied["proxies"] == 1
    weights = direct["weight_bytes"]
    # Without the proxy each of the 3 collectors receives its own copy; with it the node gets one.
    assert direct["rx_per_round"] > 2.5 * weights, facts
    assert proxied["rx_per_round"] < 1.5 * weights, facts
