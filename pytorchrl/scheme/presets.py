"""Named scheme layouts: values of the configuration file's ``scheme:`` section.

A configuration picks one with ``scheme: {preset: NAME}`` and may change any of its
values next to it (``scheme: {preset: dd-ppo, num_grad_workers: 4}``): the preset's
values are applied first, then the keys written explicitly. ``pytorchrl presets`` lists
them.

Only layouts that the current :class:`~pytorchrl.scheme.Scheme` runs are listed, each
proved by a test (tests/cli/test_cli_presets.py). The worker counts are the smallest that
show the layout; the resources are fractions of a CPU so that every preset runs on a
2-core machine (Ray packs several workers on a core). On a bigger machine raise the
counts and the resources, e.g. ``scheme.num_col_workers=8 scheme.col_workers_resources={num_cpus: 1}``.
"""

from pytorchrl.scheme.servers.queues import QUEUE_DEFAULTS

#: Resources of a remote worker in the presets: two or four fit on one core.
HALF_CPU = {"num_cpus": 0.5}
QUARTER_CPU = {"num_cpus": 0.25}


class Preset:
    """One named layout.

    Parameters
    ----------
    name : str
        Name used in ``scheme: {preset: NAME}``.
    description : str
        One line saying what the layout does.
    scheme : dict
        Values of the ``scheme:`` section (configuration-file words: "sync", "async").
    algorithm : dict or None
        Values of the ``algorithm:`` section the layout is meant for (the workflow needs
        them: EXARL's ASYNC computes DDQN's targets on the collectors). A preset sets only
        ``scheme:`` values: the configuration file writes these; ``pytorchrl presets``
        prints them and the tests train the layout with them. None: any algorithm.
    off_policy_algorithm : bool
        Whether the algorithm of ``algorithm`` learns from replayed data (the scheme names
        no algorithm class: tests/unit/test_protocols.py checks this against the class).
    """

    def __init__(self, name, description, scheme, algorithm=None, off_policy_algorithm=False):
        self.name = name
        self.description = description
        self.scheme = dict(scheme)
        self.algorithm = dict(algorithm) if algorithm else None
        self.off_policy_algorithm = bool(off_policy_algorithm)

    @property
    def uses_ray(self):
        """True when some level has several workers (they run as Ray actors)."""
        return self.scheme.get("num_col_workers", 1) > 1 or self.scheme.get("num_grad_workers", 1) > 1

    @property
    def off_policy(self):
        """True when the layout needs an off-policy algorithm (its data path is a replay
        server, or the algorithm it is meant for is one)."""
        return self.scheme.get("data_path") == "replay_server" or self.off_policy_algorithm

    def __repr__(self):
        return f"Preset({self.name!r})"


#: The collectors of the RMA presets: asynchronous, whole episodes, queue data path. On
#: this path a version is about one optimizer step (a gradient worker publishes before it
#: reads its collectors' reports, before every mini-batch; the central update of several
#: learners publishes every step). With DDQN's one update per two env steps of the
#: example configs, and two collectors playing at once, a 500-step CartPole episode spans
#: about 500 versions: 1000 drops only data of a collector that fell far behind.
_RMA_COLLECTORS = {"num_col_workers": 2, "col_workers_communication": "async", "col_workers_resources": QUARTER_CPU,
                   "max_policy_lag": 1000, "col_rollout_unit": "episodes", "data_path": "queues"}
#: Two learners kept on the same weights by the central update (gradients averaged).
_RMA_LEARNERS = {"num_grad_workers": 2, "grad_workers_communication": "sync", "grad_workers_resources": QUARTER_CPU,
                 "decentralized_update_execution": False}

def _queues(**options):
    """``scheme.queues`` of a preset: every key written (``QUEUE_DEFAULTS`` for the others)."""
    return {**QUEUE_DEFAULTS, **options}


_PRESETS = [
    Preset("single-process",
           "one collector and one gradient worker in this process, no Ray (A2C/PPO)",
           {"num_col_workers": 1, "col_workers_communication": "sync",
            "num_grad_workers": 1, "grad_workers_communication": "sync"}),
    Preset("sync-collectors",
           "N collectors step together each round; one gradient worker (PPO with parallel collection)",
           {"num_col_workers": 2, "col_workers_communication": "sync", "col_workers_resources": HALF_CPU,
            "num_grad_workers": 1, "grad_workers_communication": "sync"}),
    Preset("sync-collectors-preemptive",
           "sync collectors; a round ends once 75% of its samples are in (stragglers are cut)",
           {"num_col_workers": 2, "col_workers_communication": "sync", "col_workers_resources": HALF_CPU,
            "fraction_samples": 0.75, "fraction_workers": 1.0,
            "num_grad_workers": 1, "grad_workers_communication": "sync"}),
    Preset("async-collectors",
           "collectors run continuously; the first rollout ready is used and its collector gets the newest "
           "weights (IMPALA-style data flow; V-trace targets: storage VTraceBuffer)",
           # Versions count weight publications (one per update round, whatever the algorithm):
           # with N collectors a rollout is normally at most N versions old, so 4 drops only the
           # rollouts of a collector that fell well behind.
           {"num_col_workers": 2, "col_workers_communication": "async", "col_workers_resources": HALF_CPU,
            "max_policy_lag": 4, "num_grad_workers": 1, "grad_workers_communication": "sync"}),
    Preset("data-parallel",
           "M gradient workers, each with its own collector; gradients averaged, one central optimizer step",
           {"num_col_workers": 1, "col_workers_communication": "sync",
            "num_grad_workers": 2, "grad_workers_communication": "sync", "grad_workers_resources": HALF_CPU,
            "decentralized_update_execution": False}),
    Preset("a3c",
           "M gradient workers; each gradient is applied as it arrives and fresh weights go back to its sender",
           {"num_col_workers": 1, "col_workers_communication": "sync",
            "num_grad_workers": 2, "grad_workers_communication": "async", "grad_workers_resources": HALF_CPU,
            "decentralized_update_execution": False}),
    Preset("dd-ppo",
           "decentralized data-parallel PPO: M gradient workers all-reduce gradients and each steps its own "
           "optimizer",
           {"num_col_workers": 1, "col_workers_communication": "sync",
            "num_grad_workers": 2, "grad_workers_communication": "sync", "grad_workers_resources": HALF_CPU,
            "decentralized_update_execution": True}),
    Preset("exarl-sync",
           "EXARL's SYNC workflow: one learner and N actors; each round every actor's batch is gathered "
           "together (synchronous collection), the learner trains and broadcasts the weights; how often a batch "
           "goes: batch_step_frequency (steps) and batch_episode_frequency (episode ends)",
           {"num_col_workers": 2, "col_workers_communication": "sync", "col_workers_resources": HALF_CPU,
            "num_grad_workers": 1, "grad_workers_communication": "sync"}),
    Preset("exarl-multi-learner-async",
           "EXARL's multi-learner async: M learners take synchronous all-reduced steps on batches from "
           "asynchronous actors (here each learner owns its N actors)",
           {"num_col_workers": 2, "col_workers_communication": "async", "col_workers_resources": QUARTER_CPU,
            "num_grad_workers": 2, "grad_workers_communication": "sync", "grad_workers_resources": QUARTER_CPU,
            "decentralized_update_execution": True}),
    Preset("drl-actor-model",
           "DistributedReinforcementLearning.jl's actor model (off-policy): async collectors insert into a "
           "replay server (TrajectoryManager) that the learner samples, paced by a rate limiter (Orchestrator)",
           {"num_col_workers": 2, "col_workers_communication": "async", "col_workers_resources": QUARTER_CPU,
            "num_grad_workers": 1, "grad_workers_communication": "sync",
            "data_path": "replay_server",
            "replay_server": {"min_size_to_sample": 200, "samples_per_insert": 4.0, "error_buffer": 256.0,
                              "num_cpus": 0.25}}),
    Preset("exarl-random",
           "EXARL's RANDOM workflow: N collectors act at random for whole episodes, nothing is trained; "
           "the run writes results.csv (collection only)",
           {"num_col_workers": 2, "col_workers_communication": "async", "col_workers_resources": HALF_CPU,
            "num_grad_workers": 0, "grad_workers_communication": "sync",
            "col_rollout_unit": "episodes", "col_policy": "random"}),
    Preset("exarl-a2c-sync",
           "EXARL's A2C sync workflow: one actor collects one whole episode, the learner trains once on it "
           "(use A2C, env.vec_env_size: 1), in one process",
           {"num_col_workers": 1, "col_workers_communication": "sync",
            "num_grad_workers": 1, "grad_workers_communication": "sync", "col_rollout_unit": "episodes"}),
    Preset("exarl-a2c-async",
           "EXARL's A2C async workflow: N actors each collect whole episodes with the policy frozen for the "
           "episode; the learner trains on each as it arrives",
           {"num_col_workers": 2, "col_workers_communication": "async", "col_workers_resources": HALF_CPU,
            "max_policy_lag": 4, "num_grad_workers": 1, "grad_workers_communication": "sync",
            "col_rollout_unit": "episodes"}),
    Preset("exarl-async",
           "EXARL's ASYNC workflow: N actors each run whole episodes, compute the training data themselves "
           "(DDQN's Bellman targets, with the target network they receive: algorithm.targets_on_collector) "
           "and send it; the learner fits it as it arrives and sends fresh weights back to the sender",
           {"num_col_workers": 2, "col_workers_communication": "async", "col_workers_resources": HALF_CPU,
            "max_policy_lag": 4, "num_grad_workers": 1, "grad_workers_communication": "sync",
            "col_rollout_unit": "episodes"},
           algorithm={"name": "DDQN", "targets_on_collector": True}, off_policy_algorithm=True),
    Preset("exarl-nonblocking-async",
           "EXARL's non-blocking async workflow (off-policy): N actors collect without waiting for the learner "
           "(two requests in flight) and pull the newest weights from a weight board every few steps, "
           "mid-rollout; staleness unbounded",
           {"num_col_workers": 2, "col_workers_communication": "async", "col_workers_resources": HALF_CPU,
            "col_requests_in_flight": 2, "col_weights": "pull",
            "num_grad_workers": 1, "grad_workers_communication": "sync"},
           algorithm={"name": "DDQN"}, off_policy_algorithm=True),
    Preset("exarl-seed",
           "EXARL's SEED workflow: N actors send only observations; a central inference server batches those "
           "of every actor, acts with the learner's weights and answers with actions; the learner keeps the "
           "replay and trains (DQN)",
           {"num_col_workers": 2, "col_workers_communication": "async", "col_workers_resources": QUARTER_CPU,
            "num_grad_workers": 1, "grad_workers_communication": "sync", "col_policy": "server",
            "inference_server": {"max_batch": 64, "timeout_ms": 2.0, "num_cpus": 0.25}},
           algorithm={"name": "DDQN"}, off_policy_algorithm=True),
    Preset("exarl-seed-a2c",
           "EXARL's SEED A2C workflow: as exarl-seed, but each actor keeps its episode's trajectory and sends "
           "it whole when the episode ends; the learner takes one A2C step on each",
           {"num_col_workers": 2, "col_workers_communication": "async", "col_workers_resources": QUARTER_CPU,
            "max_policy_lag": 4, "num_grad_workers": 1, "grad_workers_communication": "sync",
            "col_rollout_unit": "episodes", "col_policy": "server",
            "inference_server": {"max_batch": 64, "timeout_ms": 2.0, "num_cpus": 0.25}},
           algorithm={"name": "A2C"}),
    # EXARL's RMA family: the queue data path (pytorchrl.scheme.servers.queues). Collectors
    # run whole episodes and put them, with their weight version, into bounded queues; the
    # learners pop them, drop those more than max_policy_lag versions old (EXARL read
    # max_model_lag but never applied it) and train. Several learners are kept on the same
    # weights by the central update (their gradients are averaged, one optimizer step).
    Preset("exarl-rma",
           "EXARL's RMA workflow: N actors each write whole episodes into their own one-slot window (a "
           "bounded queue, the actor waits while it is full; queues.kind: circular overwrites instead); the "
           "learner reads a random actor's window, drops stale data (max_policy_lag) and trains; the actors read "
           "the learner's weights from a weight board at the start of every episode",
           {**_RMA_COLLECTORS, "num_grad_workers": 1, "grad_workers_communication": "sync",
            "col_weights": "pull", "col_weight_pull_every": "episode",
            "queues": _queues(size=1, pop="one", prefetch=False, selection="random")}),
    Preset("exarl-rma-window-random",
           "EXARL's RMA with several learners, each reading a random actor's window among all actors; the "
           "learners' gradients are averaged (weights stay the same on all)",
           {**_RMA_COLLECTORS, **_RMA_LEARNERS,
            "queues": _queues(size=1, pop="one", prefetch=False, selection="random")}),
    Preset("exarl-rma-window-binned",
           "EXARL's RMA with several learners, each reading the windows of its own fixed bin of actors (oldest "
           "first); the learners' gradients are averaged",
           {**_RMA_COLLECTORS, **_RMA_LEARNERS,
            "queues": _queues(size=1, pop="one", prefetch=False, selection="binned")}),
    Preset("exarl-rma-queue-pop-all",
           "EXARL's RMA queue: each actor has a bounded queue (it waits while the queue is full); the learner "
           "drains a random actor's queue and asks for the next drain before training on this one (prefetch)",
           {**_RMA_COLLECTORS, "num_grad_workers": 1, "grad_workers_communication": "sync",
            "queues": _queues(size=4, pop="all", prefetch=True, selection="random")}),
    Preset("exarl-ml-rma-queue",
           "EXARL's multi-learner RMA queue: one group of actors per learner, each with a bounded queue the "
           "learner drains (prefetching), the budget one work counter shared by every actor; a learner whose "
           "group is finished (no actor active, nothing left to claim) drains the other groups' queues (work "
           "stealing); the run ends when no actor is active and every queue is empty",
           {**_RMA_COLLECTORS, **_RMA_LEARNERS,
            "queues": _queues(size=4, pop="all", prefetch=True, selection="binned", steal=True)}),
    Preset("exarl-ml-rma-queue-short",
           "EXARL's short multi-learner RMA queue: as exarl-ml-rma-queue, but a learner never drains another "
           "group's queues, and the run ends as soon as one learner can get no more data from its own group "
           "(its actors done, its queues empty)",
           {**_RMA_COLLECTORS, **_RMA_LEARNERS,
            "queues": _queues(size=4, pop="all", prefetch=True, selection="binned", steal=False, end="first")}),
]

#: Presets by name, in the order they are listed.
PRESETS = {p.name: p for p in _PRESETS}


def get_preset(name):
    """The preset called ``name``.

    Parameters
    ----------
    name : str
        A key of ``PRESETS``.

    Raises
    ------
    KeyError
        Naming the valid presets.
    """
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown preset {name!r}; valid: {', '.join(PRESETS)}") from None


#: Keys whose mappings are merged with the preset's (a key written changes one option of
#: the queues and keeps the preset's others: the RMA presets differ in several) instead of
#: replacing them.
MERGED_KEYS = ("queues",)


def resolve_scheme_section(section):
    """The ``scheme:`` section with its ``preset`` expanded: the preset's values, then the
    keys given explicitly (which win). A mapping given for one of ``MERGED_KEYS`` is merged
    into the preset's (``scheme.queues.size=8`` keeps the preset's other queue options). A
    section without ``preset`` is returned as is.

    Parameters
    ----------
    section : dict
        The section as written (it is not modified).
    """
    name = section.get("preset")
    if name is None:
        return dict(section)
    preset = get_preset(name).scheme
    out = {**preset, **section}
    for key in MERGED_KEYS:
        if isinstance(preset.get(key), dict) and isinstance(section.get(key), dict):
            out[key] = {**preset[key], **section[key]}
    return out


__all__ = ["Preset", "PRESETS", "get_preset", "resolve_scheme_section"]
