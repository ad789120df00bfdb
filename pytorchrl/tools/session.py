"""One training job in a run directory: what ``pytorchrl train`` and ``pytorchrl resume`` run.

:class:`TrainingSession` builds the Learner of a configuration (or restores it from the
run's checkpoint), trains it while showing progress, logging metrics, answering live
changes (``pytorchrl set``) and saving checkpoints, and finishes with a saved model, an
evaluation and ``summary.yaml``. ``pytorchrl.cli.run_training`` is a thin wrapper around it.

Checkpoints. The model and the full state are saved every ``learner.save_every`` seconds
and whenever the env steps pass a multiple of ``learner.save_every_steps`` (either one
triggers a save), at the end and on Ctrl-C. ``checkpoint.pt`` is written durably and
atomically and the one it replaces is kept as ``checkpoint.prev.pt``
(:mod:`pytorchrl.checkpoint`). A save that fails while training (disk full) is reported
on a line of its own and tried again at the next interval: the previous checkpoint is
intact, and the run may still end well. A failed final save (end or Ctrl-C) is an error
(exit status 2). Temporary files left by an interrupted save are removed when a job starts.

Worker failures. Remote workers that die are replaced and environments that fail are
rebuilt by the scheme (``scheme.max_worker_restarts``, ``scheme.worker_restart_delay_s``,
``scheme.on_env_error``); each restart is a line of the job's output and is counted in
metrics.csv (``Scheme/WorkerRestarts``, ``Scheme/EnvRestarts``). When the run cannot go on
(a worker that keeps dying, an environment error under ``on_env_error: stop``, any other
failure of a remote worker) the job saves the model and a checkpoint of the last complete
update and ends with one line: exit status 2, and ``pytorchrl resume`` continues it.

Numerical faults. An update whose gradient is NaN or infinite is skipped (the weights do
not change), said on one line at the first of a run of skips and counted in metrics.csv
(``Scheme/SkippedUpdates``). After ``learner.max_nonfinite_updates`` skips in a row the job
stops like a failed worker: the model and checkpoint hold the weights of the last finite
update (weights with NaN or infinite values are never saved over a checkpoint), one line
says why, exit status 2.

Resuming. ``checkpoint.pt`` is used; if it cannot be read (missing, empty, truncated,
random bytes, failed checksum) and ``checkpoint.prev.pt`` can, the job says so on one
line and resumes from that older one. A readable checkpoint that does not fit the run
(another algorithm, another network, an older format) is an error: the previous one would
not fit either, and silently going back in time would hide the mistake.
"""

import datetime
import math
import os
import shutil
import sys
import time

import pytorchrl
from pytorchrl.agent.vec_env import EnvError
from pytorchrl.checkpoint import CheckpointError, SaveError, previous_path, remove_orphans
from pytorchrl.config import ConfigError, build_learner, dump_config
from pytorchrl.learner import NonFiniteUpdatesError
from pytorchrl.scheme.base.ray_runtime import WorkerError
from pytorchrl.tools import (CHECKPOINT, CONFIG, HOT_SWAPS, METRICS, MODEL, PREVIOUS_CHECKPOINT, RESULTS, REWARD_PLOT,
                             SUMMARY, process_tmp_path)
from pytorchrl.tools.live_control import ControlServer, apply_changes
from pytorchrl.tools.interrupt import StopOnInterrupt
from pytorchrl.tools.metrics import RunLog
from pytorchrl.tools.progress import ProgressDisplay, format_status
from pytorchrl.tools.tracking import TrackingError, wandb_sink

#: Seconds between two redraws of the live status line.
REDRAW_EVERY_S = 0.5
#: metrics.csv and TensorBoard get a row at least every target_steps / CURVE_POINTS env
#: steps (besides every learner.log_every seconds), so that short runs draw smooth curves.
CURVE_POINTS = 200
#: Files of a run directory written through a temporary file (``<name>.tmp``); such a
#: temporary file found when a job starts was left by an interrupted save.
ATOMIC_FILES = (CHECKPOINT, MODEL, CONFIG, METRICS, HOT_SWAPS)


class UsageError(Exception):
    """A problem the user can fix, reported as one line ``error: <message>``."""


def write_config(run_dir, config, note):
    """Write the resolved configuration to ``<run_dir>/config.yaml`` atomically.

    Parameters
    ----------
    run_dir : str
        Run directory.
    config : dict
        Resolved configuration.
    note : str
        End of the header comment (where the configuration came from).
    """
    path = os.path.join(run_dir, CONFIG)
    tmp = process_tmp_path(path)
    with open(tmp, "w") as f:
        f.write(f"# Resolved configuration of this run, written by pytorchrl {pytorchrl.__version__} "
                f"on {datetime.datetime.now():%Y-%m-%d %H:%M:%S} {note}\n")
        f.write(dump_config(config))
    os.replace(tmp, path)


class _StoppedSchedule:
    """Stands in for a schedule whose parameter was set live: the user took it over.

    It keeps the place (and ``last_sent``) of the schedule in ``learner.schedules``, whose
    order the checkpoint relies on."""

    def __init__(self, schedule):
        self.schedule = schedule
        self.name, self.target = schedule.name, schedule.target
        self.last_sent = schedule.last_sent

    def due(self, step, total_steps):
        return None


def _stop_schedules(learner, target, name):
    """Stop the schedules of parameter ``target.name``; returns their indices."""
    stopped = []
    for i, sched in enumerate(learner.schedules):
        if sched.target == target and sched.name == name and not isinstance(sched, _StoppedSchedule):
            learner.schedules[i] = _StoppedSchedule(sched)
            stopped.append(i)
    return stopped


def _schema_check(config):
    """``check(target, name, value)`` validating a live change against the configuration
    schema (type and range of the parameter, as in the configuration file)."""
    from pytorchrl.config.schema import algorithm_keys, storage_keys
    from pytorchrl.config.values import check_value, strict_key

    keys = {"algorithm": algorithm_keys(config["algorithm"]["name"]),
            "storage": storage_keys(config["storage"]["name"])}

    def check(target, name, value):
        key = keys[target].get(name)
        if key is None:
            return value
        try:
            return check_value(strict_key(key), value, f"{target}.{name}")
        except ConfigError as exc:
            raise ValueError(f"{exc.path}: {exc.problem}") from None
    return check


def _config_differences(old, new, section):
    """Keys of ``section`` (other than ``name``) whose value differs between two configs."""
    return [(k, v) for k, v in new[section].items() if k != "name" and old[section].get(k) != v]


def _policy_label(config):
    """What acted in a collection-only run, for its results: "random", the saved model
    loaded (``actor.restart_model``), or "initial" (a freshly built, untrained actor)."""
    if config["scheme"]["col_policy"] == "random":
        return "random"
    return config["actor"]["restart_model"] or "initial"


def _finite(value):
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def save_due(opts, seconds, last_steps, steps):
    """Whether a checkpoint is due under the ``learner`` section ``opts``: ``seconds`` since
    the last save reached ``save_every``, or the env steps passed a multiple of
    ``save_every_steps`` between ``last_steps`` (at the last save) and ``steps``."""
    every_s, every_steps = opts["save_every"], opts.get("save_every_steps")
    if every_s and seconds >= every_s:
        return True
    return bool(every_steps) and steps // every_steps > last_steps // every_steps


class TrainingSession:
    """Train the Learner of ``config`` in ``run_dir``: one ``pytorchrl train`` or ``resume`` job.

    ``run()`` does everything: ``build``, ``resume`` (when asked), ``start``, ``train``,
    ``finish`` and, always, ``close``. The steps are methods so that each can be read,
    tested and changed on its own.

    Parameters
    ----------
    config : dict
        Resolved configuration.
    run_dir : str
        Existing run directory (``pytorchrl.cli.make_run_dir``); the model and logs go there.
    stream : file or None
        Where progress is printed (default: stdout).
    remove_run_dir_on_failure : bool
        Delete ``run_dir`` if the scheme cannot be built (set when it was created for
        this run: a directory holding only the configuration would pose as a run).
    progress : str
        Progress display: "auto", "live", "plain" or "quiet" (see ``ProgressDisplay``).
    resume : dict or None
        Continue from ``<run_dir>/checkpoint.pt`` (or ``checkpoint.prev.pt`` when the newest
        is damaged): ``{"previous": config the checkpoint was made with}``. Algorithm and
        storage values that differ in ``config`` are applied as hot-swaps after loading.
    append_logs : bool
        A new learner whose state comes later from elsewhere (a Ray Tune trial restarted
        in its run directory, which then loads a checkpoint of Tune's): keep the rows of
        metrics.csv and hot_swaps.csv found in ``run_dir`` and append to them.

    Attributes
    ----------
    learner : Learner or None
        Built by ``build``.
    saved_step : int or None
        Env steps of the newest complete checkpoint of the run (None: none yet).
    """

    def __init__(self, config, run_dir, stream=None, remove_run_dir_on_failure=False, progress="auto",
                 resume=None, append_logs=False):
        self.config = config
        self.append_logs = append_logs
        self.opts = config["learner"]
        self.run_dir = run_dir
        self.stream = stream or sys.stdout
        self.remove_run_dir_on_failure = remove_run_dir_on_failure
        self.progress = progress
        self.resume_from = resume
        self.learner = self.display = self.log = self.control = None
        self.stopped_schedules = []   # indices in learner.schedules, saved in the checkpoint
        self.saved_step = None
        self._notes = []              # lines for the user, shown once the display exists
        self._keep_previous = True    # rotate checkpoint.pt to checkpoint.prev.pt on the next save
        self._check = None
        self.metrics = {}             # the last row written to metrics.csv
        self._shown_step = None       # env step of the last progress line shown
        self._lag = None              # the last policy lag seen (shown on the status line)
        self._start_steps = 0
        self._last_log = self._last_save = self._next_redraw = 0.0
        self._save_step_mark = 0      # env steps at the last save attempt (step interval)

    # ------------------------------------------------------------------ set-up
    def build(self):
        """Remove temporary files left by an interrupted save and build the Learner.

        A component constructor refusing a value the schema let through (ValueError,
        TypeError) becomes a ``UsageError``; with ``remove_run_dir_on_failure`` the run
        directory is deleted on any failure.
        """
        removed = remove_orphans(self.run_dir, ATOMIC_FILES)
        if removed:
            self._notes.append(f"removed {', '.join(removed)}: left by a save that was interrupted")
        try:
            self.learner = build_learner(self.config, log_dir=self.run_dir)
        except BaseException as exc:
            if self.remove_run_dir_on_failure:
                shutil.rmtree(self.run_dir, ignore_errors=True)
            if isinstance(exc, (ValueError, TypeError)) and not isinstance(exc, ConfigError):
                # Raised by a component's constructor: a value the schema let through.
                raise UsageError(str(exc)) from exc
            raise
        return self.learner

    def _load_checkpoint(self):
        """Load checkpoint.pt, or checkpoint.prev.pt when checkpoint.pt cannot be read; returns
        the checkpoint's ``extra``."""
        path = os.path.join(self.run_dir, CHECKPOINT)
        try:
            return self.learner.load_checkpoint(path) or {}
        except CheckpointError as exc:
            newest = exc
        previous = previous_path(path)
        # Only a file that cannot be read is replaced by the older one (read before
        # anything is changed): a readable one that does not fit the run is the user's to fix.
        if not newest.damaged or not os.path.exists(previous):
            raise UsageError(f"cannot resume from {path}: {newest.cause}") from None
        try:
            extra = self.learner.load_checkpoint(previous) or {}
        except CheckpointError as exc:
            raise UsageError(f"cannot resume from {path}: {newest.cause}; nor from {PREVIOUS_CHECKPOINT}: "
                             f"{exc.cause}") from None
        self._notes.append(f"{CHECKPOINT} cannot be used: {newest.cause}; resuming from {PREVIOUS_CHECKPOINT} "
                           f"({self.learner.num_samples_collected:,} env steps), the checkpoint saved before it")
        # The next save replaces the damaged file without making it the previous checkpoint.
        self._keep_previous = False
        return extra

    def resume(self):
        """Restore the Learner from the run's checkpoint (see ``_load_checkpoint``), stop the
        schedules that were stopped, refuse a run that has reached its target, and rewrite
        config.yaml with this job's configuration."""
        learner = self.learner
        extra = self._load_checkpoint()
        self.saved_step = learner.num_samples_collected
        for i in extra.get("stopped_schedules", []):
            if i < len(learner.schedules):
                self.stopped_schedules.append(i)
                learner.schedules[i] = _StoppedSchedule(learner.schedules[i])
        if learner.done():
            raise UsageError(f"the run already has {learner.num_samples_collected:,} env steps, "
                             f"learner.target_steps is {learner.target_steps:,}: raise it, e.g. "
                             f"'pytorchrl resume {self.run_dir} learner.target_steps={2 * learner.target_steps}'")
        write_config(self.run_dir, self.config, f"(resumed at {learner.num_samples_collected} env steps)")

    def start(self):
        """Open the display, the logs and the control server; apply the resume overrides."""
        learner, config, resuming = self.learner, self.config, self.resume_from is not None
        self.display = ProgressDisplay(learner.target_steps, self.stream, self.progress)
        self.log = self._open_log(learner.num_samples_collected if resuming else
                                  math.inf if self.append_logs else None)
        for note in self._notes:
            self.display.message(note)
        self.display.message(f"{'resuming' if resuming else 'training'} {config['algorithm']['name']} on "
                             f"{config['env']['id']}: {learner.num_samples_collected:,}/"
                             f"{self.opts['target_steps']:,} env steps; run directory {self.run_dir}")
        if resuming:
            for target in ("algorithm", "storage"):
                for name, value in _config_differences(self.resume_from["previous"], config, target):
                    if target == "algorithm":
                        learner.update_algorithm_parameter(name, value)
                    else:
                        learner.update_storage_parameter(name, value)
                    # A value set on resume wins over the schedule of the same parameter.
                    self.stopped_schedules.extend(_stop_schedules(learner, target, name))
            for step, kind, name, value in self.log.record_hot_swaps("resume"):
                self.display.message(f"changed on resume: {kind}.{name} = {value!r}")
        self._check = _schema_check(config)
        # Restarts of workers and environments are lines of the job's output.
        learner.on_worker_event = lambda text: self.display.message(
            f"at {self.learner.num_samples_collected:,} env steps: {text}")
        learner.on_warning = self.display.message
        self._open_control()

    def _open_log(self, continue_from_step):
        """The RunLog of the run directory, with a W&B sink when ``learner.wandb`` asks for one
        (a resumed job, ``continue_from_step`` finite, continues the run's W&B run).

        Parameters
        ----------
        continue_from_step : int or float or None
            As ``RunLog``'s.
        """
        resuming = continue_from_step is not None and continue_from_step != math.inf
        try:
            sink = wandb_sink(self.opts.get("wandb"), self.run_dir, self.config,
                              self.learner.scheme.get_agent_components(), resume=resuming)
        except TrackingError as exc:
            raise UsageError(str(exc)) from None
        return RunLog(self.run_dir, self.learner, tensorboard=self.opts["tensorboard"],
                      continue_from_step=continue_from_step, sinks=[sink], warn=self.display.message)

    def _open_control(self):
        """Answer live changes in the run directory; the intervals start now."""
        self.control = ControlServer(self.run_dir, self.handle_control_request)
        self._last_log = self._last_save = self._next_redraw = time.monotonic()
        self._start_steps = self._save_step_mark = self.learner.num_samples_collected

    def move(self, config, run_dir):
        """Go on in another run directory with the same learner: its logs and control move
        there, the learner, its scheme and their processes stay (a Ray Tune actor that
        goes on with another trial, whose checkpoint then brings that trial's state).

        Parameters
        ----------
        config : dict
            The resolved configuration of the run in ``run_dir`` (its hot-swappable values
            are the caller's to apply; its other keys must be this run's).
        run_dir : str
            The run directory, existing, with its config.yaml; logs found there are kept
            and appended to.
        """
        self.control.close()
        self.log.close()
        self.config, self.opts, self.run_dir = config, config["learner"], run_dir
        self.learner.log_dir = run_dir
        self.metrics, self._shown_step, self.saved_step, self._keep_previous = {}, None, None, True
        self.log = self._open_log(math.inf)
        self._open_control()

    # ---------------------------------------------------------------- training
    def handle_control_request(self, request_id, assignments):
        """Apply a live change (``pytorchrl set``) and return its acknowledgement.

        Parameters
        ----------
        request_id : str
            Id of the request (logged with the change).
        assignments : list of (str, object)
            ``(key, value)`` pairs, applied together or not at all.

        Returns
        -------
        dict
            ``status`` "applied" (with ``step``, ``changes``, ``notes``) or "refused" (with
            ``step`` and ``reason``).
        """
        learner, log, display = self.learner, self.log, self.display
        step = learner.num_samples_collected
        try:
            changes = apply_changes(learner, assignments, self._check)
        except (ValueError, TypeError) as exc:
            reason = " ".join(str(exc).split())
            log.record_refusal(", ".join(k for k, _ in assignments),
                               ", ".join(repr(v) for _, v in assignments), reason, request_id)
            display.message(f"live change refused at step {step:,}: {reason}")
            return {"status": "refused", "step": step, "reason": reason}
        log.record_hot_swaps("live", request_id)
        notes = []
        for target, name, _ in changes:
            stopped = _stop_schedules(learner, target, name)
            if stopped:
                # Saved in the checkpoint: a resumed run keeps them stopped.
                self.stopped_schedules.extend(stopped)
                notes.append(f"the schedule of {target}.{name} is stopped")
        text = ", ".join(f"{t}.{n} = {v!r}" for t, n, v in changes)
        display.message(f"live change at step {step:,}: {text}" + (f" ({'; '.join(notes)})" if notes else ""))
        return {"status": "applied", "step": step, "changes": [[t, n, v] for t, n, v in changes], "notes": notes}

    def log_interval(self, show=True):
        """Write a row of metrics.csv and TensorBoard; with ``show``, a progress line too.

        Returns the metrics of the row (the previous row when no env step was taken since).
        """
        learner = self.learner
        # No second row for the same step (a final log right after a periodic one).
        if not (self.metrics and self.metrics["Scheme/EnvSteps"] == learner.num_samples_collected):
            self.metrics = learner.get_metrics(add_algo_metrics=True, add_episodes_metrics=True,
                                               add_scheme_metrics=True, add_time_metrics=True)
            self.log.write_metrics(self.metrics)
        if show and self._shown_step != self.metrics["Scheme/EnvSteps"]:
            self._shown_step = self.metrics["Scheme/EnvSteps"]
            self.display.log(self.metrics, self.status_line())
        return self.metrics

    def rows_due(self):
        """True when the curves are due a point: 1/CURVE_POINTS of the run since the last row."""
        # Short runs would get a handful of rows from the clock alone.
        logged = self.metrics["Scheme/EnvSteps"] if self.metrics else self._start_steps
        return self.learner.num_samples_collected - logged >= self.learner.target_steps / CURVE_POINTS

    def status_line(self):
        """The live status line: progress, speed, returns, policy lag, times."""
        learner = self.learner
        recent = self.log.timings.pop_recent_policy_lag()
        self._lag = recent if recent is not None else self._lag
        episodes = learner.get_metrics(add_algo_metrics=False, add_episodes_metrics=True)
        return format_status(learner.num_samples_collected, learner.target_steps, learner.fps,
                             time.time() - learner.start_time, episodes.get("Episodes/TrainReward"),
                             episodes.get("Episodes/TestReward"), self._lag, width=self.display.width)

    def save(self):
        """Save the full checkpoint, then the model; returns the model's path.

        Raises ``SaveError`` (the previous files intact) when a file cannot be written.
        """
        learner = self.learner
        learner.save_checkpoint(CHECKPOINT, extra={"config": self.config, "stopped_schedules": self.stopped_schedules},
                                keep_previous=self._keep_previous)
        self._keep_previous = True
        self.saved_step = learner.num_samples_collected
        return learner.save_model(MODEL)

    def save_due(self, now):
        """True when ``learner.save_every`` seconds passed since the last save, or the env
        steps passed a multiple of ``learner.save_every_steps`` since then."""
        return save_due(self.opts, now - self._last_save, self._save_step_mark, self.learner.num_samples_collected)

    def maybe_save(self, now):
        """Save when ``save_due``. A failure is reported on a line of its own and training
        goes on: the previous checkpoint is intact, and the next interval tries again.

        Returns
        -------
        bool
            True when a checkpoint was saved.
        """
        if not self.save_due(now):
            return False
        # Both intervals restart now, even after a failure: a full disk is not retried
        # after every update.
        self._save_step_mark = self.learner.num_samples_collected
        try:
            self.save()
        except SaveError as exc:
            self.display.message(f"warning: checkpoint not saved at {self.learner.num_samples_collected:,} env "
                                 f"steps: {exc}; {self._last_checkpoint()}; trying again at the next interval")
            return False
        finally:
            self._last_save = time.monotonic()
        return True

    def _last_checkpoint(self):
        if self.saved_step is None:
            return "no checkpoint of this run was saved yet"
        return f"the last checkpoint ({self.saved_step:,} env steps) is intact"

    def _final_save(self):
        """``save`` at the end of the job; a failure is a UsageError (nothing more to retry)."""
        try:
            return self.save()
        except SaveError as exc:
            raise UsageError(f"{exc}; {self._last_checkpoint()}") from None

    def train(self):
        """The training loop, until ``target_steps`` or Ctrl-C.

        Returns
        -------
        bool
            True when interrupted (Ctrl-C, SIGTERM).
        """
        with StopOnInterrupt() as stop:
            return self.train_until(lambda: stop.requested)

    def train_until(self, stop_requested, env_steps=None, autosave=True):
        """The training loop, until ``target_steps``, ``env_steps`` or a stop request.

        Parameters
        ----------
        stop_requested : callable
            Asked between updates; True ends the loop (Ctrl-C).
        env_steps : int or None
            End the loop once this many env steps are collected (a member of a population
            trains one interval at a time); None: no such limit.
        autosave : bool
            Save checkpoints at the ``learner.save_every`` intervals (a population saves its
            members together instead).

        Returns
        -------
        bool
            True when a stop was requested.
        """
        learner, log, display = self.learner, self.log, self.display
        while not (learner.done() or stop_requested()
                   or (env_steps is not None and learner.num_samples_collected >= env_steps)):
            log.timings.observe(learner.step())
            log.record_hot_swaps("schedule")
            now = time.monotonic()
            self.control.poll(now)
            if now - self._last_log >= self.opts["log_every"]:
                self.log_interval()      # (draws the status line in live mode)
                self._last_log = now
                self._next_redraw = now + REDRAW_EVERY_S
            elif self.rows_due():
                self.log_interval(show=False)
            if display.live and now >= self._next_redraw:
                display.status(self.status_line())
                self._next_redraw = now + REDRAW_EVERY_S
            if autosave and not (learner.done() or stop_requested()):   # (those end with a save anyway)
                self.maybe_save(now)
        return bool(stop_requested())

    def save_on_exit(self):
        """Log a last row, end the status line and save the model and checkpoint (a failure
        is a ``UsageError``); returns the model's path."""
        self.log_interval(show=False)
        self.display.close()
        return self._final_save()

    def interrupted(self):
        """After Ctrl-C: log, save the model and checkpoint, say how to continue."""
        self.log_interval()
        path = self.save_on_exit()
        self.display.message(f"interrupted at {self.learner.num_samples_collected:,} env steps; model saved to "
                             f"{path}; continue with: pytorchrl resume {self.run_dir}")

    def stopped_by_failure(self, exc):
        """After a failure that ends the run (a worker that keeps dying, an environment error
        under ``on_env_error: stop``, updates skipped for non-finite gradients): log, save
        the model and the checkpoint of the last complete update, and raise the one-line
        ``UsageError`` that says so (exit status 2).

        Parameters
        ----------
        exc : Exception
            The ``WorkerError``, ``EnvError`` or ``NonFiniteUpdatesError`` that stopped the run.
        """
        learner = self.learner
        cause = " ".join(str(exc).split())
        self.log_interval(show=False)
        self.display.close()
        try:
            self.save()
        except (SaveError, WorkerError) as save_exc:
            raise UsageError(f"{cause}; stopped at {learner.num_samples_collected:,} env steps and the checkpoint "
                             f"could not be saved ({' '.join(str(save_exc).split())}); "
                             f"{self._last_checkpoint()}") from None
        raise UsageError(f"{cause}; stopped at {learner.num_samples_collected:,} env steps, checkpoint saved: "
                         f"continue with 'pytorchrl resume {self.run_dir}'") from None

    def finish(self):
        """After the last update: log, save, evaluate on the test environments (if any) and
        write summary.yaml; returns the summary."""
        learner, config, display = self.learner, self.config, self.display
        metrics = self.log_interval()
        display.close()
        summary = {"env_steps": learner.num_samples_collected, "updates": learner.num_updates,
                   "seconds": round(metrics["Time/Elapsed"], 2),
                   "train_return": _finite(metrics.get("Episodes/TrainReward")), "model": self._final_save()}
        display.message(f"done: {summary['env_steps']:,} env steps, {summary['updates']:,} updates in "
                        f"{summary['seconds']:.1f} s; model saved to {summary['model']}")
        if config["env"]["test_env"] and self.opts["final_eval"]:
            episodes = self.opts["final_eval_episodes"] or config["algorithm"].get("num_test_episodes")
            summary["test_return"] = float(learner.evaluate(episodes))
            summary["test_episodes"] = episodes
            display.message(f"evaluation: mean return {summary['test_return']:.4g} over {episodes} episodes "
                            f"(deterministic)")
        if config["scheme"]["num_grad_workers"] == 0:
            # Collection-only run: every episode, and one line about them.
            # Relative: the learner writes it in its log_dir, the run directory.
            line = learner.write_episode_records(RESULTS, _policy_label(config))
            summary["results"] = os.path.join(self.run_dir, RESULTS)
            summary["episodes"] = learner.num_episodes
            display.message(f"results: {line}")
        if self.opts["plot_at_end"]:
            summary["plot"] = self._plot()
        self.log.write_summary(summary)
        with open(os.path.join(self.run_dir, SUMMARY), "w") as f:
            f.write(dump_config(summary))
        return summary

    def _plot(self):
        """Draw the run's reward-vs-steps and reward-vs-time curves (``learner.plot_at_end``);
        returns the file, or None (said on the display) when it cannot be drawn."""
        from pytorchrl.tools.plot import plot_runs
        path = os.path.join(self.run_dir, REWARD_PLOT)
        try:
            plot_runs([self.run_dir], path)
        except (ImportError, ValueError, OSError) as exc:
            self.display.message(f"no plot drawn: {' '.join(str(exc).split())}")
            return None
        self.display.message(f"reward-vs-time plot: {path}")
        return path

    def close(self, failed=False):
        """End the display, the control server and the logs, and stop the scheme (idempotent).

        Parameters
        ----------
        failed : bool
            The job ends with an error: the W&B run (``learner.wandb``) is marked failed.
        """
        if self.display is not None:
            self.display.close()
        if self.control is not None:
            self.control.close()
        if self.log is not None:
            self.log.close(failed=failed)
        if self.learner is not None:
            self.learner.stop()

    def run(self):
        """Build (or resume), train and finish, closing everything in the end.

        Returns
        -------
        str
            "done", or "interrupted" (Ctrl-C or SIGTERM; the model and checkpoint are saved).

        Raises
        ------
        UsageError
            A problem the user can fix (a refused component value, a checkpoint that cannot
            be used, a target already reached, a failed final save), or a failure that ended
            the run after its checkpoint was saved (``stopped_by_failure``).
        """
        # Entered before the build: a signal while Ray starts is kept for the first update
        # boundary (ensure_ray keeps this handler over the one ray.init installs).
        with StopOnInterrupt() as stop:
            self.build()
            failed = True
            try:
                if self.resume_from is not None:
                    self.resume()
                self.start()
                try:
                    interrupted = self.train_until(lambda: stop.requested)
                except KeyboardInterrupt:   # a second Ctrl-C, or one outside StopOnInterrupt's reach
                    interrupted = True
                except (WorkerError, EnvError, NonFiniteUpdatesError) as exc:
                    # The driver's state is that of the last complete update: saved, then one line.
                    self.stopped_by_failure(exc)
                if interrupted:
                    self.interrupted()
                    failed = False
                    return "interrupted"
                self.finish()
                failed = False
                return "done"
            finally:
                self.close(failed=failed)


__all__ = ["TrainingSession", "UsageError", "StopOnInterrupt", "write_config", "save_due", "REDRAW_EVERY_S",
           "CURVE_POINTS"]
