"""The queue server's rules for several learners, in this process: a pop asked ahead steps
aside while another group is finished, one work counter and one entry per actor in the
record of active actors, and a circular queue that overwrites its oldest rollout (on Ray:
tests/distributed/test_work_stealing.py)."""

from pytorchrl.scheme.servers.queues import EMPTY, OK, QueueServer


#: Two gradient workers (1, 2), each with collectors 1 and 2.
GROUPS = {1: [1, 2], 2: [1, 2]}


def rollout(tag):
    return {"tag": tag}


def test_a_pop_asked_ahead_steps_aside_while_another_group_is_finished():
    server = QueueServer(GROUPS, size=4, pop="all", steal=True)
    server.put((2, 1), rollout("a"), 0)
    # No group finished: the busy owner's pop asked ahead takes its data.
    assert server.pop(2, prefetch=True, timeout=0)[0] == OK
    assert server.pop(1, finished=True, timeout=0)[0] == EMPTY      # group 1 is now finished
    server.put((2, 1), rollout("b"), 0)
    # While group 1 is finished the owner's prefetch leaves it queued (at once, no wait) ...
    assert server.pop(2, prefetch=True, timeout=5) == (EMPTY, [], False)
    # ... for the finished learner, which steals it.
    outcome, items, stolen = server.pop(1, finished=True, timeout=0)
    assert (outcome, [d["tag"] for d, *_ in items], stolen) == (OK, ["b"], True)
    # The owner's own pop (it needs data) still takes what is queued first.
    server.put((2, 2), rollout("c"), 0)
    assert server.pop(2, timeout=0)[1][0][0] == {"tag": "c"}
    stats = server.stats()
    assert (stats["stolen_pops"], stats["stolen_rollouts"], stats["active_groups"]) == (1, 1, 1)


def test_one_work_counter_and_one_entry_per_actor_in_the_record_of_active_actors():
    server = QueueServer(GROUPS, size=4, pop="all", steal=True)
    server.set_episode_budget(3)
    # Collector (1, 1) is fast: it claims and hands over two episodes while (2, 1) plays one.
    assert server.claim((1, 1), 1) == (True, 1)
    assert server.claim((2, 1), 1) == (True, 1)
    assert server.active_actors() == {(1, 1): True, (1, 2): False, (2, 1): True, (2, 2): False}
    server.settle((1, 1), 1, 1, 20)
    assert server.claim((1, 1), 1) == (True, 1)   # the third and last episode of the budget
    assert server.claim((1, 2), 1) == (False, None) and server.claim((2, 2), 1) == (False, None)
    # A rollout that did not finish its episode (a long one) frees the claim: claimed again.
    server.settle((1, 1), 1, 0, 64)
    assert server.claim((1, 1), 1) == (True, 1)
    server.settle((1, 1), 1, 1, 30)
    # Group 1 has no active actor and nothing is left to claim: finished. Group 2's actor is
    # still playing: group 2 is not, and its learner may not steal.
    stats = server.stats()
    assert (stats["active_groups"], stats["active_actors"], stats["counted_episodes"]) == (1, 1, 2), stats
    server.put((2, 1), rollout("a"), 0)
    assert server.pop(2, prefetch=True, timeout=0) == (EMPTY, [], False)    # steps aside for group 1
    outcome, items, stolen = server.pop(1, timeout=0)
    assert (outcome, [d["tag"] for d, *_ in items], stolen) == (OK, ["a"], True)
    # Episodes a dead server took with it are given back to the counter.
    server.settle((2, 1), 1, 1, 10)
    server.release(1)
    assert server.claim((2, 2), 1) == (True, 1)


def test_a_circular_queue_overwrites_its_oldest_rollout_and_never_waits():
    server = QueueServer(GROUPS, size=2, kind="circular")
    for tag in "abc":
        assert server.put((1, 1), rollout(tag), 0, timeout=0) == OK
    assert [d["tag"] for d, *_ in server.pop(1, timeout=0)[1]] == ["b"]
    stats = server.stats()
    assert stats["overwritten"] == 1 and stats["max_size"] == 2
    fifo = QueueServer(GROUPS, size=2)
    for tag in "ab":
        fifo.put((1, 1), rollout(tag), 0)
    assert fifo.put((1, 1), rollout("c"), 0, timeout=0) == "timeout"
