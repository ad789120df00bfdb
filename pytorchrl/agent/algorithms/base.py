"""Algorithm base class: losses, gradients, optimizer and live hyperparameters."""

import inspect
import math
from abc import ABC

import numpy as np
import torch

from pytorchrl.agent import accel
from pytorchrl.agent.accel.adam import NumpyAdam
from pytorchrl.agent.accel.cuda_graph import graph_accelerator
from pytorchrl.agent.accel.private_torch import all_finite, foreach_mul_, foreach_norms
from pytorchrl.agent.factory import ComponentFactory, documented_kind, documented_parameters
from pytorchrl.gc_pause import gc_paused


@accel.accelerated(graph_accelerator())
class Algorithm(ABC):
    """Base class of every algorithm.

    An algorithm turns mini-batches into gradients (``compute_gradients``) and gradients
    into a new version of the weights (``apply_gradients``). What it needs from the rest of
    the library is declared, never assumed by the generic code:

    - ``acting_extras``: the per-step quantities collectors must store besides
      observations, actions, rewards and episode ends (log-probability and value for PPO,
      nothing for DQN);
    - ``bootstrap``: what a rollout needs at its end (values of the last observations for
      on-policy returns; nothing for replay-based algorithms);
    - ``parameter_groups``: the parameters each named optimizer trains (SAC has three);
      ``group_lr`` names the hyperparameter holding each group's learning rate;
    - ``learner_modules``: networks only the learner keeps (target networks), saved and
      sent to other gradient workers with the actor's weights; ``collector_modules`` names
      those of them that collectors need too (they then travel with the acting weights);
    - ``preprocess_rollout``: what a collector computes on a finished rollout before
      sending it (nothing by default; DDQN's Bellman targets with ``targets_on_collector``),
      and ``preprocessed_keys``, the data keys it adds (storages keep them);
    - ``server_calls``: the methods through which the collector side computes with
      weights (``collector_call``), which a collector acting through an inference server
      runs on the server (SEED: the collector holds no weights);
    - ``collector_state``: what a collector's algorithm accumulates over the run (RND's
      observation statistics), saved with checkpoints and given back to the collectors of
      a resumed run.

    Hyperparameters are plain attributes, listed in ``self.hyperparameters``;
    ``update_algorithm_parameter`` changes them while training (optimizer settings such as
    learning rates and Adam's eps included).

    An algorithm's loss is ``loss_tensors``: tensors only, never read back to the host, so
    that on a CUDA device the whole gradient computation can be captured and replayed as
    one CUDA graph (``accel.cuda_graph``); ``compute_loss`` adds the one read-back of its
    statistics. A subclass may override either (``compute_loss`` then takes the eager path).

    Parameters
    ----------
    device : torch.device or str
        Device of the actor.
    actor : Actor
        The actor whose parameters are trained.
    envs : TorchVecEnv or None
        Environments (only their spaces may be used).
    """

    #: Name under which the algorithm is known to actors, configs and logs.
    name = None
    #: Whether the algorithm learns from data produced by its current policy only.
    on_policy = True
    #: Keys of ``Actor.act``'s extras that collectors store with every step.
    acting_extras = ()
    #: Hyperparameter holding the learning rate of each parameter group.
    group_lr = {"actor": "lr"}
    #: Hyperparameters fixed at construction: a hot-swap may only repeat their value.
    fixed_hyperparameters = ()
    #: Whether ``max_grad_norm`` bounds the norm of every group's gradients taken together
    #: (one clip over all parameters) instead of each group's on its own.
    clip_groups_together = False

    def __init__(self, device, actor, envs=None):
        self.device = torch.device(device)
        self.actor = actor
        self.envs = envs
        self.updates_applied = 0   # optimizer steps taken (the weight version of one learner)
        self.skipped_updates = 0   # updates refused for non-finite gradients (see apply_gradients)
        self._optimizers = None
        self._params = None
        self._groups = None

    #: Attributes derived from the others on first use (fast paths, which hold numpy views
    #: of the parameters or graphs captured on them): a copy (deepcopy, pickle) builds its own.
    derived_attributes = ("_update_engine", "_fused_loss", "_graph_update")

    def __getstate__(self):
        # A route leads to a server of this process (or to its handle's client): a copy
        # computes with its own weights.
        return {k: v for k, v in self.__dict__.items()
                if k not in self.derived_attributes and k != "_collector_route"}

    # ------------------------------------------------------------ parameters
    def parameter_groups(self):
        """Dict group name -> list of parameters, one optimizer per group (in order)."""
        return {"actor": list(self.actor.parameters())}

    @property
    def learner_modules(self):
        """Dict name -> nn.Module of networks the learner keeps besides the actor (targets)."""
        return {}

    @property
    def collector_modules(self):
        """Names of ``learner_modules`` that collectors need for ``preprocess_rollout``: sent
        with every weight broadcast (``get_acting_weights``). None by default."""
        return ()

    def trainable_parameters(self):
        """Every parameter that gets a gradient, group after group: the order of the
        gradient lists that ``compute_gradients`` returns and ``apply_gradients`` takes."""
        if self._params is None:
            self._params = [p for params in self._parameter_groups().values() for p in params]
        return self._params

    def _parameter_groups(self):
        """``parameter_groups()``, computed once (it runs at every update)."""
        if self._groups is None:
            self._groups = self.parameter_groups()
        return self._groups

    # The optimizers are built on first use: collection workers act but never train, and
    # the first torch.optim optimizer of a process costs seconds (it imports torch._dynamo).
    @property
    def optimizers(self):
        """Dict group name -> optimizer (built by ``make_optimizer`` on first use)."""
        if self._optimizers is None:
            self._optimizers = {name: self.make_optimizer(name, params)
                                for name, params in self.parameter_groups().items()}
        return self._optimizers

    @property
    def optimizer(self):
        """The optimizer of an algorithm with one parameter group (pytorchrl's attribute)."""
        opts = self.optimizers
        if len(opts) != 1:
            raise AttributeError(f"{self.name} has several optimizers: {list(opts)}; use .optimizers")
        return next(iter(opts.values()))

    def make_optimizer(self, group, params):
        """Build the optimizer of parameter group ``group``: Adam with the group's learning
        rate and, when the algorithm has one, its ``eps`` (``NumpyAdam``, the same
        arithmetic without torch's dispatch, when the numpy update runs)."""
        if self.update_engine is not None:
            return NumpyAdam(params, self, lr_attr=self.group_lr[group])
        return make_adam(params, lr=getattr(self, self.group_lr[group]), eps=getattr(self, "eps", 1e-8))

    def _sync_optimizers(self):
        """Write the current optimizer hyperparameters (learning rates, eps) into the
        optimizers, so that a hot-swap reaches them."""
        if self._optimizers is None:
            return
        for name, opt in self._optimizers.items():
            for group in opt.param_groups:
                group["lr"] = float(getattr(self, self.group_lr[name]))
                if hasattr(self, "eps") and "eps" in group:
                    group["eps"] = float(self.eps)

    def _derived(self, attribute, build):
        """The fast path kept under ``attribute`` (one of ``derived_attributes``), built by
        ``build()`` on first use; None when it does not apply (decided once).

        Parameters
        ----------
        attribute : str
            Where it is kept.
        build : callable
            ``build() -> fast path or None``.
        """
        value = self.__dict__.get(attribute)
        if value is None:
            value = build() or False
            setattr(self, attribute, value)
        return value or None

    @property
    def update_engine(self):
        """The fast update of this algorithm (computes gradients into ``.grad``), or None.

        Chosen once, on first use, by ``build_update_engine``.
        """
        return self._derived("_update_engine", self.build_update_engine)

    @property
    def graph_update(self):
        """The update captured as CUDA graphs (``accel.cuda_graph.CudaGraphUpdate``) when
        it applies to this algorithm (a CUDA device, a feed-forward actor, the library's
        ``compute_loss``), else None (said once). Used where ``update_engine`` is None;
        chosen on first use."""
        return self._derived("_graph_update", lambda: accel.build(self, "graph"))

    def build_update_engine(self):
        """A callable ``engine(batch) -> info`` filling every trainable parameter's ``.grad``
        exactly as ``compute_loss`` + backward would, or None (torch path): the "update"
        fast path the class declares (``pytorchrl.agent.accel``) when ``numpy_update`` is
        set and it applies (else said once)."""
        if not getattr(self, "numpy_update", False):
            return None
        return accel.build(self, "update")

    # ----------------------------------------------------------------- factories
    @classmethod
    def hyperparameter_names(cls):
        """Names accepted by ``create_factory`` (the constructor's keyword arguments)."""
        # Read once per class: a schedule checks every hot swap against these names, and
        # inspect.signature per check cost ~4% of PPO CartPole's training time.
        names = cls.__dict__.get("_hyperparameter_names")
        if names is None:
            params = inspect.signature(cls.__init__).parameters
            names = tuple(n for n in params if n not in ("self", "device", "actor", "envs"))
            cls._hyperparameter_names = names
        return list(names)

    @classmethod
    def create_factory(cls, **hyperparameters):
        """Return ``(factory, name)``: a picklable ``factory(device, actor, envs)`` and the algorithm name.

        Every keyword argument is a hyperparameter of the algorithm (see the class
        docstring); an unknown name raises ValueError listing the valid ones.
        """
        valid = cls.hyperparameter_names()
        unknown = [k for k in hyperparameters if k not in valid]
        if unknown:
            raise ValueError(f"unknown {cls.name} hyperparameter(s) {unknown}; valid: {valid}")
        return ComponentFactory(cls, **hyperparameters), cls.name

    # ------------------------------------------------------------ hyperparameters
    @property
    def hyperparameters(self):
        """Dict of the current value of every hyperparameter."""
        return {n: getattr(self, n) for n in self.hyperparameter_names()}

    def check_update(self, parameter_name, new_parameter_value):
        """What ``update_algorithm_parameter(parameter_name, new_parameter_value)`` would set
        (the value converted to the parameter's type), or the ValueError/TypeError it would
        raise: name, type, range and fixed hyperparameters. Nothing changes.

        Parameters
        ----------
        parameter_name : str
            One of ``self.hyperparameters``.
        new_parameter_value : object
            The value asked for.
        """
        value = check_parameter(self.hyperparameters, parameter_name, new_parameter_value,
                                f"{self.name} hyperparameter", owner=self)
        old = getattr(self, parameter_name)
        if parameter_name in self.fixed_hyperparameters:
            if value != old:
                raise ValueError(f"{self.name} hyperparameter {parameter_name!r} is fixed once the "
                                 f"algorithm is built (it is {old!r})")
            return value
        # The ranges are checked on the algorithm as it would be, then every hyperparameter
        # held as an attribute is put back (one set through a property, A2C's ``lr``, may
        # change several).
        names = set(self.hyperparameter_names())
        saved = {n: v for n, v in self.__dict__.items() if n in names}
        setattr(self, parameter_name, value)
        try:
            self.check_hyperparameters()
        finally:
            self.__dict__.update(saved)
        return value

    def update_algorithm_parameter(self, parameter_name, new_parameter_value):
        """Set hyperparameter ``parameter_name`` to ``new_parameter_value`` (refused, with
        nothing changed, as ``check_update`` says).

        Parameters
        ----------
        parameter_name : str
            One of ``self.hyperparameters``; anything else raises ValueError listing them.
        new_parameter_value : object
            New value; numbers must stay numbers, booleans booleans.
        """
        value = self.check_update(parameter_name, new_parameter_value)
        if parameter_name in self.fixed_hyperparameters:
            return
        setattr(self, parameter_name, value)
        self._sync_optimizers()

    def check_hyperparameters(self):
        """Raise ValueError/TypeError if a hyperparameter holds a value the algorithm cannot use.

        Called by the constructor and by every hot-swap, so that a change refused at
        construction is refused while training too.
        """

    # ------------------------------------------------------------------- acting
    #: Data keys that ``preprocess_rollout`` adds to a rollout (storages keep them).
    preprocessed_keys = ()

    def preprocess_rollout(self, data):
        """Collector-side pre-processing of a finished rollout, before it is sent.

        Runs on the collector with the weights it acted with (the actor's and those of
        ``collector_modules``); may add per-transition arrays under ``preprocessed_keys``.
        The default changes nothing.

        Parameters
        ----------
        data : dict of tensors
            The rollout as the storage hands it over (``Storage.get_data``).

        Returns
        -------
        dict of tensors
            The rollout to send.
        """
        return data

    #: Methods of this algorithm that its collector-side hooks (``preprocess_rollout``,
    #: bootstraps) compute with weights, through ``collector_call``: numpy arrays (or None)
    #: in, a numpy array out, no per-collector state read or changed. A collector acting
    #: through an inference server runs them on the server, with its current weights.
    server_calls = ()

    def route_collector_calls(self, program):
        """Run ``collector_call`` through ``program`` instead of this algorithm's weights.

        Parameters
        ----------
        program : object or None
            Anything with ``call_algorithm(name, *args)`` (``ServerActing``: the collector's
            inference server). None: back to this algorithm's own weights.
        """
        self._collector_route = program

    def collector_call(self, name, *args):
        """``self.<name>(*args)``, or the same call run by the program set by
        ``route_collector_calls`` (the inference server's copy of this algorithm).

        Parameters
        ----------
        name : str
            One of ``server_calls``.
        *args : np.ndarray or None
            The method's arguments.

        Raises
        ------
        ValueError
            ``name`` is not one of ``server_calls``.
        """
        if name not in self.server_calls:
            raise ValueError(f"{self.name}.collector_call: {name!r} is not one of its server_calls "
                             f"{list(self.server_calls)}")
        route = getattr(self, "_collector_route", None)
        if route is None:
            return getattr(self, name)(*args)
        return route.call_algorithm(name, *args)

    def warm_up(self, envs):
        """What a collector does with its training environments before its first rollout
        (RND_PPO: observation statistics from random steps); nothing by default.

        Parameters
        ----------
        envs : TorchVecEnv
            The collector's training environments.

        Returns
        -------
        bool
            Whether ``envs`` were stepped (the collector then resets them).
        """
        return False

    def collector_state(self):
        """What a collector's algorithm accumulates over the run, in plain types (numbers,
        numpy arrays, lists, dicts), for checkpoints; None (the default): nothing."""
        return None

    def load_collector_state(self, state):
        """Restore a ``collector_state`` (a resumed run's collectors).

        Parameters
        ----------
        state : dict or None
            What ``collector_state`` returned.

        Raises
        ------
        ValueError
            ``state`` is not None: this algorithm keeps no collector state (the checkpoint
            was saved by another algorithm).
        """
        if state is not None:
            raise ValueError(f"{self.name} keeps no collector state; got one with keys {sorted(state)}")

    def bootstrap(self, obs, state=None):
        """What a rollout needs at its end, computed from observations (N, ...) numpy.

        Returns the values (N, 1) used to bootstrap returns, or None when the algorithm
        bootstraps at training time (replay-based algorithms). Called by on-policy
        storages for the observation after a rollout's last step and for the final
        observations of truncated episodes.
        """
        return None

    # ---------------------------------------------------------------- learning
    def loss_tensors(self, batch):
        """Return (loss, info) for one mini-batch, without reading anything back to the host.

        ``loss`` is a scalar tensor (one parameter group) or a dict group name -> scalar
        tensor, each loss back-propagated into its own group only. ``info`` maps each metric
        to a tensor outside the autograd graph: 0-d for a statistic, one value per sample
        for a per-sample array (``prl.TD_ERROR``, for prioritized replay).

        Nothing here may synchronise with the device (no ``float(tensor)``, ``.item()``,
        ``.tolist()``, ``.cpu()``, no Python branch on a tensor's value), and the operations
        run may depend only on the shapes of the batch, the hyperparameters and
        ``update_variant()``: on a CUDA device the update is captured once and replayed
        (``accel.cuda_graph``). Statistics the host knows without the batch come from
        ``host_stats``.

        Parameters
        ----------
        batch : dict of tensors
            One mini-batch produced by a storage, on this algorithm's device.
        """
        raise NotImplementedError(f"{type(self).__name__} defines neither loss_tensors nor compute_loss")

    def host_stats(self):
        """Statistics of the next update known on the host without its mini-batch (Python
        numbers, e.g. DDQN's exploration rate): added to every update's info. None by default."""
        return {}

    def update_variant(self):
        """What, besides the shapes of a mini-batch and the hyperparameters, decides which
        operations ``loss_tensors`` runs (a tuple of hashable values): a captured update is
        replayed only for the variant it was captured for. Nothing by default."""
        return ()

    def info_to_host(self, info):
        """The info of ``loss_tensors`` as ``compute_loss`` returns it: every tensor read back
        at once (``tensors_to_host``), then ``host_stats``.

        Parameters
        ----------
        info : dict
            Metric name -> tensor (or a Python value, kept).
        """
        host = tensors_to_host(info)
        host.update(self.host_stats())
        return host

    def compute_loss(self, batch):
        """Return (loss, info) for one mini-batch: ``loss_tensors`` with its info read back to
        the host, a dict of floats (numpy arrays for per-sample arrays), every key of which
        reaches the learner's metrics; per-sample arrays (``prl.TD_ERROR``) are taken out by
        the storage before the info leaves the gradient worker.

        Parameters
        ----------
        batch : dict of tensors
            One mini-batch produced by a storage.
        """
        loss, info = self.loss_tensors(batch)
        return loss, self.info_to_host(info)

    def write_gradients(self, loss):
        """Back-propagate ``loss`` (as ``loss_tensors`` returns it) into the ``.grad`` fields
        of the trainable parameters, replacing what they held: a dict's losses each into
        their own parameter group only.

        Parameters
        ----------
        loss : tensor or dict of tensors
            A scalar loss, or group name -> scalar loss (None or absent: that group gets none).
        """
        for p in self.trainable_parameters():  # not optimizer.zero_grad: no optimizer is needed here
            p.grad = None
        if isinstance(loss, dict):
            groups = self._parameter_groups()
            todo = [(loss[g], groups[g]) for g in groups if loss.get(g) is not None]
            for i, (group_loss, group_params) in enumerate(todo):
                # Each loss trains its own group: the policy loss of SAC flows through
                # the critics but must not change them.
                grads = torch.autograd.grad(group_loss, group_params, retain_graph=i < len(todo) - 1,
                                            allow_unused=True)
                for p, g in zip(group_params, grads):
                    p.grad = g
        else:
            loss.backward()

    def eager_gradients(self, batch):
        """The reference path of ``compute_gradients``: ``compute_loss``, then
        ``write_gradients``; returns the info.

        Parameters
        ----------
        batch : dict of tensors
            One mini-batch.
        """
        loss, info = self.compute_loss(batch)
        self.write_gradients(loss)
        return info

    def compute_gradients(self, batch, grads_to_cpu=True, return_grads=True):
        """Back-propagate the loss of ``batch`` into the ``.grad`` fields of the trainable parameters.

        Parameters
        ----------
        batch : dict of tensors
            One mini-batch produced by a storage.
        grads_to_cpu : bool
            Move returned gradients to the CPU (for sending to another process).
        return_grads : bool
            Return a copy of the gradients (False when they are applied in place by the
            same process: no copy is made).

        Returns
        -------
        grads : list of tensors or None
            One gradient per trainable parameter (None where a parameter got none), or None.
        info : dict
            Loss components and statistics of this mini-batch.
        """
        engine = self.update_engine or self.graph_update
        # Either fast path fills every parameter's .grad as eager_gradients does.
        info = self.eager_gradients(batch) if engine is None else engine(batch)
        if not return_grads:
            return None, info
        grads = []
        for p in self.trainable_parameters():
            g = p.grad
            if g is not None:
                # A copy, always: apply_gradients clips .grad in place.
                g = g.detach().to("cpu", copy=True) if grads_to_cpu else g.detach().clone()
            grads.append(g)
        return grads, info

    def apply_gradients(self, gradients=None):
        """Clip the gradients, step every optimizer that has gradients, then let the
        algorithm update what follows an update (``after_update``: target networks,
        exploration) — unless a gradient holds a NaN or an infinity.

        A non-finite gradient (a NaN or inf loss gives one) would make every weight it
        reaches NaN for good: the update is skipped instead. No optimizer steps (the
        weights and the optimizer state stay as they were), ``after_update`` is not called,
        ``updates_applied`` does not move, ``skipped_updates`` counts it and the ``.grad``
        fields are cleared. Every group is checked before any steps, so an algorithm with
        several optimizers (SAC) never applies half an update.

        Parameters
        ----------
        gradients : list of tensors or None
            Gradients in ``trainable_parameters`` order (as returned by
            ``compute_gradients``); None uses those already in the ``.grad`` fields.

        Returns
        -------
        bool
            True when the update was applied, False when it was skipped.
        """
        params = self.trainable_parameters()
        if gradients is not None:
            for p, g in zip(params, gradients):
                p.grad = None if g is None else g.to(p.device)
        max_norm = getattr(self, "max_grad_norm", None)
        clip = max_norm is not None and max_norm > 0
        groups = {}
        for name, group_params in self._parameter_groups().items():
            grads = [p.grad for p in group_params if p.grad is not None]
            if grads:   # a group without gradients had no loss this update (TD3's delayed policy)
                # With clipping, the norms it needs anyway are the finiteness check.
                groups[name] = (grads, grad_norm(grads) if clip else None)
        finite = all(math.isfinite(total) for _, total in groups.values()) if clip else \
            grads_finite([g for grads, _ in groups.values() for g in grads])
        if not finite:
            for p in params:
                p.grad = None
            self.skipped_updates += 1
            return False
        if clip and self.clip_groups_together and groups:
            total = math.sqrt(sum(norm * norm for _, norm in groups.values()))
            groups = {name: (grads, total) for name, (grads, _) in groups.items()}
        for name, (grads, total) in groups.items():
            if clip:
                scale_grads(grads, max_norm / (total + 1e-6))
            self.optimizers[name].step()
        self.updates_applied += 1
        self.after_update()
        return True

    def after_update(self):
        """Called after every optimizer step: update target networks, exploration, ..."""

    # ------------------------------------------------------------------ weights
    def get_weights(self):
        """Everything a gradient worker needs to compute gradients, as a dict of CPU
        tensors: the actor's weights and, prefixed ``algo.<name>.``, the learner modules."""
        weights = {k: v.detach().cpu() for k, v in self.actor.state_dict().items()}
        for name, module in self.learner_modules.items():
            weights.update({f"algo.{name}.{k}": v.detach().cpu() for k, v in module.state_dict().items()})
        return weights

    def set_weights(self, weights):
        """Load weights produced by ``get_weights`` (learner modules too when present)."""
        actor_w, modules = _split_weights(weights)
        self.actor.load_state_dict(actor_w)
        for name, module in self.learner_modules.items():
            if name in modules:
                module.load_state_dict(modules[name])

    def get_acting_weights(self):
        """The weights collectors act with (``Actor.acting_state_dict``) and, prefixed
        ``algo.<name>.``, the ``collector_modules``: CPU tensors."""
        weights = {k: v.detach().cpu() for k, v in self.actor.acting_state_dict().items()}
        modules = self.learner_modules
        for name in self.collector_modules:
            weights.update({f"algo.{name}.{k}": v.detach().cpu() for k, v in modules[name].state_dict().items()})
        return weights

    def set_acting_weights(self, weights):
        """Load weights produced by ``get_acting_weights`` (or by ``get_weights``: of the
        learner modules only ``collector_modules`` are loaded)."""
        actor_w, modules = _split_weights(weights)
        self.actor.load_acting_state_dict(actor_w)
        learner = self.learner_modules
        for name in self.collector_modules:
            if name in modules:
                learner[name].load_state_dict(modules[name])

    def state_dict(self):
        """Full state for checkpoints: weights (learner modules included), optimizers,
        hyperparameters and update count (random generators are the learner's part)."""
        return {"actor": self.get_weights(),
                "optimizers": {n: o.state_dict() for n, o in self.optimizers.items()},
                "hyperparameters": self.hyperparameters, "updates_applied": self.updates_applied}

    def load_state_dict(self, state):
        """Restore a state produced by ``state_dict``."""
        self.set_weights(state["actor"])
        optimizers = state.get("optimizers") or {next(iter(self.optimizers)): state["optimizer"]}
        if set(optimizers) != set(self.optimizers):
            raise ValueError(f"the saved state holds the optimizers {sorted(optimizers)}; {self.name} has "
                             f"{sorted(self.optimizers)} (saved by another version of {self.name}?)")
        for name, opt_state in optimizers.items():
            self.optimizers[name].load_state_dict(opt_state)
        for name, value in state.get("hyperparameters", {}).items():
            if hasattr(self, name):
                setattr(self, name, value)
        self._sync_optimizers()
        self.updates_applied = state.get("updates_applied", state.get("num_updates", 0))


def tensors_to_host(info):
    """``info`` with its tensors read back to the host: a 0-d tensor becomes a Python number
    (as ``Tensor.item``), any other a numpy array of its shape; other values are kept, and
    keys keep their order. The tensors of a device other than the CPU come back in one
    transfer per device and dtype: one synchronisation with a GPU instead of one per metric.

    Parameters
    ----------
    info : dict
        Metric name -> tensor or Python value.
    """
    host = dict(info)
    remote = {}
    for key, value in info.items():
        if isinstance(value, torch.Tensor):
            if value.is_cpu:    # no transfer to save: the cheapest conversion
                host[key] = value.item() if value.dim() == 0 else value.detach().numpy()
            else:
                remote.setdefault((value.device, value.dtype), []).append(key)
    for keys in remote.values():
        scalars = [k for k in keys if info[k].dim() == 0]
        arrays = [k for k in keys if info[k].dim() != 0]
        parts = [torch.stack([info[k] for k in scalars])] if scalars else []
        parts += [info[k].reshape(-1) for k in arrays]
        values = (parts[0] if len(parts) == 1 else torch.cat(parts)).detach().cpu().numpy()
        host.update(zip(scalars, values[:len(scalars)].tolist()))
        start = len(scalars)
        for k in arrays:
            end = start + info[k].numel()
            host[k] = values[start:end].reshape(info[k].shape)
            start = end
    return host


def _split_weights(weights):
    """(actor weights, dict module name -> its weights) of a dict whose learner-module
    entries are prefixed ``algo.<name>.``."""
    actor_w, modules = {}, {}
    for k, v in weights.items():
        if k.startswith("algo."):
            name, _, key = k[5:].partition(".")
            modules.setdefault(name, {})[key] = v
        else:
            actor_w[k] = v
    return actor_w, modules


def make_adam(params, lr, eps=1e-8):
    """Adam with the fastest implementation available: the fused kernel (one operator for
    all parameters: 3x faster than foreach on small CPU networks), else foreach.

    Parameters
    ----------
    params : iterable of torch.nn.Parameter
        Parameters to train.
    lr : float
        Learning rate.
    eps : float
        Adam's epsilon.
    """
    params = list(params)
    # A process's first torch.optim optimizer imports torch._dynamo: 0.73-0.86 CPU-s after
    # torch's objects were frozen at its import, 0.65 with the collector paused (measured).
    with gc_paused():
        try:
            return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
        except (RuntimeError, TypeError):
            return torch.optim.Adam(params, lr=lr, eps=eps, foreach=True)


def grad_norm(grads):
    """Global L2 norm of ``grads`` (tensors of one device and dtype), as a float: inf or
    NaN when a gradient holds an infinity or a NaN.

    On the CPU the norm is taken in numpy on views of the gradients (a few hundred
    nanoseconds per array, where each torch operator costs microseconds of dispatch): it
    runs after every mini-batch.

    Parameters
    ----------
    grads : list of tensors
        The gradients (at least one).
    """
    if grads[0].device.type == "cpu":
        arrays = [g.detach().numpy() for g in grads]
        total = float(np.sqrt(sum(float(np.vdot(a, a)) for a in arrays)))
        if not math.isfinite(total) and all(np.isfinite(a).all() for a in arrays):
            # Finite gradients whose squares overflow float32 (above ~1e19): the norm in
            # float64, so that they are clipped, not mistaken for a numerical fault.
            total = float(np.sqrt(sum(float(np.vdot(a, a)) for a in (x.astype(np.float64) for x in arrays))))
        return total
    # One synchronisation with the device per update, which clipping needed anyway.
    total = float(torch.linalg.vector_norm(torch.stack(foreach_norms(grads))))
    if not math.isfinite(total) and all(bool(torch.isfinite(g).all()) for g in grads):
        total = float(torch.linalg.vector_norm(torch.stack([g.double().norm() for g in grads])))
    return total


def grads_finite(grads):
    """True when no tensor of ``grads`` holds a NaN or an infinity (one fused pass over all
    of them where torch offers it: ``private_torch.all_finite``).

    Parameters
    ----------
    grads : list of tensors
        Gradients of one device (an empty list is finite).
    """
    return all_finite(grads)


def scale_grads(grads, coef):
    """Multiply ``grads`` in place by ``min(coef, 1)`` (nothing when ``coef >= 1``).

    Parameters
    ----------
    grads : list of tensors
        Gradients of one device and dtype.
    coef : float
        Scale factor.
    """
    if coef >= 1.0:
        return
    if grads[0].device.type == "cpu":
        for g in grads:
            a = g.detach().numpy()
            a *= coef
    else:
        foreach_mul_(grads, coef)


def clip_grad_norm(parameters, max_norm):
    """Scale gradients in place so that their global L2 norm is at most ``max_norm``.

    Same result as ``torch.nn.utils.clip_grad_norm_`` for the gradients of one device and
    dtype, with less overhead (see ``grad_norm``).

    Parameters
    ----------
    parameters : iterable of torch.nn.Parameter
        Parameters whose ``.grad`` is clipped (those without a gradient are skipped).
    max_norm : float
        Largest global norm allowed.

    Returns
    -------
    float
        The global norm before clipping.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return 0.0
    total = grad_norm(grads)
    scale_grads(grads, max_norm / (total + 1e-6))
    return total


def check_parameter(current, name, value, what, owner=None):
    """Validate a hot-swap of ``name`` to ``value`` against the dict ``current``.

    Returns the value converted to the parameter's type (1 -> 1.0 for a float parameter).
    Raises ValueError naming the valid names for an unknown name, and TypeError for a value
    of the wrong kind (a string for a number, 2.5 for an integer, a number for a boolean).
    A parameter whose current value is None takes the kind its owner documents ("int or
    None": an integer, 1.0 refused; "float or None": a number), or None again.

    Parameters
    ----------
    current : dict
        Current values of the parameters that may change.
    name : str
        Name of the parameter to change.
    value : object
        Requested value.
    what : str
        Words naming the kind of parameter, for the messages.
    owner : object, type or None
        The component (or its class) whose docstring documents the parameters (read only
        for a parameter that is None now; None: such a parameter accepts anything).
    """
    if name not in current:
        raise ValueError(f"unknown {what} {name!r}; valid: {sorted(current)}")
    old = current[name]
    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if old is None:
        return _check_documented(owner, name, value, what, number)
    if isinstance(old, bool):
        if isinstance(value, bool):
            return value
    elif isinstance(old, int):
        if number and float(value).is_integer():
            return int(value)
    elif isinstance(old, float):
        if number:
            return float(value)
    elif isinstance(value, type(old)):
        return value
    raise TypeError(f"{what} {name!r} expects {type(old).__name__}, got {value!r}")


def _check_documented(owner, name, value, what, number):
    """``check_parameter`` of a parameter that is None now: ``value`` must be None or of
    the kind ``owner`` documents for ``name`` (anything when it documents none)."""
    if value is None or owner is None:
        return value
    cls = owner if isinstance(owner, type) else type(owner)
    type_text = documented_parameters(cls).get(name, ("", ""))[0]
    kind = documented_kind(type_text)
    if kind is None:
        return value
    if kind == "int" and number and isinstance(value, (int, np.integer)):
        return int(value)
    if kind == "number" and number:
        return float(value)
    if (kind, type(value)) in (("bool", bool), ("str", str), ("dict", dict)):
        return value
    raise TypeError(f"{what} {name!r} expects {type_text} (it is None now), got {value!r}")
