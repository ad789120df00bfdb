"""Learning checks shared by the workflow and learning tests (importable because pytest puts
tests/ on sys.path)."""

import torch

from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import ReplayBuffer
from pytorchrl.envs import make_gym_env
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme


def greedy_returns_along_run(learner, first, every, episodes=5, stop_at=None):
    """Step ``learner`` until it is done, evaluating its greedy policy along the way.

    DQN's CartPole returns swing from one evaluation to the next (it has collapses), so a
    learning check takes the best evaluation along the run, not one at the end.

    Parameters
    ----------
    learner : Learner
        A built learner (stopped by the caller).
    first : int
        Env steps collected before the first evaluation.
    every : int
        Env steps between two evaluations after that.
    episodes : int
        Episodes of each evaluation.
    stop_at : float or None
        End the run early once an evaluation reaches this mean return (None: run to the end).

    Returns
    -------
    list of float
        The mean returns of the evaluations, in order.
    """
    returns, next_eval = [], first
    while not learner.done() and (stop_at is None or max(returns, default=float("-inf")) < stop_at):
        learner.step()
        if learner.num_samples_collected >= next_eval:
            returns.append(learner.evaluate(episodes))
            next_eval += every
    return returns


def learner_for(env_id, algo_factory, algo_name, budget, seed=0, hidden=(64, 64), precision="fp32"):
    """An in-process Learner (one collector, one gradient worker, 1 env) of an off-policy
    ``algo_factory`` on ``env_id`` with a 100k replay and test environments."""
    torch.manual_seed(seed)
    train, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": env_id}, vec_env_size=1,
                                                           seed=seed)
    test, _, _ = VecEnv.create_factory(make_gym_env, {"env_id": env_id}, vec_env_size=1, seed=seed + 100)
    actor_factory = OffPolicyActor.create_factory(obs_space, action_space, algo_name,
                                                  common_feature_extractor_kwargs={"hidden_sizes": list(hidden)},
                                                  precision=precision)
    scheme = Scheme(algo_factory=algo_factory, actor_factory=actor_factory,
                    storage_factory=ReplayBuffer.create_factory(size=100_000), train_envs_factory=train,
                    test_envs_factory=test)
    return Learner(scheme, target_steps=budget)


def train_until(learner, goal, budget, every, episodes):
    """Step until the greedy evaluation reaches ``goal`` or ``budget`` transitions were
    collected; returns (best evaluation, steps, history)."""
    storage = learner.scheme.update_worker.local_worker.storage
    best, history, next_eval = float("-inf"), [], every
    while storage.num_inserted < budget:
        learner.step()
        if storage.num_inserted >= next_eval:
            next_eval += every
            score = learner.evaluate(episodes)
            history.append((storage.num_inserted, round(score, 1)))
            best = max(best, score)
            if best >= goal:
                break
    return best, storage.num_inserted, history
