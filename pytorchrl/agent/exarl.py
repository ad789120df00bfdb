"""EXARL's base classes (seed 001), and adapters that run agents and environments written
against them in our schemes unchanged.

- ``ExaAgent``: EXARL's agent interface (``get_weights``, ``set_weights``, ``train``,
  ``action``, ``has_data``, ``load``, ``save(results_dir)``). A user's agent subclasses it.
- ``ExaEnv``: EXARL's environment, a ``gymnasium.Wrapper`` (with ``set_results_dir``); our
  ``VecEnv`` takes it as any gymnasium environment.
- ``ExaData``: EXARL's memory pool between actors and learners (``push(data, rank)``,
  ``pop(rank, count)``, ``get_data(learner_counter, low, high)``). A subclass is the memory
  pool of the RMA workflows: ``Scheme(data_path="queues", queues={"kind": MyData})`` (YAML
  ``queues.kind: package.module:MyData``), one window per collector (its rank).
- ``ExaActor``: our actor protocol over an ``ExaAgent``: ``act`` calls the agent's
  ``action`` for each observation, the acting weights are the agent's ``get_weights``
  (loaded with ``set_weights``), a saved model is the agent's weights. Before a collector
  sends a rollout it asks the agent's ``has_data`` (``ready_to_send``: the rollout's
  transitions are first given to the agent's ``remember``, when it has one, as EXARL's
  actors do): while it says no, the collector keeps the rollout and sends it with the next.
- ``ExaAlgorithm``: our algorithm protocol over the same agent: each mini-batch drawn
  from our storage is handed to the agent's ``train``, which updates its weights itself.
  With several gradient workers (EXARL's multi-learner workflows) each learner's agent
  trains on its own batches, and the changes of the weights are what the learners share,
  as gradients are: averaged by the central update, all-reduced by the decentralized one.

The experiences live in our storage and data paths (the learner's replay, EXARL's RMA
queues, a replay server), so an agent needs no memory of its own. An agent's ``load`` and
``save`` are its own format: ``ExaActor(restart_model=...)`` loads a file our runs saved
(the weights) and hands any other file (or directory) to ``load``; a run that saves its
model calls the agent's ``save`` with the run directory (``ExaActor.save_own``).
"""

import abc

import gymnasium as gym
import numpy as np
import torch

from pytorchrl import ACT, DISCOUNT, OBS, OBS2, REW
from pytorchrl.agent.actors.base import Actor
from pytorchrl.agent.algorithms.base import Algorithm
from pytorchrl.agent.algorithms.off_policy import check_replay_schedule, set_replay_schedule
from pytorchrl.agent.exa_data import ExaData  # noqa: F401 (EXARL's base classes are imported from here)
from pytorchrl.agent.factory import ComponentFactory, accepted_kwargs


class ExaAgent(abc.ABC):
    """EXARL's agent base class: the methods a workflow calls (seed 001).

    Parameters
    ----------
    **kwargs
        The agent's own settings.
    """

    def __init__(self, **kwargs):
        pass

    @abc.abstractmethod
    def get_weights(self):
        """The weights actors act with: a list (or tuple) of numpy arrays, or a dict of them."""

    @abc.abstractmethod
    def set_weights(self, weights):
        """Load weights as ``get_weights`` returns them."""

    @abc.abstractmethod
    def train(self, batch):
        """Train on one batch of experiences (the agent updates its weights itself); may
        return the loss, a number."""

    @abc.abstractmethod
    def action(self, state):
        """The next action for one observation ``state``: an action, or EXARL's
        ``(action, policy_type)`` (policy type 0: random, 1: model)."""

    @abc.abstractmethod
    def has_data(self):
        """True when the agent holds experiences from simulation: an actor sends its data
        only then (see ``ExaActor.ready_to_send``)."""

    @abc.abstractmethod
    def load(self, filename):
        """Load weights from ``filename`` (the agent's own format: what its ``save`` wrote)."""

    @abc.abstractmethod
    def save(self, results_dir):
        """Save the weights into the directory ``results_dir`` (the agent's own format)."""


class ExaEnv(gym.Wrapper):
    """EXARL's environment base class: a gymnasium wrapper of ``env``.

    Parameters
    ----------
    env : gymnasium.Env
        The wrapped environment.
    **kwargs
        The environment's own settings (kept in ``self.kwargs``).
    """

    def __init__(self, env, **kwargs):
        super().__init__(env)
        self.kwargs = kwargs
        self.results_dir = None

    def set_results_dir(self, results_dir):
        """Where the environment may save its own information (EXARL's default: remembered)."""
        self.results_dir = results_dir


class EnvSpaces:
    """What an ``ExaAgent`` is built with in place of EXARL's environment: the spaces.

    Parameters
    ----------
    observation_space, action_space : gymnasium.Space
        The environment's spaces.
    """

    def __init__(self, observation_space, action_space):
        self.observation_space = observation_space
        self.action_space = action_space


def _numpy(value):
    """A tensor or array as a numpy array."""
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value


def _weights_as_dict(weights):
    """An agent's weights (a list/tuple of arrays or a dict of them) as a dict name -> tensor."""
    if isinstance(weights, dict):
        items = weights.items()
    elif isinstance(weights, (list, tuple)):
        items = ((str(i), w) for i, w in enumerate(weights))
    else:
        raise TypeError(f"an ExaAgent's get_weights must return a list, tuple or dict of arrays, got "
                        f"{type(weights).__name__}")
    return {k: torch.as_tensor(np.array(w, copy=True)) for k, w in items}


class ExaActor(Actor):
    """Our actor protocol over a user's ``ExaAgent``.

    ``act`` asks the agent's ``action`` for each observation row (with
    ``deterministic=True`` too, unless ``action`` takes a ``deterministic`` keyword: an
    EXARL agent explores as it decides); ``state_dict`` is the agent's ``get_weights``
    and ``load_state_dict`` its ``set_weights``, so weights travel, are checkpointed and
    saved as for any actor. The agent's device is its own business; the actor has no torch
    parameters.

    Parameters
    ----------
    device : str or torch.device
        Our device (the agent chooses its own).
    agent_class : type
        A subclass of ``ExaAgent``, built as ``agent_class(env=EnvSpaces(...), **agent_kwargs)``
        (``env`` only when its constructor takes it).
    input_space, action_space : gymnasium.Space
        The environment's spaces.
    agent_kwargs : dict or None
        More keyword arguments of ``agent_class`` (EXARL's ``is_learner``, hyperparameters).
    restart_model : str or None
        A model our run saved (the agent's weights), or a file of the agent's own format
        (given to its ``load``), loaded after building.
    algorithm_name : str
        Name of the algorithm served (``ExaAlgorithm.name``).
    """

    def __init__(self, device, agent_class, input_space, action_space, agent_kwargs=None, restart_model=None,
                 algorithm_name="ExaAgent"):
        if not (isinstance(agent_class, type) and issubclass(agent_class, ExaAgent)):
            raise TypeError(f"ExaActor needs a subclass of ExaAgent, got {agent_class!r}")
        super().__init__(device, input_space, action_space, algorithm_name)
        kwargs = dict(agent_kwargs or {})
        kwargs.update(accepted_kwargs(agent_class.__init__, {"env": EnvSpaces(input_space, action_space)}))
        self.agent = agent_class(**kwargs)
        self._deterministic_kw = "deterministic" in accepted_kwargs(self.agent.action, {"deterministic": None})
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        self.policy_counts = {0: 0, 1: 0}   # EXARL's policy types of the actions taken: random, model
        if restart_model:
            self.load_restart_model(restart_model)

    @classmethod
    def create_factory(cls, agent_class, input_space, action_space, agent_kwargs=None, restart_model=None):
        """Return a picklable ``factory(device)`` building an ExaActor (parameters as in the class)."""
        return ComponentFactory(cls, agent_class=agent_class, input_space=input_space, action_space=action_space,
                                agent_kwargs=dict(agent_kwargs or {}), restart_model=restart_model)

    def act(self, obs, state=None, deterministic=False):
        kwargs = {"deterministic": deterministic} if self._deterministic_kw else {}
        actions = []
        for row in np.asarray(obs):
            out = self.agent.action(row, **kwargs)
            if isinstance(out, tuple) and len(out) == 2:
                out, policy = out
                self.policy_counts[int(policy)] = self.policy_counts.get(int(policy), 0) + 1
            actions.append(out)
        if self.discrete:
            return np.asarray(actions, dtype=np.int64).reshape(len(actions), 1), {}, state
        return np.asarray(actions, dtype=np.float32).reshape(len(actions), -1), {}, state

    def state_dict(self, *args, **kwargs):
        """The agent's weights (``get_weights``) as a dict of CPU tensors."""
        return _weights_as_dict(self.agent.get_weights())

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Give the agent weights produced by ``state_dict`` (``set_weights``, in its form)."""
        ordered = [np.asarray(state_dict[k].detach().cpu().numpy() if isinstance(state_dict[k], torch.Tensor)
                              else state_dict[k]) for k in state_dict]
        current = self.agent.get_weights()
        self.agent.set_weights(dict(zip(state_dict, ordered)) if isinstance(current, dict) else ordered)

    def load_restart_model(self, path):
        """Load a model our run saved, or give any other file (or directory) to the agent's
        ``load``."""
        from pytorchrl.checkpoint import CheckpointError
        try:
            super().load_restart_model(path)
        except (CheckpointError, ValueError):
            self.agent.load(path)

    def save_agent(self, results_dir):
        """Save the agent in its own format into the directory ``results_dir`` (its
        ``save``); returns ``results_dir``."""
        self.agent.save(results_dir)
        return results_dir

    def save_own(self, results_dir):
        """What a run saving its model adds for this actor: the agent's own ``save`` into the
        run directory ``results_dir``."""
        return self.save_agent(results_dir)

    def ready_to_send(self, data):
        """Whether a collector may send the rollout ``data`` it just collected (with those it
        kept before): EXARL's actors send only when the agent ``has_data``. The rollout's
        transitions are first handed to the agent's ``remember(state, action, reward,
        next_state, done)`` one by one, when it has one (as EXARL's actors remember each
        step), so that ``has_data`` knows of them.

        Parameters
        ----------
        data : dict
            The rollout as the storage hands it over (``prl.OBS``, ``prl.ACT``, ``prl.REW``,
            ``prl.OBS2``, ``prl.DISCOUNT`` of a replay storage).
        """
        remember = getattr(self.agent, "remember", None)
        if callable(remember) and data:
            obs, act, rew, obs2 = (np.asarray(_numpy(data[k])) for k in (OBS, ACT, REW, OBS2))
            done = np.asarray(_numpy(data[DISCOUNT])) == 0.0
            for i in range(len(obs)):
                a = act[i].item() if self.discrete else act[i]
                remember(obs[i], a, float(np.asarray(rew[i]).reshape(-1)[0]), obs2[i], bool(done[i].reshape(-1)[0]))
        return bool(self.agent.has_data())


class ExaAlgorithm(Algorithm):
    """Our algorithm protocol over the ``ExaAgent`` of an ``ExaActor``: the replay storage
    draws mini-batches (paced by ``update_every``, ``num_updates``, ``start_steps``,
    ``mini_batch_size``) and each is handed to the agent's ``train`` as a dict of numpy
    arrays under EXARL's names: ``state``, ``action``, ``reward``, ``next_state``, ``done``
    (the episode terminated after the step) and ``discount`` (the factor of the value of
    ``next_state``: gamma^n, 0 after a termination). The agent updates its weights itself.

    Several learners (EXARL's multi-learner workflows: several gradient workers). What a
    gradient worker sends in place of gradients is the change its agent's ``train`` made to
    the weights (before minus after, one tensor per weight, the order of ``get_weights``):
    the central update averages the changes of the gradient workers and applies the mean to
    the weights they all started from, and the decentralized one all-reduces them among the
    gradient workers (the ``trainable_parameters``' gradients hold them), so every learner's
    agent continues from the same weights (its own optimizer state is its own). With one
    gradient worker the agent's weights are kept as ``train`` left them.

    Parameters
    ----------
    device, actor, envs
        As in ``Algorithm``; ``actor`` is an ``ExaActor``.
    gamma : float
        Discount factor of the replay's n-step returns.
    num_updates : int
        Mini-batches (``train`` calls) per ``update_every`` transitions collected.
    update_every : int
        Environment steps (transitions) between two stages of ``num_updates`` calls.
    start_steps : int
        Transitions collected before the first ``train``.
    mini_batch_size : int
        Transitions per batch.
    test_every : int
        Evaluate on the test envs every this many collection rounds.
    num_test_episodes : int
        Episodes per evaluation.
    """

    name = "ExaAgent"
    on_policy = False
    acting_extras = ()

    def __init__(self, device, actor, envs=None, gamma=0.99, num_updates=1, update_every=1, start_steps=0,
                 mini_batch_size=32, test_every=10, num_test_episodes=5):
        if not isinstance(actor, ExaActor):
            raise TypeError(f"ExaAlgorithm trains the agent of an ExaActor, got {type(actor).__name__}")
        super().__init__(device, actor, envs)
        set_replay_schedule(self, gamma, num_updates, update_every, start_steps, mini_batch_size, test_every,
                            num_test_episodes)
        self.check_hyperparameters()

    def check_hyperparameters(self):
        check_replay_schedule(self)

    @property
    def optimizers(self):
        """None of ours: the agent keeps its own."""
        return {}

    def trainable_parameters(self):
        """One tensor per weight of the agent (``get_weights``' order), whose gradient after
        ``compute_gradients(return_grads=False)`` is the change ``train`` made: what the
        decentralized update all-reduces."""
        current = self.actor.state_dict()
        if self._params is None or len(self._params) != len(current):
            self._params = [torch.nn.Parameter(w.clone().float(), requires_grad=False) for w in current.values()]
        return self._params

    def compute_gradients(self, batch, grads_to_cpu=True, return_grads=True):
        """Hand ``batch`` to the agent's ``train``; returns the change of its weights (before
        minus after, a list of tensors; None with ``return_grads`` False: then they are the
        ``trainable_parameters``' gradients) and the info, ``Loss`` in it when ``train``
        returned a number."""
        discount = batch[DISCOUNT].cpu().numpy()
        exa_batch = {"state": batch[OBS].cpu().numpy(), "action": batch[ACT].cpu().numpy(),
                     "reward": batch[REW].cpu().numpy(), "next_state": batch[OBS2].cpu().numpy(),
                     "done": (discount == 0.0).astype(np.float32), "discount": discount}
        before = self.actor.state_dict()
        loss = self.actor.agent.train(exa_batch)
        after = self.actor.state_dict()
        changes = [(before[k].float() - after[k].float()) for k in before]
        self._trained = (before, changes)
        for p, change in zip(self.trainable_parameters(), changes):
            p.grad = change
        info = {} if loss is None else {"Loss": float(loss)}
        return (changes if return_grads else None), info

    def apply_gradients(self, gradients=None):
        """Apply changes of the weights: ``gradients`` (the mean of several gradient workers'
        changes, from the weights this worker holds), or those in the
        ``trainable_parameters``' gradients (this worker's own ``train``, kept as it left
        the weights, or all-reduced with its peers', applied to the weights it trained
        from). A change that is not finite is refused (False) and the weights stay.

        Returns
        -------
        bool
            Whether the update was applied.
        """
        trained, self._trained = getattr(self, "_trained", None), None
        if gradients is None:
            params = self.trainable_parameters()
            if trained is not None and all(p.grad is c for p, c in zip(params, trained[1])):
                return self._count_update()     # one learner: the agent's own result stays
            base = trained[0] if trained is not None else self.actor.state_dict()
            changes = [p.grad for p in params]
        else:
            base, changes = self.actor.state_dict(), [torch.as_tensor(g) for g in gradients]
        if not all(bool(torch.isfinite(c).all()) for c in changes):
            if trained is not None:
                self.actor.load_state_dict(trained[0])
            self.skipped_updates += 1
            return False
        self.actor.load_state_dict({k: (base[k].float() - c).to(base[k].dtype)
                                    for k, c in zip(base, changes)})
        return self._count_update()

    def _count_update(self):
        self.updates_applied += 1
        self.after_update()
        return True

    def state_dict(self):
        """The agent's weights, hyperparameters and update count (its optimizer state is
        the agent's own)."""
        return {"actor": self.get_weights(), "optimizers": {}, "hyperparameters": self.hyperparameters,
                "updates_applied": self.updates_applied}

    def load_state_dict(self, state):
        self.set_weights(state["actor"])
        for name, value in state.get("hyperparameters", {}).items():
            if hasattr(self, name):
                setattr(self, name, value)
        self.updates_applied = state.get("updates_applied", 0)


__all__ = ["ExaAgent", "ExaEnv", "ExaData", "ExaActor", "ExaAlgorithm", "EnvSpaces"]
