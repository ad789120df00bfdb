"""Feature extractors (MLP, CNN, Fixup): shapes, num_outputs, pixel scaling, gradients, the
name registry, and HWC images turned channels-first by VecEnv."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from pytorchrl.agent.actors.feature_extractors import CNN, MLP, FixupCNN, get_feature_extractor
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
