"""The queue data path's refusals in a child process: the Scheme's, and the command line's
one line and exit status 2 for queues with synchronous collectors (the queues themselves:
tests/unit/test_queues.py)."""

import pytest

from pytorchrl.scheme import Scheme

from cli_helpers import assert_one_line_error, pytorchrl, write_config
from distributed_fixtures import factories
from queues_helpers import queue_config


@pytest.mark.parametrize("kwargs,words", [
    ({"queues": {"size": 2}}, "queues options act with data_path='queues' only"),
    ({"data_path": "queues", "num_col_workers": 1}, "needs remote collectors: with num_col_workers=1"),
    ({"data_path": "queues", "num_col_workers": 2}, "needs asynchronous collection"),
    ({"data_path": "queues", "num_col_workers": 2, "col_workers_communication": "async",
      "replay_server": {"num_cpus": 0}}, "replay_server options have no effect with data_path='queues'"),
    ({"data_path": "queues", "num_col_workers": 2, "col_workers_communication": "async", "num_grad_workers": 0},
     "data_path='queues' with num_grad_workers=0 (collection only)"),
    ({"data_path": "queues", "num_col_workers": 2, "col_workers_communication": "async", "col_policy": "server"},
     "col_policy='server' with data_path='queues' is not supported"),
])
def test_scheme_refuses_what_the_queue_path_cannot_run(kwargs, words):
    import pytorchrl as prl
    if kwargs.get("col_workers_communication") == "async":
        kwargs["col_workers_communication"] = prl.ASYNC
    with pytest.raises(ValueError) as info:
        Scheme(**factories(), **kwargs)       # refused before any worker (or Ray) starts
    assert words in str(info.value)


def test_command_line_refuses_queues_with_synchronous_collectors(tmp_path):
    path = write_config(tmp_path, queue_config({"col_workers_communication": "sync"}))
    assert_one_line_error(pytorchrl("train", path, cwd=tmp_path), "scheme.data_path: queues needs")
