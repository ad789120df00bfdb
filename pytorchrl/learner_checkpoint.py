"""The Learner's saved models and checkpoints: what a checkpoint holds, how it is restored,
and the checks that a file fits the run before anything is changed.

The file I/O itself (atomic writes, plain types, reading without executing code) is
``pytorchrl.checkpoint``'s; this module decides the content.
"""

import logging
import time

import torch

from pytorchrl import checkpoint as ckpt
from pytorchrl.scheme.base.ray_runtime import WorkerError

logger = logging.getLogger("pytorchrl")


def save_model(update_worker, path):
    """Save the actor's weights to ``path`` (see ``Learner.save_model``); returns the path.

    Parameters
    ----------
    update_worker : UWorker
        The scheme's update worker (its local copy of the weights is made current first).
    path : str
        The file.
    """
    refuse_nonfinite_weights(update_worker, path)
    return ckpt.write_atomically(update_worker.save_model, path)


def refuse_nonfinite_weights(update_worker, path):
    """Raise SaveError (naming ``path``) when a weight is NaN or infinite (the local copy
    of the weights is made current first: ``UWorker.get_weights``)."""
    bad = [k for k, v in update_worker.get_weights().items()
           if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise ckpt.SaveError(f"{path} not written: the weights hold NaN or infinite values "
                             f"({', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''})")


def training_state(learner, extra=None, path="the training state", replay=True):
    """The full training state of ``learner`` as a dict: what a checkpoint holds (see
    ``Learner.save_checkpoint``), and what a member of a population copies from another
    (``restore(..., copy=True)``). Its tensors may share memory with the live networks:
    copy it before the learner trains on, unless it is written or sent away at once.

    Parameters
    ----------
    learner : Learner
        The learner whose state is taken (the local copy of its weights is made current).
    extra : object or None
        Kept along under ``"extra"``.
    path : str
        Where the state goes (the checkpoint file), for the warning of a replay server
        found dead (see ``replay_contents``).
    replay : bool
        Include the replay's contents (with ``learner.checkpoint_replay``); a member of a
        population that copies another keeps its own, so the copy leaves them out.

    ``"collectors"`` holds the collectors' ``Algorithm.collector_state`` when the algorithm
    keeps one (RND_PPO's statistics): the local collector's, or the first remote
    collector's (each collector holds its own; one of them is saved).
    """
    learner.update_worker.sync_local_weights()
    local = learner.update_worker.local_worker
    metrics = learner.metrics
    state = {
        "format": ckpt.FORMAT,
        "algorithm": algorithm_name(local.algo),
        "actor": type(local.actor).__name__,
        "worker": local.get_state(),
        "learner": {"num_samples_collected": metrics.env_steps, "num_updates": learner.num_updates,
                    "num_episodes": metrics.num_episodes, "episodes": list(metrics.episodes),
                    "episode_lengths": list(metrics.episode_lengths), "test_reward": metrics.test_reward,
                    "hot_swaps": [list(swap) for swap in learner.hot_swaps],
                    "elapsed": time.time() - metrics.start_time, "target_steps": learner.target_steps},
        "storage": dict(local.storage.hyperparameters),
        "schedules": [s.last_sent for s in learner.schedules],
        # The actor's own generators (numpy acting samples from one) are part of the
        # random state a resumed run must continue from.
        "rng": {**ckpt.process_rng_state(), "actor": ckpt.generator_states(local.actor)},
        "extra": extra,
    }
    try:
        collectors = learner.update_worker.collector_state()
    except WorkerError as exc:
        # A checkpoint taken because workers died (a run that stops) is still saved; a run
        # resumed from it warms its collectors' statistics up again.
        logger.warning(f"the checkpoint holds no collector state (a resumed run's collectors start afresh): {exc}")
        collectors = None
    if collectors is not None:
        # What the collectors' algorithm accumulated (RND's statistics): a resumed run's
        # collectors start from it instead of warming up again.
        state["collectors"] = collectors
    if replay and learner.checkpoint_replay:
        # The replay's contents, counters and sampling state: a resumed run samples
        # from the same transitions (the replay server's, or the local gradient worker's).
        contents = replay_contents(learner, path)
        if contents is not None:
            state["replay"] = {"contents": contents, "rng": ckpt.generator_states(local.storage)}
    return state


def save_checkpoint(learner, path, extra=None, keep_previous=True):
    """Write the full training state of ``learner`` to ``path`` (see ``Learner.save_checkpoint``);
    returns the path.

    Parameters
    ----------
    learner : Learner
        The learner whose state is saved.
    path : str
        The file.
    extra : object or None
        Saved along, in plain types.
    keep_previous : bool
        Keep the checkpoint being replaced as ``<stem>.prev<ext>``.
    """
    refuse_nonfinite_weights(learner.update_worker, path)
    state = training_state(learner, extra, path)
    ckpt.save_torch(ckpt.to_plain(state), path, keep_previous=keep_previous)
    if "replay" in state and learner.scheme.replay_server is not None:
        # A replacement of the replay server starts from what this checkpoint holds.
        learner.scheme.set_replay_snapshot(ReplaySnapshot(path, learner.metrics.env_steps))
    return path


def replay_contents(learner, path):
    """The replay contents a checkpoint of ``learner`` saves (to ``path``): the replay
    server's, or the local gradient worker's storage's. A replay server found dead gives
    those of the last checkpoint instead (said with ``learner.on_warning``; None, and the
    checkpoint keeps no replay, when there was none)."""
    from pytorchrl.scheme.base.servers import ServerLost
    scheme = learner.scheme
    if scheme.replay_server is None:
        return learner.update_worker.local_worker.storage.state_dict()
    try:
        return scheme.replay_contents()
    except ServerLost as lost:
        snapshot, contents, why = scheme.replay_snapshot, None, ""
        if snapshot is not None:
            try:
                contents = snapshot()[0]
            except (OSError, ValueError) as exc:
                why = f" (those of the last checkpoint cannot be read: {' '.join(str(exc).split())})"
        kept = f"the transitions saved at {snapshot.env_steps:,} env steps" if contents is not None else "no replay"
        learner.on_warning(f"{path} keeps {kept}: {lost}{why}")
        return contents


class ReplaySnapshot:
    """The replay server's contents saved with a checkpoint, read back from its file when a
    replacement of the server needs them (``Scheme.set_replay_snapshot``).

    Parameters
    ----------
    path : str
        The checkpoint file.
    env_steps : int
        Its env steps (said in the restart's line).
    """

    def __init__(self, path, env_steps):
        self.path = path
        self.env_steps = int(env_steps)

    def __call__(self):
        """``(contents, env_steps)``.

        Raises
        ------
        ValueError
            The file cannot be read any more (``CheckpointError``), or holds no replay.
        """
        state = ckpt.read_checkpoint(self.path)
        if "replay" not in state:
            raise ValueError(f"{self.path} holds no replay")
        return state["replay"]["contents"], self.env_steps


def load_checkpoint(learner, path):
    """Restore on ``learner`` a state written by ``save_checkpoint`` (see
    ``Learner.load_checkpoint``); returns the checkpoint's ``extra``.

    Parameters
    ----------
    learner : Learner
        The learner to restore; its scheme gets the weights, hyperparameters and versions.
    path : str
        The checkpoint file.
    """
    state = ckpt.read_checkpoint(path)
    restore(learner, state, path)
    return state.get("extra")


def restore(learner, state, source, copy=False):
    """Restore on ``learner`` a ``training_state`` (read from a checkpoint, or taken from
    another learner), on every worker of its scheme.

    Parameters
    ----------
    learner : Learner
        The learner to restore.
    state : dict
        The state (``training_state``).
    source : str
        Where it comes from (the file, or "member-2"), for messages.
    copy : bool
        False: a resumed run, everything comes back (counters, hot-swap log, random states,
        replay, the collectors' state: every collector gets the one saved). True: the
        exploit step of population-based training, where ``learner`` takes over another
        learner's policy: the weights, optimizer state and
        hyperparameters come, with the counters that describe them (updates, the recent
        returns and test return; the weight version moves on by one, a new publication),
        while the learner keeps its own env steps and episodes (its timeline), hot-swap
        log, schedules, random states, replay and collector state (RND's statistics).

    Raises
    ------
    pytorchrl.checkpoint.CheckpointError
        The state does not fit the learner (another algorithm, actor or network; checked
        before anything is changed where possible), with a one-line cause.
    """
    uw = learner.update_worker
    local = uw.local_worker
    metrics = learner.metrics
    try:
        check_fits(state, local.algo, local.actor, source)
        worker = state["worker"]
        if copy:
            # Other weights are a new publication of this scheme: rollouts still on their
            # way from the old policy must look older than them (policy lag), never newer.
            worker = {**worker, "version": uw.version + 1}
        uw.set_state(worker)
        for name, value in worker["algo"]["hyperparameters"].items():
            uw.update_algorithm_parameter(name, value)
        for name, value in state.get("storage", {}).items():
            uw.update_storage_parameter(name, value)
        ls = state["learner"]
        learner.num_updates = ls["num_updates"]
        metrics.policy_version = int(worker["version"])
        metrics.episodes.clear()
        metrics.episodes.extend(ls["episodes"])
        metrics.episode_lengths.clear()
        metrics.episode_lengths.extend(ls["episode_lengths"])
        metrics.test_reward = ls["test_reward"]
        if copy:
            return
        metrics.env_steps = ls["num_samples_collected"]
        metrics.num_episodes = ls["num_episodes"]
        if learner.target_episodes is not None:
            # The collectors count from zero again: only the episodes still to run.
            uw.set_episode_budget(max(0, learner.target_episodes - metrics.num_episodes))
        if learner.steps_on_data:
            uw.set_step_budget(max(0, learner.target_steps - metrics.env_steps))
        learner.hot_swaps = [tuple(swap) for swap in ls["hot_swaps"]]
        metrics.restart_clock(ls["elapsed"])
        for sched, last in zip(learner.schedules, state.get("schedules", [])):
            sched.last_sent = last
        ckpt.set_generator_states(local.actor, state["rng"]["actor"], "actor")
        ckpt.set_process_rng_state(state["rng"])
        if "collectors" in state:
            uw.set_collector_state(state["collectors"])
        if "replay" in state and learner.scheme.replay_server is not None:
            learner.scheme.load_replay(state["replay"]["contents"])
            learner.scheme.set_replay_snapshot(ReplaySnapshot(source, metrics.env_steps))
        elif "replay" in state and hasattr(local.storage, "load_state_dict"):
            local.storage.load_state_dict(state["replay"]["contents"])
            ckpt.set_generator_states(local.storage, state["replay"]["rng"], "storage")
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as exc:
        if isinstance(exc, ckpt.CheckpointError):
            raise
        # A state dict of another shape, or a hyperparameter this algorithm refuses.
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise ckpt.CheckpointError(source, f"does not fit this run: {detail[:300]}") from None


def algorithm_name(algo):
    """The name checkpoints record for ``algo``: its ``name``, else its class name."""
    return getattr(algo, "name", None) or type(algo).__name__


def check_fits(state, algo, actor, path):
    """Raise CheckpointError unless ``state`` was saved by the same algorithm and actor
    class with a network of the same parameters (names and shapes) and the same random
    generators as ``actor``'s; done
    before anything is loaded, so that a mismatch changes nothing (``path``: the file, for
    the message)."""
    saved, mine = state.get("algorithm"), algorithm_name(algo)
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


__all__ = ["save_model", "training_state", "save_checkpoint", "load_checkpoint", "restore", "check_fits",
           "algorithm_name", "refuse_nonfinite_weights", "ReplaySnapshot"]
