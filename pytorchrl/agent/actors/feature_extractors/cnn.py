"""Convolutional feature extractor of the Nature DQN paper (Mnih et al., 2015)."""

import numpy as np
import torch
import torch.nn as nn

from pytorchrl.agent.actors.feature_extractors.mlp import get_activation
from pytorchrl.agent.actors.feature_extractors.precision import ImageFeatureExtractor


def image_scale(input_space, scale):
    """The factor observations are multiplied by before the first layer.

    Parameters
    ----------
    input_space : gymnasium.spaces.Box
        Observation space.
    scale : float or None
        Explicit factor; None: 1/255 for uint8 spaces (pixels), 1 otherwise.

    Returns
    -------
    float
    """
    if scale is not None:
        return float(scale)
    # Decided from the space and not from the tensor: storages may hand uint8 frames back
    # as float32, which must be scaled all the same.
    return 1.0 / 255.0 if np.dtype(input_space.dtype) == np.uint8 else 1.0


def check_image_space(input_space, name):
    """Raise ValueError unless ``input_space`` is a channels-first image space (C, H, W)."""
    shape = getattr(input_space, "shape", None)
    if shape is None or len(shape) != 3:
        raise ValueError(f"{name} needs image observations of shape (C, H, W), got shape {shape}; "
                         f"use MLP for flat observations (VecEnv turns HWC images into CHW)")


class CNN(ImageFeatureExtractor):
    """Nature-DQN convolutions followed by one fully connected layer.

    Conv 32x8x8 stride 4, conv 64x4x4 stride 2, conv 64x3x3 stride 1 (ReLU after each), then
    a linear layer of ``hidden_size`` units and the activation. Convolutions have no padding,
    so images must be at least 36x36 pixels.

    Parameters
    ----------
    input_space : gymnasium.spaces.Box
        Observation space of shape (C, H, W), channels first.
    hidden_size : int
        Width of the final linear layer, which is the feature size (``num_outputs``).
    activation : str or nn.Module class
        Non-linearity after every layer ("relu", "tanh", ... or a class).
    scale : float or None
        Factor applied to the observations; None: 1/255 for uint8 spaces, 1 otherwise.
    precision : str
        "fp32", or "bf16": bfloat16 mixed precision (float32 weights and features), for
        CPUs with AVX512-BF16/AMX and GPUs (see ``precision.ImageFeatureExtractor``).
    channels_last : bool or None
        Memory layout of the convolutions' input; None: chosen per batch (channels last on
        the CPU in float32 for training batches, see ``prefers_channels_last``).
    """

    #: Smallest height and width the convolutions (no padding) can take.
    MIN_SIZE = 36

    def __init__(self, input_space, hidden_size=512, activation=nn.ReLU, scale=None, precision="fp32",
                 channels_last=None):
        super().__init__(precision, channels_last)
        check_image_space(input_space, "CNN")
        act = get_activation(activation)
        channels, height, width = input_space.shape
        if min(height, width) < 36:
            raise ValueError(f"CNN needs images of at least 36x36 pixels, got {height}x{width}")
        self.scale = image_scale(input_space, scale)
        self.convs = nn.Sequential(
            nn.Conv2d(channels, 32, 8, stride=4), act(),
            nn.Conv2d(32, 64, 4, stride=2), act(),
            nn.Conv2d(64, 64, 3, stride=1), act(),
            nn.Flatten())
        with torch.no_grad():
            n_flat = self.convs(torch.zeros(1, channels, height, width)).shape[1]
        self.linear = nn.Sequential(nn.Linear(n_flat, hidden_size), act())
        self.num_outputs = hidden_size
        # Orthogonal initialisation with ReLU gain, as in the PPO/A2C Atari baselines.
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                nn.init.orthogonal_(module.weight, gain=nn.init.calculate_gain("relu"))
                nn.init.zeros_(module.bias)

    def prefers_channels_last(self, batch, dtype, grad):
        """Channels last in float32 for training batches and batches of at least 128
        images. Measured on 4x84x84 frames, one thread: a training pass of 256 images
        takes ~20% less time channels last, a forward pass of 256 ~15% less, but one of 8
        or 64 ~10% more; in bfloat16 the layout makes no difference worth having (within
        5%, channels first ahead)."""
        return dtype is None and (grad or batch >= 128)
