"""Hindsight experience replay (HER, Andrychowicz et al., 2017) for goal environments.

A goal environment observes ``Dict{"observation", "achieved_goal", "desired_goal"}`` and
has a vectorised ``compute_reward(achieved_goal, desired_goal, info)`` (gymnasium-robotics'
Fetch tasks, ``PointReach-v0``). Its observations travel packed in one float32 vector like
every Dict observation (``pytorchrl.agent.spaces``), so the actors, the algorithms and
their numpy fast paths see a replay of flat vectors and apply unchanged.

Relabelling happens on the collector, at the end of each episode, as in the HER paper:
each transition of the episode is stored once as it was and ``n_sampled_goal`` more times
with its desired goal replaced by a goal the episode achieved (``strategy``), its reward
recomputed by the environment's ``compute_reward``. The relabelled fraction of the replay
is therefore ``n_sampled_goal / (n_sampled_goal + 1)``. The collector-side storage keeps
every environment's unfinished episode across rollouts (collection rounds), so an episode
cut by rollout boundaries is relabelled whole, and only with its own steps; an episode
never spans collectors (each environment belongs to one), so every layout (one process,
Ray collectors, a replay server) receives ready transitions through the usual path.

Relabelled transitions do not count as environment steps for the replay schedule
(``update_every``, ``start_steps``): the replay ratio is per real step, as without HER.
"""

import numpy as np

from pytorchrl import ACT, DISCOUNT, OBS, OBS2, REW, TERM, TRUNC
from pytorchrl.agent.spaces import packing_of
from pytorchrl.agent.storages.replay import _TRANSITION_KEYS, ReplayBuffer, nstep_transitions

#: Storage key: 1.0 for a relabelled transition, 0.0 for one as collected.
RELABELLED = "her_relabelled"

#: Goal selection strategies: which step of the episode gives a transition its new goal.
STRATEGIES = ("future", "final", "episode")

#: Keys of a goal environment's Dict observation.
GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")


def select_goal_steps(strategy, length, n_sampled_goal, rng):
    """Steps whose achieved goal relabels each transition of an episode.

    Parameters
    ----------
    strategy : str
        ``"future"``: a step from the transition's own to the episode's last, uniformly;
        ``"final"``: the episode's last step; ``"episode"``: any step of the episode.
    length : int
        Steps of the episode (L).
    n_sampled_goal : int
        Goals drawn per transition (k).
    rng : np.random.Generator
        Random numbers.

    Returns
    -------
    t : np.ndarray
        (L k,) the transition relabelled (each step k times, in order).
    g : np.ndarray
        (L k,) the step whose achieved goal (after the step) becomes its desired goal.
    """
    t = np.repeat(np.arange(length), n_sampled_goal)
    if strategy == "future":
        g = rng.integers(t, length)
    elif strategy == "final":
        g = np.full_like(t, length - 1)
    elif strategy == "episode":
        g = rng.integers(0, length, size=t.shape)
    else:
        raise ValueError(f"HER strategy must be one of {STRATEGIES}, got {strategy!r}")
    return t, g


class HERBuffer(ReplayBuffer):
    """Uniform replay with hindsight relabelling (see the module docstring).

    Parameters
    ----------
    device, actor, algorithm, envs, size
        As in ``ReplayBuffer``; ``envs`` must be goal environments (a Dict observation with
        observation, achieved_goal and desired_goal, and ``compute_reward``).
    strategy : str
        Goal selection strategy: future (a goal achieved later in the same episode), final
        (the goal achieved at the episode's end) or episode (a goal achieved anywhere in it).
    n_sampled_goal : int
        Relabelled copies stored per transition (k): the relabelled fraction of the replay
        is k / (k + 1).
    """

    fixed_parameters = ("size", "strategy", "n_sampled_goal")

    def __init__(self, device, actor, algorithm, envs, size, strategy="future", n_sampled_goal=4):
        super().__init__(device, actor, algorithm, envs, size)
        if strategy not in STRATEGIES:
            raise ValueError(f"HERBuffer strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        if not isinstance(n_sampled_goal, int) or isinstance(n_sampled_goal, bool) or n_sampled_goal < 1:
            raise ValueError(f"HERBuffer n_sampled_goal must be a positive integer, got {n_sampled_goal!r}")
        self.strategy, self.n_sampled_goal = strategy, n_sampled_goal
        self._episodes = None     # per environment: the chunks of its unfinished episode
        self._next_obs = None     # where the next rollout must start for the episodes to continue
        if envs is not None:
            self._goal, self._compute_reward = self._goal_layout(envs)

    @staticmethod
    def _goal_layout(envs):
        """(achieved goal entry, desired goal entry) of the packed observation, and the
        environments' compute_reward; ValueError naming what is missing."""
        packing = packing_of(envs.observation_space)
        keys = [] if packing is None else [e.key for e in packing.entries]
        if any(k not in keys for k in GOAL_KEYS):
            raise ValueError(f"HERBuffer needs a goal environment (a Dict observation with keys "
                             f"{', '.join(GOAL_KEYS)}); {envs.name} observes {envs.observation_space}")
        reward_fn = envs.goal_reward_fn()
        if reward_fn is None:
            raise ValueError(f"HERBuffer needs the environment's compute_reward(achieved_goal, desired_goal, "
                             f"info); {envs.name} has none")
        entries = {e.key: e for e in packing.entries}
        return (entries["achieved_goal"], entries["desired_goal"]), reward_fn

    @property
    def hyperparameters(self):
        return {"size": self.size, "strategy": self.strategy, "n_sampled_goal": self.n_sampled_goal}

    # ------------------------------------------------------------ collection side
    def start(self, obs, state=None):
        super().start(obs, state)
        if self._next_obs is not None and not np.array_equal(self._next_obs, self._rec[OBS][0]):
            self._episodes = None   # the environments were replaced or reset: their episodes are cut

    def get_data(self, data_to_cpu=True):
        """The rollout's transitions, followed by the relabelled copies of the episodes that
        ended in it (tensors of shape (M, ...), with ``RELABELLED``)."""
        k = self.step
        if k == 0:
            data = super().get_data(data_to_cpu)
            data[RELABELLED] = data[REW][:0].clone()
            return data
        seq = self.recorded_steps()
        n = seq[REW].shape[1]
        steps = nstep_transitions(seq[OBS], seq[OBS2], seq[ACT], seq[REW], seq[TERM], seq[TRUNC],
                                  self.algorithm.gamma, 1)
        per_env = {key: v.reshape((k, n) + v.shape[1:]) for key, v in steps.items()}
        if self._episodes is None:
            self._episodes = [[] for _ in range(n)]
        ends = (seq[TERM] > 0) | (seq[TRUNC] > 0)
        parts = [{**steps, RELABELLED: np.zeros((k * n, 1), np.float32)}]
        for i in range(n):
            first = 0
            for t in np.flatnonzero(ends[:, i]):
                self._episodes[i].append({key: v[first:t + 1, i] for key, v in per_env.items()})
                parts.append(self.relabel(self._episodes[i]))
                self._episodes[i], first = [], t + 1
            if first < k:
                self._episodes[i].append({key: v[first:k, i].copy() for key, v in per_env.items()})
        self._next_obs = self._rec[OBS][k].copy()
        out = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
        return self._tensors(out, data_to_cpu)

    def relabel(self, chunks):
        """The relabelled copies of one finished episode.

        Parameters
        ----------
        chunks : list of dict
            The episode's transitions in order (``OBS``, ``ACT``, ``REW``, ``OBS2``,
            ``DISCOUNT``, arrays of the steps of one rollout each).

        Returns
        -------
        dict
            ``n_sampled_goal`` copies of every transition, goals chosen by ``strategy``,
            rewards recomputed by ``compute_reward``, ``RELABELLED`` 1.
        """
        ep = {key: np.concatenate([c[key] for c in chunks]) for key in _TRANSITION_KEYS}
        t, g = select_goal_steps(self.strategy, len(ep[REW]), self.n_sampled_goal, self.rng)
        achieved, desired = self._goal
        goals = ep[OBS2][g, achieved.start:achieved.stop]
        obs, obs2 = ep[OBS][t], ep[OBS2][t]     # copies (fancy indexing)
        obs[:, desired.start:desired.stop] = goals
        obs2[:, desired.start:desired.stop] = goals
        m = len(t)
        shape = (m,) + achieved.shape
        reward = self._compute_reward(obs2[:, achieved.start:achieved.stop].reshape(shape), goals.reshape(shape),
                                      [{} for _ in range(m)])
        return {OBS: obs, ACT: ep[ACT][t], REW: np.asarray(reward, np.float32).reshape(m, 1), OBS2: obs2,
                DISCOUNT: ep[DISCOUNT][t], RELABELLED: np.ones((m, 1), np.float32)}

    def clear(self):
        super().clear()
        self._episodes, self._next_obs = None, None

    # -------------------------------------------------------------- learner side
    def stored_keys(self):
        return _TRANSITION_KEYS + (RELABELLED,)

    def steps_received(self, arrays, m):
        """Only the transitions as collected count for the replay schedule."""
        return m - int(np.count_nonzero(arrays[RELABELLED]))

    def _arrange(self, batch):
        batch.pop(RELABELLED, None)
        return batch

    def relabelled_fraction(self):
        """Fraction of the transitions held that are relabelled copies."""
        if not self.num_items:
            return 0.0
        return float(self._arrays[RELABELLED][:self.num_items].mean())


__all__ = ["HERBuffer", "RELABELLED", "STRATEGIES", "select_goal_steps"]
