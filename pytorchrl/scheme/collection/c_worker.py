"""CWorker: runs the policy in environments and produces rollouts."""

import time

import numpy as np
import torch

from pytorchrl import ACT, OBS2, REW, RHS, TERM, TRUNC
from pytorchrl.agent.protocols import ActorFactory, AlgorithmFactory, StorageFactory
from pytorchrl.agent.storages.base import FINAL_OBS
from pytorchrl.scheme.base.components import (AGENT_COMPONENTS, LEARNER_COMPONENTS, build_agent,  # noqa: F401
                                              check_component_name, rebuild_component, rebuild_learner_component)
from pytorchrl.scheme.base.checks import check_int
from pytorchrl.scheme.base.servers import ServerLost
from pytorchrl.scheme.base.worker import Worker, set_worker_threads
from pytorchrl.scheme.collection.delivery import Deliveries, HeldRollouts, Request
from pytorchrl.scheme.collection.step_log import StepLog
from pytorchrl.scheme.collection.worker_envs import WorkerEnvironments
from pytorchrl.scheme.control_request import WorkerControlEntries
from pytorchrl.scheme.transport import payload_bytes, weights_from_wire


#: What one rollout is: a fixed number of steps, or whole episodes (see CWorker).
ROLLOUT_UNITS = ("steps", "episodes")
#: Where actions come from: the actor, uniform draws from the action space, or a central
#: inference server (SEED).
POLICIES = ("learned", "random", "server")


def episodes_per_rollout(rollout_unit, rollout_episodes=None):
    """Episodes that end a rollout: ``rollout_episodes``, else 1 with the ``"episodes"``
    unit, else None (the rollout's steps end it)."""
    if rollout_episodes is not None:
        return int(rollout_episodes)
    return 1 if rollout_unit == "episodes" else None


def no_envs(*args, **kwargs):
    """Environment factory that builds nothing (the default for test environments)."""
    return None


class CWorker(WorkerEnvironments, WorkerControlEntries, Worker):
    """Worker class handling data collection.

    It wraps an actor, an algorithm (for its hyperparameters and what it needs stored), a
    storage and train/test vector environments; it collects rollouts, sends them and
    evaluates the current policy. Its loop names no algorithm's quantities: the actor's
    ``act`` returns the environment action and extras, the storage keeps what the
    algorithm declared.

    Parameters
    ----------
    index_worker : int
        Worker index.
    index_parent : int
        Index of the gradient worker in charge of this collection worker.
    algo_factory : callable
        ``algo_factory(device, actor, envs)`` -> Algorithm.
    actor_factory : callable
        ``actor_factory(device)`` -> actor.
    storage_factory : callable
        ``storage_factory(device, actor, algorithm, envs)`` -> storage.
    fraction_samples : float
        Fraction of a round's samples after which the collector set may stop the stragglers
        (used by the CWorkerSet; stored here for compatibility).
    compress_data_to_send : bool or "auto"
        lz4-compress rollouts before sending (see ``pytorchrl.scheme.transport``).
    train_envs_factory : callable
        ``factory(device, index_col_worker, index_grad_worker, mode)`` -> TorchVecEnv.
    test_envs_factory : callable
        Same for the test environments; the default builds none.
    initial_weights : dict or None
        Initial actor weights.
    device : str or None
        "cpu" or "cuda:N" (None: CPU).
    rollout_unit : str
        ``"steps"`` (default): a rollout is the storage's ``size`` steps. ``"episodes"``: a
        rollout ends with the step that ends an episode (at most ``size`` steps: a longer
        episode goes on in the next rollout), so that with one environment a rollout is one
        whole episode, collected with one policy version (EXARL's episode work unit). With
        several environments it ends when the first of them ends an episode (the others'
        episodes go on in the next rollout).
    policy : str
        ``"learned"`` (default): the actor's actions. ``"random"``: actions drawn uniformly
        from the action space (the actor still runs, so the storage keeps its extras).
        ``"server"``: actions (and an on-policy rollout's bootstrap values) come from
        ``inference_server``: the worker sends each step's observations and acts with no weights
        of its own; a rollout is reported with the oldest weight version that acted in it.
    step_log_dir : str or None
        Directory for a per-step log of the training steps (EXARL's actor logs): the file
        ``steps_g<index_parent>_c<index_worker>.csv`` gets one row per environment and step
        (see ``step_log.STEP_LOG_FIELDS``). None (default): no log. Written where the worker runs.
    weight_board : WeightBoard, ray.actor.ActorHandle or None
        Weights pulled (EXARL's non-blocking async workflow, see
        ``pytorchrl.scheme.servers.weight_board``): the worker checks this board for a
        newer version every ``weight_pull_every`` training steps without waiting for the
        answer, and swaps the weights in between two steps when it comes. None (default):
        weights only arrive with requests (``set_weights``).
    weight_pull_every : int, str or None
        Steps between two checks of ``weight_board`` (None: ``DEFAULT_PULL_EVERY``), or
        ``"episode"``: the board is read, and the answer waited for, before the first step
        of every episode (of any environment: a step that ends one makes the next step an
        episode start).
    inference_server : InferenceServer, ray.actor.ActorHandle or None
        With ``policy="server"``: the scheme's server (see
        ``pytorchrl.scheme.servers.inference_server``); required then, refused otherwise.
    borrow_from : object or None
        The gradient worker of this process (anything with ``actor`` and ``algo``
        attributes): this worker acts with its actor and algorithm instead of building its
        own, so that the acting weights are the learner's after every update with nothing
        copied (its own storage is still built, with ``storage_factory``). The owner applies
        the hot-swaps of the algorithm and replaces the actor or algorithm first; this
        worker follows. ``initial_weights`` are then the owner's to load. None (default):
        built from the factories.
    inference_generation : int
        Generation of ``inference_server`` (one more each time the scheme replaced a dead
        one; see ``pytorchrl.scheme.base.servers``).
    rollout_episodes : int or None
        A rollout ends with the step that ends its ``rollout_episodes``-th episode (of any
        environment), at most ``update_every`` steps: EXARL's ``batch_episode_frequency``
        and ``episode_block``. None (default): 1 with ``rollout_unit="episodes"``, no limit
        with ``"steps"``.
    rollout_steps : int or None
        A rollout is at most this many steps (per environment): EXARL's
        ``batch_step_frequency``. It must fit the storage's rollout (``storage.size`` on
        policy, ``algorithm.update_every`` per environment for a replay). None (default):
        the storage's rollout.

    A data server that dies never makes this worker fail (it would be taken for dead): an
    insert or put that meets a dead server is reported lost (``server_lost`` in the
    information), and a rollout whose inference server died stops where it is and is
    reported paused; the next ``collect_data``, after ``set_inference_server`` gave the
    replacement, goes on from there, sending the observations it was waiting on again
    (or, when the rollout was finished and the algorithm's pre-processing was asking the
    server, that pre-processing's calls).

    The algorithm's ``warm_up`` runs on the training environments before the first rollout
    (not when the worker is built: a resumed run gives the collectors their
    ``collector_state`` first, and an algorithm whose statistics hold data skips it).
    """

    def __init__(self, index_worker, index_parent, algo_factory: AlgorithmFactory, actor_factory: ActorFactory,
                 storage_factory: StorageFactory,
                 fraction_samples=1.0, compress_data_to_send=False, train_envs_factory=no_envs,
                 test_envs_factory=no_envs, initial_weights=None, device=None, rollout_unit="steps",
                 policy="learned", step_log_dir=None, weight_board=None, weight_pull_every=None,
                 inference_server=None, borrow_from=None, inference_generation=0, rollout_episodes=None,
                 rollout_steps=None):
        if rollout_unit not in ROLLOUT_UNITS:
            raise ValueError(f"rollout_unit must be one of {ROLLOUT_UNITS}, got {rollout_unit!r}")
        check_int("rollout_episodes", rollout_episodes, 1, optional=True)
        check_int("rollout_steps", rollout_steps, 1, optional=True)
        self.rollout_episodes = episodes_per_rollout(rollout_unit, rollout_episodes)
        self.rollout_steps = rollout_steps
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        if (policy == "server") != (inference_server is not None):
            raise ValueError("policy='server' needs an inference_server, and an inference_server needs "
                             f"policy='server' (got policy={policy!r})")
        if inference_server is not None and weight_board is not None:
            raise ValueError("a worker acting through an inference_server loads no weights: it takes no "
                             "weight_board")
        self.rollout_unit = rollout_unit
        self.policy = policy
        self._step_log = None
        set_worker_threads()
        self.index_worker = index_worker
        self.index_parent = index_parent
        self.fraction_samples = fraction_samples
        self.compress_data_to_send = compress_data_to_send
        self.device = self.resolve_device(device)
        # Kept to rebuild environments that failed (restart_envs).
        self._env_factories = {"envs_train": train_envs_factory, "envs_test": test_envs_factory}
        self._env_failure = None
        self.envs_train = train_envs_factory(self.device, index_worker, index_parent, "train")
        self.envs_test = test_envs_factory(self.device, index_worker, index_parent, "test")
        self._owner = borrow_from
        if borrow_from is None:
            self.actor, self.algo, self.storage = build_agent(self.device, actor_factory, algo_factory,
                                                              storage_factory, self.envs_train)
        else:
            self.actor, self.algo = borrow_from.actor, borrow_from.algo
            # A replay storage seeds its sampler from torch's global stream, which this
            # collector-side one never uses: drawn apart, so that the learner's stream (SAC's
            # noise, shuffles) is the one of a process holding a single storage.
            with torch.random.fork_rng(devices=[]):
                self.storage = storage_factory(self.device, self.actor, self.algo, self.envs_train)
        self._server_acting = None
        if inference_server is not None:
            from pytorchrl.scheme.servers.inference_server import ServerActing, check_server_agent
            check_server_agent(self.actor, self.algo)
            self._server_acting = ServerActing(inference_server, inference_generation)
            self.actor.route_acting(self._server_acting)
            # The algorithm's collector-side computations with weights (RND's predictor
            # errors and intrinsic values) run on the server too.
            self.algo.route_collector_calls(self._server_acting)
        self.iter = 0
        self.actor_version = 0
        self._cut_round = None
        self._paused = None   # a rollout stopped by the death of its inference server (see _rollout)
        self._unsent = None   # a finished rollout whose pre-processing met a dead inference server
        self._warmed_up = False  # the algorithm's warm-up (see _warm_up) has run
        if rollout_steps is not None and self.envs_train is not None:
            fits = self.storage.rollout_steps(self.envs_train.num_envs)
            if rollout_steps > fits:
                raise ValueError(f"a rollout of rollout_steps={rollout_steps} steps does not fit "
                                 f"{type(self.storage).__name__}'s rollout of {fits} steps per environment (raise "
                                 f"storage.size, or algorithm.update_every for a replay)")
        self.obs = self.envs_train.reset_numpy().copy() if self.envs_train is not None else None
        if step_log_dir and self.envs_train is not None:
            self._step_log = StepLog(step_log_dir, index_parent, index_worker, self.envs_train.num_envs, policy)
        self.state = self.actor.initial_state(self.envs_train.num_envs) if self.envs_train is not None else None
        if initial_weights is not None and borrow_from is None:
            # The weights a worker is built with are version 0 wherever it lives.
            self.set_weights(initial_weights, version=0)
        self._board_reader = None
        if weight_board is not None:
            from pytorchrl.scheme.servers.weight_board import DEFAULT_PULL_EVERY, BoardReader
            self._board_reader = BoardReader(weight_board, weight_pull_every or DEFAULT_PULL_EVERY)
        self._held = HeldRollouts()
        # Where rollouts go (returned, or sent to a server named by the request).
        self._deliveries = Deliveries(compress_data_to_send, (index_parent, index_worker))
        self._done = None           # done flags of the last step taken (see ``done``)
        self._weight_swaps = []     # (step, version) of the rollout running
        self._pulled_bytes = 0
        self._episode_starts = True  # the next step begins an episode (read the board "each episode")

    # ---------------------------------------------------------------- properties
    @property
    def rhs(self):
        """Latest policy recurrent hidden state (pytorchrl's name of ``state``; None for an
        actor without memory)."""
        return self.state

    @property
    def done(self):
        """Latest train environment done flags, one per environment: whether the last step
        taken ended its episode (terminated or truncated); all False before the first step
        and after the environments were reset."""
        if self._done is None and self.envs_train is not None:
            self._done = np.zeros(self.envs_train.num_envs, dtype=bool)
        return self._done

    @property
    def update_every(self):
        """Vectorized environment steps in one rollout (at most: episodes may end it first)."""
        steps = self.storage.rollout_steps(self.envs_train.num_envs)
        return steps if self.rollout_steps is None else min(steps, self.rollout_steps)

    # ---------------------------------------------------------------- collection
    def collect_data(self, listen_to=(), data_to_cpu=True, weights=None, version=None, round_id=None,
                     pack_data=None, replay_server=None, queue_server=None, server_generation=None,
                     max_episodes=None, data_proxy=None):
        """Collect one rollout and return it with information about the collection.

        Parameters
        ----------
        listen_to : sequence of str
            Control messages that may cut the rollout short; ``"sync"`` makes the worker
            honour ``interrupt(round_id)`` (preemption of stragglers by the collector set).
        data_to_cpu : bool
            Move the rollout to the CPU before returning it.
        weights : dict or None
            Actor weights to load before collecting (sent with the request so that a remote
            worker never collects with weights older than the request).
        version : int or None
            Version of ``weights``.
        round_id : int or None
            Identifies this request for ``interrupt`` (None with ``"sync"``: a fresh id,
            reachable with ``interrupt()``).
        pack_data : bool or None
            Pack the rollout for the wire (``pytorchrl.scheme.transport.pack``, compressed
            as ``compress_data_to_send`` says) and count its bytes. None: only when
            compression is on. The collector set asks for it on every remote worker.
        replay_server : ray.actor.ActorHandle or None
            Replay-server data path: insert the rollout into this server (waiting as long as
            its rate limiter says) and return None in its place.
        queue_server : ray.actor.ActorHandle or None
            Queue data path: put the rollout into this worker's queue of this server
            (waiting while it is full: back-pressure) and return None in its place.
        server_generation : int or None
            Generation of ``replay_server`` or ``queue_server`` (reported with a loss).
        max_episodes : int or None
            End this rollout with the step that ends this many episodes (fewer than
            ``rollout_episodes`` when an episode budget has fewer left). None:
            ``rollout_episodes``.
        data_proxy : ray.actor.ActorHandle or None
            This worker's node proxy (``pytorchrl.scheme.servers.worker_proxy``): the
            insert into ``replay_server`` or the put into ``queue_server`` is handed to it,
            which passes it on with those of the node's other collectors as one message (a
            proxy found dead is bypassed: the call goes to the server).

        Returns
        -------
        data : dict, Packed or None
            The rollout (see the storage's ``get_data``), packed if asked to; None when it
            went to ``replay_server``.
        info : dict
            ``collected_samples``, ``steps`` (per environment), ``col_time``, ``version``
            (weights that produced it), ``episodes`` (return, length) finished,
            ``index_worker``, ``cut`` (stopped early), ``TestReward`` when an evaluation ran,
            ``raw_bytes``/``sent_bytes`` when packed or inserted into a replay server,
            ``replay_outcome`` ("ok", "closed", "lost") when inserted into one,
            ``queue_outcome`` when put into a queue; ``server_lost`` (a
            ``ServerLost.report()``) when the server died: the insert or put is lost, or,
            with ``paused`` True, the inference server died mid-rollout and the rollout is
            not finished (no data, no samples: ask again once the replacement is given). With a weight board:
            ``weight_swaps``, the (step, version) of every version pulled during the rollout
            (``version`` is then the one its first step acted with, the oldest), and
            ``pulled_bytes``, the size of the weights loaded. ``held`` True (data None, no
            samples, no episodes): the actor was not ready to send the rollout (an EXARL
            agent without data, ``ExaActor.ready_to_send``): it is kept and sent, and its
            samples and episodes reported, with a later one. ``obs_moments``: the count,
            mean and variance of the rollout's observations, when the actor normalises them
            (``ObservationNormalizer.moments``).
        """
        data, info = self._collect(listen_to, data_to_cpu, weights, version, round_id, max_episodes)
        if data is not None:
            delivery, server = self._deliveries.of(replay_server, queue_server)
            data = delivery.deliver(data, info, Request(pack_data, server, server_generation, data_proxy))
        if not info.get("paused"):
            self.iter += 1
        return data, info

    def _collect(self, listen_to, data_to_cpu, weights, version, round_id, max_episodes):
        """The rollout of a ``collect_data`` request (arguments as there) and its
        information: ``(data, info)``, data None when there is nothing to deliver (the
        rollout is paused by its inference server's death, or held by the actor)."""
        if weights is not None:
            self.set_weights(weights, version)
        self._check_envs()
        info = {}
        if self.envs_test is not None and self.iter % self.algo.test_every == 0:
            info["TestReward"] = self._guarded(self.evaluate, "envs_test")
        listen = None
        if "sync" in listen_to:
            listen = round_id if round_id is not None else ("local", self.iter)
            self._listening_round = listen
        first_version = self.actor_version
        try:
            if self._unsent is None:
                rollout = self._guarded(self._rollout, "envs_train", self.update_every, listen,
                                        max_episodes or self.rollout_episodes)
            else:
                rollout, self._unsent = self._unsent, None
            # The algorithm's collector-side step (EXARL's ASYNC: Bellman targets computed
            # here; RND's intrinsic rewards), with the weights this rollout was collected
            # with (or the inference server's).
            try:
                data = self.algo.preprocess_rollout(self.storage.get_data(data_to_cpu))
            except ServerLost:
                # The rollout is whole in the storage: only its pre-processing is asked again.
                self._unsent = rollout
                raise
        except ServerLost as lost:
            info.update(server_lost=lost.report(), paused=True, collected_samples=0, steps=0, col_time=0.0,
                        version=self.actor_version, episodes=[], index_worker=self.index_worker, cut=False)
            return None, info
        finally:
            self._listening_round = None
        col_time, steps, cut = rollout
        if self.actor.obs_norm is not None:
            # The learner merges them into its statistics (GWorker.publish); this worker's
            # actor keeps the learner's.
            obs = self.storage.rollout_observations()
            info["obs_moments"] = self.actor.obs_norm.moments(obs.reshape((-1,) + obs.shape[2:]))
        info.update(collected_samples=steps * self.envs_train.num_envs, steps=steps, col_time=col_time,
                    version=self._rollout_version(first_version), episodes=self.envs_train.pop_finished_episodes(),
                    index_worker=self.index_worker, cut=cut)
        if self._board_reader is not None:
            info.update(weight_swaps=self._weight_swaps, pulled_bytes=self._pulled_bytes)
            self._weight_swaps, self._pulled_bytes = [], 0
        ready = getattr(self.actor, "ready_to_send", None)
        if ready is not None:
            # (An EXARL agent's actor: it sends only when the agent has data.)
            return self._held.gate(ready, data, info, self.index_worker, self.update_every)
        return data, info

    def _rollout_version(self, first_version):
        """Weight version of the rollout just collected: ``first_version`` (the actor's when
        it began: the oldest, weights pulled mid-rollout being newer), or with an inference
        server the oldest that acted in it."""
        if self._server_acting is not None:
            return self._server_acting.rollout_version()
        if self._weight_swaps and self._weight_swaps[0][0] == 0:
            return self._weight_swaps[0][1]    # read before the first step (each episode): it acted throughout
        return first_version

    def collect_train_data(self, num_steps=None, listen_to=()):
        """Step the train environments ``num_steps`` times and keep the steps in the storage
        (as pytorchrl, a step is one step of every environment of the vector: ``num_steps``
        steps give ``num_steps * num_envs`` samples).

        The storage holds one rollout (``update_every`` steps), handed over by
        ``storage.get_data()``: more steps than that would be taken and thrown away, so
        they are refused. Collect longer stretches one rollout at a time (``collect_data``).

        Parameters
        ----------
        num_steps : int or None
            Steps to take, 1 to ``update_every``; None: ``update_every`` (one rollout).
        listen_to : sequence of str
            Accepted for pytorchrl's signature; a rollout collected here is never cut.

        Returns
        -------
        col_time : float
            Seconds spent.
        train_perf : float
            Mean return of the episodes finished meanwhile (nan if none).

        Raises
        ------
        ValueError
            ``num_steps`` below 1 or above ``update_every``, naming both.
        """
        steps = self.update_every if num_steps is None else num_steps
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
            raise ValueError(f"collect_train_data needs num_steps >= 1, got {num_steps!r}")
        if steps > self.update_every:
            raise ValueError(f"collect_train_data(num_steps={steps}): the storage holds one rollout of "
                             f"{self.update_every} steps (of {self.envs_train.num_envs} environments each); the "
                             f"steps beyond it would be collected and lost. Ask for at most {self.update_every}, "
                             f"or collect one rollout at a time with collect_data()")
        self._check_envs()
        # (A rollout started without a round id is never cut: it takes all the steps.)
        col_time, _, _ = self._guarded(self._rollout, "envs_train", int(steps), None, self.rollout_episodes)
        eps = self.envs_train.pop_finished_episodes()
        return col_time, (float(np.mean([r for r, _ in eps])) if eps else float("nan"))

    def interrupt(self, round_id=None, min_steps=0):
        """Ask the ``collect_data(listen_to=["sync"], round_id=round_id)`` call to stop at a step
        boundary once its rollout holds at least ``min_steps`` steps (per environment).

        A request for another round, earlier or later, is not affected, so a late message
        never cuts the next round. Served in the control concurrency group of a remote
        worker: it arrives while the rollout runs. A later call replaces an earlier one (the
        collector set lowers ``min_steps`` as more of the round is in).

        Parameters
        ----------
        round_id : object or None
            The round to cut (None: the request running now).
        min_steps : int
            Steps the cut rollout must keep (0: stop at the next step boundary).
        """
        if round_id is None:
            round_id = self._listening_round
        if round_id is not None:
            self._cut_request = (round_id, int(min_steps))
        return True

    # ``_rollout`` checks ``self._cut_round == round_id`` before every step. Served as a
    # property, the requested round shows only once the rollout holds its minimum number of
    # steps, so the hot loop needs no knowledge of preemption thresholds.
    _cut_request = None
    _listening_round = None

    @property
    def _cut_round(self):
        req = self._cut_request
        if req is None or self.storage.step < req[1]:
            return None
        return req[0]

    @_cut_round.setter
    def _cut_round(self, value):
        self._cut_request = None if value is None else (value, 0)

    def _rollout(self, num_steps, round_id, episodes=None):
        t0 = time.perf_counter()
        storage, actor, envs = self.storage, self.actor, self.envs_train
        reader = self._board_reader
        paused, self._paused = self._paused, None
        if paused is None:
            self._warm_up()
            state = self.state
            if self._server_acting is not None:
                self._server_acting.start_rollout()
            storage.start(self.obs, state)
            # Exploration held for many steps (gSDE) is drawn anew with every rollout.
            actor.reset_noise(envs.num_envs)
            num_steps = min(num_steps, self.update_every)
            steps, cut, ended, stepping, spent = 0, False, 0, True, 0.0
        else:
            # Stopped by its inference server's death: on from the step it was waiting for.
            num_steps, steps, cut, ended, stepping, spent, state, episodes = paused
        last_step = None
        try:
            for _ in range(num_steps - steps if stepping else 0):
                # Checked at the step boundary only, so a cut rollout holds whole transitions.
                if round_id is not None and self._cut_round == round_id:
                    cut = True
                    break
                if reader is not None:
                    if not reader.each_episode:
                        pulled = reader.poll()
                    elif self._episode_starts:
                        pulled = reader.read()
                        self._episode_starts = False
                    else:
                        pulled = None
                    if pulled is not None:
                        self._load_pulled(steps, *pulled)
                # The actor reads the storage's observation row: no copy on the way in.
                env_action, extras, state = actor.act(storage.current_obs(), state)
                if self.policy == "random":
                    env_action = self._random_actions(env_action)
                if self._step_log is not None:
                    obs = storage.current_obs().copy()
                next_obs, rew, term, trunc, final_obs = envs.step_numpy(env_action)
                last_step = (term, trunc)
                if self._step_log is not None:
                    self._step_log.write(obs, env_action, rew, next_obs, term, trunc, final_obs)
                step = {ACT: env_action, **extras, REW: rew, TERM: term, TRUNC: trunc, OBS2: next_obs,
                        FINAL_OBS: final_obs}
                if state is not None:
                    step[RHS] = state
                storage.insert(step)
                if final_obs and state is not None:
                    state = actor.reset_state(state, list(final_obs))
                steps += 1
                if final_obs:
                    self._episode_starts = True
                if final_obs and episodes is not None:
                    ended += len(final_obs)
                    if ended >= episodes:
                        break
            stepping = False
            if last_step is not None:
                self._done = np.logical_or(np.asarray(last_step[0]), np.asarray(last_step[1])).reshape(-1)
            storage.finish(state)
        except ServerLost:
            # Raised by the inference server's acting program before the step (or the
            # bootstrap) it was asked for: nothing of it happened, the rollout is kept.
            self._paused = (num_steps, steps, cut, ended, stepping, spent + time.perf_counter() - t0, state,
                            episodes)
            raise
        if self._step_log is not None:
            self._step_log.flush()
        self.obs = storage.next_rollout_obs()
        self.state = state
        return spent + time.perf_counter() - t0, steps, cut

    def _warm_up(self):
        """The algorithm's ``warm_up`` on the training environments, once; environments it
        stepped are reset, and the next rollout starts from their reset observations."""
        if self._warmed_up:
            return
        self._warmed_up = True
        if self.algo.warm_up(self.envs_train):
            self.obs = self.envs_train.reset_numpy().copy()
            self.state = self.actor.initial_state(self.envs_train.num_envs)
            self._episode_starts = True
            self._done = None   # (reset: no step taken)

    def _load_pulled(self, step, version, weights):
        """Load weights pulled from the board before step ``step`` of the rollout (a version
        the worker already holds, e.g. the first answer, is not loaded again)."""
        if version == self.actor_version:
            return
        self.set_weights(weights, version)
        self._weight_swaps.append((step, int(version)))
        self._pulled_bytes += payload_bytes(weights)

    def _close_step_log(self):
        if self._step_log is not None:
            self._step_log.close()
            self._step_log = None

    # ----------------------------------------------------------------- control
    def set_inference_server(self, server, generation):
        """Act through ``server`` (of ``generation``), the replacement of a dead inference
        server, from now on (a paused rollout goes on with it at the next request)."""
        if self._server_acting is None:
            raise ValueError("set_inference_server: this worker does not act through an inference server "
                             f"(policy={self.policy!r})")
        self._server_acting.set_server(server, generation)
        return True

    def set_weights(self, actor_weights, version=None):
        """Load actor weights.

        Parameters
        ----------
        actor_weights : dict of tensors or numpy arrays
            The acting weights (``Algorithm.get_acting_weights``: the actor's and those of
            the algorithm's ``collector_modules``; numpy arrays: as sent by
            ``transport.weights_to_wire``).
        version : int or None
            Version of these weights (None: one more than the current version).
        """
        self.algo.set_acting_weights(weights_from_wire(actor_weights))
        self.actor_version = self.actor_version + 1 if version is None else int(version)

    def get_weights(self):
        """The actor's acting weights (what collectors need) as a dict of CPU tensors."""
        return self.algo.get_acting_weights()

    def get_collector_state(self):
        """What this worker's algorithm accumulated over the run (``Algorithm.collector_state``:
        RND's statistics), for checkpoints."""
        return self.algo.collector_state()

    def handle_control(self, request):
        """Apply ``request`` (a ``ControlRequest``) to this worker.

        An algorithm parameter is set unless the algorithm is borrowed (its owner, the
        gradient worker of this process, set it); a collector state (``get_collector_state``
        of a resumed run) makes the algorithm skip its warm-up before the first rollout; a
        component ("actor", "algo", "storage", "envs_train" or "envs_test") is rebuilt from
        the request's factory. Returns the parameter's value now, True for a collector
        state, or the replaced component's name.
        """
        if request.target == "algorithm":
            if self._owner is None:   # a borrowed algorithm was changed by its owner
                self.algo.update_algorithm_parameter(request.name, request.value)
            return getattr(self.algo, request.name)
        if request.target == "storage":
            self.storage.update_storage_parameter(request.name, request.value)
            return getattr(self.storage, request.name)
        if request.target == "collector_state":
            self.algo.load_collector_state(request.value)
            return True
        return self._replace_component(request.name, request.value)

    def _replace_component(self, component_name, new_component_factory):
        """Rebuild component ``component_name`` from ``new_component_factory``, and what
        depends on it here (the rollout under way, the acting route, the warm-up, the
        recurrent state)."""
        rebuild_component(self, component_name, new_component_factory, self._owner)
        if component_name != "envs_test":
            # A rollout paused by its server's death belonged to the components replaced.
            self._paused = self._unsent = None
        if component_name == "actor" and self._server_acting is not None:
            self.actor.route_acting(self._server_acting)
        if component_name == "algo":
            if self._server_acting is not None:
                self.algo.route_collector_calls(self._server_acting)
            # A new algorithm starts without the statistics its warm-up fills.
            self._warmed_up = False
        if component_name in self._env_factories:
            self._env_factories[component_name] = new_component_factory
        if component_name == "envs_train":
            self.obs = self.envs_train.reset_numpy().copy()
            self._episode_starts = True
            self._done = None
        if component_name in ("envs_train", "actor") and self.envs_train is not None:
            self.state = self.actor.initial_state(self.envs_train.num_envs)
        return component_name

    def get_hyperparameters(self):
        """Current algorithm and storage parameters of this worker, and where it stands
        (used to check that a hot-swap reached every worker)."""
        return {"role": "collection", "index_worker": self.index_worker, "index_parent": self.index_parent,
                "version": self.actor_version, "algorithm": dict(self.algo.hyperparameters),
                "storage": dict(self.storage.hyperparameters)}

    def stop(self):
        """Close the environments (and the per-step log)."""
        self._close_step_log()
        for envs in (self.envs_train, self.envs_test):
            if envs is not None:
                envs.close()
