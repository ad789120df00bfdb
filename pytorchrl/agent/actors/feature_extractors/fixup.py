"""IMPALA ResNet feature extractor with Fixup initialisation.

The network of Espeholt et al. (2018, IMPALA): three stacks, each a 3x3 convolution, a 3x3
max-pool of stride 2 and two residual blocks. Its residual blocks carry no normalisation;
Fixup (Zhang et al., 2019) keeps such a deep network trainable from the first update by
initialising every residual branch close to zero: the last convolution of each branch at
zero, the first one scaled by L^(-1/2) (L residual blocks, 2 layers per branch), plus
scalar biases and a multiplier per branch.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from pytorchrl.agent.actors.feature_extractors.cnn import check_image_space, image_scale
from pytorchrl.agent.actors.feature_extractors.precision import ImageFeatureExtractor


class FixupResidual(nn.Module):
    """One residual block ``x + scale * conv2(relu(conv1(relu(x) + b1) + b2) + b3) + b4``.

    Parameters
    ----------
    channels : int
        Number of input and output channels.
    num_residual : int
        Number of residual blocks of the whole network (sets the Fixup scaling).
    """

    def __init__(self, channels, num_residual):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        with torch.no_grad():
            nn.init.kaiming_normal_(self.conv1.weight, nonlinearity="relu")
            self.conv1.weight.mul_(num_residual ** -0.5)
            self.conv2.weight.zero_()
        self.bias1 = nn.Parameter(torch.zeros(channels, 1, 1))
        self.bias2 = nn.Parameter(torch.zeros(channels, 1, 1))
        self.bias3 = nn.Parameter(torch.zeros(channels, 1, 1))
        self.bias4 = nn.Parameter(torch.zeros(channels, 1, 1))
        self.scale = nn.Parameter(torch.ones(channels, 1, 1))

    def forward(self, x):
        out = self.conv1(F.relu(x) + self.bias1)
        out = self.conv2(F.relu(out + self.bias2) + self.bias3)
        return x + out * self.scale + self.bias4


class FixupCNN(ImageFeatureExtractor):
    """IMPALA ResNet (Fixup initialisation) followed by one fully connected layer.

    Stacks of 16, 32 and 32 channels (by default), each: conv 3x3, max-pool 3x3 stride 2,
    two residual blocks; then ReLU, a linear layer of ``hidden_size`` units and ReLU. Each
    stack halves the image side (rounding up), so (4, 84, 84) inputs end as 32x11x11.

    Parameters
    ----------
    input_space : gymnasium.spaces.Box
        Observation space of shape (C, H, W), channels first.
    hidden_size : int
        Width of the final linear layer, which is the feature size (``num_outputs``).
    channels : sequence of int
        Number of channels of each stack.
    scale : float or None
        Factor applied to the observations; None: 1/255 for uint8 spaces, 1 otherwise.
    precision : str
        "fp32", or "bf16": bfloat16 mixed precision (float32 weights and features), for
        CPUs with AVX512-BF16/AMX and GPUs (see ``precision.ImageFeatureExtractor``).
    channels_last : bool or None
        Memory layout of the convolutions' input; None: channels last on the CPU (measured
        faster there in both precisions, for acting and training batches alike), channels
        first elsewhere.
    """

    def __init__(self, input_space, hidden_size=256, channels=(16, 32, 32), scale=None, precision="fp32",
                 channels_last=None):
        super().__init__(precision, channels_last)
        check_image_space(input_space, "FixupCNN")
        in_channels, height, width = input_space.shape
        self.scale = image_scale(input_space, scale)
        num_residual = 2 * len(channels)
        layers = []
        for out_channels in channels:
            layers += [nn.Conv2d(in_channels, out_channels, 3, padding=1),
                       nn.MaxPool2d(3, stride=2, padding=1),
                       FixupResidual(out_channels, num_residual),
                       FixupResidual(out_channels, num_residual)]
            in_channels = out_channels
            height, width = math.ceil(height / 2), math.ceil(width / 2)
        self.convs = nn.Sequential(*layers, nn.ReLU(), nn.Flatten())
        self.linear = nn.Sequential(nn.Linear(in_channels * height * width, hidden_size), nn.ReLU())
        self.num_outputs = hidden_size
