"""Algorithm base class: losses to gradients, gradients to weights, weights and state.

``Algorithm`` is assembled from one part per role, each in its own module:

- ``optimization.Optimization``: parameter groups, optimizers and the update engine;
- ``hyperparameters.HyperparameterRegistry``: hyperparameters, factories and hot-swaps;
- ``collector_side.CollectorSide``: what collectors store, pre-process and bootstrap, and
  the routing of their computations with weights to an inference server;
- this module: the learner-facing core (compute and apply gradients, weights, state).

The gradient kernels (norms, finiteness, clipping) are in ``accel.gradients``.
"""

from abc import ABC

import torch

from pytorchrl.agent import accel
from pytorchrl.agent.accel.cuda_graph import graph_accelerator
from pytorchrl.agent.accel.gradients import clip_grad_norm, clip_norms, grad_norm, grads_finite, scale_grads
from pytorchrl.agent.algorithms.collector_side import CollectorSide
from pytorchrl.agent.algorithms.hyperparameters import HyperparameterRegistry
from pytorchrl.agent.algorithms.optimization import Optimization, make_adam
from pytorchrl.agent.factory import check_parameter


@accel.accelerated(graph_accelerator())
class Algorithm(Optimization, HyperparameterRegistry, CollectorSide, ABC):
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
    #: Whether ``max_grad_norm`` bounds the norm of every group's gradients taken together
    #: (one clip over all parameters) instead of each group's on its own.
    clip_groups_together = False
    #: Run after every accepted hot-swap: the optimizers take the new learning rates and eps.
    hyperparameter_effects = ("_sync_optimizers",)

    def __init__(self, device, actor, envs=None):
        self.device = torch.device(device)
        self.actor = actor
        self.envs = envs
        self.updates_applied = 0   # optimizer steps taken (the weight version of one learner)
        self.skipped_updates = 0   # updates refused for non-finite gradients (see apply_gradients)
        self._optimizers = None
        self._params = None
        self._groups = None

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items()
                if k not in self.derived_attributes and k not in self.process_local_attributes}

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
                groups[name] = grads
        norms = clip_norms(groups, clip, self.clip_groups_together)
        if norms is None:
            for p in params:
                p.grad = None
            self.skipped_updates += 1
            return False
        for name, grads in groups.items():
            if clip:
                scale_grads(grads, max_norm / (norms[name] + 1e-6))
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


# Names this module has always offered (their definitions moved to the modules of their role).
__all__ = ["Algorithm", "tensors_to_host", "make_adam", "check_parameter", "grad_norm", "grads_finite", "scale_grads",
           "clip_grad_norm"]
