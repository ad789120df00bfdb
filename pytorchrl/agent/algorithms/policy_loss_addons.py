"""Policy-loss add-ons: terms that PPO and A2C add to their policy loss.

An add-on is an object with two methods (``PolicyLossAddOn``): ``setup(device)``, called
once by the algorithm that trains with it, on its device, before the first term; and
``compute_loss_term(actor, actor_dist, data)``, a scalar tensor added to the policy loss
of every mini-batch. The algorithm passes ``policy_loss_addons=[...]`` through its
factory, so add-ons travel to Ray workers by pickling: they hold what builds their state
(factories), never live networks, and ``setup`` builds those on each worker.

``AttractionKL`` and ``RepulsionKL`` compare the policy with saved behaviour policies
(actors loaded from checkpoints of earlier runs: ``SavedActorFactory``) by the KL
divergence KL(behaviour || policy) on the observations of the mini-batch.

Example::

    from pytorchrl.agent.algorithms import PPO
    from pytorchrl.agent.algorithms.policy_loss_addons import AttractionKL, SavedActorFactory

    actor_factory = OnPolicyActor.create_factory(obs_space, action_space, "PPO")
    behaviour = SavedActorFactory(actor_factory, "runs/cartpole-ppo/model.state_dict")
    algo_factory, name = PPO.create_factory(
        lr=3e-4, policy_loss_addons=[AttractionKL([behaviour], [1.0], loss_term_weight=0.5)])

The fast paths of PPO and A2C (the numpy update, the fused loss, the CUDA graph update)
compute the library's loss only: with add-ons they step aside (said once) and the
reference torch path computes the loss with the terms.
"""

import abc
import math

import torch
from torch.distributions import Categorical, Independent, Normal, kl_divergence

from pytorchrl import DONE, OBS, RHS
from pytorchrl.agent.actors.distributions import MultiCategorical


class PolicyLossAddOn(abc.ABC):
    """A term added to the policy loss of an on-policy algorithm (PPO, A2C).

    The algorithm trains with its own copy of each add-on (a deep copy, as a worker on
    another process gets one by unpickling): what ``setup`` builds belongs to that copy.
    Its term is reported under ``AddOnLoss/<metric_name>`` (``Algorithm/AddOnLoss/...``
    among the learner's metrics).
    """

    @abc.abstractmethod
    def setup(self, device):
        """Prepare the add-on to compute terms on ``device`` (e.g. build the behaviour
        policies there). Called once by the algorithm, before its first term.

        Parameters
        ----------
        device : torch.device
            The device the algorithm trains on.
        """

    @abc.abstractmethod
    def compute_loss_term(self, actor, actor_dist, data):
        """The term of one mini-batch, added to the policy loss.

        Parameters
        ----------
        actor : Actor
            The algorithm's actor (the policy being trained).
        actor_dist : torch.distributions.Distribution
            The policy at the mini-batch's observations (batch shape (N,), N the samples of
            the mini-batch, time first for the sequences of a recurrent actor), with
            gradients to the actor's parameters.
        data : dict of tensors
            The mini-batch: ``prl.OBS``, ``prl.ACT``, ``prl.DONE``, ``prl.LOGP``, ``prl.ADV``,
            ``prl.RET`` and, for a recurrent actor's sequences, ``prl.RHS`` (``OBS`` and
            ``DONE`` are then (T, B, ...)).

        Returns
        -------
        torch.Tensor
            A 0-d tensor on the algorithm's device (gradients flow to the actor through
            ``actor_dist``, or through ``actor`` itself).
        """

    @property
    def metric_name(self):
        """The name its term is reported under (after ``AddOnLoss/``): the class name."""
        return type(self).__name__


def normalized_weights(weights, count, owner="behavior_weights"):
    """``weights`` as a tuple of floats summing to 1.

    Parameters
    ----------
    weights : sequence of numbers
        Relative weights, one per behaviour; non-negative, at least one positive.
    count : int
        The number of behaviours they must match.
    owner : str
        Words naming them in the messages.

    Raises
    ------
    ValueError
        A length other than ``count``, a negative, non-finite or non-numeric weight, or
        weights that sum to 0; one line naming the cause.
    """
    try:
        values = [float(w) for w in weights]
    except (TypeError, ValueError):
        raise ValueError(f"{owner}: expected a list of numbers, got {weights!r}") from None
    if len(values) != count:
        raise ValueError(f"{owner}: {len(values)} weight(s) for {count} behaviour(s); give one weight per "
                         f"behaviour")
    for i, w in enumerate(values):
        if not math.isfinite(w) or w < 0:
            raise ValueError(f"{owner}: weight {i} is {w}; weights must be finite and >= 0")
    total = sum(values)
    if total <= 0:
        raise ValueError(f"{owner}: the weights sum to 0; give at least one behaviour a positive weight")
    return tuple(w / total for w in values)


def as_distribution(policy):
    """``policy`` as a torch distribution: a distribution as it is; a tensor of actions (a
    deterministic policy) as a unit-variance Normal around them, one event over the last
    dimension (pytorchrl's reading of a deterministic policy)."""
    if isinstance(policy, torch.distributions.Distribution):
        return policy
    return Independent(Normal(policy, torch.ones_like(policy), validate_args=False), 1, validate_args=False)


def floored(dist, eps):
    """``dist`` with its probabilities (categorical) or standard deviations (Normal)
    floored at ``eps``, so that a KL divergence with it stays finite: a probability that
    underflows to 0 would make KL(behaviour || policy) infinite and its gradient NaN.
    Other distributions are returned as they are.

    Parameters
    ----------
    dist : torch.distributions.Distribution
        A ``Categorical``, a ``Normal``, an ``Independent`` of either, or a
        ``MultiCategorical`` (every component floored).
    eps : float
        The floor.
    """
    if isinstance(dist, MultiCategorical):
        return MultiCategorical([floored(c, eps).logits for c in dist.components])
    if isinstance(dist, Independent):
        return Independent(floored(dist.base_dist, eps), dist.reinterpreted_batch_ndims, validate_args=False)
    if isinstance(dist, Categorical):
        return Categorical(probs=dist.probs.clamp_min(eps), validate_args=False)
    if isinstance(dist, Normal):
        return Normal(dist.loc, dist.scale.clamp_min(eps), validate_args=False)
    return dist


def behaviour_distribution(behavior, data):
    """The distribution of ``behavior`` (an actor with ``action_distribution``) at the
    observations of the mini-batch ``data``, computed without gradients.

    Sequences of a recurrent policy (``data`` with ``prl.RHS``): a recurrent behaviour
    reads them as the policy's evaluation does, from the batch's ``RHS`` and ``DONE`` (its
    state must have the policy's size: the behaviours are saved runs of the same actor), a
    feed-forward one reads the observations one by one, in the same (time-first) order.
    """
    obs = data[OBS]
    kwargs = {}
    if RHS in data:
        if getattr(behavior, "is_recurrent", False):
            kwargs = {"rhs": data[RHS], "done": data[DONE]}
        else:
            obs = obs.reshape(-1, *obs.shape[2:])
    with torch.no_grad():
        return as_distribution(behavior.action_distribution(obs, **kwargs))


class SavedActorFactory:
    """A picklable ``factory(device) -> actor``: an actor built by ``actor_factory`` with
    the weights of a saved run, for ``behavior_factories``.

    The weights are read once, here (the file is read without executing code from it), and
    travel with the factory: a worker on another machine needs no copy of the file.

    Parameters
    ----------
    actor_factory : callable
        ``actor_factory(device) -> actor`` building the network the weights belong to (the
        saved run's actor configuration, e.g. ``OnPolicyActor.create_factory(...)``).
    path : str
        A run's ``model.state_dict`` or ``checkpoint.pt``.

    Raises
    ------
    ValueError
        The file cannot be read or holds no actor weights (one line naming the file).
    """

    def __init__(self, actor_factory, path):
        from pytorchrl.agent.actors.base import read_actor_weights
        self.actor_factory = actor_factory
        self.path = str(path)
        self.weights = read_actor_weights(self.path)

    def __call__(self, device):
        actor = self.actor_factory(device)
        actor.load_saved_weights(self.weights, self.path)
        return actor

    def __repr__(self):
        return f"SavedActorFactory({self.actor_factory!r}, {self.path!r})"


class BehaviourKL(PolicyLossAddOn):
    """Base of the add-ons that compare the policy with saved behaviour policies by
    KL(behaviour || policy) (``AttractionKL``, ``RepulsionKL``).

    Parameters
    ----------
    behavior_factories : list of callables
        ``factory(device) -> actor`` building each behaviour policy: an actor with
        ``action_distribution`` (``OnPolicyActor``) on the algorithm's observation and
        action spaces, e.g. ``SavedActorFactory`` (an actor factory and a saved run's
        weights). Picklable (plain pickle, or cloudpickle on Ray) where the algorithm
        trains on Ray workers.
    behavior_weights : list of float
        Relative weight of each behaviour: non-negative, one per factory, normalised to sum 1.
    loss_term_weight : float
        Weight of the term in the policy loss (>= 0).
    eps : float
        Floor of the action probabilities of categorical policies (and of the standard
        deviations of Gaussian ones) in the KL: keeps it finite (at most log(1 / eps) for a
        categorical policy) when a probability underflows to 0. In (0, 0.5].
    """

    def __init__(self, behavior_factories, behavior_weights, loss_term_weight=1.0, eps=1e-8):
        name = type(self).__name__
        factories = list(behavior_factories) if isinstance(behavior_factories, (list, tuple)) else None
        if not factories or not all(callable(f) for f in factories):
            raise ValueError(f"{name} behavior_factories: expected a non-empty list of factory(device) -> actor, "
                             f"got {behavior_factories!r}")
        self.behavior_factories = factories
        self.behavior_weights = normalized_weights(behavior_weights, len(factories), f"{name} behavior_weights")
        self.loss_term_weight = float(loss_term_weight)
        if not math.isfinite(self.loss_term_weight) or self.loss_term_weight < 0:
            raise ValueError(f"{name} loss_term_weight must be finite and >= 0, got {loss_term_weight!r}")
        self.eps = float(eps)
        if not 0.0 < self.eps <= 0.5:
            raise ValueError(f"{name} eps must be in (0, 0.5], got {eps!r}")
        self.behaviors = None
        self.device = None

    def __getstate__(self):
        # Networks never travel: a copy (another worker) builds its own in ``setup``.
        return {**self.__dict__, "behaviors": None, "device": None}

    def setup(self, device):
        """Build every behaviour on ``device``, without gradients."""
        self.device = torch.device(device)
        behaviors = []
        for factory in self.behavior_factories:
            behavior = factory(self.device)
            if isinstance(behavior, torch.nn.Module):
                behavior.eval().requires_grad_(False)
            behaviors.append(behavior)
        self.behaviors = behaviors

    def divergences(self, actor_dist, data):
        """KL(behaviour_i || policy) of every sample of ``data``, per behaviour: a list of
        tensors (N,) with gradients to the policy (arguments as ``compute_loss_term``)."""
        if self.behaviors is None:
            raise RuntimeError(f"{type(self).__name__}: setup(device) builds the behaviours; call it first")
        policy = floored(as_distribution(actor_dist), self.eps)
        return [kl_divergence(floored(behaviour_distribution(b, data), self.eps), policy)
                for b in self.behaviors]

    def weighted(self, per_behaviour):
        """``sum_i behavior_weights[i] * per_behaviour[i]`` (0-d tensors)."""
        return sum(w * term for w, term in zip(self.behavior_weights, per_behaviour))


class AttractionKL(BehaviourKL):
    """Pull the policy towards saved behaviours: the term is

        loss_term_weight * sum_i w_i * mean_s KL(behaviour_i(s) || policy(s))

    over the observations s of the mini-batch (w_i the normalised ``behavior_weights``).
    It is 0 where the policy is every behaviour, and minimising it moves the policy's
    probability mass onto the behaviours' actions (the forward KL: the policy covers every
    action a behaviour takes). Parameters are ``BehaviourKL``'s.

    pytorchrl's own AttractionKL returns ``-w * min_i(KL_i - log w_i)``, which the
    algorithms add to a loss they minimise: that pushes the policy away. This one pulls, as
    its name says.
    """

    def compute_loss_term(self, actor, actor_dist, data):
        """``loss_term_weight`` times the weighted mean KL (arguments as in ``PolicyLossAddOn``)."""
        return self.loss_term_weight * self.weighted([kl.mean() for kl in self.divergences(actor_dist, data)])


class RepulsionKL(BehaviourKL):
    """Push the policy away from saved behaviours, boundedly: the term is

        -loss_term_weight * sum_i w_i * mean_s (1 - exp(-KL(behaviour_i(s) || policy(s))))

    Subtracting the KL itself would let the optimizer lower the loss without limit by
    driving to 0 the probability of the behaviours' actions: the term would outgrow the
    reinforcement-learning loss and the logits diverge. ``1 - exp(-KL)`` is the KL to first
    order near a behaviour (where the push matters) and saturates at 1 far from it: the
    term stays in [-loss_term_weight, 0] and its gradient, ``exp(-KL)`` times the KL's,
    fades once the policy is away, leaving the return in charge. Per observation, so a few
    states already far away cannot hide the others. Parameters are ``BehaviourKL``'s.
    """

    def compute_loss_term(self, actor, actor_dist, data):
        """Minus ``loss_term_weight`` times the weighted mean of ``1 - exp(-KL)`` (arguments
        as in ``PolicyLossAddOn``)."""
        similarity = [(-torch.expm1(-kl)).mean() for kl in self.divergences(actor_dist, data)]
        return -self.loss_term_weight * self.weighted(similarity)


#: Add-ons by name, for configuration files (``algorithm.policy_loss_addons``).
POLICY_LOSS_ADDONS = {cls.__name__: cls for cls in (AttractionKL, RepulsionKL)}

__all__ = ["PolicyLossAddOn", "BehaviourKL", "AttractionKL", "RepulsionKL", "SavedActorFactory", "POLICY_LOSS_ADDONS",
           "normalized_weights", "as_distribution", "floored", "behaviour_distribution"]
