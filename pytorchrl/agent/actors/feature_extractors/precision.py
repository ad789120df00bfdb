"""How image feature extractors compute: number format (fp32 or bf16 mixed precision) and
memory layout of the convolutions' input (channels first or channels last).

Mixed precision (``precision="bf16"``) runs the extractor's convolutions and linear layers
under ``torch.autocast`` with bfloat16: the weights stay float32 (the optimizer updates
them in float32), each layer reads a bfloat16 copy, and the features the extractor returns
are float32 again, so that policy and value heads, losses, advantages and value targets
are computed in float32 as before. Pixels (uint8, exact in bfloat16) are converted and
scaled in one pass straight to bfloat16.

bfloat16 pays only where the processor computes it natively: on a CPU without AVX512-BF16
or AMX (and on a GPU without bfloat16 support) the extractor says so once and computes
in float32.
"""

import functools

import torch

from pytorchrl.agent.accel.private_torch import cpu_has_native_bf16
from pytorchrl.agent.notices import say_once

#: Accepted values of ``precision`` and what each computes in.
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}


def check_precision(precision):
    """Return ``precision`` if it is one of ``PRECISIONS``, else raise ValueError."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
    return precision


@functools.lru_cache(maxsize=None)
def native_bf16(device_type):
    """True when ``device_type`` ("cpu", "cuda") computes bfloat16 natively: a CPU with
    AVX512-BF16 or AMX instructions (oneDNN's bfloat16 kernels emulate it otherwise, slower
    than float32), a GPU that supports bfloat16."""
    if device_type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    return device_type == "cpu" and cpu_has_native_bf16()


def compute_dtype(precision, device):
    """The autocast dtype of ``precision`` on ``device`` (None: plain float32).

    bf16 on a device without native bfloat16 is float32, said once per device type.

    Parameters
    ----------
    precision : str
        "fp32" or "bf16".
    device : torch.device
        Where the extractor computes.
    """
    dtype = PRECISIONS[precision]
    if dtype is None:
        return None
    if not native_bf16(device.type):
        say_once(("bf16", device.type),
                 f"precision bf16: this {device.type.upper()} does not compute bfloat16 natively "
                 f"(no AVX512-BF16/AMX on a CPU, no bfloat16 on a GPU); computing in fp32")
        return None
    return dtype


def image_input(obs, scale, dtype=torch.float32, channels_last=False):
    """The first convolution's input: ``obs`` (B, C, H, W) times ``scale`` as ``dtype``, in
    one pass over the pixels where possible.

    ``obs.float() * scale`` would read and write the frames twice (uint8 to float32, then
    the product): ``torch.mul`` of the uint8 tensor by the scale converts and multiplies at
    once, with the same float32 values. In bfloat16 the uint8 pixels convert exactly and
    the product is rounded once, as autocast would round the float32 product.

    Parameters
    ----------
    obs : torch.Tensor
        Observations (uint8 pixels or floats).
    scale : float
        Factor applied to them (1: none).
    dtype : torch.dtype
        dtype of the result: float32, or the autocast dtype (bfloat16).
    channels_last : bool
        Return a channels-last (NHWC in memory) tensor: the layout oneDNN's convolutions
        run fastest on the CPU for batches with gradients.
    """
    if obs.dtype != torch.uint8 and obs.dtype != dtype:
        # Floats of another precision: scaled in float32 and rounded once, as autocast would.
        x = obs.float() * scale if scale != 1.0 else obs.float()
        x = x.to(dtype)
        return x.contiguous(memory_format=torch.channels_last) if channels_last else x
    # uint8 pixels convert exactly to float32 and to bfloat16: one rounding, in the product.
    if channels_last:
        x = torch.empty(obs.shape, dtype=dtype, device=obs.device, memory_format=torch.channels_last)
        x.copy_(obs)
        return x.mul_(scale) if scale != 1.0 else x
    if scale == 1.0:
        return obs.to(dtype)
    if dtype == torch.float32 or obs.dtype == dtype:
        return torch.mul(obs, scale)    # uint8 x Python float promotes to float32: one kernel
    return obs.to(dtype).mul_(scale)    # a new tensor: the caller's observations are left alone


class ImageFeatureExtractor(torch.nn.Module):
    """Base of the convolutional extractors (``CNN``, ``FixupCNN``): a convolutional part
    ``self.convs`` (ending with a flatten) followed by ``self.linear``, applied to the
    observations scaled by ``self.scale``, in the precision and memory layout chosen here.

    Parameters
    ----------
    precision : str
        "fp32", or "bf16": convolutions and linear layers in bfloat16 mixed precision
        (float32 weights and features; see the module docstring).
    channels_last : bool or None
        Layout of the convolutions' input. None: chosen per batch by
        ``prefers_channels_last`` (on the CPU only: oneDNN's convolutions are often faster
        on channels-last input there, by how much depends on the network, the precision
        and the batch); True or False forces it.
    """

    def __init__(self, precision="fp32", channels_last=None):
        super().__init__()
        self.precision = check_precision(precision)
        if channels_last not in (None, True, False):
            raise ValueError(f"channels_last must be None, True or False, got {channels_last!r}")
        self.channels_last = channels_last

    def prefers_channels_last(self, batch, dtype, grad):
        """Whether a CPU batch of ``batch`` images takes the channels-last layout when
        ``channels_last`` is None (``dtype``: the autocast dtype, None in float32; ``grad``:
        gradients will be computed). Subclasses choose from measurements; the default is
        always channels last."""
        return True

    def _channels_last(self, obs, dtype):
        if self.channels_last is not None:
            return self.channels_last
        return obs.device.type == "cpu" and self.prefers_channels_last(obs.shape[0], dtype, torch.is_grad_enabled())

    def forward(self, obs):
        """Map observations (batch, C, H, W), uint8 or float, to float32 features (batch, num_outputs)."""
        dtype = compute_dtype(self.precision, obs.device)
        x = image_input(obs, self.scale, dtype or torch.float32, self._channels_last(obs, dtype))
        if dtype is None:
            return self.linear(self.convs(x))
        with torch.autocast(obs.device.type, dtype=dtype):
            features = self.linear(self.convs(x))
        return features.float()
