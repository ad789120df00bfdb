"""Scheme: composes collection, gradient and update workers into one training layout."""

import logging

import pytorchrl as prl
from pytorchrl.agent.protocols import ActorFactory, AlgorithmFactory, StorageFactory
from pytorchrl.scheme.base.checks import check_communication, check_fraction, check_int, ineffective_options
from pytorchrl.scheme.base.faults import FaultPolicy
from pytorchrl.scheme.base.servers import (SERVER_TITLES, ServerClient, ServerLost, ServerSupervisor, close_server,
                                          stop_server)
from pytorchrl.scheme.base.worker import default_remote_config
from pytorchrl.scheme.collection.c_worker import episodes_per_rollout, no_envs
from pytorchrl.scheme.collection.c_worker_set import CWorkerSet
from pytorchrl.scheme.gradients.g_worker_set import GWorkerSet
from pytorchrl.scheme.layout_rules import broken_rules, layout_settings
from pytorchrl.scheme.updates.u_worker import UWorker
from pytorchrl.scheme.servers import inference_server as inference
from pytorchrl.scheme.servers.queues import QueueLink, check_queue_path, make_queue_server
from pytorchrl.scheme.servers.replay_server import check_data_path, make_server
from pytorchrl.scheme.servers.replay_server import start_remote as start_replay_server
from pytorchrl.scheme.servers.weight_board import PullRefused, check_weight_mode

DEFAULT_COL_RESOURCES = default_remote_config(num_cpus=1)
DEFAULT_GRAD_RESOURCES = default_remote_config(num_cpus=1)

logger = logging.getLogger("pytorchrl")


class Scheme:
    """A distributed training layout built from agent factories.

    With ``num_col_workers=1`` and ``num_grad_workers=1`` everything runs in this process
    and Ray is never imported. With more workers at a level, that level's workers are Ray
    actors (a local Ray instance is started, or the cluster at ``RAY_ADDRESS`` joined).

    Parameters
    ----------
    algo_factory, actor_factory, storage_factory : callable
        Agent component factories (``<Algorithm>.create_factory(...)[0]``,
        ``<Actor>.create_factory(...)``, ``<Storage>.create_factory(...)``).
    train_envs_factory : callable
        ``VecEnv.create_factory(...)[0]``: the environments data is collected in.
    test_envs_factory : callable
        Environments for deterministic evaluation (default: none).
    num_col_workers : int
        Collection workers per gradient worker.
    col_compress_data : bool or "auto"
        lz4-compress rollouts sent by remote collection workers ("auto": only uint8 arrays).
    col_workers_communication : str
        ``prl.SYNC`` or ``prl.ASYNC`` collection.
    col_workers_resources : dict
        Ray resources of each remote collection worker (``Worker.as_remote`` arguments:
        num_cpus, num_gpus, memory, resources; default one CPU, no GPU). Fractions let
        several workers share a core, e.g. ``{"num_cpus": 0.5}``.
    col_preemption_thresholds : dict
        ``{"fraction_samples": f, "fraction_workers": g}``, each in (0, 1], default 1.0 (no
        preemption). In synchronous collection with either below 1, the collectors still
        running are cut at a step boundary once a fraction g of the workers have finished
        and the round holds a fraction f of its samples (a threshold left at 1.0 sets no
        condition of its own); see ``CWorkerSet``.
    num_grad_workers : int
        Gradient workers; 0 makes a collection-only scheme: the collectors of one gradient
        worker (in this process) run and their episodes are counted, nothing is trained
        (EXARL's RANDOM workflow with ``col_policy="random"``, or a saved policy).
    grad_compress_data : bool or "auto"
        lz4-compress gradients sent by remote gradient workers.
    grad_workers_communication : str
        ``prl.SYNC`` or ``prl.ASYNC`` (A3C) gradient application.
    grad_workers_resources : dict
        Ray resources of each remote gradient worker (as ``col_workers_resources``).
    local_device : str or None
        Device of the workers in this process.
    decentralized_update_execution : bool
        DD-PPO: gradient workers all-reduce gradients and step their own optimizers.
    max_policy_lag : int or None
        Asynchronous collection: drop rollouts whose weights are more than this many
        versions old.
    max_grad_lag : int or None
        Asynchronous gradients: drop gradients computed on weights more than this many
        versions old.
    col_requests_in_flight : int
        Asynchronous collection: rollout requests queued at each remote collection worker
        (default 1). 2 keeps every collector busy while the learner reacts, at the cost of
        rollouts made with weights one rollout older; see ``CWorkerSet``.
    max_worker_restarts : int
        Restarts allowed to each worker over the run (default 3): a remote worker whose
        process dies is replaced with the current weights and the hot-swapped parameters,
        an environment that fails is rebuilt, and each counts as one restart of that
        worker; its next failure ends the run with one line naming it (``WorkerFailure``).
        The limit is per worker, not a total: a lost node costs each of its workers one
        restart, while a worker that keeps dying ends the run.
    worker_restart_delay_s : float
        Seconds waited before each restart, so that a worker that dies at once is not
        rebuilt in a tight loop.
    on_env_error : str
        What an environment that raises does: "restart" (default) rebuilds the worker's
        environments, drops the rollout and goes on; "stop" ends the run with the error.
    data_path : str
        How transitions reach the gradient workers. "direct" (default): each collector's
        rollouts go to its gradient worker's storage. "replay_server" (off-policy
        algorithms): collectors insert them into one replay server built from
        ``storage_factory`` (a Ray actor when the scheme uses Ray) and gradient workers
        sample mini-batches from it, paced by its rate limiter instead of the algorithm's
        ``update_every``/``num_updates``/``start_steps``; prioritized replay's TD errors go
        back to it. Remote collectors must then be asynchronous. See
        ``pytorchrl.scheme.servers.replay_server``. "queues": every remote collector
        puts its rollouts into a bounded queue of one queue server (a Ray actor) and
        waits while it is full; gradient workers pop them into their own storage (EXARL's
        RMA windows and queues). Needs ``num_col_workers >= 2`` and asynchronous
        collection; ``max_policy_lag`` drops rollouts too old when popped. See
        ``pytorchrl.scheme.servers.queues``.
    replay_server : dict or None
        With ``data_path="replay_server"``: some of ``min_size_to_sample``,
        ``samples_per_insert``, ``error_buffer`` (the rate limiter, see ``RateLimiter``)
        and ``num_cpus`` (Ray CPUs of the server actor); the others keep
        ``REPLAY_SERVER_DEFAULTS``.
    queues : dict or None
        With ``data_path="queues"``: some of ``size``, ``pop``, ``prefetch``, ``selection``,
        ``steal``, ``route``, ``num_cpus`` (see ``pytorchrl.scheme.servers.queues``); the
        others keep ``QUEUE_DEFAULTS``. Refused with another data path.
    col_rollout_unit : str
        What one rollout is: "steps" (default: the storage's ``size`` steps) or "episodes"
        (a rollout ends with the first episode that ends in it, at most ``size`` steps: with
        one environment per collector, one whole episode), see ``CWorker``.
    col_policy : str
        "learned" (default): collectors act with the actor they hold; "random": they act
        uniformly at random; "server": a central inference server acts for them (SEED):
        collectors send each step's observations, the server batches those of every
        collector, acts once per batch with the learner's latest published weights and
        answers with actions; see ``pytorchrl.scheme.servers.inference_server``. The
        actor must be feed-forward without per-environment state, the algorithm without
        collector-side pre-processing, and there is one gradient worker.
    inference_server : dict or None
        With ``col_policy="server"``: some of ``max_batch``, ``timeout_ms`` (batching) and
        ``num_cpus`` (Ray CPUs of the server actor when the scheme uses Ray); the others
        keep ``INFERENCE_SERVER_DEFAULTS``.
    col_step_log_dir : str or None
        Directory where every collector writes a per-step log of its training steps
        (time, state, action, reward, next state, total reward, done, episode, step,
        policy; see ``CWorker``), one CSV file per collector. None (default): no log.
    col_weights : str
        How remote collectors get new weights. "push" (default): with each rollout request,
        so a rollout is acted by one version. "pull" (EXARL's non-blocking async workflow;
        asynchronous collection, off-policy algorithms): each version is published once to
        a weight board (a Ray actor holding a reference to the weights in the object store)
        that every collector checks every ``col_weight_pull_every`` steps without waiting
        for the answer, swapping weights mid-rollout; a rollout's version is the oldest it
        acted with. See ``pytorchrl.scheme.servers.weight_board``.
    col_weight_pull_every : int, str or None
        With ``col_weights="pull"``: environment steps between two checks of the board
        (None: ``DEFAULT_PULL_EVERY``, 10), none of them waited for; or ``"episode"``:
        the board is read at the start of every episode and the answer waited for (EXARL's
        RMA actors reading the weight window per episode). Then on-policy algorithms may
        pull too when a rollout is one episode (``col_rollout_unit="episodes"``): the
        weights change between rollouts only.
    batch_step_frequency : int or None
        EXARL's ``batch_step_frequency``: a collector hands its batch over every this many
        steps (per environment); a rollout is at most that long. It must fit the storage's
        rollout (``storage.size``, or ``update_every`` per environment for a replay). None:
        the storage's rollout.
    batch_episode_frequency : int or None
        EXARL's ``batch_episode_frequency``: a collector hands its batch over at the end of
        every this many episodes (a rollout ends with the step that ends its this-many-th
        episode, or at its step limit, whichever first). With synchronous collection every
        round gathers one such batch of every collector (EXARL's SYNC). None: 1 with
        ``col_rollout_unit="episodes"``, episodes do not end rollouts otherwise.
    col_worker_proxy : bool
        DistributedReinforcementLearning.jl's WorkerProxy (remote collectors): one proxy per
        node that runs collectors receives each weight version once and serves every
        collector of its node from its node's object store; it gathers their rollouts into
        one message per round (synchronous collection, without preemption), or passes them
        on to the data server together (asynchronous collection with a replay server or
        queues), see ``pytorchrl.scheme.servers.worker_proxy``. Refused where it has
        nothing to share (asynchronous collectors on the direct data path that load no
        pushed weights: an inference server, pulled weights). Default False: every collector
        gets its own request, small weights ride inside each, and every collector sends
        its rollouts itself.
    episode_block : int or None
        EXARL's ``episode_block`` (ASYNC workflow; asynchronous collection): each request
        runs a block of this many whole episodes, sent as one rollout, and the collectors'
        next requests go out together, with the newest weights, once every collector has
        handed its block over (one weight broadcast per block round). None: a collector gets
        its next request as soon as it hands a rollout over.

    Options that the layout never uses (preemption thresholds with asynchronous collection
    or one collection worker, ``max_policy_lag`` with synchronous collection,
    ``max_grad_lag`` with synchronous gradients or one gradient worker, ``max_policy_lag``
    and ``replay_server`` with the other data path, ``col_weights="pull"`` with one collection
    worker, ``col_weight_pull_every`` with pushed weights) are ignored with a warning on the
    "pytorchrl" logger, one per option; the configuration file refuses them.

    Attributes
    ----------
    fault_policy : FaultPolicy
        The three options above (and ``start_timeout_s``, the time a replacement may wait
        for resources), shared by the worker sets in this process; remote gradient workers
        hold a copy made when they were built (see ``pytorchrl.scheme.base.faults``).
    servers : ServerSupervisor
        Replaces the data servers (replay, inference, queue server) that run as Ray actors
        when they die, under the same limit and delay as the workers; every client is
        given the replacement (see ``pytorchrl.scheme.base.servers``). The replay server's
        replacement holds the contents of the last checkpoint that saved them
        (``set_replay_snapshot``), else none; the inference server's gets the current
        weights; the queue server's starts empty.
    replay_server, inference_server, queue_server : ray.actor.ActorHandle, object or None
        The running data servers (None where the layout has none).
    """

    def __init__(self, algo_factory: AlgorithmFactory, actor_factory: ActorFactory,
                 storage_factory: StorageFactory, train_envs_factory,
                 test_envs_factory=no_envs, num_col_workers=1, col_compress_data=False,
                 col_workers_communication=prl.SYNC, col_workers_resources=None,
                 col_preemption_thresholds=None, num_grad_workers=1, grad_compress_data=False,
                 grad_workers_communication=prl.SYNC, grad_workers_resources=None, local_device=None,
                 decentralized_update_execution=False, max_policy_lag=None, max_grad_lag=None,
                 col_requests_in_flight=1, max_worker_restarts=3, worker_restart_delay_s=1.0,
                 on_env_error="restart", data_path="direct", replay_server=None, col_rollout_unit="steps",
                 col_policy="learned", col_step_log_dir=None, col_weights="push", col_weight_pull_every=None,
                 inference_server=None, queues=None, batch_step_frequency=None, batch_episode_frequency=None,
                 episode_block=None, col_worker_proxy=False):
        thresholds = {"fraction_samples": 1.0, "fraction_workers": 1.0}
        unknown = set(col_preemption_thresholds or {}) - set(thresholds)
        if unknown:
            raise ValueError(f"unknown col_preemption_thresholds keys {sorted(unknown)}; valid: {sorted(thresholds)}")
        thresholds.update(col_preemption_thresholds or {})
        for name, v in thresholds.items():
            check_fraction(f"col_preemption_thresholds[{name!r}]", v)
        check_int("num_col_workers", num_col_workers, 1)
        check_int("num_grad_workers", num_grad_workers, 0)
        collect_only = num_grad_workers == 0
        requested_grad_workers, num_grad_workers = num_grad_workers, max(1, num_grad_workers)
        col_workers_communication = check_communication("col_workers_communication", col_workers_communication)
        grad_workers_communication = check_communication("grad_workers_communication", grad_workers_communication)
        for name, mode in (("col_compress_data", col_compress_data), ("grad_compress_data", grad_compress_data)):
            if mode not in (True, False, "auto"):
                raise ValueError(f"{name} must be True, False or 'auto', got {mode!r}")
        for name, lag in (("max_policy_lag", max_policy_lag), ("max_grad_lag", max_grad_lag)):
            check_int(name, lag, 0, optional=True)
        check_int("col_requests_in_flight", col_requests_in_flight, 1)
        for name, value in (("batch_step_frequency", batch_step_frequency),
                            ("batch_episode_frequency", batch_episode_frequency), ("episode_block", episode_block)):
            check_int(name, value, 1, optional=True)
        if not isinstance(col_worker_proxy, bool):
            raise ValueError(f"col_worker_proxy must be True or False, got {col_worker_proxy!r}")
        refuse_broken_layout(layout_settings(
            remote_col_workers=0 if num_col_workers == 1 else num_col_workers,
            col_workers_communication=col_workers_communication, col_requests_in_flight=col_requests_in_flight,
            col_weights=col_weights, col_policy=col_policy, data_path=data_path, col_worker_proxy=col_worker_proxy,
            episode_block=episode_block, batch_episode_frequency=batch_episode_frequency,
            num_grad_workers=requested_grad_workers, grad_workers_communication=grad_workers_communication,
            decentralized_update_execution=bool(decentralized_update_execution), **thresholds))
        for item in ineffective_options(num_col_workers, col_workers_communication == prl.ASYNC, num_grad_workers,
                                        grad_workers_communication == prl.ASYNC, thresholds["fraction_samples"],
                                        thresholds["fraction_workers"], max_policy_lag, max_grad_lag,
                                        col_compress_data, grad_compress_data, decentralized_update_execution,
                                        col_workers_resources, grad_workers_resources):
            logger.warning(f"Scheme: {_python_name(item.option)}={item.value!r} has no effect with "
                           f"{item.setting}={_python_value(item.current)} ({item.reason}); it is ignored "
                           f"(it acts with {item.setting}={_python_value(item.needed)})")
            if item.option == "decentralized_update_execution":
                decentralized_update_execution = False   # (what the warning says: one worker updates itself)
        try:
            ineffective = check_weight_mode(col_weights, col_weight_pull_every, num_col_workers, algo_factory,
                                            episodes_per_rollout(col_rollout_unit,
                                                                 episode_block or batch_episode_frequency))
        except PullRefused as exc:
            raise ValueError(f"col_weights='pull': pulled weights {exc}") from None
        for option, value, reason in ineffective:
            logger.warning(f"Scheme: {option}={value!r} has no effect with {reason}; it is ignored")
            if option == "col_weights":
                col_weights = "push"
        replay_options = check_data_path(data_path, replay_server, storage_factory)
        if replay_options is not None and max_policy_lag is not None:
            logger.warning(f"Scheme: max_policy_lag={max_policy_lag!r} has no effect with "
                           f"data_path='replay_server' (rollouts are in the server before their lag is known); "
                           f"it is ignored")
            max_policy_lag = None
        queue_options = None
        if data_path == "queues":
            queue_options = check_queue_path(queues, requested_grad_workers, grad_workers_communication == prl.ASYNC)
        elif queues:
            raise ValueError(f"queues options act with data_path='queues' only, got data_path={data_path!r}; "
                             f"remove them, or set data_path='queues'")
        server_options = self._check_inference_server(col_policy, inference_server, algo_factory, actor_factory)
        self.fault_policy = FaultPolicy(max_worker_restarts=max_worker_restarts,
                                        worker_restart_delay_s=worker_restart_delay_s, on_env_error=on_env_error)
        from pytorchrl.scheme.base.ray_runtime import validate_resources
        col_res = validate_resources(col_workers_resources or DEFAULT_COL_RESOURCES, "collection workers")
        grad_res = validate_resources(grad_workers_resources or DEFAULT_GRAD_RESOURCES, "gradient workers")
        remote_cols = 0 if num_col_workers == 1 else num_col_workers
        remote_grads = 0 if num_grad_workers == 1 else num_grad_workers
        self.num_col_workers, self.num_grad_workers = num_col_workers, requested_grad_workers
        self._components = {"actor": actor_factory, "algorithm": algo_factory, "storage": storage_factory,
                            "train_envs": train_envs_factory, "test_envs": test_envs_factory}
        self._layout = {"num_col_workers": num_col_workers, "col_workers_communication": col_workers_communication,
                        "num_grad_workers": requested_grad_workers,
                        "grad_workers_communication": grad_workers_communication,
                        "decentralized_update_execution": bool(decentralized_update_execution),
                        "data_path": data_path}
        self.collect_only = collect_only
        self.uses_ray = bool(remote_cols or remote_grads)
        self._holds_ray = False
        self.update_worker = None
        self.replay_server = None
        self.inference_server = None
        self.queue_server = None
        if self.uses_ray:
            from pytorchrl.scheme.base.ray_runtime import acquire_ray, check_schedulable
            acquire_ray()
            self._holds_ray = True
            # The whole tree is checked before anything starts, so an impossible request
            # fails at once instead of leaving half a scheme waiting for resources.
            try:
                check_schedulable([("gradient workers", remote_grads, grad_res),
                                   ("collection workers", remote_cols * num_grad_workers, col_res),
                                   ("the replay server", 1 if replay_options else 0,
                                    {"num_cpus": (replay_options or {}).get("num_cpus", 0)}),
                                   ("the inference server", 1 if server_options else 0,
                                    {"num_cpus": (server_options or {}).get("num_cpus", 0)}),
                                   ("the queue server", 1 if queue_options else 0,
                                    {"num_cpus": (queue_options or {}).get("num_cpus", 0)})])
            except BaseException:
                self._release_ray()
                raise
        self.servers = ServerSupervisor(self.fault_policy)
        self.replay_snapshot = None   # see set_replay_snapshot
        queue_link = None
        try:
            self._start_servers(algo_factory, actor_factory, storage_factory, replay_options, server_options,
                                queue_options, num_col_workers, num_grad_workers)
        except BaseException:
            self._stop_servers()
            self._release_ray()
            raise
        if queue_options is not None:
            queue_link = QueueLink(self.queue_server, queue_options["prefetch"])

        col_kwargs = dict(algo_factory=algo_factory, actor_factory=actor_factory,
                          storage_factory=storage_factory, test_envs_factory=test_envs_factory,
                          total_parent_workers=num_grad_workers,
                          col_fraction_samples=thresholds["fraction_samples"],
                          col_fraction_workers=thresholds["fraction_workers"],
                          compress_data_to_send=col_compress_data, col_worker_resources=col_res,
                          communication=col_workers_communication, max_policy_lag=max_policy_lag,
                          requests_in_flight=col_requests_in_flight, fault_policy=self.fault_policy,
                          replay_server=self.replay_server, rollout_unit=col_rollout_unit, policy=col_policy,
                          step_log_dir=col_step_log_dir, weights=col_weights,
                          weight_pull_every=col_weight_pull_every, inference_server=self.inference_server,
                          queues=queue_link, rollout_steps=batch_step_frequency,
                          rollout_episodes=episode_block or batch_episode_frequency,
                          block_rounds=episode_block is not None and num_col_workers > 1,
                          worker_proxy=col_worker_proxy)
        col_factory = CWorkerSet.create_factory(num_workers=remote_cols, train_envs_factory=train_envs_factory,
                                                **col_kwargs)
        # With remote gradient workers, the local one only keeps and evaluates the weights.
        local_col_factory = CWorkerSet.create_factory(num_workers=0, train_envs_factory=no_envs, **col_kwargs) \
            if remote_grads else None
        grad_factory = GWorkerSet.create_factory(
            num_workers=remote_grads, col_workers_factory=col_factory,
            local_col_workers_factory=local_col_factory, compress_grads_to_send=grad_compress_data,
            decentralized=decentralized_update_execution, grad_worker_resources=grad_res,
            fault_policy=self.fault_policy)
        try:
            self.update_worker = UWorker(grad_factory, grad_communication=grad_workers_communication,
                                         decentralized_update_execution=decentralized_update_execution,
                                         local_device=local_device, max_grad_lag=max_grad_lag,
                                         collect_only=collect_only,
                                         budget_end=queue_options["end"] if queue_options else "all",
                                         queue_server=self.queue_server)
        except BaseException:
            # The worker sets stop what they started before failing; what is left is the
            # data servers and Ray.
            self._stop_servers()
            self._release_ray()
            raise
        self.servers.listen(self._server_replaced)
        self.update_worker.watch_servers(self.servers)

    def _start_servers(self, algo_factory, actor_factory, storage_factory, replay_options, inference_options,
                       queue_options, num_col_workers, num_grad_workers):
        """Start the data servers the layout has (their options None: none), and have the
        remote ones supervised (``servers``)."""
        remote = self.uses_ray
        if replay_options is not None:
            self.replay_server = make_server(algo_factory, actor_factory, storage_factory, replay_options,
                                             remote=remote)
            if remote:
                self.servers.add("replay", self.replay_server, restore=self._restore_replay, start=lambda: (
                    start_replay_server(algo_factory, actor_factory, storage_factory, replay_options, wait=False)))
        if inference_options is not None:
            # Each collector waits for its answer before it asks again: once all of them
            # wait, the batch is complete.
            self.inference_server = inference.make_server(algo_factory, actor_factory, inference_options,
                                                          remote=remote, num_callers=num_col_workers)
            if remote:
                # (The collector set gives it the current weights before any collector acts.)
                self.servers.add("inference", self.inference_server,
                                 restore=lambda client: "replaced, with the current weights", start=lambda: (
                                     inference.start_remote(algo_factory, actor_factory, inference_options,
                                                            num_col_workers, wait=False)))
        if queue_options is not None:
            # Gradient workers are indexed 1..M when remote, 0 when the only one is local.
            parents = [0] if num_grad_workers == 1 else list(range(1, num_grad_workers + 1))
            groups = {p: list(range(1, num_col_workers + 1)) for p in parents}
            self.queue_server = make_queue_server(groups, queue_options, remote=remote)
            if remote:
                self.servers.add("queue", self.queue_server, restore=self._restore_queue_counter,
                                 start=lambda: make_queue_server(groups, queue_options, remote=True, wait=False))

    def _restore_queue_counter(self, client):
        """A replacement of the queue server starts empty, with the work counter the
        collector sets know (episodes and env steps handed over, claims of the requests out),
        so the budget stays exact."""
        state = self.update_worker.queue_counter_state()
        client.call("restore_counter", *(state[k] for k in ("episodes", "steps", "received", "samples", "requests")))
        return "replaced, empty"

    def _server_replaced(self, kind, handle, generation):
        setattr(self, _SERVER_ATTRIBUTES[kind], handle)

    # ---------------------------------------------------------------- servers
    def set_replay_snapshot(self, load):
        """Where a replacement of the replay server gets its contents.

        Parameters
        ----------
        load : callable or None
            ``load()`` -> ``(contents, env_steps)``: what ``replay_contents`` returned when
            the last checkpoint was saved (read back from it) and that checkpoint's env
            steps; it raises OSError or ValueError when they cannot be read. Kept as
            ``replay_snapshot``. None: replacements start empty.
        """
        self.replay_snapshot = load

    def _restore_replay(self, client):
        """Fill a replacement of the replay server (``client``) from the last checkpoint;
        returns the words of the restart's line."""
        if self.replay_snapshot is None:
            return "replaced, empty"
        try:
            contents, env_steps = self.replay_snapshot()
        except (OSError, ValueError) as exc:
            return f"replaced, empty (the last checkpoint's transitions cannot be read: {' '.join(str(exc).split())})"
        held = client.call("load_state_dict", contents)
        return f"replaced with the {held:,} transitions saved at {env_steps:,} env steps"

    def replay_contents(self):
        """The replay server's transitions and counters (``ReplayServer.state_dict``), for a
        checkpoint; None without a replay server.

        Raises
        ------
        ServerLost
            The server is dead. It is not replaced here: a checkpoint saved on the way out
            of a run that a dying server ended must not start another.
        """
        if self.replay_server is None:
            return None
        return self._client("replay").call("state_dict")

    def load_replay(self, contents):
        """Make the replay server hold ``contents`` (``replay_contents``' output, from a
        checkpoint); returns the transitions it holds (raises ``ServerLost`` if it died)."""
        if self.replay_server is None:
            raise ValueError("this scheme has no replay server to load transitions into")
        return self._client("replay").call("load_state_dict", contents)

    def server_processes(self):
        """``{kind: (node id, pid)}`` of the data servers that run as Ray actors and are
        alive (empty in one process)."""
        out = {kind: self._live_call(kind, "process_info") for kind in SERVER_TITLES if kind in self.servers}
        return {kind: where for kind, where in out.items() if where is not None}

    def _client(self, kind):
        server = getattr(self, _SERVER_ATTRIBUTES[kind])
        generation = self.servers.generation(kind) if kind in self.servers else 0
        return ServerClient(server, kind=kind, generation=generation)

    def _live_call(self, kind, method, *args):
        """``method(*args)`` of the data server of ``kind``, or None when it is dead: a
        query (metrics, process ids) replaces nothing; the next step of the run that needs
        the server does (or ends the run when it may not)."""
        try:
            return self._client(kind).call(method, *args)
        except ServerLost:
            return None

    @staticmethod
    def _check_inference_server(col_policy, options, algo_factory, actor_factory):
        """Check ``col_policy``/``inference_server``; returns the server's options
        (``inference_server_options``), or None without a server."""
        from pytorchrl.scheme.collection.c_worker import POLICIES
        if col_policy not in POLICIES:
            raise ValueError(f"col_policy must be one of {POLICIES}, got {col_policy!r}")
        if col_policy != "server":
            if options:
                logger.warning(f"Scheme: inference_server options have no effect with col_policy={col_policy!r}; "
                               f"they are ignored (they act with col_policy='server')")
            return None
        out = inference.inference_server_options(options)
        # Built once here so that an agent the server cannot act for is refused before
        # anything starts.
        actor = actor_factory("cpu")
        inference.check_server_agent(actor, algo_factory("cpu", actor, None))
        return out

    @property
    def step_budget_on_data(self):
        """True on the queue data path: a step budget (``Learner``'s ``target_steps``) is
        then a budget of env steps the collectors hand over, and the run ends once their
        rollouts are popped and trained on (``UWorker.set_step_budget``), not at the step
        count: every rollout queued is consumed."""
        return self.queue_server is not None

    def get_agent_components(self):
        """What this scheme is made of, as pytorchrl's scripts log it (``wandb.config``): a
        dict naming each agent component and the layout.

        Returns
        -------
        dict
            ``actor``, ``algorithm``, ``storage``: the class each factory builds (its name);
            ``train_envs``, ``test_envs``: the environment factories in words (None where
            there are none); and the layout options ``num_col_workers``,
            ``col_workers_communication``, ``num_grad_workers``, ``grad_workers_communication``,
            ``decentralized_update_execution``, ``data_path``.
        """
        return {**{name: _component_name(factory) for name, factory in self._components.items()}, **self._layout}

    def inference_stats(self):
        """The inference server's counters (``InferenceServer.stats``), or None without one (or
        while it is dead: see ``_live_call``)."""
        if self.inference_server is None:
            return None
        return self._live_call("inference", "stats")

    def process_info(self):
        """(node id, pid) of every remote worker process of the scheme (empty in-process)."""
        return self.update_worker.process_info() if self.update_worker is not None else []

    def replay_stats(self):
        """The replay server's counters (``ReplayServer.stats``), or None on the direct data path
        (or while it is dead)."""
        if self.replay_server is None:
            return None
        return self._live_call("replay", "stats")

    def queue_stats(self):
        """The queue server's counters (``QueueServer.stats``), or None on another data path (or
        while it is dead)."""
        if self.queue_server is None:
            return None
        return self._live_call("queue", "stats")

    def get_hyperparameters(self):
        """Parameters held by every worker (see ``UWorker.get_hyperparameters``)."""
        return self.update_worker.get_hyperparameters()

    def stop(self):
        """Stop every worker (remote ones are killed, and gone when this returns); a local
        Ray instance started for this scheme is shut down once no other scheme uses it.
        Calling it again does nothing."""
        try:
            # Nothing is replaced any more: a server found dead while stopping stays so.
            self.servers.stop()
            # Collectors waiting to insert and gradient workers waiting to sample are let
            # go first, so that no worker is stopped in the middle of a wait.
            if self.replay_server is not None:
                close_server(self.replay_server)
            if self.queue_server is not None:
                close_server(self.queue_server)
            if self.update_worker is not None:
                self.update_worker.stop()
        finally:
            self._stop_servers()
            self._release_ray()

    def _stop_servers(self):
        """Stop the data servers that are running."""
        for attribute in _SERVER_ATTRIBUTES.values():
            server = getattr(self, attribute)
            setattr(self, attribute, None)
            if server is not None:
                stop_server(server)

    def _release_ray(self):
        if self._holds_ray:
            self._holds_ray = False
            from pytorchrl.scheme.base.ray_runtime import release_ray
            release_ray()


#: Scheme attribute holding each kind of data server.
_SERVER_ATTRIBUTES = {"replay": "replay_server", "inference": "inference_server", "queue": "queue_server"}


def refuse_broken_layout(settings):
    """Raise ValueError with the message of the first rule of
    ``pytorchrl.scheme.layout_rules.LAYOUT_RULES`` that the layout ``settings`` (see
    ``layout_settings``) breaks, written with ``Scheme``'s parameter names."""
    for rule in broken_rules(settings):
        raise ValueError(rule.explain(settings, _spell_setting, _python_name))


def _spell_setting(option, value):
    """How a Scheme caller writes the layout setting ``option`` set to ``value`` (a
    configuration word; no remote collection worker is ``num_col_workers=1``)."""
    if option in ("col_workers_communication", "grad_workers_communication"):
        return f"{option}={_python_value(value)}"
    return f"{_python_name(option)}={(value or 1) if option == 'remote_col_workers' else value!r}"


def _python_name(option):
    """How a Scheme caller writes ``option`` (the preemption thresholds are keys of a dict;
    the remote collection workers are counted by ``num_col_workers``)."""
    if option.startswith("fraction_"):
        return f"col_preemption_thresholds[{option!r}]"
    return "num_col_workers" if option == "remote_col_workers" else option


def _python_value(value):
    """A value of ``Ineffective`` as a Scheme caller writes it ("async" -> prl.ASYNC)."""
    return {"sync": "prl.SYNC", "async": "prl.ASYNC"}.get(value, value)


def _component_name(factory):
    """A factory in words: the name of the class a ``ComponentFactory`` builds, the
    ``repr`` of an environment factory, None for the factory that builds no environments."""
    if factory is no_envs:
        return None
    cls = getattr(factory, "cls", None)
    if isinstance(cls, type):
        return cls.__name__
    return repr(factory)
