"""Algorithm base class: losses, gradients, optimizer and live hyperparameters."""

import inspect
from abc import ABC, abstractmethod

import numpy as np
import torch

from pytorchrl.agent.factory import ComponentFactory


class Algorithm(ABC):
    """Base class of every algorithm.

    An algorithm owns the optimizer over its actor's parameters and turns mini-batches into
    gradients (``compute_gradients``) and gradients into a new version of the weights
    (``apply_gradients``). Its hyperparameters are plain attributes, listed in
    ``self.hyperparameters``; ``update_algorithm_parameter`` changes them while training.

    Parameters
    ----------
    device : torch.device or str
        Device of the actor.
    actor : nn.Module
        The actor whose parameters are trained.
    envs : TorchVecEnv or None
        Environments (only their spaces may be used).
    """

    #: Name under which the algorithm is known to actors, configs and logs.
    name = None
    #: Whether the algorithm learns from data produced by its current policy only.
    on_policy = True

    def __init__(self, device, actor, envs=None):
        self.device = torch.device(device)
        self.actor = actor
        self.envs = envs
        self.num_updates = 0
        self._optimizer = None

    # The optimizer is built on first use: collection workers act but never train, and the
    # first torch.optim optimizer of a process costs seconds (it imports torch._dynamo).
    @property
    def optimizer(self):
        """The optimizer over the actor's parameters (built by ``make_optimizer`` on first use)."""
        if self._optimizer is None:
            self._optimizer = self.make_optimizer()
        return self._optimizer

    def make_optimizer(self):
        """Build the optimizer over ``self.actor``'s parameters (current hyperparameters)."""
        raise NotImplementedError

    #: Hyperparameters fixed at construction: a hot-swap may only repeat their value.
    fixed_hyperparameters = ()

    @property
    def numpy_update_engine(self):
        """The numpy update of this algorithm (see ``numpy_update.py``), or None: torch path."""
        return None

    # ----------------------------------------------------------------- factories
    @classmethod
    def hyperparameter_names(cls):
        """Names accepted by ``create_factory`` (the constructor's keyword arguments)."""
        params = inspect.signature(cls.__init__).parameters
        return [n for n in params if n not in ("self", "device", "actor", "envs")]

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

    def update_algorithm_parameter(self, parameter_name, new_parameter_value):
        """Set hyperparameter ``parameter_name`` to ``new_parameter_value``.

        Parameters
        ----------
        parameter_name : str
            One of ``self.hyperparameters``; anything else raises ValueError listing them.
        new_parameter_value : object
            New value; numbers must stay numbers, booleans booleans.
        """
        value = check_parameter(self.hyperparameters, parameter_name, new_parameter_value,
                                f"{self.name} hyperparameter")
        old = getattr(self, parameter_name)
        if parameter_name in self.fixed_hyperparameters:
            if value != old:
                raise ValueError(f"{self.name} hyperparameter {parameter_name!r} is fixed once the "
                                 f"algorithm is built (it is {old!r})")
            return
        setattr(self, parameter_name, value)
        try:
            self.check_hyperparameters()
        except (ValueError, TypeError):
            setattr(self, parameter_name, old)  # a refused change leaves nothing changed
            raise
        if parameter_name == "lr" and self._optimizer is not None:
            for group in self._optimizer.param_groups:
                group["lr"] = float(new_parameter_value)

    def check_hyperparameters(self):
        """Raise ValueError/TypeError if a hyperparameter holds a value the algorithm cannot use.

        Called by the constructor and by every hot-swap, so that a change refused at
        construction is refused while training too.
        """

    # ------------------------------------------------------------------- acting
    @torch.inference_mode()
    def acting(self, obs, deterministic=False):
        """Pick actions for a batch of observations.

        Returns (action, env_action, logp, value) as ``OnPolicyActor.get_action``.
        """
        return self.actor.get_action(obs, deterministic)

    def acting_numpy(self, obs, deterministic=False):
        """``acting`` for a numpy batch of observations, returning numpy arrays (the
        collectors' path on CPU: see ``OnPolicyActor.act_numpy``)."""
        return self.actor.act_numpy(obs, deterministic)

    # ---------------------------------------------------------------- learning
    @abstractmethod
    def compute_loss(self, batch):
        """Return (loss tensor, info dict of floats) for one mini-batch."""

    def compute_gradients(self, batch, grads_to_cpu=True, return_grads=True):
        """Back-propagate the loss of ``batch`` into the actor's ``.grad`` fields.

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
            One gradient per parameter (None where a parameter got none), or None.
        info : dict
            Loss components and statistics of this mini-batch.
        """
        fast = self.numpy_update_engine
        if fast is not None:
            info = fast(batch)  # fills every parameter's .grad
        else:
            loss, info = self.compute_loss(batch)
            for p in self.actor.parameters():  # not optimizer.zero_grad: no optimizer is needed here
                p.grad = None
            loss.backward()
        if not return_grads:
            return None, info
        grads = []
        for p in self.actor.parameters():
            g = p.grad
            if g is not None:
                # A copy, always: apply_gradients clips .grad in place.
                g = g.detach().to("cpu", copy=True) if grads_to_cpu else g.detach().clone()
            grads.append(g)
        return grads, info

    def apply_gradients(self, gradients=None):
        """Clip the gradients and take one optimizer step.

        Parameters
        ----------
        gradients : list of tensors or None
            Gradients in parameter order (as returned by ``compute_gradients``); None uses
            the gradients already held in the parameters' ``.grad`` fields.
        """
        if gradients is not None:
            for p, g in zip(self.actor.parameters(), gradients):
                p.grad = None if g is None else g.to(p.device)
        if self.numpy_update_engine is not None:
            grads = [p.grad.numpy() for p in self.actor.parameters()]
            if self.max_grad_norm is not None and self.max_grad_norm > 0:
                total = np.sqrt(sum(float(np.vdot(g, g)) for g in grads))
                coef = min(1.0, self.max_grad_norm / (total + 1e-6))
                if coef < 1.0:
                    for g in grads:
                        g *= coef
            self.optimizer.step(grads)
        else:
            if self.max_grad_norm is not None and self.max_grad_norm > 0:
                clip_grad_norm(self.actor.parameters(), self.max_grad_norm)
            self.optimizer.step()
        self.num_updates += 1

    # ------------------------------------------------------------------ weights
    def get_weights(self):
        """Actor weights as a dict of CPU tensors."""
        return {k: v.detach().cpu() for k, v in self.actor.state_dict().items()}

    def set_weights(self, weights):
        """Load actor weights (dict of tensors)."""
        self.actor.load_state_dict(weights)

    def state_dict(self):
        """Full state for checkpoints: actor, optimizer, hyperparameters and update count."""
        return {"actor": self.actor.state_dict(), "optimizer": self.optimizer.state_dict(),
                "hyperparameters": self.hyperparameters, "num_updates": self.num_updates}

    def load_state_dict(self, state):
        """Restore a state produced by ``state_dict``."""
        self.actor.load_state_dict(state["actor"])
        self.optimizer.load_state_dict(state["optimizer"])
        for name, value in state.get("hyperparameters", {}).items():
            if hasattr(self, name):
                setattr(self, name, value)
        self.num_updates = state.get("num_updates", 0)


def clip_grad_norm(parameters, max_norm):
    """Scale gradients in place so that their global L2 norm is at most ``max_norm``.

    Same result as ``torch.nn.utils.clip_grad_norm_`` for the gradients of one device and
    dtype, in four operators (no grouping or checks): it runs after every mini-batch.

    Parameters
    ----------
    parameters : iterable of torch.nn.Parameter
        Parameters whose ``.grad`` is clipped (those without a gradient are skipped).
    max_norm : float
        Largest global norm allowed.

    Returns
    -------
    torch.Tensor
        The global norm before clipping.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.zeros(())
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, (max_norm / (total + 1e-6)).clamp_(max=1.0))
    return total


def check_parameter(current, name, value, what):
    """Validate a hot-swap of ``name`` to ``value`` against the dict ``current``.

    Returns the value converted to the parameter's type (1 -> 1.0 for a float parameter).
    Raises ValueError naming the valid names for an unknown name, and TypeError for a value
    of the wrong kind (a string for a number, 2.5 for an integer, a number for a boolean).

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
    """
    if name not in current:
        raise ValueError(f"unknown {what} {name!r}; valid: {sorted(current)}")
    old = current[name]
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(old, bool):
        if isinstance(value, bool):
            return value
    elif isinstance(old, int):
        if number and float(value).is_integer():
            return int(value)
    elif isinstance(old, float):
        if number:
            return float(value)
    elif old is None or isinstance(value, type(old)):
        return value
    raise TypeError(f"{what} {name!r} expects {type(old).__name__}, got {value!r}")
