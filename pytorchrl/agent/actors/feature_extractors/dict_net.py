"""Feature extractor of structured (Dict or Tuple) observations: one network per key."""

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from pytorchrl.agent.actors.feature_extractors.cnn import CNN
from pytorchrl.agent.actors.feature_extractors.mlp import MLP
from pytorchrl.agent.spaces import packing_of

#: Smallest height and width of an image key: the CNN's convolutions have no padding.
MIN_IMAGE_SIZE = 36


def is_image_key(space):
    """Whether a key of a structured observation is read by a CNN: uint8 frames
    (C, H, W) with H, W >= ``MIN_IMAGE_SIZE``; every other key is read by an MLP."""
    shape = tuple(getattr(space, "shape", None) or ())
    return len(shape) == 3 and np.dtype(space.dtype) == np.uint8 and min(shape[1:]) >= MIN_IMAGE_SIZE


class DictNet(nn.Module):
    """One feature extractor per key of a Dict or Tuple observation, their features
    concatenated (in the packing order): a ``CNN`` for image keys (``is_image_key``), an
    ``MLP`` for every other key (vectors, discrete values, bits), each over that key only.

    It reads observations packed by ``pytorchrl.agent.spaces.PackedObservation`` (the
    vector envs hand them out so) and cuts them back into their keys.

    Parameters
    ----------
    input_space : PackedBox or gymnasium.spaces.Dict or gymnasium.spaces.Tuple
        The observation space (a structured space is packed by the same rule).
    hidden_sizes : list of int
        Widths of the hidden layers of every key's MLP (the last one is its feature size).
    activation : str or nn.Module class
        Non-linearity of the MLPs (and of the CNNs' layers).
    image_kwargs : dict or None
        Keyword arguments of every image key's ``CNN`` (``hidden_size``, ``precision``, ...).
    """

    def __init__(self, input_space, hidden_sizes=(64, 64), activation="tanh", image_kwargs=None):
        super().__init__()
        self.packing = packing_of(input_space)
        if self.packing is None:
            raise ValueError(f"DictNet reads Dict or Tuple observations, got {input_space}; use MLP or CNN")
        self.slices = []
        nets = []
        for entry in self.packing.entries:
            if is_image_key(entry.space):
                net = CNN(entry.space, **dict(image_kwargs or {}))
            else:
                # The MLP sees the key's values as a flat float vector, whatever its space.
                flat = gym.spaces.Box(-np.inf, np.inf, (entry.size,), dtype=np.float32)
                net = MLP(flat, hidden_sizes=hidden_sizes, activation=activation)
            nets.append(net)
            self.slices.append((entry.start, entry.stop, (-1,) + entry.shape))
        self.nets = nn.ModuleList(nets)
        self.num_outputs = sum(int(net.num_outputs) for net in nets)

    def forward(self, obs):
        obs = obs.reshape(obs.shape[0], -1)
        features = [net(obs[:, a:b].reshape(shape)) for net, (a, b, shape) in zip(self.nets, self.slices)]
        return torch.cat(features, dim=-1)


__all__ = ["DictNet", "is_image_key", "MIN_IMAGE_SIZE"]
