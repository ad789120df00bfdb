"""The environments of a collection worker (``CWorker``): the policy's evaluation on the test
environments, uniform actions drawn from the action space, and what happens when the
environments fail (the failure is remembered, later requests are refused, ``restart_envs``
rebuilds them)."""

import numpy as np

from pytorchrl.agent.vec_env import EnvError


class WorkerEnvironments:
    """What ``CWorker`` does with its environments, apart from stepping them in a rollout.

    Expects of the worker: ``envs_train``, ``envs_test``, ``actor``, ``algo``, the factories
    the environments were built with (``_env_factories``), ``_env_failure`` and
    ``replace_agent_component``.
    """

    # ---------------------------------------------------------------- evaluation
    def evaluate(self, num_episodes=None, deterministic=True):
        """Run the current policy on the test environments.

        Parameters
        ----------
        num_episodes : int or None
            Episodes to run (default: the algorithm's ``num_test_episodes``).
        deterministic : bool
            Greedy actions (mode of the policy) instead of sampled ones.

        Returns
        -------
        float
            Mean return over the episodes.
        """
        envs = self.envs_test
        if envs is None:
            raise ValueError("evaluate() needs test environments (test_envs_factory)")
        n = int(num_episodes or self.algo.num_test_episodes)
        quota = -(-n // envs.num_envs)   # episodes per env: every env contributes equally
        returns = [[] for _ in range(envs.num_envs)]
        obs = envs.reset_numpy()
        envs.pop_finished_episodes()
        state = self.actor.initial_state(envs.num_envs)
        while sum(min(len(r), quota) for r in returns) < n:
            env_action, _, state = self.actor.act(obs, state, deterministic=deterministic)
            obs, _, _, _, final_obs = envs.step_numpy(env_action)
            if final_obs:
                finished = envs.pop_finished_episodes()
                for i, (ret, _) in zip(sorted(final_obs), finished):
                    returns[i].append(ret)
                if state is not None:
                    state = self.actor.reset_state(state, list(final_obs))
        picked = [r for env_returns in returns for r in env_returns[:quota]][:n]
        return float(np.mean(picked))

    def _random_actions(self, like):
        """One uniform draw of the action space per environment, shaped and typed as the
        actor's actions ``like`` (the storage's buffers are sized by them)."""
        space = self.envs_train.action_space
        draws = np.stack([np.asarray(space.sample()) for _ in range(self.envs_train.num_envs)])
        return draws.reshape(np.shape(like)).astype(np.asarray(like).dtype, copy=False)

    # ------------------------------------------------------------ env failures
    def _guarded(self, fn, component, *args):
        """Run ``fn(*args)``; an EnvError it raises is tagged with the failed ``component``
        and remembered: the environments are in an unknown state until ``restart_envs``."""
        try:
            return fn(*args)
        except EnvError as exc:
            exc.component = component
            self._env_failure = exc
            raise

    def _check_envs(self):
        """Refuse to collect with environments that failed and were not rebuilt (a request
        queued behind the failed one fails at once instead of stepping broken envs)."""
        failed = self._env_failure
        if failed is not None:
            err = EnvError(f"{failed} (not rebuilt yet)")
            err.component = failed.component
            raise err

    def restart_envs(self, component="envs_train"):
        """Rebuild the ``component`` environments ("envs_train" or "envs_test") with the
        factory they were built with, after they failed.

        The rollout they were producing is dropped: the next one starts from the new
        environments' first observations (and the actor's initial state).

        Returns
        -------
        str
            The component rebuilt.
        """
        if component not in self._env_factories:
            raise ValueError(f"restart_envs: component must be 'envs_train' or 'envs_test', got {component!r}")
        old = getattr(self, component)
        setattr(self, component, None)
        if old is not None:
            try:
                old.close()
            except Exception:  # noqa: BLE001 - a broken env may fail to close; it is dropped anyway
                pass
        self.replace_agent_component(component, self._env_factories[component])
        self._env_failure = None
        return component
