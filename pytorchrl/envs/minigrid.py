"""MiniGrid gridworlds (``MiniGrid-Empty-5x5-v0``, ``MiniGrid-DoorKey-5x5-v0``, ...).

Requires the ``minigrid`` package (``pip install "pytorchrl[minigrid]"``). A MiniGrid
environment observes a Dict (``image``: the agent's 7x7 partial view, ``direction``,
``mission``: a text); ``observation`` chooses what the agent sees instead:

- ``image`` (default): the symbolic view, uint8 of shape (7, 7, 3) holding (object, colour,
  state) indices per cell (MiniGrid's ``ImgObsWrapper``). Channels last, and too small for
  the Atari CNN: ``actor.feature_extractor: auto`` gives it the MLP;
- ``onehot``: the same view one-hot encoded per cell (``OneHotPartialObsWrapper``),
  flattened to uint8 of shape (7 * 7 * 20,) = (980,) for the MLP;
- ``rgb``: the view drawn as pixels, 8 per cell (``RGBImgPartialObsWrapper``), channels first,
  uint8 of shape (3, 56, 56): an image for the CNN;
- ``dict``: MiniGrid's Dict itself, packed like every Dict observation (docs/spaces.md) and
  read by ``DictNet``: ``image`` (7, 7, 3) uint8 and ``direction`` (Discrete(4)) as they are;
  ``mission`` is a free text (a gymnasium ``Text``, which no network reads), so it is given as
  a bag of words: a MultiBinary(``MISSION_BITS``) with the bit ``crc32(word) % MISSION_BITS``
  set for each of its words (``mission_bits``). Word order is lost (MiniGrid's missions are
  short and mostly fixed per task; two words may share a bit).

The reward is MiniGrid's: ``1 - 0.9 * steps / max_steps`` on reaching the goal, 0 otherwise;
episodes are truncated at the task's ``max_steps`` (4 * size * size for Empty).
"""

import zlib

import gymnasium as gym
import numpy as np

from pytorchrl.envs.common import SeedOnFirstReset, env_seed

__all__ = ["minigrid_train_env_factory", "minigrid_test_env_factory", "OBSERVATIONS", "observation_refused",
           "register_minigrid", "mission_bits", "MISSION_BITS"]

#: What a MiniGrid agent may observe (``env.observation``), see the module documentation.
OBSERVATIONS = ("image", "onehot", "rgb", "dict")

#: Bits of the bag of words that stands for the mission text in ``observation: dict``: MiniGrid's
#: missions use a few dozen words, so collisions between two of them are rare.
MISSION_BITS = 128

#: Pixels per grid cell of the ``rgb`` observation (MiniGrid's default tile size).
RGB_TILE_SIZE = 8


def register_minigrid():
    """Register the MiniGrid ids with gymnasium (importing minigrid does it).

    Raises
    ------
    ImportError
        When minigrid is not installed, naming the extra that installs it.
    """
    try:
        import minigrid  # noqa: F401  (registers the MiniGrid-* ids)
    except ImportError as exc:
        raise ImportError("MiniGrid environments need minigrid: pip install \"pytorchrl[minigrid]\"") from exc


def observation_refused(observation):
    """Why ``observation`` cannot be a MiniGrid observation (None when it can).

    Parameters
    ----------
    observation : str
        The ``env.observation`` asked for.

    Returns
    -------
    str or None
        One line saying what is wrong and what is valid.
    """
    if observation not in OBSERVATIONS:
        return f"expected one of {', '.join(OBSERVATIONS)}, got {observation!r}"
    return None


class _ChannelsFirst(gym.ObservationWrapper):
    """Moves the channels of (H, W, C) images first, (C, H, W), as the CNNs expect."""

    def __init__(self, env):
        super().__init__(env)
        space = env.observation_space
        self.observation_space = gym.spaces.Box(np.transpose(space.low, (2, 0, 1)),
                                                np.transpose(space.high, (2, 0, 1)), dtype=space.dtype)

    def observation(self, observation):
        return np.ascontiguousarray(np.transpose(observation, (2, 0, 1)))


def mission_bits(mission, bits=MISSION_BITS):
    """A mission text as a bag of words: int8 bits, the bit ``crc32(word) % bits`` set for each
    word (lower-cased, punctuation split off). crc32 rather than ``hash``: the same text gives
    the same bits in every process.

    Parameters
    ----------
    mission : str
        The mission, e.g. "get to the green goal square".
    bits : int
        Length of the bag.

    Returns
    -------
    numpy.ndarray
        int8 of shape (bits,), 0 or 1.
    """
    out = np.zeros(bits, np.int8)
    for word in mission.lower().replace(",", " ").replace(".", " ").split():
        out[zlib.crc32(word.encode()) % bits] = 1
    return out


class _MissionAsWords(gym.ObservationWrapper):
    """MiniGrid's Dict observation with its ``mission`` text as a bag of words (``mission_bits``)."""

    def __init__(self, env):
        super().__init__(env)
        space = env.observation_space
        self.observation_space = gym.spaces.Dict({"image": space["image"], "direction": space["direction"],
                                                  "mission": gym.spaces.MultiBinary(MISSION_BITS)})

    def observation(self, observation):
        return {"image": observation["image"], "direction": observation["direction"],
                "mission": mission_bits(observation["mission"])}


def _make_minigrid(env_id, index_col_worker, index_grad_worker, index_env, seed, observation, render_mode, mode):
    problem = observation_refused(observation)
    if problem is not None:
        raise ValueError(f"observation: {problem}")
    register_minigrid()
    from minigrid.wrappers import ImgObsWrapper, OneHotPartialObsWrapper, RGBImgPartialObsWrapper

    env = gym.make(env_id, render_mode=render_mode)
    if observation == "onehot":
        env = gym.wrappers.FlattenObservation(ImgObsWrapper(OneHotPartialObsWrapper(env)))
    elif observation == "rgb":
        env = _ChannelsFirst(ImgObsWrapper(RGBImgPartialObsWrapper(env, tile_size=RGB_TILE_SIZE)))
    elif observation == "dict":
        env = _MissionAsWords(env)
    else:
        env = ImgObsWrapper(env)
    return SeedOnFirstReset(env, env_seed(seed, index_col_worker, index_grad_worker, index_env, mode))


def minigrid_train_env_factory(env_id, index_col_worker, index_grad_worker, index_env=0, seed=0,
                               observation="image", render_mode=None):
    """Create a training MiniGrid environment.

    Parameters
    ----------
    env_id : str
        Gymnasium id of the task, e.g. "MiniGrid-Empty-5x5-v0".
    index_col_worker : int
        Index of the collection worker running this environment.
    index_grad_worker : int
        Index of the gradient worker owning that collection worker.
    index_env : int
        Index of this environment within its worker's vector.
    seed : int
        Base seed; combined with the three indexes so that every environment of every
        worker gets a different, reproducible seed (grid layout and action space).
    observation : str
        What the agent observes: image (the symbolic 7x7x3 view, for the MLP), onehot (that
        view one-hot per cell, flattened to 980 values), rgb (the view as 3x56x56 pixels,
        for the CNN) or dict (MiniGrid's Dict: image, direction, and the mission as a bag of
        ``MISSION_BITS`` word bits; read by ``DictNet``).
    render_mode : str or None
        Passed to ``gymnasium.make`` ("rgb_array" to film episodes).

    Returns
    -------
    gymnasium.Env
        uint8 observations: (7, 7, 3) for image, (980,) for onehot, (3, 56, 56) for rgb; a Dict
        (image, direction, mission bits) for dict.
    """
    return _make_minigrid(env_id, index_col_worker, index_grad_worker, index_env, seed, observation, render_mode,
                          "train")


def minigrid_test_env_factory(env_id, index_col_worker, index_grad_worker, index_env=0, seed=0,
                              observation="image", render_mode=None):
    """Create a test MiniGrid environment: the same as ``minigrid_train_env_factory``, with the
    same parameters and returns, seeded differently from the training environment of the same
    indexes."""
    return _make_minigrid(env_id, index_col_worker, index_grad_worker, index_env, seed, observation, render_mode,
                          "test")
