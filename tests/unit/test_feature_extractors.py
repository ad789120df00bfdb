"""Feature extractors (MLP, CNN, Fixup): shapes, num_outputs, pixel scaling, gradients, the
name registry, the image extractors' memory layout (channels last) and bf16 mixed precision,
and HWC images turned channels-first by VecEnv."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from pytorchrl.agent.actors.feature_extractors import CNN, MLP, FixupCNN, get_feature_extractor
from pytorchrl.agent.actors.feature_extractors import precision as precision_module
from pytorchrl.agent.actors.feature_extractors.precision import image_input, native_bf16
from pytorchrl.agent.env import VecEnv


def image_space(shape, dtype=np.uint8):
    return gym.spaces.Box(0, 255, shape=shape, dtype=dtype)


def random_images(batch, shape, seed=0):
    return torch.randint(0, 256, (batch, *shape), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("cls,features", [(CNN, 512), (FixupCNN, 256)])
@pytest.mark.parametrize("shape", [(4, 84, 84), (1, 64, 64), (3, 96, 72)])
def test_output_shape_and_num_outputs(cls, features, shape):
    torch.manual_seed(0)
    net = cls(image_space(shape))
    assert net.num_outputs == features
    out = net(random_images(3, shape))
    assert out.shape == (3, features) and out.dtype == torch.float32


def test_feature_size_is_configurable():
    space = image_space((4, 84, 84))
    frames = random_images(2, (4, 84, 84))
    assert CNN(space, hidden_size=128)(frames).shape == (2, 128)
    net = FixupCNN(space, hidden_size=64, channels=(8, 16))
    assert net(frames).shape == (2, 64) and net.linear[0].in_features == 16 * 21 * 21


def test_nature_cnn_layers():
    net = CNN(image_space((4, 84, 84)))
    convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == \
        [(32, (8, 8), (4, 4)), (64, (4, 4), (2, 2)), (64, (3, 3), (1, 1))]
    assert net.linear[0].in_features == 64 * 7 * 7


def test_fixup_residual_branches_start_at_identity():
    """Fixup: the last convolution of every residual branch starts at zero, so at
    initialisation every residual block is the identity."""
    from pytorchrl.agent.actors.feature_extractors.fixup import FixupResidual
    net = FixupCNN(image_space((4, 84, 84)))
    blocks = [m for m in net.modules() if isinstance(m, FixupResidual)]
    assert len(blocks) == 6 and [b.conv1.in_channels for b in blocks] == [16, 16, 32, 32, 32, 32]
    x = torch.randn(2, 16, 21, 21)
    torch.testing.assert_close(blocks[0](x), x)
    assert net.linear[0].in_features == 32 * 11 * 11


@pytest.mark.parametrize("cls", [CNN, FixupCNN])
def test_uint8_observations_are_scaled(cls):
    """uint8 spaces are divided by 255 whatever the tensor's dtype (a storage may hand frames
    back as float); float spaces are not."""
    shape = (4, 40, 40)  # small: the scaling does not depend on the size
    torch.manual_seed(0)
    net = cls(image_space(shape))
    frames = random_images(2, shape)
    out = net(frames)
    torch.testing.assert_close(net(frames.float()), out)
    float_net = cls(image_space(shape, dtype=np.float32))
    float_net.load_state_dict(net.state_dict())
    torch.testing.assert_close(float_net(frames.float() / 255.0), out)
    assert cls(image_space(shape), scale=1.0).scale == 1.0


@pytest.mark.parametrize("cls", [CNN, FixupCNN])
def test_gradients_reach_every_parameter(cls):
    torch.manual_seed(0)
    net = cls(image_space((4, 84, 84)))
    net(random_images(4, (4, 84, 84))).pow(2).sum().backward()
    for name, p in net.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    # Fixup's zero-initialised convolutions receive gradient and leave zero at the first step.
    assert all(p.grad.abs().sum() > 0 for n, p in net.named_parameters() if "conv2" in n or "linear" in n)


def test_image_extractors_refuse_flat_or_tiny_inputs():
    flat = gym.spaces.Box(-1, 1, shape=(8,), dtype=np.float32)
    for cls in (CNN, FixupCNN):
        with pytest.raises(ValueError, match="C, H, W"):
            cls(flat)
    with pytest.raises(ValueError, match="36x36"):
        CNN(image_space((3, 20, 20)))


def test_get_feature_extractor():
    assert get_feature_extractor("MLP") is MLP
    assert get_feature_extractor("cnn") is CNN
    assert get_feature_extractor("Fixup") is FixupCNN
    assert get_feature_extractor("FIXUP") is FixupCNN
    assert get_feature_extractor(CNN) is CNN
    with pytest.raises(ValueError, match="MLP, CNN, Fixup"):
        get_feature_extractor("ResNet")


# ------------------------------------------------------- memory layout and mixed precision
def first_conv_inputs(net):
    """A list that receives the input of ``net``'s first convolution at every forward."""
    seen = []
    first = next(m for m in net.modules() if isinstance(m, torch.nn.Conv2d))
    first.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    return seen


#: Small images and networks: what is checked does not depend on the size.
SHAPE = (4, 48, 48)
SIZES = {CNN: {"hidden_size": 64}, FixupCNN: {"hidden_size": 32, "channels": (8, 16)}}


def small(cls, **kwargs):
    return cls(image_space(SHAPE), **SIZES[cls], **kwargs)


def twin(cls, net, **kwargs):
    """A small ``cls`` extractor built with ``kwargs`` holding ``net``'s weights."""
    other = small(cls, **kwargs)
    other.load_state_dict(net.state_dict())
    return other


def test_image_input_converts_in_one_pass_with_the_same_values():
    frames = random_images(3, (4, 40, 40))
    reference = frames.float() * (1 / 255)
    for channels_last in (False, True):
        x = image_input(frames, 1 / 255, torch.float32, channels_last)
        assert x.dtype == torch.float32 and x.is_contiguous(memory_format=torch.channels_last) == channels_last
        assert torch.equal(x, reference)
        # bfloat16: the uint8 pixels are exact, the product is rounded once (as autocast
        # rounds the float32 product).
        y = image_input(frames, 1 / 255, torch.bfloat16, channels_last)
        assert y.dtype == torch.bfloat16 and torch.equal(y, reference.to(torch.bfloat16))
    # Float frames of another precision are scaled in float32 and rounded once.
    assert torch.equal(image_input(frames.float(), 1 / 255, torch.bfloat16), reference.to(torch.bfloat16))
    # Never in place on the caller's tensor, whatever the dtypes.
    halves = frames.to(torch.bfloat16)
    before = halves.clone()
    image_input(halves, 1 / 255, torch.bfloat16)
    assert torch.equal(halves, before)


@pytest.mark.parametrize("cls", [CNN, FixupCNN])
def test_channels_last_computes_what_channels_first_computes(cls):
    """The channels-last input layout changes the order of the convolutions' sums only:
    outputs and every parameter's gradient match the channels-first path to float32 rounding."""
    torch.manual_seed(0)
    first = small(cls, channels_last=False)
    last = twin(cls, first, channels_last=True)
    frames = random_images(6, SHAPE)
    seen = first_conv_inputs(last)
    out_first, out_last = first(frames), last(frames)
    assert seen[-1].is_contiguous(memory_format=torch.channels_last) and not seen[-1].is_contiguous()
    torch.testing.assert_close(out_last, out_first, rtol=1e-5, atol=1e-5)
    out_first.pow(2).sum().backward()
    out_last.pow(2).sum().backward()
    for (name, a), b in zip(first.named_parameters(), last.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-5 * float(a.grad.abs().max()) + 1e-12,
                                   msg=name)


def test_automatic_layout_follows_the_measurements():
    """None (the default) picks channels last on the CPU where it was measured faster: the
    Nature CNN in float32 for batches with gradients and large inference batches (small
    acting batches stay channels first), FixupCNN always."""
    def layout(net, batch, grad):
        seen = first_conv_inputs(net)
        with torch.set_grad_enabled(grad):
            net(random_images(batch, SHAPE))
        return seen[-1].is_contiguous(memory_format=torch.channels_last) and not seen[-1].is_contiguous()

    torch.manual_seed(0)
    cnn = small(CNN)
    assert layout(cnn, 4, grad=True)
    assert not layout(cnn, 8, grad=False)
    assert layout(cnn, 128, grad=False)
    fixup = small(FixupCNN)
    assert layout(fixup, 2, grad=False) and layout(fixup, 2, grad=True)
    with pytest.raises(ValueError, match="channels_last"):
        CNN(image_space((4, 84, 84)), channels_last="yes")


@pytest.mark.skipif(not native_bf16("cpu"), reason="this CPU has no native bfloat16 (AVX512-BF16/AMX)")
@pytest.mark.parametrize("cls", [CNN, FixupCNN])
def test_bf16_mixed_precision_computes_in_bfloat16_with_float32_weights_and_features(cls):
    torch.manual_seed(0)
    full = small(cls)
    mixed = twin(cls, full, precision="bf16")
    frames = random_images(6, SHAPE)
    seen = first_conv_inputs(mixed)
    out_full, out_mixed = full(frames), mixed(frames)
    assert seen[-1].dtype == torch.bfloat16
    # Features, weights and gradients stay float32; values agree to bfloat16's precision.
    assert out_mixed.dtype == torch.float32
    assert float((out_mixed - out_full).detach().norm() / out_full.detach().norm()) < 0.03
    out_full.pow(2).sum().backward()
    out_mixed.pow(2).sum().backward()
    for (name, a), b in zip(full.named_parameters(), mixed.parameters()):
        assert b.dtype == torch.float32 and b.grad.dtype == torch.float32, name
        if a.grad.abs().sum() > 0:
            assert float((b.grad - a.grad).norm() / a.grad.norm()) < 0.05, name
    # Inference (acting) runs in bfloat16 too, and leaves no autocast state behind.
    with torch.inference_mode():
        assert mixed(frames[:2]).dtype == torch.float32
    assert seen[-1].dtype == torch.bfloat16 and not torch.is_autocast_enabled("cpu")


def test_bf16_without_native_support_says_so_once_and_computes_fp32(monkeypatch, caplog):
    """A CPU without AVX512-BF16/AMX would emulate bfloat16 more slowly than float32: the
    extractor computes in float32 (bit for bit the fp32 extractor) and says so once."""
    monkeypatch.setattr(precision_module, "native_bf16", lambda device_type: False)
    monkeypatch.setattr("pytorchrl.agent.notices._said", set())
    torch.manual_seed(0)
    full = small(CNN)
    mixed = twin(CNN, full, precision="bf16")
    frames = random_images(3, SHAPE)
    seen = first_conv_inputs(mixed)
    with caplog.at_level("WARNING", logger="pytorchrl"):
        out = mixed(frames)
        mixed(frames)
    assert seen[-1].dtype == torch.float32 and torch.equal(out, full(frames))
    notes = [r.getMessage() for r in caplog.records if "bf16" in r.getMessage()]
    assert len(notes) == 1 and "computing in fp32" in notes[0]


def test_precision_is_checked():
    with pytest.raises(ValueError, match="precision must be one of"):
        CNN(image_space((4, 84, 84)), precision="fp16")
    with pytest.raises(ValueError, match="precision must be one of"):
        FixupCNN(image_space((4, 84, 84)), precision=None)


# ----------------------------------------------------------------- HWC images through VecEnv
def hwc_image(t, height, width, channels):
    """uint8 image (H, W, C) whose pixel (y, x, c) is ``t + y + 2x + 3c`` (mod 256): every
    axis is recognisable after a transposition."""
    y, x, c = np.meshgrid(np.arange(height), np.arange(width), np.arange(channels), indexing="ij")
    return ((t + y + 2 * x + 3 * c) % 256).astype(np.uint8)


def expected_chw(t, height, width, channels):
    return np.transpose(hwc_image(t, height, width, channels), (2, 0, 1))


class HWCImageEnv(gym.Env):
    """Episodes of 3 steps whose observations are ``hwc_image(t, ...)``, t the step count."""

    def __init__(self, height=12, width=10, channels=3):
        self.observation_space = gym.spaces.Box(0, 255, shape=(height, width, channels), dtype=np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def _obs(self):
        return hwc_image(self.t, *self.observation_space.shape)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 1.0, self.t >= 3, False, {}


@pytest.mark.parametrize("vectorization", ["sync", "subprocess"])
def test_vec_env_turns_hwc_images_channels_first(vectorization):
    factory, _, obs_space = VecEnv.create_factory(HWCImageEnv, {"height": 48, "width": 40}, vec_env_size=2,
                                                  vectorization=vectorization)
    assert obs_space.shape == (3, 48, 40) and obs_space.dtype == np.uint8
    envs = factory("cpu")
    try:
        obs = envs.reset()
        assert tuple(obs.shape) == (2, 3, 48, 40)
        np.testing.assert_array_equal(obs[0].numpy(), expected_chw(0, 48, 40, 3))
        for t in (1, 2, 3):
            obs, _, term, _, final_obs = envs.step(np.zeros(2, dtype=np.int64))
        # The episode ended at t=3: its final observation is transposed too.
        assert term.all()
        np.testing.assert_array_equal(final_obs[1], expected_chw(3, 48, 40, 3))
        np.testing.assert_array_equal(obs[1].numpy(), expected_chw(0, 48, 40, 3))
    finally:
        envs.close()
    # The transposed space feeds a CNN directly.
    torch.manual_seed(0)
    assert CNN(obs_space)(obs).shape == (2, 512)


def test_vec_env_channels_first_option():
    # Auto: single-channel and 4-channel HWC images are transposed.
    for channels in (1, 4):
        _, _, space = VecEnv.create_factory(HWCImageEnv, {"height": 8, "width": 6, "channels": channels})
        assert space.shape == (channels, 8, 6)
    # False keeps HWC; True forces the transposition of an image auto-detection would skip.
    _, _, space = VecEnv.create_factory(HWCImageEnv, {"channels": 3}, channels_first=False)
    assert space.shape == (12, 10, 3)
    _, _, space = VecEnv.create_factory(HWCImageEnv, {"channels": 2})
    assert space.shape == (12, 10, 2)
    factory, _, space = VecEnv.create_factory(HWCImageEnv, {"channels": 2}, channels_first=True)
    assert space.shape == (2, 12, 10)
    assert tuple(factory("cpu").reset().shape) == (1, 2, 12, 10)
    with pytest.raises(ValueError, match="channels_first"):
        VecEnv.create_factory(lambda: gym.make("CartPole-v1"), channels_first=True)
    with pytest.raises(ValueError, match="channels_first"):
        VecEnv.create_factory(HWCImageEnv, channels_first="yes")


def test_vec_env_leaves_vectors_and_chw_images_alone():
    _, _, space = VecEnv.create_factory(lambda: gym.make("CartPole-v1"))
    assert space.shape == (4,)

    class CHWEnv(HWCImageEnv):
        def __init__(self):
            super().__init__()
            self.observation_space = gym.spaces.Box(0, 255, shape=(4, 84, 84), dtype=np.uint8)

        def _obs(self):
            return np.zeros((4, 84, 84), dtype=np.uint8)

    _, _, space = VecEnv.create_factory(CHWEnv)
    assert space.shape == (4, 84, 84)
