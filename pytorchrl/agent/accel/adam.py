"""Adam on numpy views of torch parameters, in torch.optim.Adam's arithmetic and format."""

import numpy as np
import torch

from pytorchrl.agent.accel.private_torch import adam_step_


class NumpyAdam:
    """Adam with torch.optim.Adam's arithmetic, on numpy views of torch parameters.

    ``state_dict`` and ``load_state_dict`` use torch.optim.Adam's format, so checkpoints
    move between this optimizer and torch's.

    Parameters
    ----------
    params : list of torch.nn.Parameter
        Parameters, in the actor's order.
    algo : Algorithm
        Source of the learning rate (attribute ``lr_attr``) and of Adam's ``eps`` (its
        ``eps``, 1e-8 when it has none), read at every step, so hot-swaps apply at once.
    betas : tuple of float
        Adam's decay rates.
    lr_attr : str
        The algorithm's hyperparameter holding this optimizer's learning rate (``lr_q``,
        ``lr_pi``, ... for algorithms with several parameter groups).
    """

    def __init__(self, params, algo, betas=(0.9, 0.999), lr_attr="lr"):
        self.params = list(params)
        self.algo = algo
        self.betas = betas
        self.lr_attr = lr_attr
        self.step_count = 0
        # float32 moments, as the float32 parameters they follow.
        self.exp_avg = [np.zeros(p.shape, dtype=np.float32) for p in self.params]
        self.exp_avg_sq = [np.zeros(p.shape, dtype=np.float32) for p in self.params]
        self._views_of_params()

    def _views_of_params(self):
        # Torch tensors sharing the memory of the parameters and of the moments: a step is
        # one call of ``adam_step_`` (torch's fused kernel: one pass where numpy needs thirteen).
        self._tensors = ([p.detach() for p in self.params], [torch.from_numpy(m) for m in self.exp_avg],
                         [torch.from_numpy(v) for v in self.exp_avg_sq])

    def __getstate__(self):
        # Views of the parameters are not copied (a copy would no longer be a view):
        # a copy (deepcopy, pickle) takes them again from its own parameters.
        return {k: v for k, v in self.__dict__.items() if k != "_tensors"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._views_of_params()

    @property
    def lr(self):
        """The learning rate (the algorithm's ``lr_attr``)."""
        return float(getattr(self.algo, self.lr_attr))

    @property
    def eps(self):
        """Adam's epsilon (the algorithm's ``eps``)."""
        return float(getattr(self.algo, "eps", 1e-8))

    @property
    def param_groups(self):
        """torch.optim-style view of the hyper-parameters (they live in the algorithm: a
        hot-swap changes them there, and writes into this view are not needed)."""
        return [{"lr": self.lr, "betas": self.betas, "eps": self.eps}]

    def step(self, grads=None):
        """One Adam step with ``grads`` (arrays or tensors, parameter order; None: the
        parameters' ``.grad``)."""
        self.step_count += 1
        if grads is None:
            grads = [p.grad for p in self.params]
        grads = [torch.as_tensor(g).detach().to("cpu", torch.float32) for g in grads]
        params, exp_avg, exp_avg_sq = self._tensors
        b1, b2 = self.betas
        adam_step_(params, grads, exp_avg, exp_avg_sq, self.step_count, lr=self.lr, beta1=b1, beta2=b2, eps=self.eps)

    def zero_grad(self, set_to_none=True):
        """Drop the parameters' gradients."""
        for p in self.params:
            p.grad = None

    def state_dict(self):
        """State in torch.optim.Adam's format."""
        state = {i: {"step": torch.tensor(float(self.step_count)), "exp_avg": torch.from_numpy(m.copy()),
                     "exp_avg_sq": torch.from_numpy(v.copy())}
                 for i, (m, v) in enumerate(zip(self.exp_avg, self.exp_avg_sq))}
        group = {"lr": self.lr, "betas": self.betas, "eps": self.eps, "weight_decay": 0,
                 "amsgrad": False, "params": list(range(len(self.params)))}
        return {"state": state, "param_groups": [group]}

    def load_state_dict(self, state_dict):
        """Restore a state in torch.optim.Adam's format (from this class or from torch)."""
        state = state_dict["state"]
        if not state:
            self.step_count = 0
            for m, v in zip(self.exp_avg, self.exp_avg_sq):
                m[...] = 0.0
                v[...] = 0.0
            return
        self.step_count = int(float(state[0]["step"]))
        for i, (m, v) in enumerate(zip(self.exp_avg, self.exp_avg_sq)):
            m[...] = state[i]["exp_avg"].numpy()
            v[...] = state[i]["exp_avg_sq"].numpy()


__all__ = ["NumpyAdam"]
