"""Rollouts compressed by Ray collectors on the replay-server and queue paths reach the
learner as they were sent (what is refused: tests/unit/test_compression_paths.py)."""

import os

import pytest

from pytorchrl.config import build_learner, load_config

from cli_helpers import EXARL


def _train(name, *overrides):
    learner = build_learner(load_config(os.path.join(EXARL, f"{name}.yaml"),
                                        ["learner.tensorboard=false", "env.test_env=false",
                                         "scheme.col_compress_data=true", *overrides]))
    raw = sent = 0
    try:
        while not learner.done():
            for info in learner.step():
                raw += info.get("raw_bytes", 0)
                sent += info.get("sent_bytes", 0)
        return learner, raw, sent, learner.scheme.replay_stats() or learner.scheme.queue_stats()
    finally:
        learner.stop()


@pytest.mark.timeout(300)
def test_collectors_compress_on_the_replay_server_and_queue_paths(ray_for_module):
    learner, raw, sent, stats = _train("drl-actor-model", "learner.target_steps=1500",
                                       "scheme.replay_server.min_size_to_sample=200")
    # Int64 actions and 0/1 flags compress: fewer bytes went than the rollouts hold.
    assert 0 < sent < raw, (raw, sent)
    assert stats["inserts"] >= 1000 and learner.num_updates > 0   # the server unpacked and trained on them
    learner, raw, sent, stats = _train("exarl-rma", "learner.target_steps=800")
    assert 0 < sent < raw, (raw, sent)
    # The queues held the compressed rollouts; the gradient worker unpacked and trained on them.
    assert stats["popped_rollouts"] > 0 and stats["bytes_in"] < raw and learner.num_updates > 0
