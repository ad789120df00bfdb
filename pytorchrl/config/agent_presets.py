"""Named agents: the catalogue of whole configurations picked with ``preset: NAME`` at the
top of a file.

An agent preset combines an algorithm, a storage, an actor, an environment (family and
id), a scheme layout (a ``scheme.preset``) and a training budget. Each preset is a YAML
file under ``pytorchrl/config/presets/`` (shipped with the package), and
``examples/configs/`` holds a copy of the same file, so that its values are on view where
users look (tests/unit/test_agent_presets.py keeps the two identical).

This module only names them (the schema's choices for ``preset`` come from here): their
files are read, and merged under a configuration, by ``pytorchrl.config.loader``
(``agent_preset_values``, ``resolve_agent_preset``, ``apply_agent_preset``).
"""

import os

#: Directory of the preset files.
PRESETS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "presets")


class AgentPreset:
    """One named agent.

    Parameters
    ----------
    name : str
        Value of the top-level ``preset`` key.
    description : str
        One line saying what the agent is.
    file : str
        Name of its file in ``PRESETS_DIR`` and of the example in ``examples/configs/``.
    """

    def __init__(self, name, description, file):
        self.name = name
        self.description = description
        self.file = file

    @property
    def path(self):
        """Path of the preset's YAML file."""
        return os.path.join(PRESETS_DIR, self.file)

    def __repr__(self):
        return f"AgentPreset({self.name!r})"


_AGENTS = [
    AgentPreset("A2C", "synchronous advantage actor-critic on CartPole-v1: one gradient step per 8x5-step rollout, "
                       "one process (rl-zoo hyperparameters)", "a2c_cartpole.yaml"),
    AgentPreset("PPO", "PPO on CartPole-v1: 20 epochs over 8x32-step rollouts, lr and clip range annealed to 0, "
                       "one process (rl-zoo hyperparameters)", "ppo_cartpole.yaml"),
    AgentPreset("A3C", "A2C with asynchronous gradients: 2 gradient workers, each gradient applied as it arrives "
                       "(scheme preset a3c)", "a3c_cartpole.yaml"),
    AgentPreset("IMPALA", "A2C with V-trace targets (VTraceBuffer) fed by 2 asynchronous collectors "
                          "(scheme preset async-collectors)", "impala_cartpole.yaml"),
    AgentPreset("DD-PPO", "decentralized data-parallel PPO: 2 gradient workers all-reduce gradients, each with its "
                          "own collector and optimizer (scheme preset dd-ppo)", "ddppo_cartpole.yaml"),
    AgentPreset("DQN", "double DQN on CartPole-v1 with uniform replay, one process (rl-zoo hyperparameters)",
                "dqn_cartpole.yaml"),
    AgentPreset("Ape-X", "double DQN with prioritized 3-step replay (PERBuffer) fed by 2 asynchronous collectors",
                "apex_cartpole.yaml"),
    AgentPreset("R2D2-Lite", "recurrent double DQN (GRU) on the memory task MaskedCartPole-v1: prioritized replay of "
                             "sequences with burn-in (RecurrentReplayBuffer), one process",
                "r2d2_cartpole_masked.yaml"),
    AgentPreset("SAC", "soft actor-critic on Pendulum-v1, one process (rl-zoo hyperparameters)",
                "sac_pendulum.yaml"),
    AgentPreset("TD3", "TD3 on Pendulum-v1, one process (rl-zoo hyperparameters)", "td3_pendulum.yaml"),
    AgentPreset("PPO-Atari", "PPO on Atari (env family atari, PongNoFrameskip-v4, 4 stacked 84x84 frames, Nature "
                             "CNN): pytorchrl's Atari PPO hyperparameters, lr and clip annealed", "ppo_atari.yaml"),
    AgentPreset("SAC-MuJoCo", "SAC on a MuJoCo task (env family mujoco, HalfCheetah-v5), rl-zoo's hyperparameters",
                "sac_mujoco.yaml"),
]

#: Agent presets by name, in the order they are listed.
AGENT_PRESETS = {a.name: a for a in _AGENTS}


def get_agent_preset(name):
    """The agent preset called ``name``.

    Parameters
    ----------
    name : str
        A key of ``AGENT_PRESETS``.

    Raises
    ------
    KeyError
        Naming the valid agent presets.
    """
    try:
        return AGENT_PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown agent preset {name!r}; valid: {', '.join(AGENT_PRESETS)}") from None


__all__ = ["AgentPreset", "AGENT_PRESETS", "PRESETS_DIR", "get_agent_preset"]
