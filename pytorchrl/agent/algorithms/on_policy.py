"""Shared machinery of the actor-critic on-policy algorithms (PPO, A2C)."""

import copy

from pytorchrl import ACT, ADV, DONE, LOGP, OBS, RET, RHS, VAL
from pytorchrl.agent import accel
from pytorchrl.agent.accel.cuda_graph import graph_accelerator
from pytorchrl.agent.losses.actor_critic import normalize_advantages, reference_actor_critic
from pytorchrl.agent.accel.on_policy import FusedCategoricalLoss, NumpyActorCriticUpdate
from pytorchrl.agent.accel.xp import TORCH
from pytorchrl.agent.actors.on_policy_actor import OnPolicyActor
from pytorchrl.agent.algorithms.base import Algorithm


def sequence_args(batch):
    """Keyword arguments that make a recurrent actor read ``batch`` as sequences (its
    initial states and episode ends); none for a batch of single steps."""
    if RHS not in batch:
        return {}
    return {"rhs": batch[RHS], "done": batch[DONE]}


def addons_refused(algo):
    """Why no fast path computes ``algo``'s loss: the policy-loss add-ons it has (arbitrary
    torch code, which only the reference path runs), or None without any."""
    addons = getattr(algo, "policy_loss_addons", None)
    if not addons:
        return None
    names = ", ".join(type(a).__name__ for a in addons)
    return f"policy-loss add-ons ({names}) run on the reference torch path only"


def actor_critic_accelerators():
    """The fast paths an on-policy algorithm declares (``accel.accelerated``): the numpy
    update of categorical MLP actor-critics on the CPU and the fused torch loss of the
    other categorical actors. Both compute ``policy_objective`` with the value and entropy
    terms of ``loss_tensors``, from ``OnPolicyActor``'s networks; the numpy update also
    reports what ``host_stats`` adds (nothing). Neither serves an algorithm with
    policy-loss add-ons (``addons_refused``)."""
    reproduces = ("compute_loss", "loss_tensors", "policy_loss", "policy_objective")
    return (accel.Accelerator("update", "numpy update", NumpyActorCriticUpdate.build, reproduces + ("host_stats",),
                              actor_class=OnPolicyActor,
                              actor_reproduces=("logits_and_value", "evaluate_actions", "_features", "normalize"),
                              fallback="updating in torch", refuses=addons_refused),
            accel.Accelerator("loss", "fused loss", FusedCategoricalLoss.build, reproduces,
                              actor_class=OnPolicyActor, actor_reproduces=("logits_and_value", "evaluate_actions"),
                              fallback="computing the loss operator by operator", refuses=addons_refused))


def checked_addons(addons, owner):
    """The policy-loss add-ons an algorithm trains with: a list of deep copies of
    ``addons`` (one add-on or a list or tuple of them), each checked to have ``setup`` and
    ``compute_loss_term`` (``PolicyLossAddOn``'s methods).

    Parameters
    ----------
    addons : PolicyLossAddOn, list or tuple
        What the algorithm was given.
    owner : str
        The algorithm's name, for the messages.

    Raises
    ------
    ValueError
        Anything else, one line naming it.
    """
    if hasattr(addons, "compute_loss_term"):
        addons = [addons]
    if not isinstance(addons, (list, tuple)):
        raise ValueError(f"{owner} policy_loss_addons: expected a list of policy-loss add-ons, got {addons!r}")
    for addon in addons:
        if not (callable(getattr(addon, "setup", None)) and callable(getattr(addon, "compute_loss_term", None))):
            raise ValueError(f"{owner} policy_loss_addons: {addon!r} is not a policy-loss add-on (an object with "
                             f"setup(device) and compute_loss_term(actor, actor_dist, data): PolicyLossAddOn)")
    # Each algorithm owns what its add-ons build, as on another process: algorithms of one
    # process (a collector's and a learner's) would otherwise share one set of behaviours.
    return [copy.deepcopy(addon) for addon in addons]


def addon_metric_names(addons):
    """The metric of each add-on's term: ``AddOnLoss/<metric_name>``, numbered from the
    second of a name on (``AddOnLoss/AttractionKL``, ``AddOnLoss/AttractionKL_2``)."""
    names, seen = [], {}
    for addon in addons:
        name = getattr(addon, "metric_name", type(addon).__name__)
        seen[name] = seen.get(name, 0) + 1
        names.append(f"AddOnLoss/{name}" + (f"_{seen[name]}" if seen[name] > 1 else ""))
    return names


@accel.accelerated(graph_accelerator(refuses=addons_refused))
class OnPolicyAlgorithm(Algorithm):
    """Actor-critic algorithm trained on advantage-weighted log-probabilities.

    Subclasses define ``policy_objective`` (the policy loss, written once over an array
    namespace: its value and its gradient with respect to the log-probabilities); this
    class adds the value and entropy terms, builds the optimizer and exposes the
    hyperparameters every on-policy algorithm shares. Subclasses declaring
    ``actor_critic_accelerators`` (PPO, A2C) get the numpy update and the fused loss while
    they override none of ``compute_loss``, ``loss_tensors``, ``policy_loss`` and
    ``policy_objective``; on a CUDA device the update is captured as CUDA graphs while
    ``compute_loss`` is this class's (``accel.cuda_graph``).
    Collectors store the log-probability and value of every step (``acting_extras``) and
    bootstrap rollouts with the value of their last observation (``bootstrap``).

    Parameters
    ----------
    device, actor, envs
        As in ``Algorithm``.
    lr : float
        Learning rate of the Adam optimizer.
    eps : float
        Adam's epsilon.
    gamma : float
        Discount factor.
    num_epochs : int
        Passes over each collected rollout.
    num_mini_batch : int
        Mini-batches per epoch (ignored when ``mini_batch_size`` is set).
    mini_batch_size : int or None
        Samples per mini-batch; None splits the rollout into ``num_mini_batch`` parts.
    entropy_coef : float
        Weight of the entropy bonus.
    value_loss_coef : float
        Weight of the value loss.
    max_grad_norm : float
        Gradients are clipped to this global norm (0 or None disables clipping).
    normalize_advantages : bool
        Standardise advantages within each mini-batch.
    test_every : int
        Evaluate deterministically on the test envs every this many collection rounds.
    num_test_episodes : int
        Episodes per evaluation.
    numpy_update : bool
        Compute updates of MLP actors with categorical policies on the CPU in numpy (same
        arithmetic as torch, about three times faster for small networks); other actors,
        policies and devices always use torch. Fixed at construction.
    policy_loss_addons : list
        Terms added to the policy loss (``policy_loss_addons.PolicyLossAddOn``: e.g.
        ``AttractionKL``, ``RepulsionKL``), one add-on or a list; the algorithm trains with
        deep copies of them, set up on its device before its first update, and reports
        each term as ``AddOnLoss/<name>``. With add-ons the loss is computed on the
        reference torch path (the fast paths step aside, said once). Fixed at construction.
    """

    fixed_hyperparameters = ("numpy_update", "policy_loss_addons")
    acting_extras = (LOGP, VAL)
    derived_attributes = Algorithm.derived_attributes + ("_addons_ready",)

    def __init__(self, device, actor, envs=None, lr=3e-4, eps=1e-5, gamma=0.99, num_epochs=4,
                 num_mini_batch=1, mini_batch_size=None, entropy_coef=0.0, value_loss_coef=0.5,
                 max_grad_norm=0.5, normalize_advantages=True, test_every=10, num_test_episodes=10,
                 numpy_update=True, policy_loss_addons=()):
        super().__init__(device, actor, envs)
        self.policy_loss_addons = checked_addons(policy_loss_addons, self.name)
        if self.policy_loss_addons and not callable(getattr(actor, "evaluate_actions_and_distribution", None)):
            raise ValueError(f"{self.name} policy_loss_addons: the add-ons read the policy as a distribution, which "
                             f"{type(actor).__name__} does not give (evaluate_actions_and_distribution: "
                             f"OnPolicyActor's)")
        self.lr = float(lr)
        self.eps = float(eps)
        self.gamma = float(gamma)
        self.num_epochs = int(num_epochs)
        self.num_mini_batch = int(num_mini_batch)
        self.mini_batch_size = None if mini_batch_size is None else int(mini_batch_size)
        self.entropy_coef = float(entropy_coef)
        self.value_loss_coef = float(value_loss_coef)
        self.max_grad_norm = None if max_grad_norm is None else float(max_grad_norm)
        self.normalize_advantages = bool(normalize_advantages)
        self.test_every = int(test_every)
        self.num_test_episodes = int(num_test_episodes)
        self.numpy_update = bool(numpy_update)
        self.check_hyperparameters()

    def bootstrap(self, obs, state=None):
        """Value estimates (N, 1) of ``obs`` (numpy), through the actor's acting program
        (``state``: recurrent state of the rows, for recurrent actors)."""
        return self.actor.values(obs, state)

    def check_hyperparameters(self):
        for name in ("num_epochs", "num_mini_batch", "test_every", "num_test_episodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{self.name} hyperparameter {name} must be >= 1, got {getattr(self, name)}")
        for name in ("mini_batch_size", "max_grad_norm"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise TypeError(f"{self.name} hyperparameter {name} must be a number or None, got {value!r}")
        if self.mini_batch_size is not None and self.mini_batch_size < 1:
            raise ValueError(f"{self.name} hyperparameter mini_batch_size must be >= 1, got {self.mini_batch_size}")
        # (A2C's ``lr`` is None while its two rates differ: they are checked themselves.)
        for name in ("lr", "lr_v", "lr_pi", "gamma", "entropy_coef", "value_loss_coef", "clip_param", "kl_coef"):
            value = getattr(self, name, 0.0)
            if value is not None and value < 0:
                raise ValueError(f"{self.name} hyperparameter {name} must be >= 0, got {value}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"{self.name} hyperparameter gamma must be in [0, 1], got {self.gamma}")

    def policy_objective(self, xp, logp, old_logp, adv, grad=False):
        """The policy loss of a mini-batch, written once for every path.

        Parameters
        ----------
        xp : namespace
            ``accel.xp.TORCH`` (the reference path under autograd, the fused loss) or
            ``accel.xp.NUMPY`` (the numpy update).
        logp, old_logp, adv : array (N, 1)
            Log-probabilities of the actions under the current and the behaviour policy,
            and the advantages.
        grad : bool
            Also return the gradient with respect to ``logp``.

        Returns
        -------
        (loss, stats, g_logp): the 0-d loss, a dict of 0-d statistics (outside any
        gradient) and d loss / d logp (N, 1) or None.
        """
        raise NotImplementedError

    def policy_loss(self, logp, old_logp, adv):
        """Return (policy loss, info dict of 0-d tensors) for one mini-batch: the reference
        torch path of ``policy_objective``."""
        loss, stats, _ = self.policy_objective(TORCH, logp, old_logp, adv)
        return loss, stats

    #: Range of PPO's value clipping (None: the value loss is not clipped).
    value_clip = None
    #: The factor of the value loss's mean squared error (``losses.actor_critic.value_loss``).
    value_loss_scale = 0.5

    def loss_tensors(self, batch, fused=True):
        """Return (loss, info dict of 0-d tensors) for one mini-batch (see
        ``Algorithm.loss_tensors``).

        Parameters
        ----------
        batch : dict of tensors
            OBS, ACT, LOGP, ADV, RET of the mini-batch. A sequence mini-batch (recurrent
            actors) also holds RHS, the state (B, ...) before its first step; its OBS and
            DONE are then (T, B, ...) and the other entries (T * B, ...), time first.
        fused : bool
            Use the fused loss of categorical policies when it applies (one autograd node:
            the same values and gradients, fewer operators); False always takes the
            reference autograd path. With policy-loss add-ons the reference path runs
            (it adds their terms, ``addon_terms``, to the policy loss and its statistics).
        """
        adv = batch[ADV]
        if self.normalize_advantages:
            adv = normalize_advantages(TORCH, adv)
        fused_loss = self.fused_loss if fused else None
        if fused_loss is not None:
            logits, value = self.actor.logits_and_value(batch[OBS], **sequence_args(batch))
            return fused_loss(logits, value, batch, adv)
        args = (batch[OBS], batch[ACT])
        kwargs = dict(entropy_grad=self.entropy_coef != 0.0, **sequence_args(batch))
        policy_loss = self.policy_loss
        if self.policy_loss_addons:
            logp, entropy, value, dist = self.actor.evaluate_actions_and_distribution(*args, **kwargs)
            policy_loss = self._with_addon_terms(policy_loss, dist, batch)
        else:
            logp, entropy, value = self.actor.evaluate_actions(*args, **kwargs)
        return reference_actor_critic(logp, entropy, value, batch[LOGP], adv, batch[RET], batch.get(VAL),
                                      policy_loss, self.value_clip, self.value_loss_coef, self.entropy_coef,
                                      self.value_loss_scale)

    def addon_terms(self, actor_dist, batch):
        """The term of every policy-loss add-on on ``batch``, by metric name
        (``addon_metric_names``); the add-ons are set up on this algorithm's device first
        if they are not yet.

        Parameters
        ----------
        actor_dist : torch.distributions.Distribution
            The policy at the batch's observations (``OnPolicyActor.action_distribution``).
        batch : dict of tensors
            The mini-batch.
        """
        if not self.__dict__.get("_addons_ready"):
            for addon in self.policy_loss_addons:
                addon.setup(self.device)
            self._addons_ready = True
        return {name: addon.compute_loss_term(self.actor, actor_dist, batch)
                for name, addon in zip(addon_metric_names(self.policy_loss_addons), self.policy_loss_addons)}

    def _with_addon_terms(self, policy_loss, actor_dist, batch):
        """``policy_loss`` (``policy_loss(logp, old_logp, adv) -> (loss, stats)``) plus the
        add-ons' terms of ``batch``, which join its statistics."""
        terms = self.addon_terms(actor_dist, batch)

        def with_terms(logp, old_logp, adv):
            loss, stats = policy_loss(logp, old_logp, adv)
            return loss + sum(terms.values()), {**stats, **terms}
        return with_terms

    def state_dict(self):
        """``Algorithm.state_dict`` without the policy-loss add-ons among the
        hyperparameters: objects, not the plain values a checkpoint holds, and fixed once
        built (a resumed run trains with those of its own configuration)."""
        state = super().state_dict()
        state["hyperparameters"] = {k: v for k, v in state["hyperparameters"].items() if k != "policy_loss_addons"}
        return state

    def compute_loss(self, batch, fused=True):
        """Return (loss, info dict of floats) for one mini-batch: ``loss_tensors(batch,
        fused)`` with its info read back to the host (``Algorithm.compute_loss``)."""
        loss, info = self.loss_tensors(batch, fused)
        return loss, self.info_to_host(info)

    @property
    def fused_loss(self):
        """The fused loss (``accel.on_policy.FusedCategoricalLoss``) when it applies to this
        algorithm and actor, else None (said once). Chosen on first use."""
        return self._derived("_fused_loss", lambda: accel.build(self, "loss"))
