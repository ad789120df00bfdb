"""The queue data path (scheme.data_path: queues, pytorchrl.scheme.servers.queues):
bounded queues with back-pressure, pop one/all, prefetch, binned/random selection, work
stealing, per-learner routing and refusals, in this process. (On Ray, prefetch and the lag
bound: tests/distributed/test_queues_ray.py; the Scheme's and the command line's refusals in a
child process: tests/cli/test_cli_queues.py; EXARL's six RMA workflows learning:
tests/learning/test_learning_queues.py; the episode budget's global end, with every queue
emptied: tests/distributed/test_work_stealing.py; with the queue server killed:
tests/distributed/test_server_faults.py.)"""

import threading

import pytest

from pytorchrl.config import ConfigError, validate_config
from pytorchrl.scheme.presets import PRESETS
from pytorchrl.scheme.servers.queues import CLOSED, EMPTY, OK, TIMEOUT, QueueServer, queue_options

from cli_helpers import tiny

from queues_helpers import rollout, tags

from queues_helpers import queue_config


#: Two gradient workers (1, 2), each with collectors 1 and 2.
GROUPS = {1: [1, 2], 2: [1, 2]}


# ------------------------------------------------------------------ the server
def test_a_full_queue_makes_the_collector_wait_and_never_exceeds_its_size():
    server = QueueServer(GROUPS, size=2)
    assert server.put((1, 1), rollout(0), 0) == OK and server.put((1, 1), rollout(1), 0) == OK
    assert server.put((1, 1), rollout(2), 0, timeout=0) == TIMEOUT    # full: no room, nothing dropped
    outcome = []
    waiting = threading.Thread(target=lambda: outcome.append(server.put((1, 1), rollout(2), 0)))
    waiting.start()
    waiting.join(0.3)
    assert waiting.is_alive() and server.sizes()[(1, 1)] == 2            # still waiting for room
    assert tags(server.pop(1)[1]) == [0]                                  # a pop makes room ...
    waiting.join(10)
    assert outcome == [OK] and server.sizes()[(1, 1)] == 2                # ... and the put goes in
    stats = server.stats()
    assert stats["max_size"] == 2 and stats["puts"] == 3 and stats["put_blocked_s"] > 0
    # Other collectors' queues are not held up by a full one.
    assert server.put((1, 2), rollout(9), 0, timeout=0) == OK


def test_pop_all_drains_the_queue_oldest_first():
    server = QueueServer(GROUPS, size=4, pop="all")
    for i in range(3):
        server.put((1, 2), rollout(i), version=i)
    outcome, items, stolen = server.pop(1)
    assert outcome == OK and not stolen
    assert tags(items) == [0, 1, 2] and [v for _, v, _, _ in items] == [0, 1, 2]
    assert {c for _, _, c, _ in items} == {(1, 2)} and server.sizes()[(1, 2)] == 0
    assert server.stats()["pops"] == 1 and server.stats()["popped_rollouts"] == 3


def test_binned_selection_reads_only_its_own_bin_oldest_head_first():
    server = QueueServer(GROUPS, size=4, selection="binned")
    server.put((1, 2), rollout("a"), 0)
    server.put((2, 1), rollout("other"), 0)
    server.put((1, 1), rollout("b"), 0)
    server.put((1, 2), rollout("c"), 0)
    popped = [tags(server.pop(1, timeout=0)[1]) for _ in range(3)]
    assert popped == [["a"], ["b"], ["c"]]
    # Its bin is empty: the other gradient worker's queue is not its to read.
    assert server.pop(1, timeout=0) == (EMPTY, [], False)
    assert tags(server.pop(2, timeout=0)[1]) == ["other"]


def test_random_selection_reads_every_collectors_queue():
    server = QueueServer(GROUPS, size=1, selection="random", seed=0)
    seen = set()
    for _ in range(20):
        for g, cols in GROUPS.items():
            for c in cols:
                server.put((g, c), rollout(None), 0, timeout=0)
        for _ in range(4):
            _, items, stolen = server.pop(1, timeout=0)
            seen |= {c for _, _, c, _ in items}
            assert not stolen                 # reading any collector is what random selection does
    assert seen == {(1, 1), (1, 2), (2, 1), (2, 2)}


def test_work_stealing_drains_another_group_once_its_own_is_finished():
    server = QueueServer(GROUPS, size=4, pop="all", steal=True)
    server.put((2, 1), rollout(0), 0)
    server.put((2, 2), rollout(1), 0)
    assert server.pop(1, finished=False, timeout=0)[0] == EMPTY      # its collectors may still put
    outcome, items, stolen = server.pop(1, finished=True, timeout=0)
    assert outcome == OK and stolen and tags(items) == [0]
    assert tags(server.pop(1, finished=True, timeout=0)[1]) == [1]
    assert server.pop(1, finished=True, timeout=0)[0] == EMPTY and server.stats()["stolen_pops"] == 2
    # Without stealing a finished group stays empty.
    no_steal = QueueServer(GROUPS, size=4)
    no_steal.put((2, 1), rollout(0), 0)
    assert no_steal.pop(1, finished=True, timeout=0)[0] == EMPTY


def test_learner_route_puts_into_a_random_learner_queue_with_room():
    server = QueueServer(GROUPS, size=2, route="learner", steal=True, seed=0)
    assert sorted(server.queues) == [(1,), (2,)]
    for i in range(4):
        assert server.put((1, 1), rollout(i), 0, timeout=0) == OK
    assert server.sizes() == {(1,): 2, (2,): 2}                       # a full queue is skipped
    assert server.put((2, 2), rollout(4), 0, timeout=0) == TIMEOUT     # both full: the collector waits
    assert len(server.pop(2, timeout=0)[1]) == 1


def test_a_paused_server_admits_puts_and_a_stopped_one_ends_every_wait():
    server = QueueServer(GROUPS, size=1)
    server.put((1, 1), rollout(0), 0)
    server.pause_sampling()       # the learner waits for its collectors: puts go in beyond the bound
    assert server.put((1, 1), rollout(1), 0, timeout=0) == OK
    server.resume_sampling()
    assert server.put((1, 1), rollout(2), 0, timeout=0) == TIMEOUT
    results = []
    waiting = threading.Thread(target=lambda: results.append(server.pop(2)))
    waiting.start()
    server.stop()
    waiting.join(10)
    assert results == [(CLOSED, [], False)] and server.put((1, 1), rollout(3), 0) == CLOSED


@pytest.mark.parametrize("options,words", [
    ({"sizes": 2}, "unknown queues keys ['sizes']"),
    ({"size": 0}, "size must be a positive integer"),
    ({"pop": "some"}, "pop must be one of 'one', 'all'"),
    ({"route": "learner", "selection": "random"}, "with route='learner' each gradient worker reads its own"),
    ({"steal": "yes"}, "steal must be true or false"),
])
def test_bad_queue_options_are_refused(options, words):
    with pytest.raises(ValueError) as info:
        queue_options(options)
    assert words in str(info.value)


@pytest.mark.parametrize("config,path,words", [
    (tiny(scheme={"queues": {"size": 2}}), "scheme.queues", "has no effect with scheme.data_path: direct"),
    (queue_config({"queues": {"sise": 2}}), "scheme.queues.sise", "did you mean 'size'?"),
    (queue_config({"queues": {"pop": "most"}}), "scheme.queues.pop", "one of 'one', 'all'"),
    (queue_config({"col_workers_communication": "sync"}), "scheme.data_path",
     "needs asynchronous collection (scheme.col_workers_communication: async)"),
    (queue_config({"num_col_workers": 1}), "scheme.data_path", "needs remote collectors"),
    (queue_config({"replay_server": {"num_cpus": 0}}), "scheme.replay_server", "has no effect with scheme.data_path: queues"),
    (queue_config({"queues": {"route": "learner", "selection": "random"}}), "scheme.queues.selection",
     "with route: learner"),
    (queue_config({"col_policy": "server"}), "scheme.col_policy", "server with scheme.data_path: queues"),
])
def test_configuration_refuses_what_the_queue_path_cannot_use(config, path, words):
    with pytest.raises(ConfigError) as info:
        validate_config(config)
    assert str(info.value).startswith(f"config error: {path}: ") and words in str(info.value), str(info.value)


def test_a_resolved_queue_configuration_validates_again():
    config = validate_config(queue_config({"queues": {"size": 2}}))
    assert config["scheme"]["queues"] == {"size": 2, "pop": "one", "prefetch": True, "selection": "binned",
                                          "steal": False, "route": "collector", "kind": "fifo", "end": "all",
                                          "num_cpus": 0.25}
    assert validate_config(config)["scheme"] == config["scheme"]


# ------------------------------------------------------------------------ Ray


def test_a_queue_option_written_next_to_a_preset_keeps_its_other_options():
    config = validate_config(tiny(scheme={"preset": "exarl-rma-queue-pop-all", "queues": {"size": 8}}))
    assert config["scheme"]["queues"] == {**PRESETS["exarl-rma-queue-pop-all"].scheme["queues"], "size": 8}
