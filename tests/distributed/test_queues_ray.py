"""The queue data path on Ray: prefetch asks for the next pop before training, and the lag
bound drops stale rollouts when they are popped (in this process: tests/unit/test_queues.py)."""

from pytorchrl.scheme.servers.queues import QueueDataPath, QueueLink, make_queue_server, queue_options

from queues_helpers import rma_learner, rollout, tags


def test_prefetch_asks_for_the_next_pop_before_training(ray_for_module):
    ray = ray_for_module
    server = make_queue_server({0: [1, 2], 1: [1]}, queue_options({"num_cpus": 0}), remote=True)
    try:
        for i in range(2):
            ray.get(server.put.remote((0, 1), rollout(i), i))
        path = QueueDataPath(QueueLink(server, prefetch=True), group=0)
        assert tags(path.pop(False)) == [0]
        # Before this worker trains on rollout 0 its next pop is out: the server serves it
        # meanwhile, and the next call only collects it.
        assert path._prefetched is not None and path.prefetches == 1
        ray.wait([path._prefetched], timeout=30)
        assert ray.get(server.stats.remote())["held"] == 0
        assert tags(path.pop(False)) == [1]
        # (That pop returned data, so the next one is out again, waiting in the server.)
        assert path._prefetched is not None and path.prefetches == 2
        # It finds nothing; a rollout put after it returned is not lost: the next pop (its
        # collectors finished) asks again instead of taking the empty answer.
        ray.wait([path._prefetched], timeout=30)
        ray.get(server.put.remote((0, 2), rollout(3), 0))
        assert tags(path.pop(True)) == [3]
        assert path._prefetched is None     # a finished worker asks nothing ahead: its next pop returns at once
        no_prefetch = QueueDataPath(QueueLink(server, prefetch=False), group=1)
        ray.get(server.put.remote((1, 1), rollout(2), 0))
        assert tags(no_prefetch.pop(False)) == [2] and no_prefetch._prefetched is None
    finally:
        ray.kill(server)


def test_the_lag_bound_drops_stale_rollouts_when_popped(ray_for_module):
    ray = ray_for_module
    learner = rma_learner("exarl-rma", "scheme.max_policy_lag=1", "scheme.queues.selection=binned",
                           "scheme.queues.pop=all", "learner.target_steps=100000")
    try:
        gw = learner.update_worker.local_worker
        while gw.version < 3:
            learner.step()
        server = learner.scheme.queue_server
        # A real rollout, put back as if played with version 0: three versions too old. (The
        # collectors get their next requests when their reports are read.)
        items = []
        while not items:
            gw.col_workers.collect(False)
            _, items, _ = ray.get(server.pop.remote(0, False, 0.5))
        stale = items[0][0]
        ray.get(server.pause_sampling.remote())
        ray.get(server.put.remote((0, 1), stale, 0))
        ray.get(server.resume_sampling.remote())
        dropped = gw.col_workers.stats["dropped_rollouts"]
        stored = gw.storage.num_items
        for _ in range(100):                    # pops (no training: the version stays)
            gw._pop_queues()
            if gw.col_workers.stats["dropped_rollouts"] > dropped:
                break
        assert gw.col_workers.stats["dropped_rollouts"] > dropped
        # Only rollouts within the bound reached the storage and were reported.
        assert all(lag <= 1 for lag in gw._round_info["policy_lags"])
        assert gw.storage.num_items >= stored
    finally:
        learner.stop()
