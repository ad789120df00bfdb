"""Spaces beyond Box and Discrete: structured observations and the refusal of the rest.

Structured observations (``Dict``, ``Tuple``) travel packed: every observation is
flattened into one float32 vector (``PackedObservation``), and the environments, the
storages, compression, checkpoints and the Ray layouts all see a flat ``Box``
(``PackedBox``) as they do for any vector observation. The layout rides on that space
(``PackedBox.packing``), so the feature extractor (``DictNet``) cuts the vector back into
its keys, one sub-network per key. Packing costs image keys four bytes a pixel instead of
one (uint8 pixels are kept exactly in float32); the gain is that no layer below the actor
needs to know about structured observations.

Spaces that no actor supports are refused before anything is built
(``UnsupportedSpaceError``: one line naming the space and the algorithm; the command line
reports it with exit status 2).
"""

import gymnasium as gym
import numpy as np


class UnsupportedSpaceError(ValueError):
    """An observation or action space that the algorithm does not support; its message is
    one line naming the space and the algorithm (the command line prints it, exit status 2)."""


def describe_space(space):
    """A short one-line name of ``space``: a Box by its shape and dtype (its bounds can be
    long arrays), a Dict or Tuple by its members, others as gymnasium prints them (their
    class only when that is longer than 80 characters)."""
    if isinstance(space, gym.spaces.Box):
        return f"Box({space.shape}, {space.dtype})"
    if isinstance(space, gym.spaces.Dict):
        return "Dict(" + ", ".join(f"{k}: {describe_space(v)}" for k, v in space.spaces.items()) + ")"
    if isinstance(space, gym.spaces.Tuple):
        return "Tuple(" + ", ".join(describe_space(v) for v in space.spaces) + ")"
    text = " ".join(str(space).split())
    return text if len(text) <= 80 else type(space).__name__


def unsupported(space, role, algorithm, supported):
    """Raise ``UnsupportedSpaceError`` for ``space``.

    Parameters
    ----------
    space : gymnasium.Space
        The refused space.
    role : str
        "action" or "observation".
    algorithm : str
        The algorithm (or component) that refuses it.
    supported : str
        What it supports instead (words).
    """
    raise UnsupportedSpaceError(f"{algorithm} does not support the {role} space {describe_space(space)} "
                                f"(supported: {supported})")


#: Sub-spaces a structured observation may hold (each packed as float32 values).
_LEAVES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)


def looks_like_hwc_image(space):
    """Whether ``space`` is an image given channels last: a uint8 Box of shape (H, W, C)
    with C in 1, 3 or 4 and H, W larger than 4 (so that a (C, H, W) stack of frames or a
    small vector is not mistaken for one).

    Parameters
    ----------
    space : gymnasium.Space
        An observation space.

    Returns
    -------
    bool
    """
    return (isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3
            and space.shape[2] in (1, 3, 4) and space.shape[0] > 4 and space.shape[1] > 4)


class PackedEntry:
    """One key of a packed observation.

    Parameters
    ----------
    key : str or int
        The key in the Dict (or the index in the Tuple).
    space : gymnasium.Space
        The key's space as the feature extractor reads it (images channels first).
    start : int
        Offset of the key's values in the packed vector.
    transpose : bool
        Whether the environment gives this image channels last (packing moves them first).
    """

    def __init__(self, key, space, start, transpose):
        self.key = key
        self.space = space
        self.start = start
        self.transpose = transpose
        self.shape = tuple(space.shape) if space.shape else (1,)
        self.size = int(np.prod(self.shape))

    @property
    def stop(self):
        """End (exclusive) of the key's values in the packed vector."""
        return self.start + self.size


class PackedObservation:
    """Layout of a ``Dict`` or ``Tuple`` observation packed into one float32 vector.

    Keys are packed in the space's order (a ``Dict`` space keeps its keys sorted unless
    built from an ordered mapping), each flattened; images given channels last
    (``looks_like_hwc_image``) are packed channels first, as the CNNs read them.

    Parameters
    ----------
    space : gymnasium.spaces.Dict or gymnasium.spaces.Tuple
        The structured observation space; its members must be Box, Discrete, MultiBinary
        or MultiDiscrete (not nested).

    Raises
    ------
    UnsupportedSpaceError
        A nested or other member space.
    """

    def __init__(self, space):
        if isinstance(space, gym.spaces.Dict):
            items = list(space.spaces.items())
        elif isinstance(space, gym.spaces.Tuple):
            items = list(enumerate(space.spaces))
        else:
            unsupported(space, "observation", "PackedObservation", "Dict and Tuple spaces")
        self.space = space
        self.entries = []
        start = 0
        for key, sub in items:
            if not isinstance(sub, _LEAVES):
                unsupported(sub, "observation", f"PackedObservation (key {key!r})",
                            "Box, Discrete, MultiBinary and MultiDiscrete members, not nested")
            transpose = looks_like_hwc_image(sub)
            if transpose:
                sub = gym.spaces.Box(np.transpose(sub.low, (2, 0, 1)), np.transpose(sub.high, (2, 0, 1)),
                                     dtype=sub.dtype)
            entry = PackedEntry(key, sub, start, transpose)
            self.entries.append(entry)
            start = entry.stop
        self.size = start

    def pack(self, obs):
        """One structured observation (a dict or tuple of arrays) as a float32 vector (size,)."""
        out = np.empty(self.size, dtype=np.float32)
        for e in self.entries:
            value = np.asarray(obs[e.key])
            if e.transpose:
                value = np.transpose(value, (2, 0, 1))
            out[e.start:e.stop] = value.reshape(-1)
        return out

    def unpack(self, packed):
        """A batch of packed vectors (B, size) (numpy or torch) as ``{key: (B, *shape)}``
        views, float32 (the feature extractors scale uint8 pixels by their space)."""
        batch = packed.shape[0]
        return {e.key: packed[:, e.start:e.stop].reshape((batch,) + e.shape) for e in self.entries}

    def __repr__(self):
        return f"PackedObservation({describe_space(self.space)}, size={self.size})"


class PackedBox(gym.spaces.Box):
    """The flat float32 ``Box`` that packed structured observations live in, carrying
    their layout (``packing``) for the feature extractors.

    Parameters
    ----------
    packing : PackedObservation
        The layout.
    """

    def __init__(self, packing):
        super().__init__(-np.inf, np.inf, (packing.size,), dtype=np.float32)
        self.packing = packing

    def __repr__(self):
        return f"PackedBox({describe_space(self.packing.space)}, size={self.packing.size})"

    def __eq__(self, other):
        return isinstance(other, PackedBox) and other.packing.space == self.packing.space


def is_structured(space):
    """Whether ``space`` is a ``Dict`` or ``Tuple`` observation space (packed by the envs)."""
    return isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple))


def packed_space(space):
    """``space`` as the actors and storages see it: a ``PackedBox`` for a Dict or Tuple
    space, any other space unchanged."""
    return PackedBox(PackedObservation(space)) if is_structured(space) else space


def packing_of(space):
    """The ``PackedObservation`` of a packed (or structured) space, else None."""
    if isinstance(space, PackedBox):
        return space.packing
    return PackedObservation(space) if is_structured(space) else None


class PackObservation(gym.ObservationWrapper):
    """Hands out a Dict or Tuple environment's observations packed (``PackedObservation``).

    Parameters
    ----------
    env : gymnasium.Env
        Environment with a Dict or Tuple observation space.
    """

    def __init__(self, env):
        super().__init__(env)
        self.observation_space = packed_space(env.observation_space)
        self.packing = self.observation_space.packing

    def observation(self, observation):
        return self.packing.pack(observation)


def pack_env(env):
    """``env`` wrapped by ``PackObservation`` when its observations are structured, else
    ``env`` itself (what the vector env and ``pytorchrl evaluate`` build)."""
    return PackObservation(env) if is_structured(env.observation_space) else env


#: Action spaces of the on-policy actors (PPO, A2C, V-trace's IMPALA).
ON_POLICY_ACTION_SPACES = (gym.spaces.Discrete, gym.spaces.Box, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)


def check_observation_space(space, algorithm):
    """Refuse an observation space no actor reads (``UnsupportedSpaceError``): anything but
    Box, Discrete, MultiBinary, MultiDiscrete or a (packed) Dict/Tuple of those."""
    if isinstance(space, PackedBox) or isinstance(space, _LEAVES):
        return
    if is_structured(space):
        PackedObservation(space)    # refuses nested or other members
        return
    unsupported(space, "observation", algorithm, "Box, Discrete, MultiBinary, MultiDiscrete, and Dict or Tuple "
                                                 "of those")


def check_action_space(space, algorithm, supported):
    """Refuse an action space not among ``supported`` (classes) for ``algorithm``."""
    if not isinstance(space, tuple(supported)):
        names = ", ".join(c.__name__ for c in supported)
        unsupported(space, "action", algorithm, names)


__all__ = ["looks_like_hwc_image", "UnsupportedSpaceError", "unsupported", "describe_space", "PackedEntry",
           "PackedObservation",
           "PackedBox", "PackObservation", "is_structured", "packed_space", "packing_of", "pack_env",
           "check_observation_space", "check_action_space", "ON_POLICY_ACTION_SPACES"]
