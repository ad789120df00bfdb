"""Learner: drives a Scheme, keeps metrics, applies hot-swaps and saves models."""

import collections
import logging
import math
import os
import time

import numpy as np
import torch

from pytorchrl import checkpoint as ckpt
from pytorchrl.agent.algorithms.base import check_parameter

#: Episodes averaged in ``Episodes/TrainReward``.
RECENT_EPISODES = 100
#: Seconds of history used for the steps-per-second figure.
FPS_WINDOW_S = 10.0
#: Worker restarts kept in ``Learner.worker_events``.
RECENT_EVENTS = 1000
#: Running counts of the collector sets (``CWorkerSet.stats``, reported per gradient worker
#: as ``col_<name>``) and the ``Scheme/`` metric of their sum.
COL_COUNT_METRICS = {"dropped_rollouts": "DroppedRollouts", "weight_pulls": "WeightPulls",
                     "weight_bytes": "BytesToCollectors"}

logger = logging.getLogger("pytorchrl")


class NonFiniteUpdatesError(RuntimeError):
    """Training stopped: ``Learner.max_nonfinite_updates`` updates in a row were skipped
    because their gradients held NaN or infinite values. The weights are those of the last
    finite update (a skipped update changes nothing), so they can be saved and resumed
    from, e.g. with a lower learning rate."""


class Learner:
    """Runs the training loop of a scheme.

    Parameters
    ----------
    scheme : Scheme
        The training layout to drive.
    target_steps : int
        Environment steps after which ``done()`` is True.
    log_dir : str or None
        Directory for saved models (and, where used, logs); created if needed.
    schedules : list of Schedule or None
        Planned parameter changes (see ``pytorchrl.schedules``), applied between updates
        through the same hot-swap path as ``update_algorithm_parameter``.
    checkpoint_replay : bool
        Save the contents of the (local gradient worker's) replay storage in checkpoints,
        so that a resumed run continues with them; costs the buffer's size on disk. Only
        for replay storages.
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
    episode_records : list of dict
        Every finished training episode, in the order handed over: ``episode`` (1-based),
        ``return``, ``length``, ``grad_worker``, ``col_worker``, ``env_steps`` (when it was
        handed over) and ``time`` (seconds since the start); see ``write_episode_records``.
    worker_restarts, env_restarts : int
        Remote workers replaced after they died, and environments rebuilt after they
        failed, since the start (``Scheme/WorkerRestarts``, ``Scheme/EnvRestarts``).
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
        self.record_episodes = bool(record_episodes)
        self.episode_records = []
        self._returns = collections.deque(maxlen=2 * self.rolling_reward_length)  # for the cutoff test
        self.budget_spent = False
        self.plateau = False
        if target_episodes is not None:
            scheme.update_worker.set_episode_budget(int(target_episodes))
        self.max_nonfinite_updates = max_nonfinite_updates
        self.checkpoint_replay = bool(checkpoint_replay)
        self.scheme = scheme
        self.update_worker = scheme.update_worker
        self.target_steps = int(target_steps)
        self.log_dir = log_dir
        if log_dir:
            os.makedirs(log_dir, exist_ok=True)
        self.num_samples_collected = 0
        self.num_updates = 0
        self.num_episodes = 0
        self.policy_version = 0   # newest weight version (publication) seen in a gradient's information
        self.start_time = time.time()
        self._replay_last = (self.start_time, 0, 0)  # (time, inserts, samples) at the last replay metrics
        self._inference_last = (self.start_time, 0)  # (time, batches) at the last inference metrics
        self._episodes = collections.deque(maxlen=RECENT_EPISODES)
        self._episode_lengths = collections.deque(maxlen=RECENT_EPISODES)
        self._fps_history = collections.deque([(time.perf_counter(), 0)])
        self._algo_info = collections.defaultdict(list)
        self._scheme_info = collections.defaultdict(list)
        self._time_info = collections.defaultdict(float)
        self._col_counts = {}    # running count of the collector sets -> {gradient worker: value}
        self.bytes_from_collectors = 0
        self.worker_restarts = 0
        self.env_restarts = 0
        self.worker_events = collections.deque(maxlen=RECENT_EVENTS)
        self.on_worker_event = logger.warning
        self.skipped_updates = 0
        self._skips_in_a_row = 0
        self.on_warning = logger.warning
        self.test_reward = None
        self.hot_swaps = []   # (env step, kind, name, value) of every change applied
        self.schedules = list(schedules or [])
        for sched in self.schedules:
            # Refuse a schedule of an unknown parameter now, not mid-run.
            current = (self._local_algo().hyperparameters if sched.target == "algorithm"
                       else self._local_storage().hyperparameters)
            check_parameter(current, sched.name, sched.start, f"scheduled {sched.target} parameter")
        self._apply_schedules()

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
            self._record(info, skipped)
        self._count_skip(skipped)
        self._apply_schedules()
        now = time.perf_counter()
        self._fps_history.append((now, self.num_samples_collected))
        while len(self._fps_history) > 2 and now - self._fps_history[1][0] > FPS_WINDOW_S:
            self._fps_history.popleft()
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

    def _record(self, info, skipped=False):
        # Every metric the algorithm reports reaches get_metrics (no fixed list of keys);
        # those of a skipped update describe no change of the weights (and would turn the
        # interval's means into NaN): left out, the skip is counted instead.
        for key, value in ({} if skipped else info.get("algo", {})).items():
            if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
                self._algo_info[key].append(float(value))
        for key in ("grad_time", "col_time", "prepare_time", "wait_time", "update_time", "collect_wait"):
            if key in info:
                self._time_info[key] += info[key]
        if "version" in info:
            self.policy_version = max(self.policy_version, int(info["version"]))
        if "grad_asynchrony" in info:
            self._scheme_info["GradAsynchrony"].append(info["grad_asynchrony"])
        for event in info.get("worker_events", ()):
            if event["kind"] == "env":
                self.env_restarts += 1
            else:
                self.worker_restarts += 1
            self.worker_events.append((self.num_samples_collected, event))
            self.on_worker_event(event["text"])
        if "collected_samples" in info:
            self.num_samples_collected += int(info["collected_samples"])
            sources = info.get("episode_sources") or [(None, None)] * len(info.get("episodes", ()))
            for (ret, length), (grad_worker, col_worker) in zip(info.get("episodes", ()), sources):
                self._episodes.append(ret)
                self._episode_lengths.append(length)
                self.num_episodes += 1
                if self.record_episodes:
                    self.episode_records.append({"episode": self.num_episodes, "return": float(ret), "length": int(length),
                                                 "grad_worker": grad_worker, "col_worker": col_worker,
                                                 "env_steps": self.num_samples_collected,
                                                 "time": round(time.time() - self.start_time, 3)})
                self._returns.append(float(ret))
            self.plateau = self.plateau or self._plateaued()
            self._scheme_info["PolicyLag"].append(info.get("policy_lag", 0.0))
            self._scheme_info["MaxPolicyLag"].append(max(info.get("policy_lags") or [0]))
            self._scheme_info["CutRollouts"].append(info.get("cut_rollouts", 0))
            if "sent_bytes" in info:
                self._scheme_info["BytesSent"].append(info["sent_bytes"])
                self._scheme_info["BytesRaw"].append(info["raw_bytes"])
                self.bytes_from_collectors += int(info["sent_bytes"])
            for stat in COL_COUNT_METRICS:
                if f"col_{stat}" in info:
                    # A running count per gradient worker: the metric is their sum.
                    self._col_counts.setdefault(stat, {})[info.get("index_worker", 0)] = info[f"col_{stat}"]
        if "grad_sent_bytes" in info:
            self._scheme_info["GradBytesSent"].append(info["grad_sent_bytes"])
            self._scheme_info["GradBytesRaw"].append(info["grad_raw_bytes"])
        if info.get("TestReward") is not None:
            self.test_reward = float(info["TestReward"])

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
        (``cutoff``)."""
        return self.num_samples_collected >= self.target_steps or self.budget_spent or self.plateau

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
        import csv
        path = self._path(path)
        fields = ["episode", "return", "length", "grad_worker", "col_worker", "env_steps", "time", "policy"]
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            for record in self.episode_records:
                writer.writerow({**record, "policy": policy})
        returns = [r["return"] for r in self.episode_records]
        collectors = {(r["grad_worker"], r["col_worker"]) for r in self.episode_records}
        if not returns:
            return f"0 episodes, policy {policy}; {path}"
        return (f"{len(returns)} episodes over {len(collectors)} collectors, policy {policy}: mean return "
                f"{np.mean(returns):.2f} (min {np.min(returns):.2f}, max {np.max(returns):.2f}), mean length "
                f"{np.mean([r['length'] for r in self.episode_records]):.1f}; {path}")

    # ------------------------------------------------------------------- metrics
    @property
    def fps(self):
        """Environment steps per second over the last ``FPS_WINDOW_S`` seconds."""
        (t0, s0), (t1, s1) = self._fps_history[0], self._fps_history[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else 0.0

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
            (weight versions collectors pulled mid-rollout, ``scheme.col_weights: pull``), and the restarts since the start: ``WorkerRestarts``
            (remote workers replaced after they died) and ``EnvRestarts`` (environments
            rebuilt after they failed), and ``SkippedUpdates``: updates skipped since the start
            because their gradients were not finite. On the replay-server data path also
            ``Replay/InsertsPerS`` and ``Replay/SamplesPerS`` (transitions per second since the
            previous call), ``Replay/MeasuredRatio`` (sampled per inserted past the warm-up,
            since the start), ``Replay/Size``, ``Replay/InsertBlockedS`` and
            ``Replay/SampleBlockedS`` (seconds each side waited, since the start). With an
            inference server (``col_policy="server"``) also ``Inference/MeanBatch``
            (observations per batched act, since the start), ``Inference/Calls`` (batched act
            calls since the start), ``Inference/CallsPerS`` (since the previous call) and
            ``Inference/MeanWaitMs`` (from a request's arrival to its batch, since the start).
        add_time_metrics : bool
            Steps per second, elapsed time, seconds spent in each phase.
        """
        # Updates are optimizer steps; PolicyVersion counts weight publications (update rounds).
        m = {"Scheme/EnvSteps": self.num_samples_collected, "Scheme/Updates": self.num_updates,
             "Scheme/PolicyVersion": self.policy_version}
        if add_algo_metrics:
            for key, values in self._algo_info.items():
                if values:
                    m[f"Algorithm/{key}"] = float(np.mean(values))
            self._algo_info.clear()
        if add_episodes_metrics:
            m["Episodes/TrainReward"] = float(np.mean(self._episodes)) if self._episodes else math.nan
            m["Episodes/TrainLength"] = float(np.mean(self._episode_lengths)) if self._episode_lengths else math.nan
            m["Episodes/Episodes"] = self.num_episodes
            if self.test_reward is not None:
                m["Episodes/TestReward"] = self.test_reward
        if add_scheme_metrics:
            s = self._scheme_info
            if s.get("PolicyLag"):
                m["Scheme/PolicyLag"] = float(np.mean(s["PolicyLag"]))
            if s.get("GradAsynchrony"):
                m["Scheme/GradAsynchrony"] = float(np.mean(s["GradAsynchrony"]))
            if s.get("CutRollouts"):
                m["Scheme/CutRollouts"] = int(np.sum(s["CutRollouts"]))
            if s.get("BytesSent"):
                m["Scheme/BytesSent"] = int(np.sum(s["BytesSent"]))
                m["Scheme/CompressionRatio"] = float(np.sum(s["BytesRaw"]) / max(1, np.sum(s["BytesSent"])))
            if s.get("MaxPolicyLag"):
                m["Scheme/MaxPolicyLag"] = int(np.max(s["MaxPolicyLag"]))
            if s.get("GradBytesSent"):
                m["Scheme/GradBytesSent"] = int(np.sum(s["GradBytesSent"]))
                m["Scheme/GradCompressionRatio"] = float(np.sum(s["GradBytesRaw"]) / max(1, np.sum(s["GradBytesSent"])))
            for stat, name in COL_COUNT_METRICS.items():
                if stat in self._col_counts:
                    m[f"Scheme/{name}"] = int(sum(self._col_counts[stat].values()))
            m["Scheme/BytesFromCollectors"] = self.bytes_from_collectors
            m["Scheme/WorkerRestarts"] = self.worker_restarts
            m["Scheme/EnvRestarts"] = self.env_restarts
            m["Scheme/SkippedUpdates"] = self.skipped_updates
            dropped_grads = getattr(self.update_worker, "stats", {}).get("dropped_gradients", 0)
            if dropped_grads:
                m["Scheme/DroppedGradients"] = int(dropped_grads)
            m.update(self._replay_metrics())
            m.update(self._inference_metrics())
            m.update(self._queue_metrics())
            for key in ("PolicyLag", "MaxPolicyLag", "GradAsynchrony", "CutRollouts", "BytesSent", "BytesRaw",
                        "GradBytesSent", "GradBytesRaw"):
                s.pop(key, None)
        if add_time_metrics:
            m["Time/FPS"] = self.fps
            m["Time/Elapsed"] = time.time() - self.start_time
            for key, value in self._time_info.items():
                m[f"Time/{key}"] = value
        return m

    def _replay_metrics(self):
        """The replay server's metrics (see ``get_metrics``); empty on the direct data path."""
        replay_stats = getattr(self.scheme, "replay_stats", None)
        stats = replay_stats() if replay_stats is not None else None
        if stats is None:
            return {}
        now = time.time()
        last_t, last_inserts, last_samples = self._replay_last
        elapsed = max(1e-9, now - last_t)
        self._replay_last = (now, stats["inserts"], stats["samples"])
        return {"Replay/InsertsPerS": (stats["inserts"] - last_inserts) / elapsed,
                "Replay/SamplesPerS": (stats["samples"] - last_samples) / elapsed,
                "Replay/MeasuredRatio": stats["measured_ratio"], "Replay/Size": stats["size"],
                "Replay/InsertBlockedS": stats["insert_blocked_s"], "Replay/SampleBlockedS": stats["sample_blocked_s"]}

    def _inference_metrics(self):
        """The inference server's metrics (see ``get_metrics``); empty without one."""
        inference_stats = getattr(self.scheme, "inference_stats", None)
        stats = inference_stats() if inference_stats is not None else None
        if stats is None:
            return {}
        now = time.time()
        last_t, last_calls = self._inference_last
        self._inference_last = (now, stats["batches"])
        return {"Inference/MeanBatch": stats["mean_batch"], "Inference/Calls": stats["batches"],
                "Inference/CallsPerS": (stats["batches"] - last_calls) / max(1e-9, now - last_t),
                "Inference/MeanWaitMs": stats["mean_wait_ms"]}

    def _queue_metrics(self):
        """The queue server's counters (see ``QueueServer.stats``) as ``Queues/*`` metrics:
        rollouts held now, puts, pops and rollouts popped, pops from other gradient workers'
        queues (work stealing), seconds collectors waited for room and gradient workers
        for data, bytes put and the largest queue seen; empty on the other data paths."""
        queue_stats = getattr(self.scheme, "queue_stats", None)
        stats = queue_stats() if queue_stats is not None else None
        if stats is None:
            return {}
        names = {"held": "Held", "puts": "Puts", "pops": "Pops", "popped_rollouts": "PoppedRollouts",
                 "stolen_pops": "StolenPops", "put_blocked_s": "PutBlockedS", "pop_blocked_s": "PopBlockedS",
                 "bytes_in": "BytesIn", "max_size": "MaxSize"}
        return {f"Queues/{name}": stats[key] for key, name in names.items()}

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
    def _local_algo(self):
        return self.update_worker.local_worker.algo

    def _local_storage(self):
        return self.update_worker.local_worker.storage

    def update_algorithm_parameter(self, parameter_name, new_parameter_value):
        """Change an algorithm hyperparameter on every worker, between updates.

        The request is validated here first: an unknown name raises ValueError listing the
        valid ones, a wrong type TypeError, and no worker is touched.
        """
        check_parameter(self._local_algo().hyperparameters, parameter_name, new_parameter_value,
                        f"{self._local_algo().name} hyperparameter")
        value = self.update_worker.update_algorithm_parameter(parameter_name, new_parameter_value)
        self.hot_swaps.append((self.num_samples_collected, "algorithm", parameter_name, value))
        return value

    def update_storage_parameter(self, parameter_name, new_parameter_value):
        """Change a storage parameter on every worker, between updates (validated here first)."""
        check_parameter(self._local_storage().hyperparameters, parameter_name, new_parameter_value,
                        f"{type(self._local_storage()).__name__} parameter")
        value = self.update_worker.update_storage_parameter(parameter_name, new_parameter_value)
        self.hot_swaps.append((self.num_samples_collected, "storage", parameter_name, value))
        return value

    def replace_agent_component(self, component_name, new_component_factory):
        """Replace an agent component (actor, algo, storage, envs_train, envs_test) on every worker."""
        from pytorchrl.scheme.collection.c_worker import AGENT_COMPONENTS
        if component_name not in AGENT_COMPONENTS:
            raise ValueError(f"unknown agent component {component_name!r}; valid: {list(AGENT_COMPONENTS)}")
        self.update_worker.replace_agent_component(component_name, new_component_factory)
        self.hot_swaps.append((self.num_samples_collected, "component", component_name, repr(new_component_factory)))

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
        path = self._path(fname)
        self._refuse_nonfinite_weights(path)
        return ckpt.write_atomically(self.update_worker.save_model, path)

    def _refuse_nonfinite_weights(self, path):
        """Raise SaveError (naming ``path``) when a weight is NaN or infinite (the local copy
        of the weights is made current first: ``UWorker.get_weights``)."""
        bad = [k for k, v in self.update_worker.get_weights().items()
               if v.is_floating_point() and not bool(torch.isfinite(v).all())]
        if bad:
            raise ckpt.SaveError(f"{path} not written: the weights hold NaN or infinite values "
                                 f"({', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''})")

    def save_checkpoint(self, fname="checkpoint.pt", extra=None, keep_previous=True):
        """Write the full training state; a relative ``fname`` goes into ``log_dir``. Returns the path.

        The state holds the actor and optimizer, hyperparameters (as hot-swapped), weight
        version, step/update/episode counters, recent returns, schedule positions, the hot-swap
        log and the random states of this process (torch, CUDA, numpy, Python, and the
        actor's numpy generators), plus ``extra`` (e.g. the run's config). Everything is
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
        path = self._path(fname)
        self._refuse_nonfinite_weights(path)
        local = self.update_worker.local_worker
        state = {
            "format": ckpt.FORMAT,
            "algorithm": _algorithm_name(local.algo),
            "actor": type(local.actor).__name__,
            "worker": local.get_state(),
            "learner": {"num_samples_collected": self.num_samples_collected, "num_updates": self.num_updates,
                        "num_episodes": self.num_episodes, "episodes": list(self._episodes),
                        "episode_lengths": list(self._episode_lengths), "test_reward": self.test_reward,
                        "hot_swaps": [list(swap) for swap in self.hot_swaps],
                        "elapsed": time.time() - self.start_time, "target_steps": self.target_steps},
            "storage": dict(local.storage.hyperparameters),
            "schedules": [s.last_sent for s in self.schedules],
            # The actor's own generators (numpy acting samples from one) are part of the
            # random state a resumed run must continue from.
            "rng": {**ckpt.process_rng_state(), "actor": ckpt.generator_states(local.actor)},
            "extra": extra,
        }
        if self.checkpoint_replay:
            # The replay's contents, counters and sampling state: a resumed run samples
            # from the same transitions (local gradient worker's replay only).
            state["replay"] = {"contents": local.storage.state_dict(), "rng": ckpt.generator_states(local.storage)}
        return ckpt.save_torch(ckpt.to_plain(state), path, keep_previous=keep_previous)

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
        state = ckpt.read_checkpoint(path)
        local = self.update_worker.local_worker
        try:
            _check_fits(state, local.algo, local.actor, path)
            self.update_worker.set_state(state["worker"])
            for name, value in state["worker"]["algo"]["hyperparameters"].items():
                self.update_worker.update_algorithm_parameter(name, value)
            for name, value in state.get("storage", {}).items():
                self.update_worker.update_storage_parameter(name, value)
            ls = state["learner"]
            self.num_samples_collected = ls["num_samples_collected"]
            self.num_updates = ls["num_updates"]
            self.num_episodes = ls["num_episodes"]
            self.policy_version = int(state["worker"]["version"])
            if self.target_episodes is not None:
                # The collectors count from zero again: only the episodes still to run.
                self.update_worker.set_episode_budget(max(0, self.target_episodes - self.num_episodes))
            self._episodes.clear()
            self._episodes.extend(ls["episodes"])
            self._episode_lengths.clear()
            self._episode_lengths.extend(ls["episode_lengths"])
            self.test_reward = ls["test_reward"]
            self.hot_swaps = [tuple(swap) for swap in ls["hot_swaps"]]
            self.start_time = time.time() - ls["elapsed"]
            self._fps_history = collections.deque([(time.perf_counter(), self.num_samples_collected)])
            for sched, last in zip(self.schedules, state.get("schedules", [])):
                sched.last_sent = last
            ckpt.set_generator_states(local.actor, state["rng"]["actor"], "actor")
            ckpt.set_process_rng_state(state["rng"])
            if "replay" in state and hasattr(local.storage, "load_state_dict"):
                local.storage.load_state_dict(state["replay"]["contents"])
                ckpt.set_generator_states(local.storage, state["replay"]["rng"], "storage")
        except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as exc:
            if isinstance(exc, ckpt.CheckpointError):
                raise
            # A state dict of another shape, or a hyperparameter this algorithm refuses.
            detail = " ".join(str(exc).split()) or type(exc).__name__
            raise ckpt.CheckpointError(path, f"does not fit this run: {detail[:300]}") from None
        return state.get("extra")

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


def _algorithm_name(algo):
    return getattr(algo, "name", None) or type(algo).__name__


def _check_fits(state, algo, actor, path):
    """Raise CheckpointError unless ``state`` was saved by the same algorithm and actor
    class with a network of the same parameters (names and shapes) and the same random
    generators as ``actor``'s; done
    before anything is loaded, so that a mismatch changes nothing (``path``: the file, for
    the message)."""
    saved, mine = state.get("algorithm"), _algorithm_name(algo)
    if saved != mine:
        raise ckpt.CheckpointError(path, f"saved by algorithm {saved}; this run's algorithm is {mine}")
    if state.get("actor") != type(actor).__name__:
        raise ckpt.CheckpointError(path, f"saved with actor {state.get('actor')}; this run's actor is "
                                         f"{type(actor).__name__}")
    saved_params = state["worker"]["algo"]["actor"]
    own = algo.get_weights()   # the actor's and the learner's own networks (targets)
    missing = [k for k in own if k not in saved_params]
    unexpected = [k for k in saved_params if k not in own]
    if missing or unexpected:
        parts = ([f"this run's actor has {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}"
                  f" which the checkpoint lacks"] if missing else []) + \
                ([f"the checkpoint has {', '.join(unexpected[:3])}{' ...' if len(unexpected) > 3 else ''}"
                  f" which this run's actor lacks"] if unexpected else [])
        raise ckpt.CheckpointError(path, f"its network does not match this run's actor: {'; '.join(parts)}")
    for key, value in own.items():
        other = saved_params[key]
        if tuple(getattr(other, "shape", ())) != tuple(value.shape):
            raise ckpt.CheckpointError(path, f"its network does not match this run's actor: {key} has shape "
                                             f"{tuple(other.shape)} in the checkpoint, {tuple(value.shape)} here")
    saved_rngs, own_rngs = sorted(state["rng"]["actor"]), sorted(ckpt.generator_states(actor))
    if saved_rngs != own_rngs:
        # Resuming without them would draw other actions than the saved run: not silently.
        raise ckpt.CheckpointError(path, f"the actor's random generators ({', '.join(own_rngs) or 'none'}) are "
                                         f"not those saved ({', '.join(saved_rngs) or 'none'})")


__all__ = ["Learner", "NonFiniteUpdatesError"]
