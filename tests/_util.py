"""Helpers shared by the agent-layer tests (importable because pytest puts tests/ on sys.path).

Only public methods of the components are used, so that the tests keep checking behaviour
while the internals (buffers, fused networks) change.
"""

import inspect

import gymnasium as gym
import numpy as np
import torch

from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.actors.feature_extractors.mlp import MLP


def make_actor(obs_space, action_space, algorithm_name="PPO", hidden=(16,), **kwargs):
    """A small OnPolicyActor on the CPU."""
    factory = OnPolicyActor.create_factory(obs_space, action_space, algorithm_name,
                                           feature_extractor_network=MLP,
                                           feature_extractor_kwargs={"hidden_sizes": list(hidden),
                                                                     "activation": "tanh"},
                                           **kwargs)
    return factory("cpu")


def _takes_next_obs(storage):
    return "next_obs" in inspect.signature(storage.insert_transition).parameters


def record_step(storage, act, logp, val, rew, term, trunc, next_obs, trunc_val=None):
    """Record one vectorized transition through the storage's collection-side API.

    The storage either takes the next observation with the transition
    (``insert_transition(..., next_obs, trunc_val)``) or in a separate call
    (``insert_transition(..., trunc_val)`` then ``set_next_obs(next_obs)``).
    """
    if _takes_next_obs(storage):
        storage.insert_transition(act, logp, val, rew, term, trunc, next_obs, trunc_val)
    else:
        storage.insert_transition(act, logp, val, rew, term, trunc, trunc_val)
        storage.set_next_obs(next_obs)


def write_rollout(storage, obs, act, logp, val, rew, term, trunc, trunc_val=None):
    """Write a whole rollout into ``storage`` through the collection-side API.

    Parameters
    ----------
    obs : tensor (T + 1, N, *obs_shape)
        Observations; ``obs[t]`` is the one step t acts from, ``obs[T]`` the one after the last step.
    act : tensor (T, N, *act_shape)
    logp : tensor (T, N, 1)
    val : tensor (T + 1, N, 1)
        Values; ``val[T]`` closes the rollout (``finish_rollout``).
    rew, term, trunc : tensors (T, N) (flags may be float or bool)
    trunc_val : tensor (T, N, 1) or None
    """
    T = rew.shape[0]
    storage.reset_rollout(obs[0])
    for t in range(T):
        record_step(storage, act[t], logp[t], val[t], rew[t], term[t].bool(), trunc[t].bool(), obs[t + 1],
                    None if trunc_val is None else trunc_val[t])
    storage.finish_rollout(val[T])


def random_rollout(T, N, obs_dim=3, action_space=None, seed=0, offset=0.0):
    """A synthetic rollout with unique observations: ``obs[t, n, 0] = offset + 100 t + n``.

    Returns a dict with the arguments of ``write_rollout``.
    """
    g = torch.Generator().manual_seed(seed)
    action_space = action_space or gym.spaces.Discrete(3)
    obs = torch.randn(T + 1, N, obs_dim, generator=g)
    obs[..., 0] = offset + 100.0 * torch.arange(T + 1).unsqueeze(1) + torch.arange(N).unsqueeze(0)
    if isinstance(action_space, gym.spaces.Discrete):
        act = torch.randint(0, int(action_space.n), (T, N, 1), generator=g)
    else:
        act = torch.randn(T, N, int(np.prod(action_space.shape)), generator=g) * 3.0
    ends = torch.rand(T, N, generator=g)
    return dict(obs=obs, act=act, logp=-torch.rand(T, N, 1, generator=g), val=torch.randn(T + 1, N, 1, generator=g),
                rew=torch.randn(T, N, generator=g), term=(ends < 0.15).float(),
                trunc=((ends >= 0.15) & (ends < 0.25)).float(),
                trunc_val=torch.randn(T, N, 1, generator=g) * ((ends >= 0.15) & (ends < 0.25)).float().unsqueeze(-1))


def param_count(module):
    return sum(p.numel() for p in module.parameters())
