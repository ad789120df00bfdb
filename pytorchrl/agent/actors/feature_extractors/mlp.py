"""Multilayer perceptron feature extractor."""

import numpy as np
import torch.nn as nn

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU, "leaky_relu": nn.LeakyReLU,
               "gelu": nn.GELU, "silu": nn.SiLU}


def get_activation(activation):
    """Return an activation module class from a class or one of the names in ACTIVATIONS."""
    if isinstance(activation, str):
        if activation.lower() not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; valid: {sorted(ACTIVATIONS)}")
        return ACTIVATIONS[activation.lower()]
    return activation


class MLP(nn.Module):
    """Fully connected layers over the flattened observation.

    Parameters
    ----------
    input_space : gymnasium.spaces.Box
        Observation space; its shape is flattened into the input size.
    hidden_sizes : list of int
        Width of each hidden layer; the last one is the feature size.
    activation : str or nn.Module class
        Non-linearity after every layer ("tanh", "relu", ... or a class such as nn.Tanh).
    """

    def __init__(self, input_space, hidden_sizes=(256, 256), activation=nn.ReLU):
        super().__init__()
        act = get_activation(activation)
        in_size = int(np.prod(input_space.shape))
        layers = []
        for size in hidden_sizes:
            layers += [nn.Linear(in_size, size), act()]
            in_size = size
        self.net = nn.Sequential(nn.Flatten(), *layers)
        self.num_outputs = in_size

    def forward(self, obs):
        return self.net(obs.float())
