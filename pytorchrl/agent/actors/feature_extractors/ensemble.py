"""``EnsembleMLP``: several independent MLPs over one input, one batched product per layer.

The critics of the off-policy actors (and their policies, as an ensemble of one) are
built from it: on small networks the operator count, not the arithmetic, is what costs,
so all critics are computed together.
"""

import math

import torch
import torch.nn as nn

from pytorchrl.agent.actors.feature_extractors.mlp import get_activation
from pytorchrl.agent.actors.feature_extractors.precision import check_precision, compute_dtype
from pytorchrl.agent.notices import say_once


class EnsembleMLP(nn.Module):
    """``copies`` independent MLPs over the same input, computed with one batched matrix
    product per layer.

    Parameters
    ----------
    in_size : int
        Input size.
    hidden_sizes : sequence of int
        Width of each hidden layer.
    out_size : int
        Output size of each copy.
    copies : int
        Number of independent networks.
    activation : str or nn.Module class
        Non-linearity after each hidden layer.
    precision : str
        "fp32", or "bf16": the products between two hidden layers (the wide ones, most of
        the arithmetic) read bfloat16 copies of their input and weights and accumulate in
        float32 (``low_precision_layers``); the first and last layers, the weights, the
        gradients the optimizer sees and every output stay float32. On a device without
        native bfloat16 the network says so once and computes in float32.
    """

    def __init__(self, in_size, hidden_sizes, out_size, copies=1, activation=nn.ReLU, precision="fp32"):
        super().__init__()
        self.precision = check_precision(precision)
        self.copies = int(copies)
        self.act = get_activation(activation)()
        sizes = [int(in_size)] + [int(h) for h in hidden_sizes] + [int(out_size)]
        if precision != "fp32" and len(sizes) < 4:
            say_once(("precision without hidden products", tuple(sizes)),
                     f"precision {precision}: an MLP of hidden sizes {list(hidden_sizes)} has no product between "
                     f"two hidden layers, computing in fp32 (bf16 needs two hidden layers or more)")
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for a, b in zip(sizes[:-1], sizes[1:]):
            # nn.Linear's default initialisation, copy by copy.
            bound = 1.0 / math.sqrt(a)
            self.weights.append(nn.Parameter(torch.empty(self.copies, a, b).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(self.copies, 1, b).uniform_(-bound, bound)))
        self.out_size = int(out_size)

    def low_precision_layers(self, device):
        """Indexes of the layers computed in bfloat16 on ``device`` (none in fp32, or where
        the device has no native bfloat16): those between two hidden layers."""
        if compute_dtype(self.precision, device) is None:
            return ()
        return tuple(range(1, len(self.weights) - 1))

    def forward(self, x):
        """(copies, B, out_size) for a shared input ``x`` of shape (B, in_size)."""
        n = len(self.weights)
        low = self.low_precision_layers(x.device)
        h = torch.matmul(x, self.weights[0]) + self.biases[0]
        for i in range(1, n):
            h = self.act(h)
            if i in low:
                # bfloat16 product, float32 result: what the numpy update computes too.
                h = torch.matmul(h.to(torch.bfloat16), self.weights[i].to(torch.bfloat16)).float() + self.biases[i]
            else:
                h = torch.baddbmm(self.biases[i], h, self.weights[i])
        return h


__all__ = ["EnsembleMLP"]
