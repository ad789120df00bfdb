"""Helpers shared by the agent-layer tests (importable because pytest puts tests/ on sys.path).

Only public methods of the components are used, so that the tests keep checking behaviour
while the internals (buffers, fused networks) change.
"""

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.actors.feature_extractors.mlp import MLP
from pytorchrl.agent.actors.feature_extractors.precision import native_bf16
from pytorchrl.agent.algorithms import PPO
from pytorchrl.agent.storages.base import FINAL_OBS, as_numpy


def needs_extra(module, extra):
    """``import module``, or skip the calling test (the whole test module when called at its
    top level) saying which extra of setup.py installs it: collection never fails for a
    missing optional package."""
    __tracebackhide__ = True      # the skip is reported at the caller's line
    return pytest.importorskip(module, reason=f'needs the "{extra}" extra: pip install "pytorchrl[{extra}]"')


#: Skips a test on a CPU without native bfloat16 products (the bf16 paths would be emulated).
needs_bf16 = pytest.mark.skipif(not native_bf16("cpu"), reason="this CPU has no native bfloat16 (AVX512-BF16/AMX)")


def linear_net(width):
    """A 4-input, 2-output MLP with one hidden layer of ``width`` units: its weights are
    about ``6 * width`` floats, so ``width`` sets the size of what a weight broadcast sends."""
    return torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.Tanh(), torch.nn.Linear(width, 2))


def make_actor(obs_space, action_space, algorithm_name="PPO", hidden=(16,), **kwargs):
    """A small OnPolicyActor on the CPU."""
    factory = OnPolicyActor.create_factory(obs_space, action_space, algorithm_name,
                                           feature_extractor_network=MLP,
                                           feature_extractor_kwargs={"hidden_sizes": list(hidden),
                                                                     "activation": "tanh"},
                                           **kwargs)
    return factory("cpu")


class TablePPO(PPO):
    """PPO whose ``bootstrap`` reads the values of a table instead of the critic.

    A test registers, for each observation row a storage will need, the value it should
    get (``register_values``); ``bootstrap(obs, state)`` answers, row by row, the value
    registered for that exact row (byte for byte, as float32) and raises KeyError for a row
    nobody registered, so that a storage asking for the wrong observation fails loudly.
    Every call is logged in ``bootstrap_calls`` as ``(obs copy, state)``.
    """

    # No __init__ of its own: the hyperparameters are read from PPO's signature.
    @property
    def value_table(self):
        """Dict observation bytes -> registered value."""
        return self.__dict__.setdefault("_value_table", {})

    @property
    def bootstrap_calls(self):
        """List of ``(obs, state)`` of every ``bootstrap`` call, in order."""
        return self.__dict__.setdefault("_bootstrap_calls", [])

    @staticmethod
    def _key(row):
        return np.ascontiguousarray(as_numpy(row), dtype=np.float32).tobytes()

    def register_values(self, obs, values):
        """Register ``values[i]`` as the bootstrap value of observation ``obs[i]``.

        Parameters
        ----------
        obs : array or tensor (M, *obs_shape)
        values : array or tensor (M,) or (M, 1)

        Registering a row again with a different value raises ValueError (the table
        would otherwise answer one of two values for the same observation).
        """
        obs, values = as_numpy(obs), as_numpy(values).reshape(-1)
        assert len(obs) == len(values), (obs.shape, values.shape)
        for row, v in zip(obs, values):
            key, v = self._key(row), float(v)
            old = self.value_table.setdefault(key, v)
            if old != v:
                raise ValueError(f"observation {row} registered with values {old} and {v}")

    def bootstrap(self, obs, state=None):
        obs = np.array(as_numpy(obs))
        self.bootstrap_calls.append((obs, state))
        values = np.empty((len(obs), 1), dtype=np.float32)
        for i, row in enumerate(obs):
            key = self._key(row)
            if key not in self.value_table:
                raise KeyError(f"TablePPO.bootstrap: no value registered for observation {row}")
            values[i, 0] = self.value_table[key]
        return values


def final_obs_of(obs, t, n):
    """The synthesized final observation of env ``n``'s episode ended at step ``t``: after
    an episode ends ``obs[t + 1, n]`` is the reset observation of the next one, so the
    final observation is another, distinct one."""
    return as_numpy(obs[t + 1, n]) + np.float32(0.5)


def record_step(storage, act, logp, val, rew, term, trunc, next_obs, final_obs=None):
    """Record one vectorized step through the storage's ``insert``, keyed as ``CWorker``
    does (``final_obs``: dict env index -> final observation of the episodes that ended)."""
    storage.insert({prl.ACT: act, prl.LOGP: logp, prl.VAL: val, prl.REW: rew, prl.TERM: term,
                    prl.TRUNC: trunc, prl.OBS2: next_obs, FINAL_OBS: final_obs or {}})


def table_of(storage):
    algo = storage.algorithm
    assert isinstance(algo, TablePPO), f"write_rollout needs a storage built with a TablePPO, not {type(algo)}"
    return algo


def record_rollout_step(storage, t, obs, act, logp, val, rew, term, trunc, trunc_val=None):
    """Record step ``t`` of a rollout (arguments as in ``write_rollout``).

    Every env whose episode ended at step t (terminated or truncated) gets a final
    observation (``final_obs_of``) in ``FINAL_OBS``; those of truncated steps are
    registered with value ``trunc_val[t, n]`` (0 if ``trunc_val`` is None) in the
    storage's ``TablePPO``.
    """
    term_t, trunc_t = as_numpy(term[t]).astype(bool), as_numpy(trunc[t]).astype(bool)
    final = {}
    for n in np.flatnonzero(term_t | trunc_t).tolist():
        final[n] = final_obs_of(obs, t, n)
        if trunc_t[n]:
            v = 0.0 if trunc_val is None else float(as_numpy(trunc_val[t]).reshape(-1)[n])
            table_of(storage).register_values(final[n][None], [v])
    record_step(storage, act[t], logp[t], val[t], rew[t], torch.as_tensor(term_t), torch.as_tensor(trunc_t),
                obs[t + 1], final)


def close_rollout(storage, last_obs, last_val, state=None):
    """Register ``last_val`` (N, 1) as the value of ``last_obs`` (N, *obs_shape) and
    ``finish`` the rollout."""
    table_of(storage).register_values(last_obs, last_val)
    storage.finish(state)


def write_rollout(storage, obs, act, logp, val, rew, term, trunc, trunc_val=None, steps=None):
    """Write a whole rollout into ``storage`` through the collection-side API
    (``start`` / ``insert`` / ``finish``), its algorithm being a ``TablePPO``.

    Parameters
    ----------
    obs : tensor (T + 1, N, *obs_shape)
        Observations; ``obs[t]`` is the one step t acts from, ``obs[T]`` the one after the last step.
    act : tensor (T, N, *act_shape)
    logp : tensor (T, N, 1)
    val : tensor (T + 1, N, 1)
        Values; ``val[k]`` is registered as the bootstrap value of ``obs[k]``, the
        observation after the last recorded step.
    rew, term, trunc : tensors (T, N) (flags may be float or bool)
    trunc_val : tensor (T, N, 1) or None
        Registered as the value of the final observation of each truncated step (None: 0).
    steps : int or None
        Record only the first ``steps`` steps (a rollout cut short); None: all T.
    """
    k = rew.shape[0] if steps is None else steps
    storage.start(obs[0])
    for t in range(k):
        record_rollout_step(storage, t, obs, act, logp, val, rew, term, trunc, trunc_val)
    close_rollout(storage, obs[k], val[k])


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
