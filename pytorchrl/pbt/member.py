"""One member of a population: an ordinary training job in its own run directory, trained
one interval at a time, which can take over another member's policy in place.

A :class:`Member` is a plain class; the population runs it in its own process or as a Ray
actor (``Member.as_remote()``, as the scheme's workers), with the same methods. What it prints goes to the
population's output through the reports its methods return (``lines``), prefixed with
the member's name, rather than to the process it runs in.
"""

import copy
import math
import time

from pytorchrl.agent.vec_env import EnvError
from pytorchrl.config.targets import TARGETS
from pytorchrl.learner import NonFiniteUpdatesError
from pytorchrl.scheme.base.ray_runtime import WorkerError
from pytorchrl.scheme.base.worker import Worker
from pytorchrl.tools.session import TrainingSession, UsageError


#: Seconds between two snapshots of a member's progress (``Member.progress``), taken between
#: its updates: what the population's progress line shows while members train.
PROGRESS_EVERY_S = 0.25


def member_name(index):
    """The name of member ``index``, also its directory in the population's: ``member-<index>``."""
    return f"member-{index}"


class _Lines:
    """A stream that keeps the complete lines written to it until they are taken."""

    def __init__(self):
        self._text = ""

    def write(self, text):
        self._text += text

    def flush(self):
        pass

    def take(self):
        """The complete lines written since the last call (a status line's redraws dropped)."""
        done, _, self._text = self._text.rpartition("\n")
        return [line.rpartition("\r")[2].replace("\x1b[K", "") for line in done.split("\n") if line.strip()] \
            if done else []


def _finite(value):
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


class Member(Worker):
    """A member of a population: the training job of ``config`` in ``run_dir``.

    Parameters
    ----------
    index : int
        The member's index in the population (its name is ``member-<index>``).
    config : dict
        The member's resolved configuration (no ``pbt`` section).
    run_dir : str
        Its run directory, existing, with its ``config.yaml``.
    resume : dict or None
        Continue from the run directory's checkpoint: ``{"previous": configuration the
        checkpoint was made with}`` (as ``TrainingSession``).
    stop_requested : callable or None
        Asked between updates (with ``request_stop``'s flag): True ends the current
        interval early. A member in the population's own process is given the
        population's Ctrl-C flag; one in a Ray actor is sent ``request_stop`` (in the
        actor's ``Worker.CONTROL`` concurrency group, served while it trains).
    append_logs : bool
        Keep and append to the logs found in ``run_dir`` (see ``TrainingSession``).

    Every method that trains or changes the member returns, or includes in its report,
    ``lines``: what the member's job printed meanwhile (restarts of its workers, a live
    change, the final evaluation).
    """

    def __init__(self, index, config, run_dir, resume=None, stop_requested=None, append_logs=False):
        self.index = index
        self.name = member_name(index)
        self._lines = _Lines()
        self.session = TrainingSession(config, run_dir, stream=self._lines, progress="quiet", resume=resume,
                                       append_logs=append_logs)
        self._stop = False
        self._stop_requested = stop_requested or (lambda: False)
        self._progress = {"env_steps": 0, "train_return": None}
        self._next_progress = 0.0

    # ------------------------------------------------------------------ life cycle
    def start(self):
        """Build the member's learner (or restore it from its checkpoint) and open its logs;
        returns its report (see ``report``)."""
        session = self.session
        session.build()
        try:
            if session.resume_from is not None:
                session.resume()
            session.start()
        except BaseException:
            session.close()
            raise
        self._note_progress(force=True)
        return self.report()

    def request_stop(self):
        """End the current interval at the next update boundary (Ctrl-C of the population)."""
        self._stop = True

    def _stopping(self):
        self._note_progress()
        return self._stop or self._stop_requested()

    def _note_progress(self, force=False):
        """Snapshot the env steps and training return, at most every PROGRESS_EVERY_S (unless
        ``force``): taken between updates, so that ``progress`` (served while the member
        trains, in the actor's control thread) never reads the learner mid-update."""
        now = time.monotonic()
        if now < self._next_progress and not force:
            return
        self._next_progress = now + PROGRESS_EVERY_S
        learner = self.session.learner
        metrics = learner.get_metrics(add_algo_metrics=False, add_episodes_metrics=True)
        self._progress = {"env_steps": learner.num_samples_collected,
                          "train_return": _finite(metrics.get("Episodes/TrainReward"))}

    def progress(self):
        """The member's latest progress snapshot, taken between its updates: ``env_steps``
        and ``train_return`` (None before an episode ends). A Ray actor answers it in its
        ``Worker.CONTROL`` concurrency group, while it trains."""
        return dict(self._progress)

    def train_until(self, env_steps):
        """Train until ``env_steps`` env steps, the end of the run or a stop request.

        A failure that ends the member's run (a worker that keeps dying, an environment
        error under ``on_env_error: stop``, updates that keep being non-finite) is reported
        rather than raised: the member's model and checkpoint are saved first, and the
        report's ``failed`` holds the one-line cause.

        Parameters
        ----------
        env_steps : int
            Env steps to reach (the population's next decision).

        Returns
        -------
        dict
            The member's report (see ``report``).
        """
        try:
            self.session.train_until(self._stopping, env_steps, autosave=False)
            self._note_progress(force=True)   # where the interval ended
        except (WorkerError, EnvError, NonFiniteUpdatesError) as exc:
            try:
                self.session.stopped_by_failure(exc)
            except UsageError as failure:
                return self.report(failed=" ".join(str(failure).split()))
        return self.report()

    def report(self, failed=None):
        """What the population reads of the member.

        Returns
        -------
        dict
            ``index``; ``env_steps``; ``train_return`` (mean of the last 100 training
            episodes, None before one ends) and ``test_return`` (the latest evaluation, None
            before one); ``done`` (its ``learner.target_steps`` is reached); ``stopped``
            (a stop was requested); ``failed`` (None, or the cause that ended its run);
            ``elapsed`` (seconds of training); ``values`` (every hot-swappable value, see
            ``values``); ``lines`` (printed since the last report).
        """
        learner = self.session.learner
        metrics = learner.get_metrics(add_algo_metrics=False, add_episodes_metrics=True)
        return {"index": self.index, "env_steps": learner.num_samples_collected,
                "train_return": _finite(metrics.get("Episodes/TrainReward")),
                "test_return": _finite(metrics.get("Episodes/TestReward")), "done": learner.done(),
                "stopped": self._stopping(), "failed": failed, "elapsed": self.session.log.elapsed(),
                "values": self.values(), "lines": self._lines.take()}

    def evaluate(self):
        """Deterministic mean return of the current policy over ``num_test_episodes`` test
        episodes (what ranks members with ``pbt.metric: test_return``)."""
        return float(self.session.learner.evaluate())

    # ------------------------------------------------------------------ exploit / explore
    def values(self):
        """Every hot-swappable value of the member's algorithm and storage:
        ``{"algorithm.lr": 0.001, "storage.gae_lambda": 0.95, ...}``."""
        local = self.session.learner.update_worker.local_worker
        current = {"algorithm": local.algo.hyperparameters, "storage": local.storage.hyperparameters}
        return {f"{t}.{name}": value for t in TARGETS for name, value in current[t].items()}

    def state(self):
        """The member's training state (``Learner.training_state``, without the replay: the
        member that copies keeps its own), for another member to copy. A copy: the member
        trains on while it travels or waits."""
        return copy.deepcopy(self.session.learner.training_state(replay=False))

    def exploit(self, state, source, changes):
        """Take over another member's policy in place, then apply perturbed values.

        The weights, optimizer state, hyperparameters and the counters describing them come
        from ``state`` (``Learner.restore_state(copy=True)``) on every worker of the
        member's scheme; then ``changes`` are hot-swapped. Every value that ends up other
        than the member's before, and every perturbed one, is a row of its hot_swaps.csv
        with source ``pbt``; no process is restarted.

        Parameters
        ----------
        state : dict
            The source member's ``state()`` (through Ray's object store for actors).
        source : str
            The source member's name, for the log.
        changes : dict
            ``{"algorithm.lr": value, ...}``: the perturbed values.

        Returns
        -------
        dict
            ``values`` (every hot-swappable value after), ``lines``.
        """
        before = self.values()
        self.restore(state, source, copy=True)
        after = {**self.values(), **changes}
        self.apply({k: v for k, v in after.items() if k in changes or v != before[k]}, "pbt", f"copied {source}")
        return {"values": self.values(), "lines": self._lines.take()}

    def restore(self, state, source, copy):
        """Restore a training state on the member's learner (``Learner.restore_state``); its
        hot-swap log goes on from where the state's is (a full restore brings back the
        state's, whose changes were logged by whoever made them)."""
        self.session.learner.restore_state(state, source, copy=copy)
        self.session.log.skip_hot_swaps()

    def apply(self, values, source, detail, record=True):
        """Hot-swap ``values`` (``{"algorithm.lr": 0.001, ...}``) on every worker of the
        member, each a row of its hot_swaps.csv with ``source`` and ``detail`` (none with
        ``record`` False: values set ahead of a state that replaces them, whose differences
        are recorded then)."""
        learner = self.session.learner
        for key, value in values.items():
            target, _, name = key.partition(".")
            if target == "algorithm":
                learner.update_algorithm_parameter(name, value)
            else:
                learner.update_storage_parameter(name, value)
        if record:
            self.session.log.record_hot_swaps(source, detail)
        else:
            self.session.log.skip_hot_swaps()

    # ------------------------------------------------------------------ inspection
    def get_weights(self):
        """The member's current actor weights (``UWorker.get_weights``)."""
        return self.session.learner.update_worker.get_weights()

    def get_hyperparameters(self):
        """The parameters held by every worker of the member's scheme
        (``UWorker.get_hyperparameters``): one list per gradient worker, each with its own
        dict and its collection workers'."""
        return self.session.learner.update_worker.get_hyperparameters()

    # ------------------------------------------------------------------ the end
    def save(self):
        """Save the member's model and checkpoint; a failure is a ``SaveError``."""
        self.session.save()
        return self.session.learner.num_samples_collected

    def save_on_exit(self):
        """Log and save at the end of an interrupted population; returns ``lines``."""
        self.session.save_on_exit()
        return {"lines": self._lines.take()}

    def finish(self):
        """The end of the member's run: log, save, evaluate, write summary.yaml (as
        ``TrainingSession.finish``); returns its summary with ``lines``."""
        summary = self.session.finish()
        return {**summary, "lines": self._lines.take()}

    def close(self):
        """Stop the member's scheme and close its logs (idempotent)."""
        self.session.close()
        return True


__all__ = ["Member", "member_name"]
