"""The garbage collector paused around the library's large imports (pytorchrl/gc_pause.py)
is put back as it was found, and the optimizer built under the pause is torch's (in a fresh
interpreter: tests/cli/test_gc_pause_processes.py)."""

import gc

import pytest
import torch

from pytorchrl.agent.algorithms.base import make_adam
from pytorchrl.gc_pause import gc_paused, import_and_freeze


@pytest.fixture
def collector_state():
    enabled = gc.isenabled()
    yield
    (gc.enable if enabled else gc.disable)()


def test_the_collector_is_paused_inside_and_enabled_again_after(collector_state):
    gc.enable()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():                   # nested: the outer pause holds after the inner one
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_disabled_by_the_caller_stays_disabled(collector_state):
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()


def test_an_error_inside_still_puts_the_collector_back(collector_state):
    gc.enable()
    with pytest.raises(ValueError):
        with gc_paused():
            raise ValueError("inside")
    assert gc.isenabled()


def test_make_adam_builds_torchs_adam_and_leaves_the_collector_on(collector_state):
    gc.enable()
    net = torch.nn.Linear(3, 2)
    opt = make_adam(net.parameters(), lr=1e-2, eps=1e-6)
    assert isinstance(opt, torch.optim.Adam) and gc.isenabled()
    assert opt.param_groups[0]["lr"] == 1e-2 and opt.param_groups[0]["eps"] == 1e-6
    before = net.weight.detach().clone()
    net(torch.ones(4, 3)).sum().backward()
    opt.step()
    assert not torch.equal(before, net.weight)


def test_import_and_freeze_moves_what_exists_out_of_later_collections(collector_state):
    frozen = gc.get_freeze_count()
    kept = [[] for _ in range(100)]           # tracked containers that exist before the call
    module = import_and_freeze("json")
    assert module.dumps([1]) == "[1]" and gc.isenabled()
    assert gc.get_freeze_count() >= frozen + len(kept)
    # (Frozen objects are still freed when their last reference goes: only cycles stay.)
