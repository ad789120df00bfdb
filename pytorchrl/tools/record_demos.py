"""``pytorchrl record-demos``: demonstrations for PPO+D (``storage.name: ppod``).

Episodes are played in one environment built from a run's ``env`` section, either by the
run's saved policy or by a human typing one action per step on stdin, and each episode
kept is written as an ``.npz`` file in the format ``PPODBuffer`` reads (``Observation``,
``Action``, ``Reward``, ``FrameSkip``; see ``pytorchrl.agent.storages.ppod``). With a return
threshold only the episodes that reach it are kept.
"""

import os
import sys

import gymnasium as gym
import numpy as np

from pytorchrl import ACT
from pytorchrl.agent.storages.ppod import save_demo
from pytorchrl.tools import CONFIG, MODEL
from pytorchrl.tools.evaluate import EvaluationError, build_env, build_policy

#: Words that end the human session at once (the episode in progress is not kept).
QUIT_WORDS = ("q", "quit")


def action_names(env):
    """Names of a Discrete action space's actions: the environment's own (MiniGrid's
    ``actions`` enumeration) when it has them, else their numbers.

    Parameters
    ----------
    env : gymnasium.Env
        The environment, with a Discrete action space.
    """
    n = env.action_space.n
    enum = getattr(env.unwrapped, "actions", None)
    try:
        names = [enum(i).name for i in range(n)]
    except (TypeError, ValueError):
        names = [str(i) for i in range(n)]
    return names


class HumanPolicy:
    """Reads one action per step from a text stream (a keyboard on stdin, or a file).

    Parameters
    ----------
    env : gymnasium.Env
        Its action space must be Discrete.
    stream : file
        Where the lines are read; each holds an action's number or name (``action_names``),
        ``q`` quits. End of stream quits too.
    out : file
        Where the keys, the observations and the prompts are written.
    """

    def __init__(self, env, stream, out):
        if not isinstance(env.action_space, gym.spaces.Discrete):
            raise EvaluationError(f"human demonstrations need a Discrete action space (one key per action), "
                                  f"the environment has {env.action_space}")
        self.env, self.stream, self.out = env, stream, out
        self.names = action_names(env)
        keys = ", ".join(f"{i}={name}" for i, name in enumerate(self.names))
        print(f"action keys: {keys}; q quits (one per line)", file=out, flush=True)

    def __call__(self, obs):
        """The action typed for ``obs`` (an int), or None to quit."""
        self._show(obs)
        while True:
            print("action> ", end="", file=self.out, flush=True)
            line = self.stream.readline()
            if not line:
                return None
            word = line.strip().lower()
            if word in QUIT_WORDS:
                return None
            if word.isdigit() and int(word) < len(self.names):
                return int(word)
            if word in self.names:
                return self.names.index(word)
            print(f"unknown action {word!r}: {', '.join(self.names)} or their numbers", file=self.out, flush=True)

    def _show(self, obs):
        # MiniGrid draws its grid as text; other environments show their observation.
        text = str(self.env.unwrapped)
        if text.startswith("<"):
            text = np.array2string(np.asarray(obs), precision=3, threshold=200)
        print(text, file=self.out, flush=True)


def play_episode(env, choose, seed=None):
    """One episode; returns (obs, act, rew) lists (obs has one row more: the final
    observation) or None when ``choose`` quit.

    Parameters
    ----------
    env : gymnasium.Env
        The environment.
    choose : callable
        ``choose(obs) -> (env_action, stored_action)``, or None to quit.
    seed : int or None
        Seed of the reset.
    """
    obs, _ = env.reset(seed=seed)
    observations, actions, rewards = [np.array(obs)], [], []
    done = False
    while not done:
        chosen = choose(obs)
        if chosen is None:
            return None
        env_action, stored = chosen
        obs, reward, terminated, truncated, _ = env.step(env_action)
        observations.append(np.array(obs))
        actions.append(np.asarray(stored))
        rewards.append(float(reward))
        done = terminated or truncated
    return observations, actions, rewards


def policy_chooser(env, actor, deterministic):
    """``choose`` (see ``play_episode``) of a saved policy: its action, stored as training
    stores it.

    Parameters
    ----------
    env : gymnasium.Env
        The environment (a Discrete action is handed to it as an int).
    actor : Actor
        The policy.
    deterministic : bool
        Its mode (True) or a sample.
    """
    discrete = isinstance(env.action_space, gym.spaces.Discrete)

    def choose(obs):
        action, extras, _ = actor.act(np.asarray(obs)[None], None, deterministic=deterministic)
        stored = np.asarray(extras.get(ACT, action))[0]
        return (int(action.reshape(-1)[0]) if discrete else action[0]), stored
    return choose


def human_chooser(env, stream, out):
    """``choose`` (see ``play_episode``) of a human typing actions (``HumanPolicy``); the
    stored action is the index as a one-element int64 row, as the on-policy actors store
    Discrete actions.

    Parameters
    ----------
    env : gymnasium.Env
        The environment, with a Discrete action space.
    stream, out : file
        Where the keys are read and the prompts written.
    """
    human = HumanPolicy(env, stream, out)

    def choose(obs):
        a = human(obs)
        return None if a is None else (a, np.array([a], dtype=np.int64))
    return choose


def record_demos(source, out_dir, demos=5, human=False, min_return=None, max_episodes=None, seed=None, model=None,
                 deterministic=True, frame_stack=1, stdin=None, stdout=None, on_episode=None):
    """Record demonstrations into ``out_dir``.

    Parameters
    ----------
    source : str
        A run directory (``config.yaml``, and ``model.state_dict`` for a policy), or with
        ``human`` a configuration file whose ``env`` section builds the environment.
    out_dir : str
        Folder of the ``.npz`` files (created); ``demo_<k>.npz``, or ``human_demo_<k>.npz``,
        numbered after those already there.
    demos : int
        Demonstrations to keep.
    human : bool
        Actions typed on ``stdin`` instead of the saved policy's.
    min_return : float or None
        Keep only the episodes whose return reaches it (None: every finished episode).
    max_episodes : int or None
        Give up after this many episodes (None: 20 per demonstration for a policy, no
        limit for a human, who quits with ``q``).
    seed : int or None
        Seed of the first reset (later episodes continue the environment's generator).
    model : str or None
        Weights to load instead of ``<run>/model.state_dict``.
    deterministic : bool
        The policy's mode (True) or samples of it.
    frame_stack : int
        Frames stacked in an observation: only the newest one (``obs.shape[0] //
        frame_stack`` channels) is written, as ``PPODBuffer(frame_stack=...)`` reads it.
    stdin, stdout : file or None
        The human's streams (default: the process's).
    on_episode : callable or None
        ``on_episode(index, return, length, kept_path_or_None)`` after each episode.

    Returns
    -------
    dict
        ``kept`` (paths), ``returns`` (of every episode played), ``quit`` (the human quit).
    """
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    config = recording_config(os.path.join(source, CONFIG) if os.path.isdir(source) else source)
    if human:
        env = build_env(config)
        choose = human_chooser(env, stdin, stdout)
    else:
        env, actor = build_policy(config, model or os.path.join(source, MODEL))
        choose = policy_chooser(env, actor, deterministic)
    if max_episodes is None and not human:
        max_episodes = 20 * demos
    frame_skip = int(config["env"].get("frame_skip") or 0)
    os.makedirs(out_dir, exist_ok=True)
    stem = "human_demo" if human else "demo"
    kept, returns, quit_ = [], [], False
    # Numbered after the files already there: several sessions fill one folder.
    taken = [_index_of(f, stem) for f in os.listdir(out_dir)]
    first = max([i for i in taken if i is not None], default=0) + 1
    try:
        episode = 0
        while len(kept) < demos and (max_episodes is None or episode < max_episodes):
            played = play_episode(env, choose, seed=seed if episode == 0 else None)
            if played is None:
                quit_ = True
                break
            obs, act, rew = played
            ret = float(np.sum(rew))
            returns.append(ret)
            path = None
            if min_return is None or ret >= min_return:
                path = os.path.join(out_dir, f"{stem}_{first + len(kept)}.npz")
                obs = np.stack(obs)
                if frame_stack > 1:
                    obs = obs[:, -(obs.shape[1] // frame_stack):]
                save_demo(path, obs, np.stack(act), rew, frame_skip)
                kept.append(path)
            if on_episode is not None:
                on_episode(episode, ret, len(act), path)
            episode += 1
    finally:
        env.close()
    return {"kept": kept, "returns": returns, "quit": quit_}


def _index_of(name, stem):
    """k of a file named ``<stem>_<k>.npz``, else None."""
    base, ext = os.path.splitext(name)
    head, _, k = base.rpartition("_")
    return int(k) if ext == ".npz" and head == stem and k.isdigit() else None


def recording_config(path):
    """The configuration in the file ``path`` (a run's config.yaml or a configuration file),
    validated without the demonstrations folders its storage reads: only its env and actor
    sections are used, and those folders may be the ones being recorded into.

    Parameters
    ----------
    path : str
        The YAML file.
    """
    from pytorchrl.config import ConfigError, validate_config
    from pytorchrl.config.loader import load_yaml
    if not os.path.isfile(path):
        raise EvaluationError(f"no such run directory (with {CONFIG}) or configuration file: {path}")
    raw = load_yaml(path)
    storage = raw.get("storage") if isinstance(raw, dict) else None
    if isinstance(storage, dict):
        for key in ("initial_human_demos_dir", "initial_agent_demos_dir", "initial_value_demos_dir"):
            storage.pop(key, None)
    try:
        return validate_config(raw)
    except ConfigError as exc:
        raise exc.with_source(os.path.basename(path)) from None


__all__ = ["record_demos", "recording_config", "play_episode", "HumanPolicy", "action_names", "policy_chooser",
           "human_chooser", "QUIT_WORDS"]
