"""Tools for run directories: what a training run writes, and the commands that read it back.

A run directory (``pytorchrl train`` makes one) holds:

======================  ==============================================================
``config.yaml``         the resolved configuration (every default filled in)
``metrics.csv``         one row every ``learner.log_every`` s and 1/200 of the run, a column per metric
``tensorboard/``        the same metrics as TensorBoard event files, plus the hot-swaps
``hot_swaps.csv``       every parameter change (schedule, live ``pytorchrl set``, resume)
``model.state_dict``    the actor's weights
``checkpoint.pt``       the full training state (for ``pytorchrl resume``)
``checkpoint.prev.pt``  the checkpoint saved before it (used by ``resume`` if the newest is damaged)
``summary.yaml``        steps, time, final returns (at the end of a run)
``monitor/``            one CSV line per finished episode
``control/``            live-control requests and their acknowledgements
======================  ==============================================================

Modules: :mod:`~pytorchrl.tools.metrics` (CSV and TensorBoard logs),
:mod:`~pytorchrl.tools.progress` (the progress line), :mod:`~pytorchrl.tools.live_control`
(live control of a running job), :mod:`~pytorchrl.tools.evaluate` and
:mod:`~pytorchrl.tools.plot` (what ``pytorchrl evaluate`` and ``pytorchrl plot`` do),
:mod:`~pytorchrl.tools.session` (a training job: ``pytorchrl train`` and ``resume``).
"""

import os

#: File names inside a run directory.
CONFIG = "config.yaml"
METRICS = "metrics.csv"
HOT_SWAPS = "hot_swaps.csv"
TENSORBOARD = "tensorboard"
MODEL = "model.state_dict"
CHECKPOINT = "checkpoint.pt"
PREVIOUS_CHECKPOINT = "checkpoint.prev.pt"   # pytorchrl.checkpoint.previous_path(CHECKPOINT)
SUMMARY = "summary.yaml"
#: Per-episode results of a collection-only run (scheme.num_grad_workers: 0).
RESULTS = "results.csv"
#: Reward against env steps and wall-clock time, drawn at the end with learner.plot_at_end.
REWARD_PLOT = "reward_vs_time.png"
CONTROL = "control"


def process_tmp_path(path):
    """The temporary name of ``path`` for this process (``<path>.<pid>.tmp``), for a file of
    the run directory that two processes may write at once (the configuration and logs of a
    Ray Tune trial that Tune starts again in a new actor while the previous one still
    closes): each renames its own temporary file into place, never the other's.
    (``pytorchrl.checkpoint.remove_orphans`` removes those a killed process left.)"""
    return f"{path}.{os.getpid()}.tmp"


__all__ = ["process_tmp_path", "CONFIG", "METRICS", "HOT_SWAPS", "TENSORBOARD", "MODEL", "CHECKPOINT",
           "PREVIOUS_CHECKPOINT", "SUMMARY", "RESULTS", "REWARD_PLOT", "CONTROL"]
