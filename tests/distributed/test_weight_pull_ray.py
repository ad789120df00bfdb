"""Weight boards as Ray actors: one that never answers does not hold collection up, and a
remote board delivers the published version (in this process: tests/unit/test_weight_pull.py)."""

from pytorchrl.scheme.servers.weight_board import BoardPublisher, WeightBoard, start_remote_board

from weight_pull_helpers import ROLLOUT, acting_weights_equal, make_collector, shifted


def test_a_board_that_never_answers_does_not_hold_collection_up(ray_session):
    ray = ray_session
    # An actor that can never be scheduled: its answers never come.
    board = ray.remote(WeightBoard).options(num_cpus=0, resources={"no_such_resource": 1}).remote()
    try:
        collector = make_collector(board, every=2)
        for _ in range(3):
            _, info = collector.collect_data()
            assert info["collected_samples"] == ROLLOUT and info["weight_swaps"] == [] and info["version"] == 0
        # It asked once and kept stepping (the question is still out).
        assert collector._board_reader.checks == 15 and collector._board_reader._question is not None
    finally:
        ray.kill(board)


def test_a_remote_board_delivers_the_published_version(ray_session):
    board = start_remote_board()
    try:
        collector = make_collector(board, every=1)
        v1 = shifted(collector.get_weights(), 0.25)
        publisher = BoardPublisher(board, lambda: v1)
        publisher.publish(3)
        swaps = []
        for _ in range(5000):     # answers take milliseconds: a few rollouts of 10 steps
            _, info = collector.collect_data()
            swaps += info["weight_swaps"]
            if swaps:
                break
        assert [v for _, v in swaps] == [3] and collector.actor_version == 3
        assert acting_weights_equal(collector, v1)
    finally:
        ray_session.kill(board)
