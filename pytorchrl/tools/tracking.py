"""Experiment tracking with Weights & Biases (``learner.wandb``), as pytorchrl's scripts do it.

A :class:`WandbSink` is one more sink of :class:`pytorchrl.tools.metrics.RunLog`, next to
TensorBoard: every row of metrics.csv becomes a ``wandb.log`` call (plotted against
``Scheme/EnvSteps``), every hot-swap a ``HotSwap/<kind>.<name>`` point, and the run's
``summary.yaml`` the W&B summary. The run's configuration holds the resolved YAML
configuration and ``Scheme.get_agent_components()`` (under ``agent_components``).

``mode: offline`` writes the run under ``<dir>/wandb/offline-run-*`` without any network
(``wandb sync`` uploads it later); ``mode: disabled`` turns W&B off without needing the
package. The run is finished when the job ends: with exit code 0 after training or Ctrl-C,
1 after an error.
"""

import os

# The configuration refuses learner.wandb without the package before anything starts: the
# test and the import are its, shared here.
from pytorchrl.config.wandb_options import INSTALL_HINT, import_wandb, wandb_wanted  # noqa: F401

#: Metric every W&B chart is plotted against (the x axis of metrics.csv too).
STEP_METRIC = "Scheme/EnvSteps"

#: File of the run directory holding the W&B run id: ``pytorchrl resume`` continues that run.
RUN_ID_FILE = "wandb-run-id.txt"


class TrackingError(RuntimeError):
    """The W&B run could not start (not logged in for ``mode: online``, server unreachable,
    a project the user may not write to): one line naming the cause."""


class WandbSink:
    """Sends what a run logs to a Weights & Biases run.

    Parameters
    ----------
    options : dict
        The resolved ``learner.wandb`` section: ``project``, ``entity``, ``name``, ``group``,
        ``tags``, ``notes``, ``mode`` (online, offline) and ``dir`` (null: the run directory).
    run_dir : str
        The run directory; the run's name defaults to its base name, and the W&B run id is
        kept in it so that a resumed job continues the same W&B run.
    config : dict
        The resolved configuration, logged as the W&B run's config.
    components : dict
        ``Scheme.get_agent_components()``, logged in the config under ``agent_components``.
    resume : bool
        Continue the W&B run whose id the run directory holds (``pytorchrl resume``).
    """

    def __init__(self, options, run_dir, config, components, resume=False):
        wandb = import_wandb()
        self._wandb = wandb
        directory = options["dir"] or run_dir
        os.makedirs(directory, exist_ok=True)
        id_path = os.path.join(run_dir, RUN_ID_FILE)
        run_id = None
        if resume and os.path.exists(id_path):
            with open(id_path) as f:
                run_id = f.read().strip() or None
        try:
            self.run = wandb.init(
                project=options["project"], entity=options["entity"], group=options["group"], tags=options["tags"],
                notes=options["notes"], mode=options["mode"], dir=directory,
                name=options["name"] or os.path.basename(os.path.normpath(run_dir)),
                id=run_id, resume="allow" if run_id else None,
                config={**config, "agent_components": dict(components)},
                # The job's own output already reports progress: no W&B banner in it.
                settings=wandb.Settings(silent=True, console="off"),
                # A process may hold several runs (the members of a population).
                reinit="create_new")
        except wandb.errors.Error as exc:
            raise TrackingError(f"learner.wandb: the W&B run could not start ({options['mode']} mode): "
                                f"{' '.join(str(exc).split())}") from None
        with open(id_path, "w") as f:
            f.write(self.run.id)
        # Every chart against env steps, as metrics.csv and TensorBoard draw them.
        self.run.define_metric(STEP_METRIC)
        self.run.define_metric("*", step_metric=STEP_METRIC)

    def scalars(self, metrics, step):
        """Log one row of metrics (``name -> number``) taken at env step ``step``."""
        self.run.log({**metrics, STEP_METRIC: step})

    def hot_swap(self, step, kind, name, value, text):
        """Log a hot-swap: its value as ``HotSwap/<kind>.<name>`` when it is a number, and
        ``text`` (the line of hot_swaps.csv in words) under ``HotSwaps``."""
        row = {STEP_METRIC: step, "HotSwaps": text}
        if value is not None:
            row[f"HotSwap/{kind}.{name}"] = value
        self.run.log(row)

    def summary(self, values):
        """Put the end-of-run results (``summary.yaml``: returns, steps, time) in the run's summary."""
        self.run.summary.update({k: v for k, v in values.items() if v is not None})

    def close(self, failed=False):
        """Finish the W&B run (exit code 1 when the job ended with an error)."""
        if self.run is not None:
            self.run.finish(exit_code=1 if failed else 0)
            self.run = None


def wandb_sink(options, run_dir, config, components, resume=False):
    """A :class:`WandbSink` for ``options`` (the ``learner.wandb`` section), or None when it
    asks for no run (absent, or mode ``disabled``). Parameters as ``WandbSink``'s."""
    if not wandb_wanted(options):
        return None
    return WandbSink(options, run_dir, config, components, resume=resume)


__all__ = ["WandbSink", "TrackingError", "wandb_sink", "wandb_wanted", "import_wandb", "INSTALL_HINT", "RUN_ID_FILE"]
