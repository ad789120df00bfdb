"""Learning checks shared by the learning tests (importable because pytest puts tests/ on
sys.path). A test that uses one of them is marked ``learning`` (tests/conftest.py).

Seeds: ``PYTORCHRL_TEST_SEED`` (default 0) reruns the in-process learning tests with
other seeds, to see the margin of a budget."""

import os

import torch

from pytorchrl.config import build_learner, load_config

from pytorchrl.agent.actors import OffPolicyActor, OnPolicyActor
from pytorchrl.agent.actors.on_policy_actor import default_feature_extractor
from pytorchrl.agent.algorithms import PPO
from pytorchrl.agent.storages import GAEBuffer
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import ReplayBuffer
from pytorchrl.envs import make_gym_env
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme

SEED = int(os.environ.get("PYTORCHRL_TEST_SEED", "0"))


def greedy_returns_along_run(learner, first, every, episodes=5, stop_at=None, on_infos=lambda infos: None):
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
    on_infos : callable
        Sees the infos of every ``learner.step()`` (a ``LayoutProbe.observe``).

    Returns
    -------
    list of float
        The mean returns of the evaluations, in order.
    """
    returns, next_eval = [], first
    while not learner.done() and (stop_at is None or max(returns, default=float("-inf")) < stop_at):
        on_infos(learner.step())
        if learner.num_samples_collected >= next_eval:
            returns.append(learner.evaluate(episodes))
            next_eval += every
    return returns


def cartpole_learner(algo_factory, algo_name, storage_factory, target_steps, seed=SEED, num_envs=8,
                     env_id="CartPole-v1"):
    """A Learner of ``algo_name`` on ``env_id`` (CartPole or one of its variants:
    ``DictCartPole-v1``, ``MultiDiscreteCartPole-v1``, ...) with 64x64 tanh networks,
    separate for policy and value (one ``DictNet`` of such MLPs per key for Dict observations)."""
    torch.manual_seed(seed)
    train, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": env_id},
                                                           vec_env_size=num_envs, seed=seed)
    test, _, _ = VecEnv.create_factory(make_gym_env, {"env_id": env_id}, vec_env_size=1, seed=seed + 100)
    # The default extractor: MLP for CartPole's vector, DictNet for Dict observations.
    extractor = default_feature_extractor(obs_space)
    actor_factory = OnPolicyActor.create_factory(obs_space, action_space, algo_name, feature_extractor_network=extractor,
                                                 shared_policy_value_network=False,
                                                 feature_extractor_kwargs={"hidden_sizes": [64, 64],
                                                                           "activation": "tanh"})
    scheme = Scheme(algo_factory=algo_factory, actor_factory=actor_factory, storage_factory=storage_factory,
                    train_envs_factory=train, test_envs_factory=test)
    return Learner(scheme, target_steps=target_steps)


def ppo_cartpole_learner(budget, seed=SEED, env_id="CartPole-v1"):
    """The PPO learner of the CartPole learning tests (lr 1e-3, 20 epochs of 256-sample
    mini-batches, 8 envs x 32 steps, GAE 0.8, gamma 0.98) on ``env_id``."""
    algo_factory, name = PPO.create_factory(lr=1e-3, eps=1e-5, num_epochs=20, mini_batch_size=256, clip_param=0.2,
                                            gamma=0.98, entropy_coef=0.0, value_loss_coef=0.5, max_grad_norm=0.5,
                                            test_every=10**9, num_test_episodes=5)
    return cartpole_learner(algo_factory, name, GAEBuffer.create_factory(size=32, gae_lambda=0.8), budget,
                            seed=seed, env_id=env_id)


def steps_to_solve(learner, goal=195.0, eval_episodes=5):
    """Step ``learner`` until its mean training return reaches ``goal`` and then its greedy
    evaluation (``eval_episodes`` episodes) does too, or its budget runs out.

    Returns
    -------
    dict
        ``best_train``, ``best_eval`` (the best of each seen), ``steps`` (env steps collected
        when it stopped), ``solved`` (both reached ``goal``) and ``history`` (steps, return).
    """
    history = []
    best_train = best_eval = float("-inf")
    seen = 0
    while not learner.done():
        learner.step()
        if learner.num_samples_collected == seen:
            continue                                   # same round: no new episodes
        seen = learner.num_samples_collected
        reward = train_reward(learner)
        history.append((seen, reward))
        if reward == reward:
            best_train = max(best_train, reward)
        if best_train >= goal:
            # the training goal holds; check the greedy policy too (until it also holds)
            best_eval = max(best_eval, learner.evaluate(eval_episodes))
            if best_eval >= goal:
                break
    return {"best_train": best_train, "best_eval": best_eval, "steps": seen, "history": history,
            "solved": best_train >= goal and best_eval >= goal}


def assert_ppo_solves_cartpole(env_id="CartPole-v1", budget=50_000, goal=195.0, seed=SEED):
    """Train ``ppo_cartpole_learner`` on ``env_id`` until ``steps_to_solve`` says solved;
    assert that it did within ``budget`` env steps. Returns the env steps it took."""
    learner = ppo_cartpole_learner(budget, seed=seed, env_id=env_id)
    try:
        result = steps_to_solve(learner, goal)
    finally:
        learner.stop()
    assert result["best_train"] >= goal, \
        f"{env_id}: mean training return {result['best_train']:.1f} < {goal} after {result['steps']} steps: " \
        f"{result['history'][-5:]}"
    assert result["best_eval"] >= goal, \
        f"{env_id}: deterministic evaluation {result['best_eval']:.1f} < {goal} after {result['steps']} steps"
    assert result["steps"] <= budget
    print(f"PPO on {env_id}: training return {result['best_train']:.1f}, evaluation {result['best_eval']:.1f} "
          f"after {result['steps']} steps")
    return result["steps"]


def train_reward(learner):
    """Mean training return of the episodes of the last metrics interval (NaN before any)."""
    return learner.get_metrics(add_algo_metrics=False, add_episodes_metrics=True)["Episodes/TrainReward"]


def train_until(learner, goal, what, on_infos=lambda infos: None):
    """Step ``learner`` (one collection and one update per step, as A2C) until its mean
    training return exceeds ``goal`` or its budget runs out; assert the goal was reached.
    ``on_infos`` sees the infos of every step."""
    best = float("-inf")
    history = []
    while not learner.done():
        on_infos(learner.step())
        reward = train_reward(learner)
        history.append(reward)
        if reward == reward:
            best = max(best, reward)
        if best > goal:
            break
    assert best > goal, f"{what} mean training return {best:.1f} <= {goal} after " \
                        f"{learner.num_samples_collected} steps: {history[-5:]}"
    print(f"{what}: training return {best:.1f} after {learner.num_samples_collected} steps")


def offpolicy_learner(env_id, algo_factory, algo_name, budget, seed=SEED, hidden=(64, 64), precision="fp32",
                      storage_factory=None):
    torch.manual_seed(seed)
    train, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": env_id}, vec_env_size=1,
                                                           seed=seed)
    test, _, _ = VecEnv.create_factory(make_gym_env, {"env_id": env_id}, vec_env_size=1, seed=seed + 100)
    actor_factory = OffPolicyActor.create_factory(obs_space, action_space, algo_name,
                                                  common_feature_extractor_kwargs={"hidden_sizes": list(hidden)},
                                                  precision=precision)
    scheme = Scheme(algo_factory=algo_factory, actor_factory=actor_factory,
                    storage_factory=storage_factory or ReplayBuffer.create_factory(size=100_000),
                    train_envs_factory=train, test_envs_factory=test)
    return Learner(scheme, target_steps=budget)


def evaluate_until(learner, goal, budget, every, episodes):
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


def assert_greedy_reaches(learner, goal, budget, what, every=1000, episodes=5):
    """Train ``learner`` with ``evaluate_until`` and fail unless its greedy return reaches
    ``goal`` within ``budget`` transitions; the learner is stopped either way.

    Parameters
    ----------
    learner : Learner
        What trains (an off-policy learner: its storage counts the transitions).
    goal, budget, every, episodes
        As in ``evaluate_until``.
    what : str
        The agent's name in the failure message and the printed result.
    """
    try:
        best, steps, history = evaluate_until(learner, goal, budget, every=every, episodes=episodes)
        assert best >= goal, f"{what} greedy return {best:.1f} < {goal} after {steps} steps: {history[-5:]}"
        print(f"{what}: greedy return {best:.1f} after {steps} steps")
    finally:
        learner.stop()


def best_return(learner, stop_above=float("inf"), on_infos=lambda infos: None):
    """Best mean training return seen before the budget ran out (or it passed ``stop_above``);
    ``on_infos`` sees the infos of every step. Stops the learner."""
    best, seen = float("-inf"), 0
    try:
        while not learner.done() and best <= stop_above:
            on_infos(learner.step())
            if learner.num_samples_collected != seen:
                seen = learner.num_samples_collected
                reward = train_reward(learner)
                if reward == reward:
                    best = max(best, reward)
    finally:
        learner.stop()
    return best, seen


def check_memory_is_needed(make_learner, budget, threshold, what, on_infos=lambda infos: None):
    """Train ``make_learner(recurrent=True)`` until its mean training return passes
    ``threshold`` (``on_infos`` sees its infos) and ``make_learner(recurrent=False)`` for
    its whole ``budget``; assert that the first passes and the second does not."""
    memory_best, memory_steps = best_return(make_learner(recurrent=True), threshold, on_infos)
    plain_best, plain_steps = best_return(make_learner(recurrent=False))
    print(f"{what} with memory: {memory_best:.1f} after {memory_steps} steps; feed-forward: {plain_best:.1f} "
          f"after {plain_steps} steps")
    assert memory_best > threshold, f"recurrent {what} reached only {memory_best:.1f} in {memory_steps} steps"
    assert plain_steps >= budget and plain_best < threshold, \
        f"feed-forward {what} reached {plain_best:.1f}: the task no longer needs memory"


def config_curve(config_path, seed, overrides=(), every=10_000, stop_at=None, final_episodes=10):
    """Train the configuration file ``config_path`` (as ``pytorchrl train`` reads it, with
    ``seed`` and ``overrides``) in this process, without run directory.

    Parameters
    ----------
    config_path : str
        A YAML file (``examples/configs/...``).
    seed : int
        Its ``seed``.
    overrides : sequence of str
        ``key=value`` overrides, as on the command line.
    every : int
        Env steps between two readings of the mean training return (each the mean over
        the episodes that ended since the last).
    stop_at : float or None
        End the run once a reading reaches this return (None: train to the budget).
    final_episodes : int
        Episodes of the deterministic evaluation at the end (0: none).

    Returns
    -------
    dict
        ``train`` (the readings, in order), ``final`` (the final evaluation, or None) and
        ``steps`` (env steps collected).
    """
    config = load_config(config_path, [f"seed={seed}", "learner.tensorboard=false", *overrides])
    learner = build_learner(config)
    readings, next_reading = [], every
    try:
        while not learner.done() and (stop_at is None or max(readings, default=float("-inf")) < stop_at):
            learner.step()
            if learner.num_samples_collected >= next_reading:
                readings.append(train_reward(learner))
                next_reading += every
        final = learner.evaluate(final_episodes) if final_episodes else None
        return {"train": readings, "final": final, "steps": learner.num_samples_collected}
    finally:
        learner.stop()
