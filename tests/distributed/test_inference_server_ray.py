"""The central inference server with synchronous remote collectors on Ray: they act with the
published version (the server in this process: tests/unit/test_inference_server.py)."""

from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme

from inference_server_helpers import a2c_agent


def test_sync_remote_collectors_act_with_the_published_version(ray_session):
    algo, actor, storage, train = a2c_agent(vec_env_size=2)
    scheme = Scheme(algo, actor, storage, train, num_col_workers=2, col_workers_resources={"num_cpus": 0.25},
                    col_policy="server", inference_server={"timeout_ms": 50, "num_cpus": 0.25})
    learner = Learner(scheme, target_steps=640)
    try:
        while not learner.done():
            learner.step()
        metrics = learner.get_metrics(add_scheme_metrics=True)
        stats = scheme.inference_stats()
        gw = learner.update_worker.local_worker
    finally:
        learner.stop()
    # Every round's rollouts acted with the version published just before it (no lag),
    # and the server's last version is the last one published.
    assert metrics["Scheme/MaxPolicyLag"] == 0 and stats["version"] == gw.version > 0
    # Two collectors of 2 environments stepping in lockstep: their requests meet.
    # Each collector's rollout bootstraps from the server once per round.
    assert stats["mean_batch"] > 2.0 and stats["value_calls"] >= 2 * gw.version
