"""The Learner's metrics: every key read from the algorithm, the workers and the servers,
gathered in one place.

``LearnerMetrics.record`` takes the information of each gradient used by an update (the
algorithm's metrics, the collection rounds, restarts, bytes moved), ``get_metrics`` turns
it into the ``"Group/Name"`` dict of ``Learner.get_metrics``; the data servers' counters
(replay, inference, queues) are read from the scheme when asked for.
"""

import collections
import csv
import math
import time

import numpy as np

#: Episodes averaged in ``Episodes/TrainReward``.
RECENT_EPISODES = 100
#: Seconds of history used for the steps-per-second figure.
FPS_WINDOW_S = 10.0
#: Worker restarts kept in ``Learner.worker_events``.
RECENT_EVENTS = 1000
#: Running counts of the collector sets (``CWorkerSet.stats``, reported per gradient worker
#: as ``col_<name>``) and the metric of their sum. The data servers' losses are counted
#: where they are met (see ``pytorchrl.scheme.collection.server_links``).
COL_COUNT_METRICS = {"dropped_rollouts": "Scheme/DroppedRollouts", "weight_pulls": "Scheme/WeightPulls",
                     "weight_bytes": "Scheme/BytesToCollectors", "proxy_weight_bytes": "Scheme/BytesToProxies",
                     "lost_inserts": "Replay/LostInserts", "lost_transitions": "Replay/LostTransitions",
                     "lost_samples": "Replay/LostSamples", "dropped_priorities": "Replay/DroppedPriorities",
                     "lost_rollouts": "Queues/LostRollouts", "lost_episodes": "Queues/LostEpisodes",
                     "resent_acts": "Inference/ResentActs"}
#: Counters of the queue server (``QueueServer.stats``) and their ``Queues/`` names.
QUEUE_METRICS = {"held": "Held", "puts": "Puts", "pops": "Pops", "popped_rollouts": "PoppedRollouts",
                 "stolen_pops": "StolenPops", "stolen_rollouts": "StolenRollouts", "overwritten": "Overwritten",
                 "active_groups": "ActiveGroups", "active_actors": "ActiveActors",
                 "counted_episodes": "CountedEpisodes", "counted_steps": "CountedSteps",
                 "put_blocked_s": "PutBlockedS", "pop_blocked_s": "PopBlockedS",
                 "bytes_in": "BytesIn", "max_size": "MaxSize", "put_messages": "PutMessages"}
#: Keys of an update's information added up into ``Time/<key>``.
TIME_KEYS = ("grad_time", "col_time", "prepare_time", "wait_time", "update_time", "collect_wait")
#: Scheme metrics gathered per update and reported (then forgotten) by ``get_metrics``.
INTERVAL_KEYS = ("PolicyLag", "MaxPolicyLag", "GradAsynchrony", "CutRollouts", "BytesSent", "BytesRaw",
                 "GradBytesSent", "GradBytesRaw")


class LearnerMetrics:
    """Counts and metrics of a training run, from what its updates report.

    Parameters
    ----------
    scheme : Scheme
        The scheme trained: its data servers' counters are read through its
        ``replay_stats``, ``inference_stats`` and ``queue_stats`` (absent or None: no server).
    update_worker : UWorker
        Its ``stats`` give the asynchronous gradients dropped.
    record_episodes : bool
        Keep a record of every finished training episode (``episode_records``).
    on_worker_event : callable or None
        ``on_worker_event(text)`` is called with the line of each worker or environment
        restart reported (the Learner passes a warning on the "pytorchrl" logger).

    Attributes
    ----------
    env_steps : int
        Environment steps handed over since the start (``Learner.num_samples_collected``).
    num_episodes : int
        Training episodes finished since the start, less those a dead queue server took
        with it (``Queues/LostEpisodes``: they are run again).
    episodes, episode_lengths : deque
        Returns and lengths of the last ``RECENT_EPISODES`` training episodes.
    episode_records : list of dict
        Every finished training episode (see ``Learner.episode_records``).
    policy_version : int
        Newest weight version (publication) seen in a gradient's information.
    test_reward : float or None
        Latest evaluation's mean return.
    worker_restarts, env_restarts, server_restarts : int
        Remote workers replaced, environments rebuilt and data servers replaced since the start.
    worker_events : deque of (int, dict)
        (env step, event) of the latest restarts.
    on_worker_event : callable
        Called with the line of each restart.
    bytes_from_collectors : int
        Rollout bytes handed over by remote collectors since the start.
    start_time : float
        ``time.time()`` at the start (moved back by the elapsed time of a resumed run).
    """

    def __init__(self, scheme, update_worker, record_episodes=False, on_worker_event=None):
        self.scheme = scheme
        self.update_worker = update_worker
        self.record_episodes = bool(record_episodes)
        self.on_worker_event = on_worker_event
        self.env_steps = 0
        self.num_episodes = 0
        self._lost_episodes = 0   # Queues/LostEpisodes already taken off num_episodes
        self.policy_version = 0
        self.test_reward = None
        self.episode_records = []
        self.episodes = collections.deque(maxlen=RECENT_EPISODES)
        self.episode_lengths = collections.deque(maxlen=RECENT_EPISODES)
        self.worker_restarts = 0
        self.env_restarts = 0
        self.server_restarts = 0
        self.worker_events = collections.deque(maxlen=RECENT_EVENTS)
        self.bytes_from_collectors = 0
        self.start_time = time.time()
        self._replay_last = (self.start_time, 0, 0)  # (time, inserts, samples) at the last replay metrics
        self._inference_last = (self.start_time, 0)  # (time, batches) at the last inference metrics
        self._fps_history = collections.deque([(time.perf_counter(), 0)])
        self._algo_info = collections.defaultdict(list)
        self._scheme_info = collections.defaultdict(list)
        self._time_info = collections.defaultdict(float)
        self._col_counts = {}    # running count of the collector sets -> {gradient worker: value}

    # ------------------------------------------------------------------ recording
    def record(self, info, skipped=False):
        """Take the information of one gradient used by an update.

        Parameters
        ----------
        info : dict
            As ``UWorker.step`` returns them.
        skipped : bool
            The update was skipped (non-finite gradient): the algorithm's metrics are left out.

        Returns
        -------
        list of float
            The returns of the training episodes it hands over.
        """
        # Every metric the algorithm reports reaches get_metrics (no fixed list of keys);
        # those of a skipped update describe no change of the weights (and would turn the
        # interval's means into NaN): left out, the skip is counted instead.
        for key, value in ({} if skipped else info.get("algo", {})).items():
            if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
                self._algo_info[key].append(float(value))
        for key in TIME_KEYS:
            if key in info:
                self._time_info[key] += info[key]
        if "version" in info:
            self.policy_version = max(self.policy_version, int(info["version"]))
        if "grad_asynchrony" in info:
            self._scheme_info["GradAsynchrony"].append(info["grad_asynchrony"])
        for event in info.get("worker_events", ()):
            if event["kind"] == "env":
                self.env_restarts += 1
            elif event["kind"] == "server":
                self.server_restarts += 1
            else:
                self.worker_restarts += 1
            self.worker_events.append((self.env_steps, event))
            self.on_worker_event(event["text"])
        returns = []
        if "collected_samples" in info:
            returns = self._record_round(info)
        if "grad_sent_bytes" in info:
            self._scheme_info["GradBytesSent"].append(info["grad_sent_bytes"])
            self._scheme_info["GradBytesRaw"].append(info["grad_raw_bytes"])
        if info.get("TestReward") is not None:
            self.test_reward = float(info["TestReward"])
        return returns

    def _record_round(self, info):
        """The collection rounds of ``info``: env steps, episodes, policy lags, bytes and the
        collector sets' counts; returns the episodes' returns."""
        self.env_steps += int(info["collected_samples"])
        sources = info.get("episode_sources") or [(None, None)] * len(info.get("episodes", ()))
        returns = []
        for (ret, length), (grad_worker, col_worker) in zip(info.get("episodes", ()), sources):
            self.episodes.append(ret)
            self.episode_lengths.append(length)
            self.num_episodes += 1
            if self.record_episodes:
                self.episode_records.append({"episode": self.num_episodes, "return": float(ret), "length": int(length),
                                             "grad_worker": grad_worker, "col_worker": col_worker,
                                             "env_steps": self.env_steps,
                                             "time": round(time.time() - self.start_time, 3)})
            returns.append(float(ret))
        s = self._scheme_info
        s["PolicyLag"].append(info.get("policy_lag", 0.0))
        s["MaxPolicyLag"].append(max(info.get("policy_lags") or [0]))
        s["CutRollouts"].append(info.get("cut_rollouts", 0))
        if "sent_bytes" in info:
            s["BytesSent"].append(info["sent_bytes"])
            s["BytesRaw"].append(info["raw_bytes"])
            self.bytes_from_collectors += int(info["sent_bytes"])
        for stat in COL_COUNT_METRICS:
            if f"col_{stat}" in info:
                # A running count per gradient worker: the metric is their sum.
                self._col_counts.setdefault(stat, {})[info.get("index_worker", 0)] = info[f"col_{stat}"]
        # Episodes a dead queue server took with it were counted when handed over and are
        # run again: taken off, so that an episode budget reads exactly.
        lost = sum(self._col_counts.get("lost_episodes", {}).values())
        if lost > self._lost_episodes:
            self.num_episodes -= lost - self._lost_episodes
            self._lost_episodes = lost
        return returns

    def tick(self):
        """Note the env steps now, for ``fps`` (once per update)."""
        now = time.perf_counter()
        self._fps_history.append((now, self.env_steps))
        while len(self._fps_history) > 2 and now - self._fps_history[1][0] > FPS_WINDOW_S:
            self._fps_history.popleft()

    def restart_clock(self, elapsed):
        """Continue a resumed run: ``elapsed`` seconds already spent, and the steps-per-second
        window starting now."""
        self.start_time = time.time() - elapsed
        self._fps_history = collections.deque([(time.perf_counter(), self.env_steps)])

    @property
    def fps(self):
        """Environment steps per second over the last ``FPS_WINDOW_S`` seconds."""
        (t0, s0), (t1, s1) = self._fps_history[0], self._fps_history[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else 0.0

    # ------------------------------------------------------------------ reporting
    def get_metrics(self, add_algo_metrics=True, add_episodes_metrics=False, add_scheme_metrics=False,
                    add_time_metrics=False, updates=0, skipped_updates=0):
        """The metrics of ``Learner.get_metrics`` (see there for every key).

        Parameters
        ----------
        add_algo_metrics, add_episodes_metrics, add_scheme_metrics, add_time_metrics : bool
            The groups to add, as in ``Learner.get_metrics``.
        updates : int
            Optimizer steps since the start (``Scheme/Updates``), counted by the learner.
        skipped_updates : int
            Updates skipped for non-finite gradients (``Scheme/SkippedUpdates``).
        """
        # Updates are optimizer steps; PolicyVersion counts weight publications (update rounds).
        m = {"Scheme/EnvSteps": self.env_steps, "Scheme/Updates": updates,
             "Scheme/PolicyVersion": self.policy_version}
        if add_algo_metrics:
            for key, values in self._algo_info.items():
                if values:
                    m[f"Algorithm/{key}"] = float(np.mean(values))
            self._algo_info.clear()
        if add_episodes_metrics:
            m["Episodes/TrainReward"] = float(np.mean(self.episodes)) if self.episodes else math.nan
            m["Episodes/TrainLength"] = float(np.mean(self.episode_lengths)) if self.episode_lengths else math.nan
            m["Episodes/Episodes"] = self.num_episodes
            if self.test_reward is not None:
                m["Episodes/TestReward"] = self.test_reward
        if add_scheme_metrics:
            m.update(self._scheme_metrics(skipped_updates))
        if add_time_metrics:
            m["Time/FPS"] = self.fps
            m["Time/Elapsed"] = time.time() - self.start_time
            for key, value in self._time_info.items():
                m[f"Time/{key}"] = value
        return m

    def _scheme_metrics(self, skipped_updates):
        """``Scheme/*`` metrics and the data servers' (the interval's figures are forgotten)."""
        m = {}
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
                m[name] = int(sum(self._col_counts[stat].values()))
        m["Scheme/BytesFromCollectors"] = self.bytes_from_collectors
        m["Scheme/WorkerRestarts"] = self.worker_restarts
        m["Scheme/EnvRestarts"] = self.env_restarts
        m["Scheme/ServerRestarts"] = self.server_restarts
        m["Scheme/SkippedUpdates"] = skipped_updates
        dropped_grads = getattr(self.update_worker, "stats", {}).get("dropped_gradients", 0)
        if dropped_grads:
            m["Scheme/DroppedGradients"] = int(dropped_grads)
        m.update(self._replay_metrics())
        m.update(self._inference_metrics())
        m.update(self._queue_metrics())
        for key in INTERVAL_KEYS:
            s.pop(key, None)
        return m

    def _server_stats(self, name):
        """``scheme.<name>()`` (a data server's counters), or None without that server."""
        stats = getattr(self.scheme, name, None)
        return stats() if stats is not None else None

    def _replay_metrics(self):
        """The replay server's metrics (see ``Learner.get_metrics``); empty on the direct data path."""
        stats = self._server_stats("replay_stats")
        if stats is None:
            return {}
        now = time.time()
        last_t, last_inserts, last_samples = self._replay_last
        elapsed = max(1e-9, now - last_t)
        self._replay_last = (now, stats["inserts"], stats["samples"])
        return {"Replay/InsertsPerS": (stats["inserts"] - last_inserts) / elapsed,
                "Replay/SamplesPerS": (stats["samples"] - last_samples) / elapsed,
                "Replay/MeasuredRatio": stats["measured_ratio"], "Replay/Size": stats["size"],
                "Replay/InsertBlockedS": stats["insert_blocked_s"], "Replay/SampleBlockedS": stats["sample_blocked_s"],
                "Replay/InsertMessages": stats["insert_messages"]}

    def _inference_metrics(self):
        """The inference server's metrics (see ``Learner.get_metrics``); empty without one."""
        stats = self._server_stats("inference_stats")
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
        stats = self._server_stats("queue_stats")
        if stats is None:
            return {}
        return {f"Queues/{name}": stats[key] for key, name in QUEUE_METRICS.items()}

    # ------------------------------------------------------------------ records
    def write_episode_records(self, path, policy):
        """Write ``episode_records`` as CSV to ``path`` (one row per episode, with a
        ``policy`` column saying what acted); returns a one-line summary (see
        ``Learner.write_episode_records``)."""
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


__all__ = ["LearnerMetrics", "RECENT_EPISODES", "FPS_WINDOW_S", "RECENT_EVENTS", "COL_COUNT_METRICS"]
