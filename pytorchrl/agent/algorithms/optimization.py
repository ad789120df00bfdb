"""What an algorithm trains and how: its parameter groups, one optimizer per group (built
on first use), and the engine that computes its updates (a fast path of the accelerator
layer, or none: the reference torch path).

``Optimization`` is that part of ``Algorithm``; its instances need ``actor``, ``device``,
``group_lr`` and the hyperparameters ``group_lr`` names (``eps`` too where they have one).
"""

import torch

from pytorchrl.agent import accel
from pytorchrl.agent.accel.adam import NumpyAdam
from pytorchrl.gc_pause import gc_paused


class Optimization:
    """Parameter groups, optimizers and the choice of update engine of an algorithm."""

    #: Hyperparameter holding the learning rate of each parameter group.
    group_lr = {"actor": "lr"}
    #: Attributes derived from the others on first use (fast paths, which hold numpy views
    #: of the parameters or graphs captured on them): a copy (deepcopy, pickle) builds its own.
    derived_attributes = ("_update_engine", "_fused_loss", "_graph_update")

    def parameter_groups(self):
        """Dict group name -> list of parameters, one optimizer per group (in order)."""
        return {"actor": list(self.actor.parameters())}

    @property
    def learner_modules(self):
        """Dict name -> nn.Module of networks the learner keeps besides the actor (targets)."""
        return {}

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


__all__ = ["Optimization", "make_adam"]
