"""The garbage collector's pause (pytorchrl/gc_pause.py) seen from a fresh interpreter: torch
imported after the library comes frozen with the collector on, and the data servers'
modules import without torch (the pause itself: tests/unit/test_gc_pause.py)."""


def test_torch_imported_after_the_library_is_frozen_and_leaves_the_collector_on():
    import subprocess
    import sys
    # torch is not imported with the library; the first module that imports it (here the
    # code itself) has it imported paused, then frozen.
    code = ("import gc, sys, pytorchrl; before = 'torch' in sys.modules; import torch; "
            "print(before, gc.isenabled(), gc.get_freeze_count() > 100000, torch.__spec__.loader is torch.__loader__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "True", "True", "True"], out.stderr[-2000:]


def test_the_data_servers_modules_do_without_torch():
    import subprocess
    import sys
    code = ("import sys; import pytorchrl.scheme.servers.queues, pytorchrl.scheme.servers.weight_board, "
            "pytorchrl.scheme.servers.worker_proxy; from pytorchrl.scheme import Scheme, WorkerError; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code.replace("from pytorchrl.scheme import Scheme, WorkerError; ", "")],
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False"], out.stderr[-2000:]
    # The package's names still import (Scheme on first use, with torch).
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True"], out.stderr[-2000:]
