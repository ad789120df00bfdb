"""A collection worker's per-step log (EXARL's actor logs): one CSV row per environment step."""

import csv
import json
import os
import time

import numpy as np

#: Columns of a collector's per-step log.
STEP_LOG_FIELDS = ("time", "env", "state", "action", "reward", "next_state", "total_reward", "done", "episode",
                   "step", "policy")


class StepLog:
    """A collector's per-step CSV log: one row per environment and step, flushed at the end
    of each rollout (``STEP_LOG_FIELDS``; states and actions as JSON lists, ``next_state``
    the final observation of an episode that ended, ``episode`` and ``step`` counted per
    environment from 1).

    Parameters
    ----------
    directory : str
        Where the file goes (created if needed).
    index_parent, index_worker : int
        Gradient and collection worker: the file is ``steps_g<parent>_c<worker>.csv``.
    num_envs : int
        Environments of the collector.
    policy : str
        Written in every row ("learned" or "random").
    """

    def __init__(self, directory, index_parent, index_worker, num_envs, policy):
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, f"steps_g{index_parent}_c{index_worker}.csv")
        new = not os.path.exists(self.path)
        self._file = open(self.path, "a", newline="")
        self._writer = csv.writer(self._file)
        if new:
            self._writer.writerow(STEP_LOG_FIELDS)
        self.policy = policy
        self.total = np.zeros(num_envs)
        self.episode = np.ones(num_envs, dtype=np.int64)
        self.step = np.zeros(num_envs, dtype=np.int64)

    def write(self, obs, action, reward, next_obs, term, trunc, final_obs):
        """Record one vectorized step (the arrays ``envs.step_numpy`` returns)."""
        now = round(time.time(), 4)
        action = np.asarray(action)
        for i in range(len(self.total)):
            self.step[i] += 1
            self.total[i] += float(reward[i])
            done = bool(term[i] or trunc[i])
            following = final_obs[i] if done and i in final_obs else next_obs[i]
            self._writer.writerow((now, i, _json(obs[i]), _json(action[i]), float(reward[i]), _json(following),
                                   float(self.total[i]), done, int(self.episode[i]), int(self.step[i]), self.policy))
            if done:
                self.episode[i] += 1
                self.step[i] = 0
                self.total[i] = 0.0

    def flush(self):
        """Write the rows so far to the file (at the end of every rollout)."""
        self._file.flush()

    def close(self):
        """Close the file."""
        self._file.close()


def _json(x):
    return json.dumps(np.asarray(x).tolist())


__all__ = ["StepLog", "STEP_LOG_FIELDS"]
