"""Running normalisation of an actor's observations (as stable-baselines3's VecNormalize).

An actor built with ``normalize_observations=True`` holds an ``ObservationNormalizer``
(``actor.obs_norm``): the running mean and variance of every observation entry, as torch
buffers. Every input of the actor goes through it (acting, evaluation, the training
batches, the values that bootstrap a rollout), on the torch path and on the numpy fast
paths alike (``pytorchrl.agent.accel.observations``).

The statistics are the learner's: they travel with the acting weights (collectors, the
inference server) and are saved with the actor in checkpoints. Collectors do not change
them; each rollout's ``moments`` travel to the learner with the rollout's information,
and the learner merges them (``merge``) when it publishes its next weight version, so a
rollout is trained on with the statistics it was collected with (see
``GWorker.publish``).
"""

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from pytorchrl.agent.accel.observations import normalized
from pytorchrl.agent.accel.xp import TORCH
from pytorchrl.agent.running_stats import combine, moments
from pytorchrl.agent.spaces import PackedBox, UnsupportedSpaceError, describe_space, packed_space

#: Default of ``observation_clip`` (stable-baselines3's VecNormalize clips at 10 too).
DEFAULT_CLIP = 10.0


def _is_float_box(space):
    return isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating)


def normalized_entries(space):
    """The entries of ``space``'s (flattened) observations that are normalised: a (D,)
    bool array, or None when all are.

    A float ``Box`` is normalised entirely. Of a packed Dict/Tuple (``PackedBox``), the
    float ``Box`` keys are; the others are left as they are: ``Discrete``,
    ``MultiBinary`` and ``MultiDiscrete`` keys (indices and bits, whose scale means
    something) and integer ``Box`` keys (uint8 images, which the CNNs scale by 1/255).

    Parameters
    ----------
    space : gymnasium.Space
        The actor's observation space (packed).

    Raises
    ------
    UnsupportedSpaceError
        One line: image (uint8) observations, or a space with no float entries.
    """
    if isinstance(space, PackedBox):
        mask = np.zeros(space.packing.size, dtype=bool)
        for entry in space.packing.entries:
            mask[entry.start:entry.stop] = _is_float_box(entry.space)
        if not mask.any():
            raise UnsupportedSpaceError(f"normalize_observations: the observation space "
                                        f"{describe_space(space.packing.space)} has no float Box key to normalise")
        return None if mask.all() else mask
    if isinstance(space, gym.spaces.Box) and space.dtype == np.uint8:
        raise UnsupportedSpaceError(f"normalize_observations does not apply to image observations "
                                    f"{describe_space(space)}: the CNNs scale uint8 pixels by 1/255 already")
    if not _is_float_box(space):
        raise UnsupportedSpaceError(f"normalize_observations needs float Box observations (or Dict/Tuple "
                                    f"observations with float Box keys), not {describe_space(space)}")
    return None


def check_normalization(space, normalize_observations, observation_clip=DEFAULT_CLIP):
    """Refuse an actor's normalisation options that cannot apply, before anything is built:
    ``observation_clip`` not a positive number, or given without ``normalize_observations``
    (it would have no effect); observations that are not normalised (``normalized_entries``).

    Parameters
    ----------
    space : gymnasium.Space
        The observation space (packed or not).
    normalize_observations : bool
        Whether the actor normalises its observations.
    observation_clip : float
        The clip of the normalised values.

    Raises
    ------
    ValueError
        One line (``UnsupportedSpaceError`` for the space).
    """
    if isinstance(observation_clip, bool) or not isinstance(observation_clip, (int, float)) \
            or not observation_clip > 0:
        raise ValueError(f"observation_clip must be a positive number, got {observation_clip!r}")
    if not normalize_observations:
        if float(observation_clip) != DEFAULT_CLIP:
            raise ValueError(f"observation_clip={observation_clip!r} has no effect without normalize_observations")
        return
    normalized_entries(packed_space(space))


class ObservationNormalizer(nn.Module):
    """``clip((obs - mean) / sqrt(var + 1e-8), -clip, clip)`` of an actor's observations,
    element-wise, with running statistics.

    Buffers (saved with the actor, sent with its acting weights): ``mean`` and ``var``
    (D,) float64, of every observation entry (D: the flattened observation size; the
    entries left as they are, see ``normalized_entries``, have statistics too, unused),
    and ``count`` (float64 0-d), the observations merged. Before the first merge they
    are 0, 1 and 0: the observations pass through (but for the clip).

    Parameters
    ----------
    space : gymnasium.Space
        The actor's observation space (packed: a Dict/Tuple as a ``PackedBox``).
    clip : float
        Normalised values are clipped to [-clip, clip] (> 0).

    Raises
    ------
    UnsupportedSpaceError
        Observations that are not normalised (``normalized_entries``).
    ValueError
        ``clip`` not a positive number.
    """

    def __init__(self, space, clip=DEFAULT_CLIP):
        super().__init__()
        check_normalization(space, True, clip)
        mask = normalized_entries(space)
        size = int(np.prod(space.shape))
        self.clip = float(clip)
        self.register_buffer("mean", torch.zeros(size, dtype=torch.float64))
        self.register_buffer("var", torch.ones(size, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(0.0, dtype=torch.float64))
        # Derived from the space, not learned: not saved.
        self.register_buffer("mask", None if mask is None else torch.from_numpy(mask), persistent=False)

    def forward(self, obs):
        """The normalised observations: float32, of ``obs``'s shape (B, *obs_shape)."""
        x = obs.reshape(obs.shape[0], -1).float()
        return normalized(TORCH, x, self.mean.float(), self.var.float(), self.clip, self.mask).reshape(obs.shape)

    @staticmethod
    def moments(obs):
        """``{"count", "mean", "var"}`` of the observations ``obs`` (n, *obs_shape) (numpy
        or tensor): what ``merge`` takes, computed where the observations are (a collector)."""
        obs = obs.detach().cpu().numpy() if isinstance(obs, torch.Tensor) else np.asarray(obs)
        count, mean, var = moments(obs.reshape(obs.shape[0], -1))
        return {"count": count, "mean": mean, "var": var}

    def merge(self, stats):
        """Add observations, given by their ``moments``, to the statistics (in place: the
        numpy programs' views of the buffers stay valid).

        Parameters
        ----------
        stats : dict
            ``count``, ``mean`` and ``var`` (``moments``).

        Raises
        ------
        ValueError
            Statistics of another observation size.
        """
        mean = np.asarray(stats["mean"], dtype=np.float64)
        if mean.shape != tuple(self.mean.shape):
            raise ValueError(f"observation statistics of size {mean.shape}, this actor normalises "
                             f"{tuple(self.mean.shape)}")
        count, mean, var = combine(int(self.count.item()), self.mean.cpu().numpy(), self.var.cpu().numpy(),
                                   int(stats["count"]), mean, np.asarray(stats["var"], dtype=np.float64))
        with torch.no_grad():
            self.mean.copy_(torch.from_numpy(np.asarray(mean)))
            self.var.copy_(torch.from_numpy(np.asarray(var)))
            self.count.fill_(float(count))

    def extra_repr(self):
        return f"size={self.mean.numel()}, clip={self.clip}, count={int(self.count.item())}"


__all__ = ["DEFAULT_CLIP", "ObservationNormalizer", "check_normalization", "normalized_entries"]
