"""CartPole with structured spaces, for tests and examples of Dict observations and
MultiDiscrete actions (registered with gymnasium when ``pytorchrl.envs`` is imported):

- ``DictCartPole-v1``: CartPole-v1 observing ``Dict{"position": Box(2), "velocity": Box(2)}``
  (cart position and pole angle; cart velocity and pole angular velocity): the same
  information as CartPole-v1, so it is learnable to the same return.
- ``MultiDiscreteCartPole-v1``: CartPole-v1 acting with ``MultiDiscrete([2, 3])``; only the
  first component pushes the cart (0 left, 1 right), the second is ignored, so it is
  learnable to the same return while the policy must learn a 2 x 3 joint action.
"""

import gymnasium as gym
import numpy as np

#: CartPole's observation entries that go to each key of ``DictCartPole-v1``.
DICT_CARTPOLE_KEYS = {"position": (0, 2), "velocity": (1, 3)}


class DictObservation(gym.ObservationWrapper):
    """Splits a flat Box observation into a Dict of Boxes.

    Parameters
    ----------
    env : gymnasium.Env
        Environment with a one-dimensional Box observation space.
    keys : dict of str to tuple of int
        Every key of the Dict and the entries of the flat observation it holds.
    """

    def __init__(self, env, keys):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"DictObservation needs a flat Box observation space, got {space}")
        self.keys = {k: np.asarray(v, dtype=np.int64) for k, v in keys.items()}
        self.observation_space = gym.spaces.Dict({
            k: gym.spaces.Box(space.low[i], space.high[i], dtype=space.dtype) for k, i in self.keys.items()})

    def observation(self, observation):
        return {k: observation[i] for k, i in self.keys.items()}


class MultiDiscreteActions(gym.ActionWrapper):
    """Acts on a Discrete environment with a MultiDiscrete action whose first component is
    the environment's action and whose other components are ignored.

    Parameters
    ----------
    env : gymnasium.Env
        Environment with a Discrete action space.
    extra : sequence of int
        Sizes of the ignored components that follow the first.
    """

    def __init__(self, env, extra=(3,)):
        super().__init__(env)
        if not isinstance(env.action_space, gym.spaces.Discrete):
            raise ValueError(f"MultiDiscreteActions needs a Discrete action space, got {env.action_space}")
        self.action_space = gym.spaces.MultiDiscrete([int(env.action_space.n), *[int(n) for n in extra]])

    def action(self, action):
        return int(np.asarray(action).reshape(-1)[0])


def make_dict_cartpole(**kwargs):
    """``DictCartPole-v1`` (see the module); ``kwargs`` go to ``gymnasium.make("CartPole-v1")``."""
    return DictObservation(gym.make("CartPole-v1", **kwargs), DICT_CARTPOLE_KEYS)


def make_multidiscrete_cartpole(**kwargs):
    """``MultiDiscreteCartPole-v1`` (see the module); ``kwargs`` go to ``gymnasium.make("CartPole-v1")``."""
    return MultiDiscreteActions(gym.make("CartPole-v1", **kwargs), extra=(3,))


def register_structured_envs():
    """Register ``DictCartPole-v1`` and ``MultiDiscreteCartPole-v1`` (once per process)."""
    for env_id, fn in (("DictCartPole-v1", make_dict_cartpole),
                       ("MultiDiscreteCartPole-v1", make_multidiscrete_cartpole)):
        if env_id not in gym.envs.registry:
            gym.register(env_id, entry_point=fn)
