"""Learner: drives a Scheme (the training loop, its stop conditions, schedules and the
policy on non-finite updates).

Its other roles live beside it and are reached through its methods: the metrics in
``pytorchrl.learner_metrics``, saved models and checkpoints in
``pytorchrl.learner_checkpoint``, hot-swaps in ``pytorchrl.learner_control``.
"""

import collections
import logging
import os

import numpy as np

from pytorchrl import learner_checkpoint
from pytorchrl.learner_control import LearnerControl
from pytorchrl.learner_metrics import LearnerMetrics
from pytorchrl.scheme.control_request import ControlEntries

logger = logging.getLogger("pytorchrl")

#: Environment variable capping the env steps a Learner trains (see ``step_limit``): what
#: the test that runs every documented command sets, and a way to try any script quickly.
STEP_LIMIT_VARIABLE = "PYTORCHRL_STEP_LIMIT"


def step_limit():
    """The env steps a learner may train, from ``PYTORCHRL_STEP_LIMIT`` (None when unset).

    Every Learner is done once it has collected this many env steps more than when it
    started (or was restored from a checkpoint), whatever its ``target_steps``: a script,
    a configuration or a documented command then runs as written, only shorter.

    Raises
    ------
    ValueError
        The variable is set to something other than a positive integer.
    """
    text = os.environ.get(STEP_LIMIT_VARIABLE, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{STEP_LIMIT_VARIABLE} must be a positive integer (env steps), got {text!r}")
    return int(text)


def _kept_by(part, name, doc):
    """A Learner attribute held by one of its parts (``metrics``, ``control``): read and
    set through the learner as if it were its own."""
    return property(lambda self: getattr(getattr(self, part), name),
                    lambda self, value: setattr(getattr(self, part), name, value), doc=doc)


class NonFiniteUpdatesError(RuntimeError):
    """Training stopped: ``Learner.max_nonfinite_updates`` updates in a row were skipped
    because their gradients held NaN or infinite values. The weights are those of the last
    finite update (a skipped update changes nothing), so they can be saved and resumed
    from, e.g. with a lower learning rate."""


class Learner(ControlEntries):
    """Runs the training loop of a scheme.

    Parameters
    ----------
    scheme : Scheme
        The training layout to drive.
    target_steps : int
        Environment steps after which ``done()`` is True. On the queue data path
        (``Scheme.step_budget_on_data``) the collectors hand over about this many and
        ``done()`` is True once their rollouts are all trained on.
    log_dir : str or None
        Directory for saved models (and, where used, logs); created if needed.
    schedules : list of Schedule or None
        Planned parameter changes (see ``pytorchrl.schedules``), applied between updates
        through the same hot-swap path as ``update_algorithm_parameter``.
    checkpoint_replay : bool
        Save the contents of the replay (the replay server's, or the local gradient
        worker's replay storage) in checkpoints, so that a resumed run continues with them;
        costs the buffer's size on disk. Only for replay storages. A replay server that
        dies is replaced with the contents of the last checkpoint (else it starts empty).
    max_nonfinite_updates : int or None
        Updates skipped in a row for NaN or infinite gradients after which ``step`` raises
        ``NonFiniteUpdatesError`` (None: never). An update whose gradient is not finite is
        skipped by the algorithm (the weights do not change; see
        ``Algorithm.apply_gradients``), logged once per run of skips and counted in
        ``Scheme/SkippedUpdates``; training goes on, since one bad batch (a NaN reward)
        spoils only its own updates. The default, 100, outlasts one bad PPO rollout
        (``num_epochs x num_mini_batch`` updates, all skipped) while a diverged network,
        whose every update is skipped, stops the run within seconds.

    target_episodes : int or None
        End the run after this many finished training episodes (counted from the
        collectors' episode information): the collectors hand over no more once that many
        are in, and ``done()`` turns True once their data is trained on (the update round
        they arrived in is finished), so no episode counted is lost. With the
        ``episodes`` rollout unit exactly this many episodes are run. None: no limit.
    cutoff : float or None
        End the run when the mean return of the last ``rolling_reward_length`` episodes
        differs from that of the ``rolling_reward_length`` before them by less than this
        (EXARL's plateau stop; None: never).
    rolling_reward_length : int
        Episodes in each window of the ``cutoff`` test.
    record_episodes : bool
        Keep a record of every finished training episode (``episode_records``); off by
        default since it grows with the run.

    Attributes
    ----------
    metrics : LearnerMetrics
        Counts and metrics of the run, from what the updates report (``get_metrics``).
    control : LearnerControl
        Validates, sends and logs hot-swaps (``update_algorithm_parameter``, ...).
    episode_records : list of dict
        Every finished training episode, in the order handed over: ``episode`` (1-based),
        ``return``, ``length``, ``grad_worker``, ``col_worker``, ``env_steps`` (when it was
        handed over) and ``time`` (seconds since the start); see ``write_episode_records``.
    worker_restarts, env_restarts, server_restarts : int
        Remote workers replaced after they died, environments rebuilt after they failed,
        and data servers (replay, inference, queue server) replaced after they died, since
        the start (``Scheme/WorkerRestarts``, ``Scheme/EnvRestarts``, ``Scheme/ServerRestarts``).
    worker_events : deque of (int, dict)
        (env step, event) of the latest restarts; each event's ``text`` is its log line.
    on_worker_event : callable
        ``on_worker_event(text)`` is called with the line of each restart; by default it is
        logged as a warning on the "pytorchrl" logger (``pytorchrl train`` shows it with its
        progress).
    skipped_updates : int
        Updates skipped for non-finite gradients since the start (``Scheme/SkippedUpdates``).
    bytes_from_collectors : int
        Rollout bytes handed over by remote collectors since the start
        (``Scheme/BytesFromCollectors``).
    on_warning : callable
        ``on_warning(text)`` is called with the line saying that updates are being skipped
        (once per run of skips in a row) and the one saying that they ended; by default it
        is logged as a warning on the "pytorchrl" logger.
    step_limit : int or None
        Env steps this learner trains at most from where it started or was restored, read
        from ``PYTORCHRL_STEP_LIMIT`` (see ``step_limit()``); None: ``target_steps`` alone.
    """


    def __init__(self, scheme, target_steps, log_dir=None, schedules=None, checkpoint_replay=False,
                 max_nonfinite_updates=100, target_episodes=None, cutoff=None, rolling_reward_length=20,
                 record_episodes=False):
        # 1e7 written in a script is a float: an integral float is the integer meant.
        if isinstance(target_steps, (float, np.floating)) and float(target_steps).is_integer():
            target_steps = int(target_steps)
        _check_positive_int("target_steps", target_steps)
        storage = scheme.update_worker.local_worker.storage
        if checkpoint_replay and not hasattr(storage, "state_dict"):
            raise ValueError(f"checkpoint_replay needs a replay storage; {type(storage).__name__} keeps no "
                             f"replay between updates")
        _check_positive_int("max_nonfinite_updates", max_nonfinite_updates, none_ok=True)
        _check_positive_int("target_episodes", target_episodes, none_ok=True)
        if cutoff is not None and (isinstance(cutoff, bool) or not isinstance(cutoff, (int, float)) or cutoff < 0):
            raise ValueError(f"cutoff must be None or a number >= 0, got {cutoff!r}")
        _check_positive_int("rolling_reward_length", rolling_reward_length)
        self.target_episodes = target_episodes
        self.cutoff = cutoff
        self.rolling_reward_length = int(rolling_reward_length)
        self._returns = collections.deque(maxlen=2 * self.rolling_reward_length)  # for the cutoff test
        self.budget_spent = False
        self.plateau = False
        if target_episodes is not None:
            scheme.update_worker.set_episode_budget(int(target_episodes))
        # On the queue data path the steps are a budget handed to the collectors: the run
        # ends once their data is trained on (every queued rollout consumed).
        self.steps_on_data = bool(getattr(scheme, "step_budget_on_data", False))
        if self.steps_on_data:
            scheme.update_worker.set_step_budget(int(target_steps))
        self.max_nonfinite_updates = max_nonfinite_updates
        self.checkpoint_replay = bool(checkpoint_replay)
        self.scheme = scheme
        self.update_worker = scheme.update_worker
        self.target_steps = int(target_steps)
        self.log_dir = log_dir
        if log_dir:
            os.makedirs(log_dir, exist_ok=True)
        self.num_updates = 0
        self.metrics = LearnerMetrics(scheme, self.update_worker, record_episodes, on_worker_event=logger.warning)
        self.control = LearnerControl(self.update_worker)
        self.skipped_updates = 0
        self._skips_in_a_row = 0
        self.on_warning = logger.warning
        self.step_limit = step_limit()
        self._steps_at_start = 0     # env steps when this learner started or was restored
        self.schedules = list(schedules or [])
        for sched in self.schedules:
            # Refuse a schedule of an unknown parameter now, not mid-run.
            self.control.check(sched.target, sched.name, sched.start, f"scheduled {sched.target} parameter")
        self._apply_schedules()

    # Counts, records and logs kept by the learner's parts, read and set here as before.
    num_samples_collected = _kept_by("metrics", "env_steps", "Environment steps collected since the start.")
    num_episodes = _kept_by("metrics", "num_episodes", "Training episodes finished since the start, less those a dead "
                                                        "queue server took with it (they are run again).")
    policy_version = _kept_by("metrics", "policy_version",
                              "Newest weight version (publication) seen in a gradient's information.")
    test_reward = _kept_by("metrics", "test_reward", "Latest evaluation's mean return (None before one).")
    record_episodes = _kept_by("metrics", "record_episodes", "See the class docstring.")
    episode_records = _kept_by("metrics", "episode_records", "See the class docstring.")
    worker_restarts = _kept_by("metrics", "worker_restarts", "See the class docstring.")
    env_restarts = _kept_by("metrics", "env_restarts", "See the class docstring.")
    server_restarts = _kept_by("metrics", "server_restarts", "See the class docstring.")
    worker_events = _kept_by("metrics", "worker_events", "See the class docstring.")
    on_worker_event = _kept_by("metrics", "on_worker_event", "See the class docstring.")
    bytes_from_collectors = _kept_by("metrics", "bytes_from_collectors", "See the class docstring.")
    start_time = _kept_by("metrics", "start_time", "``time.time()`` when the run started (resumed runs included).")
    hot_swaps = _kept_by("control", "hot_swaps", "(env step, kind, name, value) of every change applied.")

    # ------------------------------------------------------------------ training
    def step(self):
        """Perform one update of the policy (collecting data first when the scheme needs it).

        An update whose gradient is NaN or infinite is skipped by the algorithm (see
        ``max_nonfinite_updates``); it still counts in ``num_updates``.

        Raises
        ------
        NonFiniteUpdatesError
            ``max_nonfinite_updates`` updates in a row were skipped; this step's data and
            counts are recorded first, and the weights are those of the last finite update.
        """
        infos = self.update_worker.step()
        if not infos[0].get("no_update"):
            self.num_updates += 1
        self.budget_spent = self.budget_spent or bool(infos[0].get("budget_spent"))
        # One update per step: with several gradient workers every info says the same.
        skipped = any(info.get("update_skipped") for info in infos)
        for info in infos:
            returns = self.metrics.record(info, skipped)
            if "collected_samples" in info:
                self._returns.extend(returns)
                self.plateau = self.plateau or self._plateaued()
        self._count_skip(skipped)
        self._apply_schedules()
        self.metrics.tick()
        return infos

    def _apply_schedules(self):
        for sched in self.schedules:
            value = sched.due(self.num_samples_collected, self.target_steps)
            if value is not None:
                if sched.target == "algorithm":
                    self.update_algorithm_parameter(sched.name, value)
                else:
                    self.update_storage_parameter(sched.name, value)

    def _count_skip(self, skipped):
        """Count a skipped update, say so at the first of a run of skips (and when the run
        ends), and stop after ``max_nonfinite_updates`` in a row."""
        if not skipped:
            if self._skips_in_a_row:
                self.on_warning(f"updates applied again at {self.num_samples_collected:,} env steps after "
                                f"{self._skips_in_a_row} skipped in a row")
            self._skips_in_a_row = 0
            return
        self.skipped_updates += 1
        self._skips_in_a_row += 1
        if self._skips_in_a_row == 1:
            # One line per run of skips: a bad rollout spoils dozens of updates in a row.
            self.on_warning(f"update skipped at {self.num_samples_collected:,} env steps: its gradient holds NaN or "
                            f"infinite values, the weights are unchanged (skips are counted in "
                            f"Scheme/SkippedUpdates)")
        limit = self.max_nonfinite_updates
        if limit is not None and self._skips_in_a_row >= limit:
            raise NonFiniteUpdatesError(
                f"{self._skips_in_a_row} updates in a row had NaN or infinite gradients and were skipped "
                f"(learner.max_nonfinite_updates={limit}): training diverged or the data holds NaN/inf; the "
                f"weights are those of the last finite update. Lower the learning rate, clip gradients "
                f"(max_grad_norm) or check the environment's observations and rewards")

    def _plateaued(self):
        """The ``cutoff`` test: the last two windows of returns differ by less than it."""
        n = self.rolling_reward_length
        if self.cutoff is None or len(self._returns) < 2 * n:
            return False
        returns = list(self._returns)
        return abs(np.mean(returns[n:]) - np.mean(returns[:n])) < self.cutoff

    def done(self):
        """True once ``target_steps`` environment steps have been collected, the episode
        budget (``target_episodes``) is trained on, or the returns stopped changing
        (``cutoff``). On the queue data path the steps are a budget too: done once the
        collectors have handed them over and every rollout queued is trained on."""
        steps_done = not self.steps_on_data and self.num_samples_collected >= self.target_steps
        limited = self.step_limit is not None and self.num_samples_collected - self._steps_at_start >= self.step_limit
        return steps_done or limited or self.budget_spent or self.plateau

    def learn(self, total_timesteps):
        """Train for ``total_timesteps`` more environment steps (Stable-Baselines3's name).

        ``target_steps`` becomes the env steps collected so far plus ``total_timesteps``
        (linear schedules span it), then ``step()`` runs until ``done()``. The scheme stays
        up: call ``learn`` again to train further, ``predict`` to act, ``stop`` at the end.

        Parameters
        ----------
        total_timesteps : int
            Environment steps to train for.

        Returns
        -------
        Learner
            This learner.
        """
        _check_positive_int("total_timesteps", total_timesteps)
        self.target_steps = self.num_samples_collected + int(total_timesteps)
        if self.steps_on_data:
            self.update_worker.set_step_budget(self.target_steps)
        while not self.done():
            self.step()
        return self

    def predict(self, observation, state=None, episode_start=None, deterministic=False):
        """The action(s) of the current weights for one observation or a batch
        (Stable-Baselines3's ``predict``); the arguments and what it returns are
        ``pytorchrl.agent.actors.Policy.predict``'s."""
        from pytorchrl.agent.actors import Policy
        self.update_worker.sync_local_weights()
        return Policy(self.update_worker.local_worker.actor).predict(observation, state, episode_start, deterministic)

    def write_episode_records(self, path, policy):
        """Write ``episode_records`` as CSV (one row per episode, with a ``policy`` column
        saying what acted: "random", "learned", a model's path); returns a one-line summary.

        Parameters
        ----------
        path : str
            The file (relative: in ``log_dir``).
        policy : str
            Written in every row.
        """
        return self.metrics.write_episode_records(self._path(path), policy)

    # ------------------------------------------------------------------- metrics
    @property
    def fps(self):
        """Environment steps per second over the last ``FPS_WINDOW_S`` seconds."""
        return self.metrics.fps

    def get_metrics(self, add_algo_metrics=True, add_episodes_metrics=False, add_scheme_metrics=False,
                    add_time_metrics=False):
        """Current metrics as a flat dict with ``"Group/Name"`` keys.

        Always present: ``Scheme/EnvSteps``, ``Scheme/Updates`` (optimizer steps, skipped ones
        included) and ``Scheme/PolicyVersion`` (the newest weight version a gradient was
        computed on; versions count publications of weights, see ``UWorker``). Algorithm
        metrics (losses) are means over the updates since the previous call.

        Parameters
        ----------
        add_algo_metrics : bool
            Every metric the algorithm reports for its updates (``Algorithm/<key>``: losses,
            statistics, exploration), as means over the updates since the previous call.
        add_episodes_metrics : bool
            ``Episodes/TrainReward`` (mean return of the last 100 training episodes),
            ``Episodes/TrainLength``, ``Episodes/TestReward`` (latest evaluation).
        add_scheme_metrics : bool
            Policy lag (mean and max), gradient asynchrony, bytes moved and compression ratio
            (rollouts and gradients sent by remote workers, since the previous call), cut
            rollouts, dropped stale rollouts and gradients, ``BytesFromCollectors`` (rollout
            bytes handed over by remote collectors, packed or inserted into a replay server,
            since the start) and ``BytesToCollectors`` (weight bytes they loaded: carried by
            their requests, or pulled from the weight board, since the start), ``WeightPulls``
            (weight versions collectors pulled mid-rollout, ``scheme.col_weights: pull``), and
            the restarts since the start: ``WorkerRestarts`` (remote workers replaced after
            they died), ``EnvRestarts`` (environments rebuilt after they failed) and
            ``ServerRestarts`` (data servers replaced after they died), and
            ``SkippedUpdates``: updates skipped since the start because their gradients were
            not finite. On the replay-server data path also ``Replay/InsertsPerS`` and
            ``Replay/SamplesPerS`` (transitions per second since the previous call),
            ``Replay/MeasuredRatio`` (sampled per inserted past the warm-up, since the start),
            ``Replay/Size``, ``Replay/InsertBlockedS`` and ``Replay/SampleBlockedS`` (seconds
            each side waited, since the start), and, once a replay server died, what died
            with it since the start: ``Replay/LostInserts`` and ``Replay/LostTransitions``
            (rollouts being inserted), ``Replay/LostSamples`` (mini-batches being sampled) and
            ``Replay/DroppedPriorities`` (TD errors of mini-batches sampled from it). With an
            inference server (``col_policy="server"``) also ``Inference/MeanBatch``
            (observations per batched act, since the start), ``Inference/Calls`` (batched act
            calls since the start), ``Inference/CallsPerS`` (since the previous call),
            ``Inference/MeanWaitMs`` (from a request's arrival to its batch, since the start)
            and ``Inference/ResentActs`` (acts sent again to a replacement, since the start).
            The queue path's ``Queues/LostRollouts`` and ``Queues/LostEpisodes`` count what
            dead queue servers took with them (and puts that met them), since the start.
        add_time_metrics : bool
            Steps per second, elapsed time, seconds spent in each phase.
        """
        return self.metrics.get_metrics(add_algo_metrics, add_episodes_metrics, add_scheme_metrics,
                                        add_time_metrics, updates=self.num_updates,
                                        skipped_updates=self.skipped_updates)

    def print_info(self, add_algo_info=True, add_episodes_info=True, add_scheme_info=False, add_time_info=False):
        """Print one line with the current metrics (same switches as ``get_metrics``)."""
        m = self.get_metrics(add_algo_info, add_episodes_info, add_scheme_info, add_time_info)
        parts = [f"steps {self.num_samples_collected}/{self.target_steps}", f"updates {self.num_updates}",
                 f"fps {self.fps:,.0f}"]
        for key, value in m.items():
            if key in ("Scheme/EnvSteps", "Scheme/Updates", "Time/FPS"):
                continue
            parts.append(f"{key.split('/')[-1]} {value:.4g}" if isinstance(value, float) else f"{key.split('/')[-1]} {value}")
        print(" | ".join(parts), flush=True)

    # ------------------------------------------------------------------ hot-swap
    # update_algorithm_parameter, update_storage_parameter and replace_agent_component
    # (ControlEntries) each make a ControlRequest of their arguments and hand it here.
    def handle_control(self, request):
        """Validate ``request`` (a ``ControlRequest``), deliver it to every worker between
        updates and log it in ``hot_swaps`` at the current env step (``LearnerControl.submit``);
        a refused request raises ValueError or TypeError and touches no worker. Returns the
        value set, for a parameter."""
        return self.control.submit(request, self.num_samples_collected)

    # -------------------------------------------------------------------- saving
    def _path(self, fname):
        return fname if (os.path.isabs(fname) or not self.log_dir) else os.path.join(self.log_dir, fname)

    def save_model(self, fname="model.state_dict"):
        """Save the actor's weights; a relative ``fname`` goes into ``log_dir``. Returns the path.

        Written to ``<fname>.tmp``, flushed to the disk and renamed: a crash never leaves a
        half-written model. Raises ``pytorchrl.checkpoint.SaveError`` (the previous file
        intact) when the file cannot be written, or when the weights hold NaN or infinite
        values (a diverged model never replaces a good one).
        """
        return learner_checkpoint.save_model(self.update_worker, self._path(fname))

    def save_checkpoint(self, fname="checkpoint.pt", extra=None, keep_previous=True):
        """Write the full training state; a relative ``fname`` goes into ``log_dir``. Returns the path.

        The state holds the actor and optimizer, hyperparameters (as hot-swapped), weight
        version, step/update/episode counters, recent returns, schedule positions, the hot-swap
        log and the random states of this process (torch, CUDA, numpy, Python, and the
        actor's numpy generators), the collectors' ``Algorithm.collector_state`` when the
        algorithm keeps one (RND_PPO's statistics: the local collector's, or the first
        remote collector's, given to every collector of a resumed run), plus ``extra``
        (e.g. the run's config). Everything is
        stored in plain types (``pytorchrl.checkpoint.to_plain``) so that ``load_checkpoint``
        reads it without executing code from the file.

        The file is written to a temporary name, flushed to the disk and renamed (see
        ``pytorchrl.checkpoint.write_atomically``): a failed or interrupted save never
        damages the previous checkpoint.

        Parameters
        ----------
        fname : str
            File name (relative: in ``log_dir``).
        extra : object or None
            Saved along (plain types: dicts, lists, numbers, strings, tensors), returned by
            ``load_checkpoint``.
        keep_previous : bool
            Keep the checkpoint being replaced as ``<stem>.prev<ext>``
            (``checkpoint.prev.pt``), a fallback should the newest one be damaged.

        Raises
        ------
        pytorchrl.checkpoint.SaveError
            The file could not be written (disk full, directory not writable), or the
            weights hold NaN or infinite values; the previous checkpoint is intact.
        TypeError
            ``extra`` (or a component's state) holds a value that cannot be stored in
            plain types.
        """
        return learner_checkpoint.save_checkpoint(self, self._path(fname), extra, keep_previous)

    def load_checkpoint(self, path):
        """Restore a state written by ``save_checkpoint`` and send the weights to every worker.

        Counters continue where they stopped (``done()`` counts the steps already taken),
        hot-swapped values are re-applied on every worker and the random states restored.
        The file is read with ``torch.load(weights_only=True)``: it cannot execute code.

        Parameters
        ----------
        path : str
            The checkpoint file.

        Returns
        -------
        object
            The checkpoint's ``extra``.

        Raises
        ------
        pytorchrl.checkpoint.CheckpointError
            A ValueError with a one-line cause: the file is missing or damaged
            (``damaged`` is True; checked before anything is changed), of another format,
            or saved by another algorithm, actor or network than this learner's (checked
            before anything is changed where possible).
        """
        extra = learner_checkpoint.load_checkpoint(self, path)
        self._steps_at_start = self.num_samples_collected
        return extra

    def training_state(self, replay=True):
        """The full training state as a dict: what ``save_checkpoint`` writes, in memory (its
        tensors may share memory with the live networks; copy it before training on).

        Parameters
        ----------
        replay : bool
            Include the replay's contents (off-policy runs that checkpoint their replay); a
            copy for another learner (``restore_state(copy=True)``) does without them.
        """
        return learner_checkpoint.training_state(self, replay=replay)

    def restore_state(self, state, source, copy=False):
        """Restore a ``training_state`` on every worker of the scheme.

        Parameters
        ----------
        state : dict
            From ``training_state`` (this learner's or another's) or a checkpoint file.
        source : str
            Where it comes from, for messages ("member-2", a file).
        copy : bool
            Take over another learner's policy (population-based training): the weights,
            optimizer state, hyperparameters and the counters describing them come, the env
            steps, hot-swap log, schedules and random states stay this learner's (see
            ``pytorchrl.learner_checkpoint.restore``).

        Raises
        ------
        pytorchrl.checkpoint.CheckpointError
            The state does not fit this learner (another algorithm, actor or network).
        """
        learner_checkpoint.restore(self, state, source, copy=copy)
        if not copy:
            self._steps_at_start = self.num_samples_collected

    def evaluate(self, num_episodes=None):
        """Deterministic mean return of the current weights on the test environments."""
        return self.update_worker.evaluate(num_episodes)

    def stop(self):
        """Stop every worker of the scheme (and a Ray instance started for it)."""
        self.scheme.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def _check_positive_int(name, value, none_ok=False):
    """Raise ValueError naming ``name`` unless ``value`` is a positive integer (bools are
    not), or None when ``none_ok``."""
    if none_ok and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be {'None or ' if none_ok else ''}a positive integer, got {value!r}")


__all__ = ["Learner", "NonFiniteUpdatesError"]
