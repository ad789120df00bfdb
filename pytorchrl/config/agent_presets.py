"""Named agents: whole configurations picked with ``preset: NAME`` at the top of a file.

An agent preset combines an algorithm, a storage, an actor, an environment (family and
id), a scheme layout (a ``scheme.preset``) and a training budget. Its values fill every
section first; the keys written in the configuration file (and ``key=value`` overrides)
win, key by key::

    preset: PPO-Atari
    env: {id: BreakoutNoFrameskip-v4}
    learner: {target_steps: 1000000}

Each preset is a YAML file under ``pytorchrl/config/presets/`` (shipped with the
package), and ``examples/configs/`` holds a copy of the same file, so that its values are
on view where users look (tests/unit/test_agent_presets.py keeps the two identical).
A preset file may start from another preset (``preset: A2C`` in the A3C file): the same
rule applies, its own keys win.

When the file names another algorithm than the preset's (``algorithm: {name: A2C}``), the
preset's ``algorithm`` section and its schedules (which name that algorithm's parameters)
are dropped rather than merged, and its ``actor`` and ``storage`` sections too when the
other algorithm is of the other family (on-policy or off-policy); likewise the ``storage``
section for another storage name and the ``env`` section for another ``env.family``.
"""

import copy
import os

#: Directory of the preset files.
PRESETS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "presets")

#: Key of a section (and its value when absent) whose change replaces the preset's section
#: instead of merging into it.
_IDENTITY = {"algorithm": ("name", None), "storage": ("name", None), "env": ("family", "gym")}


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
        self._values = None

    @property
    def path(self):
        """Path of the preset's YAML file."""
        return os.path.join(PRESETS_DIR, self.file)

    @property
    def values(self):
        """The configuration the preset file holds (a copy), as written (its own ``preset`` unexpanded)."""
        if self._values is None:
            # Imported here: the loader imports the validation, which imports this module.
            from pytorchrl.config.loader import load_yaml
            self._values = load_yaml(self.path)
        return copy.deepcopy(self._values)

    def resolved(self):
        """The preset's values with the presets it starts from expanded (not yet validated)."""
        return apply_agent_preset(self.values)

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


def _replaces(below, value, section):
    """Whether the written ``value`` of ``section`` replaces the preset's instead of merging into it."""
    if section not in _IDENTITY:
        return False
    key, absent = _IDENTITY[section]
    return value.get(key) is not None and below.get(key, absent) != value[key]


def merge_configs(base, over):
    """``over`` written on top of ``base`` (neither is modified): sections merged key by key
    (``over`` wins), anything else replaced; see the module documentation for the sections
    that a different algorithm, storage or family replaces."""
    out = copy.deepcopy(base)
    for name, value in over.items():
        below = out.get(name)
        if isinstance(value, dict) and isinstance(below, dict) and not _replaces(below, value, name):
            out[name] = {**below, **copy.deepcopy(value)}
        else:
            out[name] = copy.deepcopy(value)
    if isinstance(base.get("algorithm"), dict) and isinstance(over.get("algorithm"), dict) \
            and _replaces(base["algorithm"], over["algorithm"], "algorithm"):
        # The preset's schedules name its algorithm's parameters; its actor and storage
        # belong to its family of algorithms (on-policy rollouts or replay).
        dropped = ["schedules"]
        if _on_policy(base["algorithm"]["name"]) != _on_policy(over["algorithm"]["name"]):
            dropped += ["actor", "storage"]
        for name in dropped:
            if name in over:
                out[name] = copy.deepcopy(over[name])    # the file's section alone, not merged
            else:
                out.pop(name, None)
    return out


def _on_policy(algorithm_name):
    """Whether the algorithm learns from on-policy rollouts (None for an unknown name: the
    validation refuses it with the valid names)."""
    from pytorchrl.agent.algorithms import ALGORITHMS
    cls = ALGORITHMS.get(algorithm_name)
    return None if cls is None else cls.on_policy


def apply_agent_preset(config):
    """``config`` with its top-level ``preset`` expanded: the preset's values, then the
    configuration's own keys. A configuration without ``preset`` is returned as is.

    Parameters
    ----------
    config : dict
        A configuration as loaded (it is not modified).

    Raises
    ------
    KeyError
        For an unknown preset name (see ``get_agent_preset``).
    """
    name = config.get("preset")
    if name is None:
        return config
    return merge_configs(get_agent_preset(name).resolved(), config)


__all__ = ["AgentPreset", "AGENT_PRESETS", "PRESETS_DIR", "get_agent_preset", "merge_configs",
           "apply_agent_preset"]
