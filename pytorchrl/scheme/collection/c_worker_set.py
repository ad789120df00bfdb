"""CWorkerSet: the collection workers of one gradient worker, and how their data is gathered.

This module holds the set (its parameters, its local worker, the episode budget); what it
asks of its remote workers (synchronous rounds with preemption of stragglers, asynchronous
streams, the queue path's shared work counter) is ``remote_rounds.RemoteRounds``, and which
layouts it refuses is ``pytorchrl.scheme.layout_rules``. The set's other roles are its parts: how
the workers get the weights (``weight_distribution.WeightDistribution``), what happens
when a worker fails (``recovery.CollectorRecovery``), how hot-swaps reach every worker
(``control.ControlFanOut``) and the data servers its workers use, replaced when they die
(``server_links.ServerLinks``).
"""

import math
import time

import pytorchrl as prl
from pytorchrl.agent.vec_env import EnvError
from pytorchrl.agent.protocols import ActorFactory, AlgorithmFactory, StorageFactory
from pytorchrl.scheme.base.checks import check_communication, check_fraction, check_int
from pytorchrl.scheme.base.faults import InFlight, drain
from pytorchrl.scheme.base.servers import ServerLost
from pytorchrl.scheme.base.worker import default_remote_config
from pytorchrl.scheme.base.worker_set import WorkerSet, WorkerSetFactory
from pytorchrl.scheme.collection.c_worker import CWorker, episodes_per_rollout, no_envs
from pytorchrl.scheme.collection.control_fanout import ControlFanOut
from pytorchrl.scheme.collection.recovery import CollectorRecovery
from pytorchrl.scheme.collection.remote_rounds import RemoteRounds
from pytorchrl.scheme.collection.server_links import ServerLinks
from pytorchrl.scheme.collection.weight_distribution import WeightDistribution
from pytorchrl.scheme.layout_rules import broken_rules, layout_settings
from pytorchrl.scheme.transport import unpack

DEFAULT_COL_WORKER_RESOURCES = default_remote_config(num_cpus=1)

#: CWorkerSet's parameter for each layout setting of ``pytorchrl.scheme.layout_rules`` that
#: has another name here.
_PARAMETERS = {"remote_col_workers": "num_workers", "col_workers_communication": "communication",
               "col_requests_in_flight": "requests_in_flight", "col_weights": "weights",
               "col_worker_proxy": "worker_proxy", "batch_episode_frequency": "rollout_episodes"}


def _spell(option, value):
    """How a ``CWorkerSet`` caller writes the layout setting ``option`` set to ``value`` (a
    configuration word), in the messages of ``refuse_broken_layout``."""
    if option == "data_path":
        return value   # "replay_server" or "queues": the parameter that hands the set the server
    if option == "col_policy":
        return "an inference server" if value == "server" else f"policy={value!r}"
    if option == "episode_block":
        return "block_rounds=True"
    if option == "col_workers_communication":
        return f"communication=prl.{value.upper()}"
    return f"{_PARAMETERS.get(option, option)}={value!r}"


def refuse_broken_layout(settings):
    """Raise ValueError with the message of the first rule of
    ``pytorchrl.scheme.layout_rules.LAYOUT_RULES`` that the layout ``settings`` (see
    ``layout_settings``) breaks, of those a worker set checks, written with ``CWorkerSet``'s
    parameter names."""
    for rule in broken_rules(settings, worker_set=True):
        raise ValueError(rule.explain(settings, _spell, lambda option: _PARAMETERS.get(option, option)))


class EpisodeBudgetSpent(Exception):
    """Raised by ``CWorkerSet.collect`` once the budget (episodes, or env steps on the queue
    data path) is handed over: no more rollouts will come. ``args[0]``: the episodes
    handed over."""


class CWorkerSet(RemoteRounds, WorkerSet):
    """Class to better handle the operations of ensembles of CWorkers.

    With ``num_workers=0`` the local worker collects (no Ray). With remote workers, they
    collect and the local worker holds the learner's actor, evaluates it on the test
    environments and is the source of the weights sent to the remote ones.

    Preemption (synchronous collection only). With ``fraction_samples`` f and
    ``fraction_workers`` g both 1.0 (the default) every round waits for every worker. With
    either below 1, the collectors still running are cut at a step boundary once

    - at least a fraction g of the workers have finished their rollouts (at least one), and
    - the round holds at least a fraction f of its samples: each straggler is told how
      many steps it must still keep so that, with the rollouts already in, f is reached.

    A threshold left at 1.0 sets no condition of its own when the other is below 1: f=0.75
    alone cuts the stragglers once 75 % of the round's samples are in; g=0.5 alone cuts
    them as soon as half the workers are done. Cut rollouts hold whole transitions and are
    bootstrapped from the value of their last observation, like full ones.

    Parameters
    ----------
    num_workers : int
        Number of remote workers in the worker set.
    index_parent : int
        Worker index of the parent gradient worker.
    algo_factory, actor_factory, storage_factory : callable
        Factories of the agent components (see CWorker).
    local_device : str or None
        "cpu" or "cuda:N" for the local worker.
    initial_weights : dict or None
        Initial actor weights.
    fraction_samples : float
        In (0, 1]: fraction of a synchronous round's samples after which stragglers may be
        cut (see above).
    total_parent_workers : int
        Total number of gradient workers in the scheme (with several, only the set of
        gradient worker 1 keeps test environments and evaluates).
    compress_data_to_send : bool or "auto"
        Compress rollouts sent by remote workers (see ``pytorchrl.scheme.transport``).
    train_envs_factory, test_envs_factory : callable
        Environment factories (see CWorker).
    worker_remote_config : dict
        Ray resources of each remote worker.
    fraction_workers : float
        In (0, 1]: fraction of the workers that must have finished before stragglers are
        cut (see above).
    communication : str
        ``prl.SYNC`` (every worker collects one rollout per round with the same weights) or
        ``prl.ASYNC`` (workers collect continuously; the first ready rollout is handed over).
    max_policy_lag : int or None
        Asynchronous collection: rollouts produced by weights more than this many versions
        older than the current ones are dropped (and counted); None accepts any lag.
    requests_in_flight : int
        Asynchronous collection: rollout requests queued at each remote worker. With 1 a
        worker idles from handing a rollout over until its next request arrives (the
        learner's reaction time); with 2 the next request is already waiting, so it never
        idles, but that request carries the weights of one rollout earlier (larger policy
        lag).
    fault_policy : FaultPolicy or None
        What to do when a remote worker dies or an environment fails (see
        ``pytorchrl.scheme.base.faults``); None: ``FaultPolicy()``.
    replay_server : ray.actor.ActorHandle or None
        Replay-server data path (asynchronous collection): remote workers insert their
        rollouts into this server and hand over only their information.
    queues : QueueLink or None
        Queue data path (asynchronous collection): remote workers put their rollouts into
        their queue of this link's server (waiting while it is full) and hand over only
        their information; ``max_policy_lag`` is then applied by the gradient worker when
        it pops them (see ``pytorchrl.scheme.servers.queues``).
    rollout_unit, policy : str
        Passed to every ``CWorker``: what one rollout is (``"steps"`` or ``"episodes"``) and
        where actions come from (``"learned"``, ``"random"`` or ``"server"``).
    step_log_dir : str or None
        Passed to every ``CWorker``: directory of the per-step logs (None: none).
    weights : str
        How remote workers get new weights. ``"push"`` (default): with every request, so a
        rollout is acted by one version. ``"pull"`` (asynchronous collection): the set
        publishes each version once to a ``WeightBoard`` (a Ray actor) and the workers
        check it every ``weight_pull_every`` steps without waiting, swapping weights
        mid-rollout; requests carry none (see ``pytorchrl.scheme.servers.weight_board``).
        Ignored without remote workers (the local worker holds the learner's weights).
    weight_pull_every : int, str or None
        With ``weights="pull"``: environment steps between two checks of the board (None:
        ``DEFAULT_PULL_EVERY``), or ``"episode"``: a read at every episode's start (see
        ``CWorker``).
    inference_server : InferenceServer, ray.actor.ActorHandle or None
        Central inference (``policy="server"``, SEED): the workers that collect act through
        this server; the set sends it the local worker's weights whenever their version
        changes (before each collection) instead of sending weights with the requests.
    borrow_from : object or None
        The gradient worker that owns this set: the local worker acts with its actor and
        algorithm (``CWorker``'s ``borrow_from``). None: the local worker builds its own.
    server_generations : dict or None
        Generations of ``replay_server`` and ``inference_server`` by kind (``"replay"``,
        ``"inference"``; the queue server's is ``queues.generation``): one more each time
        the scheme replaced a dead one. None: all 0.
    worker_proxy : bool
        One proxy per node (DistributedReinforcementLearning.jl's WorkerProxy, see
        ``pytorchrl.scheme.servers.worker_proxy``), which receives each weight version
        once for its node's collectors. Synchronous collection (without preemption): every
        round goes through the proxies, which hand their node's rollouts back as one
        message. Asynchronous: the requests carry a reference to the node's copy of the
        weights, and with a data server (replay, queues) each node's rollouts are passed on
        to it together.
    rollout_episodes, rollout_steps : int or None
        Passed to every ``CWorker``: a rollout ends with its ``rollout_episodes``-th
        episode, and holds at most ``rollout_steps`` steps (EXARL's
        ``batch_episode_frequency``/``episode_block`` and ``batch_step_frequency``).
    block_rounds : bool
        Asynchronous collection (EXARL's ``episode_block``): a worker that hands its
        rollout over gets no new request until every worker has handed its own over; then
        every worker gets one, all with the newest weights (one broadcast per block of
        rollouts). Needs ``requests_in_flight=1``.

    Episode budget (``set_episode_budget``). Once the rollouts handed over hold that many
    finished episodes, ``collect`` raises ``EpisodeBudgetSpent`` instead of collecting. With
    ``rollout_unit="episodes"`` (or ``rollout_episodes``: K) a request finishes at most one
    (K) episodes, so the set is the shared "next episode" counter: it sends a request only
    while the episodes handed over plus those the requests out may finish stay below the
    budget, asks the last requests for only the episodes left, and exactly that many
    episodes are run (with one environment per collector; a request to a collector of
    several environments may end several episodes on its last step, which then all count).

    On the queue data path the budget is not this set's: it is the queue server's work
    counter, shared by every collector of every gradient worker (EXARL's "claim the next
    episode" counter, ``pytorchrl.scheme.servers.queues.WorkCounter``). Each request claims
    its episodes there before it goes out and settles the claim when it reports, so the
    collectors that are faster take more of the work; the set is finished once none of its
    requests is out and nothing is left to claim.

    Failures. A data server that dies is replaced by the scheme (see ``ServerLinks``): the
    set counts what its workers lost with it and sends their next requests to the
    replacement. A remote worker that dies is replaced (``WorkerSet.replace_worker``) with the
    current weights and version and the hot-swaps applied since the start; its rollout in
    flight is dropped. In a synchronous round the replacement is asked for the rollout
    again (same weights, same round), so every round still holds one rollout of every
    worker; in asynchronous collection the replacement gets the dropped requests. An
    environment that raises is rebuilt in its worker (``on_env_error="restart"``; the
    rollout is dropped and asked for again) or ends the run (``"stop"``). Both count
    against the worker's restart limit and are reported by ``pop_events``.

    Attributes
    ----------
    weights : WeightDistribution
        The weight versions and how the workers get them (``version``, ``publisher`` and
        ``set_version`` read and change it).
    recovery : CollectorRecovery
        Replaces workers that die and rebuilds environments that fail.
    servers : ServerLinks
        The data servers the workers use, and what their death cost.
    control : ControlFanOut
        Delivers hot-swaps to every worker (``handle_control``).
    stats : dict
        Running counts: rollouts dropped (policy lag) and cut (preemption), rounds, weight
        bytes loaded by the workers, weight versions pulled.
    """

    role = "collection workers"
    parent_role = "gradient worker"

    # The parameters up to worker_remote_config keep pytorchrl's positional order (scripts
    # pass them positionally); the ones it does not have follow.
    def __init__(self, num_workers, index_parent, algo_factory: AlgorithmFactory, actor_factory: ActorFactory,
                 storage_factory: StorageFactory,
                 local_device=None, initial_weights=None, fraction_samples=1.0, total_parent_workers=0,
                 compress_data_to_send=False, train_envs_factory=no_envs, test_envs_factory=no_envs,
                 worker_remote_config=None, fraction_workers=1.0, communication=prl.SYNC,
                 max_policy_lag=None, requests_in_flight=1, fault_policy=None, replay_server=None,
                 rollout_unit="steps", policy="learned", step_log_dir=None, weights="push",
                 weight_pull_every=None, inference_server=None, queues=None, borrow_from=None,
                 server_generations=None, rollout_episodes=None, rollout_steps=None, block_rounds=False,
                 worker_proxy=False):
        from pytorchrl.scheme.servers.weight_board import WEIGHT_MODES, check_pull_every
        communication = check_communication("collection communication", communication)
        for name, v in (("fraction_samples", fraction_samples), ("fraction_workers", fraction_workers)):
            check_fraction(name, v)
        if compress_data_to_send not in (True, False, "auto"):
            raise ValueError(f"compress_data_to_send must be True, False or 'auto', got {compress_data_to_send!r}")
        check_int("max_policy_lag", max_policy_lag, 0, optional=True)
        check_int("requests_in_flight", requests_in_flight, 1)
        if weights not in WEIGHT_MODES:
            raise ValueError(f"weights must be one of {', '.join(map(repr, WEIGHT_MODES))}, got {weights!r}")
        check_pull_every(weight_pull_every)
        refuse_broken_layout(layout_settings(
            remote_col_workers=num_workers, col_workers_communication=communication,
            col_requests_in_flight=requests_in_flight, col_weights=weights,
            col_policy="server" if inference_server is not None else policy,
            data_path="replay_server" if replay_server is not None else "queues" if queues is not None else "direct",
            fraction_samples=fraction_samples, fraction_workers=fraction_workers, col_worker_proxy=bool(worker_proxy),
            episode_block=True if block_rounds else None))
        self.block_rounds = bool(block_rounds)
        self.requests_in_flight = requests_in_flight
        self.fraction_samples = float(fraction_samples)
        self.fraction_workers = float(fraction_workers)
        self.communication = communication
        self.max_policy_lag = max_policy_lag
        self.total_parent_workers = total_parent_workers
        self.compress_data_to_send = compress_data_to_send
        params = dict(index_parent=index_parent, algo_factory=algo_factory, actor_factory=actor_factory,
                      storage_factory=storage_factory, compress_data_to_send=compress_data_to_send,
                      fraction_samples=fraction_samples, initial_weights=initial_weights,
                      rollout_unit=rollout_unit, policy=policy, step_log_dir=step_log_dir,
                      inference_server=inference_server,
                      inference_generation=(server_generations or {}).get("inference", 0),
                      rollout_episodes=rollout_episodes, rollout_steps=rollout_steps)
        self.rollout_unit = rollout_unit
        self.episodes_per_request = episodes_per_rollout(rollout_unit, rollout_episodes)
        self.episode_budget = None  # episodes to hand over in all (None: no limit)
        self.episodes_received = 0
        self.step_budget = None     # env steps to hand over in all (None: no limit)
        self.samples_received = 0
        # Queue data path: the budget is the queue server's work counter, shared by every set.
        self.shared_budget = queues is not None and num_workers > 0
        self._claims = {}           # request ref -> (collector, episodes it claimed), shared budget
        # A claim was refused, and nothing this set knows of has freed work since: no request
        # is asked of the counter (a finished group polls before every mini-batch).
        self._counter_refused = False
        # The local worker's rollouts never leave this process: nothing to compress. With
        # remote workers it collects nothing and keeps no training environments. Of several
        # gradient workers (indices 1..N) only the first evaluates: the others hold the same
        # weights, so their evaluations would only repeat it.
        self.evaluates = total_parent_workers <= 1 or index_parent <= 1
        self._local_params = dict(train_envs_factory=train_envs_factory if num_workers == 0 else no_envs,
                                  test_envs_factory=test_envs_factory if self.evaluates else no_envs,
                                  compress_data_to_send=False, weight_board=None, borrow_from=borrow_from)
        if num_workers and inference_server is not None:
            # A local worker that collects nothing acts (evaluates) with the learner's weights.
            self._local_params.update(policy="learned", inference_server=None, inference_generation=0)
        self._remote_params = dict(train_envs_factory=train_envs_factory, test_envs_factory=no_envs)
        self._round = 0
        self._in_flight = InFlight()  # async: ref -> worker
        self._abandoned = []        # requests of a round given up, read by stop()
        self.stats = {"dropped_rollouts": 0, "cut_rollouts": 0, "rounds": 0, "weight_bytes": 0}
        self.servers = ServerLinks(self, self.stats, replay_server, inference_server, queues, server_generations)
        self.proxies = None
        if worker_proxy and num_workers:
            from pytorchrl.scheme.servers.worker_proxy import NodeProxies
            self.proxies = NodeProxies(self.stats)
        board = None
        if weights == "pull" and num_workers:
            from pytorchrl.scheme.servers.weight_board import start_remote_board
            board = start_remote_board()
            params.update(weight_board=board, weight_pull_every=weight_pull_every)
            self.stats["weight_pulls"] = 0
        # Built before the workers: a set that fails to start stops (and reads) all its parts.
        self.weights = WeightDistribution(lambda: self._local_worker.get_weights(), self.stats,
                                          inference_server=inference_server, board=board)
        if inference_server is not None:
            self.weights.set_inference_server(inference_server, self.servers.generations["inference"])
        self.recovery = CollectorRecovery(self, self.weights.bring_up_to_date)
        # The server remote workers hand their rollouts to, if any: a call queued behind a
        # rollout may wait on its insert or put, which only the learner unblocks.
        self.control = ControlFanOut(self, self._recover, data_server=self.servers.data_server)
        try:
            super().__init__(CWorker, params, index_parent, num_workers,
                             worker_remote_config or DEFAULT_COL_WORKER_RESOURCES, local_device,
                             fault_policy=fault_policy)
        except BaseException:
            self.weights.stop()
            raise
        self.weights.publish()

    # ------------------------------------------------------------------ servers
    @property
    def replay_server(self):
        """The replay server the remote workers insert into (None on another data path)."""
        return self.servers.replay_server

    @property
    def inference_server(self):
        """The inference server the workers act through (None without one)."""
        return self.servers.inference_server

    @property
    def queues(self):
        """The queue path's ``QueueLink`` (None on another data path)."""
        return self.servers.queues

    def set_server(self, kind, server, generation):
        """Use ``server`` (of ``generation``), the replacement of the scheme's dead server of
        ``kind``, from now on (see ``ServerLinks.set_server``)."""
        self.servers.set_server(kind, server, generation)

    def settle_queue(self, popped):
        """What every gradient worker popped of this set's rollouts from the dead queue
        servers (see ``ServerLinks.settle``)."""
        self.servers.settle(popped)

    def _build_local(self, worker_class, worker_params, local_device):
        params = dict(worker_params, **self._local_params)
        return worker_class(index_worker=0, device=local_device, **params)

    def _build_remote(self, remote_cls, index, worker_params, device="cpu", seed=None):
        return remote_cls.remote(index_worker=index, device=device, **worker_params, **self._remote_params)

    def worker_name(self, index):
        """Words naming collection worker ``index`` in messages: "collection worker 2 of
        gradient worker 1" (just "collection worker 2" in a scheme of one gradient worker)."""
        if self.total_parent_workers <= 1:
            return f"collection worker {index}"
        return f"collection worker {index} of gradient worker {self.index_parent}"

    @classmethod
    def create_factory(cls, num_workers, algo_factory, actor_factory, storage_factory, test_envs_factory=no_envs,
                       train_envs_factory=no_envs, total_parent_workers=0, col_fraction_samples=1.0,
                       compress_data_to_send=False, col_worker_resources=None, col_fraction_workers=1.0,
                       communication=prl.SYNC, max_policy_lag=None, requests_in_flight=1, fault_policy=None,
                       replay_server=None, rollout_unit="steps", policy="learned", step_log_dir=None,
                       weights="push", weight_pull_every=None, inference_server=None, queues=None,
                       server_generations=None, rollout_episodes=None, rollout_steps=None, block_rounds=False,
                       worker_proxy=False):
        """Return a function ``factory(device, initial_weights=None, index_parent=0)`` creating CWorkerSets.

        Parameters are those of the class (``col_fraction_samples`` is ``fraction_samples``,
        ``col_fraction_workers`` is ``fraction_workers``, ``col_worker_resources`` is
        ``worker_remote_config``). Up to ``col_worker_resources`` they are in pytorchrl's
        positional order; the ones pytorchrl does not have follow.
        """
        return WorkerSetFactory(cls, {"local_device": None, "initial_weights": None, "index_parent": 0},
                                num_workers=num_workers, algo_factory=algo_factory, actor_factory=actor_factory,
                                storage_factory=storage_factory, fraction_samples=col_fraction_samples,
                                fraction_workers=col_fraction_workers, total_parent_workers=total_parent_workers,
                                compress_data_to_send=compress_data_to_send, train_envs_factory=train_envs_factory,
                                test_envs_factory=test_envs_factory, worker_remote_config=col_worker_resources,
                                communication=communication, max_policy_lag=max_policy_lag,
                                requests_in_flight=requests_in_flight, fault_policy=fault_policy,
                                replay_server=replay_server, rollout_unit=rollout_unit, policy=policy,
                                step_log_dir=step_log_dir, weights=weights, weight_pull_every=weight_pull_every,
                                inference_server=inference_server, queues=queues,
                                server_generations=dict(server_generations or {}),
                                rollout_episodes=rollout_episodes, rollout_steps=rollout_steps,
                                block_rounds=block_rounds, worker_proxy=worker_proxy)

    # ------------------------------------------------------------------ weights
    @property
    def version(self):
        """Version of the local (learner's) weights (see ``WeightDistribution``)."""
        return self.weights.version

    @property
    def publisher(self):
        """The weight board's publisher (``weights="pull"`` with remote workers), else None."""
        return self.weights.publisher

    def set_version(self, version):
        """Tell the set that the local worker's actor now holds weight version ``version``."""
        self.weights.version = int(version)
        self._local_worker.actor_version = self.weights.version

    def invalidate_weights(self):
        """Forget the prepared copy of the weights: the local actor changed without a new
        version (a restored checkpoint, a replaced actor)."""
        self.weights.invalidate()

    # ----------------------------------------------------------- collector state
    def collector_state(self):
        """The ``CWorker.get_collector_state`` a checkpoint keeps: the local worker's when it
        collects (no remote workers), else the first remote worker's that answers (each
        remote collector holds its own; asked in its control thread, so that a rollout
        waiting on the learner does not hold the answer back)."""
        if not self._remote_workers:
            return self._local_worker.get_collector_state()
        return self.first_answer("get_collector_state", control=True)

    # ----------------------------------------------------------- episode budget
    def set_episode_budget(self, episodes):
        """Hand over at most ``episodes`` finished episodes in all (counted from the start;
        None: no limit); see the class docstring."""
        check_int("episodes", episodes, 0, optional=True)
        self.episode_budget = episodes
        return episodes

    def set_step_budget(self, steps):
        """Hand over about ``steps`` environment steps in all (counted from the start; None:
        no limit): once that many are in no request goes out, and ``collect`` raises
        ``EpisodeBudgetSpent`` when the requests still out have been handed over too (their
        rollouts count: they may pass the budget by a rollout each). Used on the queue data
        path, where the run ends once the budget's data is popped and trained on."""
        check_int("steps", steps, 0, optional=True)
        self.step_budget = steps
        return steps

    def _budget_spent(self):
        spent = ((self.episode_budget is not None and self.episodes_received >= self.episode_budget)
                 or (self.step_budget is not None and self.samples_received >= self.step_budget))
        # Not while a dead queue server's loss is unknown: its episodes are to be run again.
        return spent and not self.servers.unsettled()

    def _finished(self):
        """The budget is handed over and, on the queue data path (where every rollout out
        is queued whatever happens), no request is out any more. With the shared work
        counter: no request is out (or waits for a server's replacement) and none could be
        claimed now."""
        if not self.shared_budget:
            return self._budget_spent() and not (self.queues is not None and self._in_flight)
        if self._in_flight or self.servers.deferred or self.servers.stash or self.servers.unsettled():
            return False
        self._start_requests()
        return not self._in_flight and not self.servers.deferred

    def _may_request(self, handing_over=0, samples=0):
        """Whether one more request may go out: always without a budget; with one, while
        the episodes handed over (``handing_over`` more are on their way) and those that the
        requests out may finish (one each, with whole-episode rollouts) stay below it, and
        while the env steps handed over (``samples`` more on their way) stay below the step
        budget. With the shared work counter the claim made when sending decides."""
        if self.shared_budget:
            return True
        if self.step_budget is not None and self.samples_received + samples >= self.step_budget:
            return False
        return self._episodes_left(handing_over) > 0

    def _episodes_left(self, handing_over=0):
        """Episodes of the budget that no rollout handed over (``handing_over`` more on their
        way) nor request out (at most ``episodes_per_request`` each) may finish; a large
        number without a budget, or when a request's episodes are not bounded."""
        if self.episode_budget is None:
            return math.inf
        claimed = self.episodes_received + handing_over
        if self.episodes_per_request is not None:
            claimed += self.episodes_per_request * len(self._in_flight)
        return self.episode_budget - claimed

    def _request_episodes(self, left=None):
        """Episodes the next request may finish: ``episodes_per_request``, fewer when the
        budget has fewer ``left`` (None: ``_episodes_left()``); None: not bounded."""
        if self.episodes_per_request is None:
            return None
        left = self._episodes_left() if left is None else left
        return int(min(self.episodes_per_request, left)) if left != math.inf else self.episodes_per_request

    # --------------------------------------------------------------- collection
    def collect(self, block=True):
        """Gather one round of rollouts.

        Parameters
        ----------
        block : bool
            False (asynchronous collection): return at once with no rollouts when none is
            ready (the replay-server data path polls its collectors' reports).

        Returns
        -------
        rollouts : list of (data dict, info dict)
            Synchronous: one per worker (cut ones included). Asynchronous: the first ready
            rollout within the policy-lag bound. Every info has ``policy_lag``: how many
            versions the weights that produced the rollout are behind the current ones.
        info : dict
            ``TestReward`` if the local worker evaluated, ``collect_wait`` seconds waited.
        """
        if self._finished():
            raise EpisodeBudgetSpent(self.episodes_received)
        t0 = time.perf_counter()
        info = {}
        local = self._local_worker
        if self.control.pending:   # (acknowledgements are read only when some are awaited)
            self.control.read_finished()
        while self.weights.inference_server is not None:
            try:
                self.weights.push_to_server()
                break
            except ServerLost as lost:
                # The inference server died: replaced (and given the weights) here, or raised.
                self.servers.recover(lost)
        if not block and self._remote_workers and self.communication == prl.ASYNC and not self._any_ready():
            return [], {"collect_wait": time.perf_counter() - t0}
        if not self._remote_workers:
            rollouts = [self._collect_local(local)]   # in this process: nothing was packed
        else:
            if local.envs_test is not None and self._round % local.algo.test_every == 0:
                reward = self.recovery.evaluate_local()
                if reward is not None:
                    info["TestReward"] = reward
            self.weights.publish()   # once per version: the workers pull it
            rollouts = self._collect_sync() if self.communication == prl.SYNC else self._collect_async(block)
            if not rollouts:   # a poll whose ready request was a failure, a loss or a dropped rollout
                return [], {"collect_wait": time.perf_counter() - t0}
            rollouts = [(unpack(d), i) for d, i in rollouts]
        self._round += 1
        self.stats["rounds"] = self._round
        for _, winfo in rollouts:
            # (A lost rollout's episodes and steps are run again; with the shared work counter
            # they were counted when reported.)
            if not winfo.get("data_lost") and not self.shared_budget:
                self.episodes_received += len(winfo["episodes"])
                self.samples_received += winfo["collected_samples"]
            winfo["policy_lag"] = self.version - winfo["version"]
            if winfo.get("cut"):
                self.stats["cut_rollouts"] += 1
            if "weight_swaps" in winfo:
                self.stats["weight_pulls"] += len(winfo["weight_swaps"])
                self.stats["weight_bytes"] += winfo["pulled_bytes"]
        if self.queues is not None:
            self.servers.take_queue_losses()
        info["collect_wait"] = time.perf_counter() - t0
        return rollouts, info

    def _collect_local(self, local):
        """One rollout of ``local``, the local worker; environments that fail are rebuilt
        (or end the run) as the fault policy says (``CollectorRecovery.local_env_failed``),
        and the rollout is collected again."""
        while True:
            try:
                return local.collect_data()
            except EnvError as exc:
                self.recovery.local_env_failed(exc)

    # ------------------------------------------------------------------ control
    def handle_control(self, request):
        """Hand ``request`` (a ``ControlRequest``) to the local and every remote worker;
        return the local result.

        Remote workers get it queued behind their current call, so it applies between
        rollouts; the call returns once every worker has applied it (acknowledged), except
        on the replay-server and queue data paths, where it returns at once (a rollout ahead
        of it may wait for samples, or for room in its queue) and the acknowledgements are
        read by later ``collect`` calls. The request is logged and replayed on workers that
        replace dead ones; a worker found dead now is replaced (and gets it with the replay).
        """
        return self.control.deliver(request)

    def check_control(self, request):
        """Raise ValueError if ``handle_control(request)`` would be refused, before anything
        changes (see ``ControlFanOut.check``)."""
        self.control.check(request)

    def _queries_answered(self):
        """On the replay-server data path the server admits every insert meanwhile (a query
        waits behind each worker's current rollout)."""
        from pytorchrl.scheme.servers.replay_server import sampling_paused
        return sampling_paused(self.servers.data_server)

    def stop(self):
        """Drop in-flight requests and stop every worker."""
        in_flight = list(self._in_flight) + self._abandoned + [r for _, r in self.control.pending]
        self._in_flight, self._abandoned, self.control.pending = InFlight(), [], []
        self.servers.clear()
        super().stop()
        self.weights.stop()
        if self.proxies is not None:
            self.proxies.stop()
        # The requests still out failed when their workers were killed (or earlier, with the
        # failure that ended the run): read, so that Ray does not report them as unhandled.
        drain(in_flight, timeout=self.stop_timeout)
