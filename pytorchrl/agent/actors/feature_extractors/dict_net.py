"""Feature extractor of structured (Dict or Tuple) observations: the vector keys through
one MLP, each image key through a CNN."""

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
    """Features of a Dict or Tuple observation: every key that is not an image
    (vectors, discrete values, bits; in the packing order) concatenated into one vector
    that one ``MLP`` reads, and a ``CNN`` for each image key (``is_image_key``); the
    MLP's features first, then each CNN's.

    As Stable-Baselines3's ``MultiInputPolicy`` (its ``CombinedExtractor``) does: an MLP
    per vector key would keep the keys apart until the heads, which learns worse than the
    flat form of the same observation (PPO on CartPole as a Dict of two keys: 447-498
    against 500, benchmarks/RESULTS.md). Without image keys the whole packed vector is
    the MLP's input, so the numpy fast paths compute this network as the ``MLP`` it is.

    It reads observations packed by ``pytorchrl.agent.spaces.PackedObservation`` (the
    vector envs hand them out so) and cuts the image keys back out of them.

    Parameters
    ----------
    input_space : PackedBox or gymnasium.spaces.Dict or gymnasium.spaces.Tuple
        The observation space (a structured space is packed by the same rule).
    hidden_sizes : list of int
        Widths of the hidden layers of the MLP (the last one is its feature size).
    activation : str or nn.Module class
        Non-linearity of the MLP (and of the CNNs' layers).
    image_kwargs : dict or None
        Keyword arguments of every image key's ``CNN`` (``hidden_size``, ``precision``, ...).
    """

    def __init__(self, input_space, hidden_sizes=(64, 64), activation="tanh", image_kwargs=None):
        super().__init__()
        self.packing = packing_of(input_space)
        if self.packing is None:
            raise ValueError(f"DictNet reads Dict or Tuple observations, got {input_space}; use MLP or CNN")
        images = [e for e in self.packing.entries if is_image_key(e.space)]
        vectors = [e for e in self.packing.entries if not is_image_key(e.space)]
        columns = [c for e in vectors for c in range(e.start, e.stop)]
        # None: the vector keys are the whole packed vector (no image key), read as it is.
        self.register_buffer("vector_columns", None if len(columns) == self.packing.size else
                             torch.as_tensor(columns, dtype=torch.int64), persistent=False)
        self.mlp = MLP(gym.spaces.Box(-np.inf, np.inf, (len(columns),), dtype=np.float32), hidden_sizes=hidden_sizes,
                       activation=activation) if columns else None
        self.image_slices = [(e.start, e.stop, (-1,) + e.shape) for e in images]
        self.cnns = nn.ModuleList(CNN(e.space, **dict(image_kwargs or {})) for e in images)
        self.num_outputs = (int(self.mlp.num_outputs) if self.mlp is not None else 0) + \
            sum(int(net.num_outputs) for net in self.cnns)

    @property
    def vector_only(self):
        """Whether every key is read by the MLP (no image key): the network is then that
        MLP over the packed vector."""
        return self.vector_columns is None and self.mlp is not None

    def forward(self, obs):
        obs = obs.reshape(obs.shape[0], -1)
        features = []
        if self.mlp is not None:
            features.append(self.mlp(obs if self.vector_columns is None else obs.index_select(1, self.vector_columns)))
        features += [net(obs[:, a:b].reshape(shape)) for net, (a, b, shape) in zip(self.cnns, self.image_slices)]
        return features[0] if len(features) == 1 else torch.cat(features, dim=-1)


__all__ = ["DictNet", "is_image_key", "MIN_IMAGE_SIZE"]
