"""The in-process scheme (one worker per level) driven by a Learner."""

import math
import os

import gymnasium as gym
import numpy as np
import pytest
import torch

from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.actors.feature_extractors.mlp import MLP
from pytorchrl.agent.algorithms import A2C, PPO
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import GAEBuffer, VanillaOnPolicyBuffer
from pytorchrl.envs import make_gym_env
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme

SIZE, ENVS, EPOCHS, MINI_BATCHES = 10, 2, 2, 2

# The in-process scheme must run without Ray (DESIGN, principle 2).
pytestmark = pytest.mark.usefixtures("no_ray_import")
UPDATES_PER_ROUND = EPOCHS * MINI_BATCHES
SAMPLES_PER_ROUND = SIZE * ENVS


class FiveStepEnv(gym.Env):
    """Reward 1 per step, terminates after exactly 5 steps, whatever the actions."""

    observation_space = gym.spaces.Box(-1.0, 10.0, shape=(3,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0, 0.5, -0.5], dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t, 0.5, -0.5], dtype=np.float32), 1.0, self.t >= 5, False, {}

    def close(self):
        CLOSED.append(id(self))


CLOSED = []   # ids of closed FiveStepEnvs


def five_step_env():
    return FiveStepEnv()


def build_scheme(env_fn=five_step_env, env_kwargs=None, size=SIZE, test_envs=True, algo_cls=PPO, **algo_kwargs):
    train, action_space, obs_space = VecEnv.create_factory(env_fn=env_fn, env_kwargs=env_kwargs or {},
                                                           vec_env_size=ENVS, seed=0)
    test = VecEnv.create_factory(env_fn=env_fn, env_kwargs=env_kwargs or {}, vec_env_size=1, seed=100)[0] \
        if test_envs else None
    params = dict(lr=1e-3, num_epochs=EPOCHS, num_mini_batch=MINI_BATCHES, test_every=1, num_test_episodes=3)
    params.update(algo_kwargs)
    algo_factory, name = algo_cls.create_factory(**params)
    actor_factory = OnPolicyActor.create_factory(obs_space, action_space, name, feature_extractor_network=MLP,
                                                 feature_extractor_kwargs={"hidden_sizes": [16]})
    kwargs = dict(algo_factory=algo_factory, actor_factory=actor_factory,
                  storage_factory=GAEBuffer.create_factory(size=size, gae_lambda=0.95), train_envs_factory=train)
    if test is not None:
        kwargs["test_envs_factory"] = test
    return Scheme(**kwargs)


@pytest.fixture
def learner(tmp_path):
    lrn = Learner(build_scheme(), target_steps=10 * SAMPLES_PER_ROUND, log_dir=str(tmp_path / "run"))
    yield lrn
    lrn.stop()


def local_algo(learner):
    return learner.update_worker.local_worker.algo


def local_storage(learner):
    return learner.update_worker.local_worker.storage


def local_actor(learner):
    return learner.update_worker.local_worker.actor


def step_counts(learner, n):
    counts = []
    for _ in range(n):
        learner.step()
        counts.append(learner.num_samples_collected)
    return counts


# ---------------------------------------------------------------------- training loop
def test_samples_grow_by_rollout_size_times_envs(learner):
    assert learner.num_samples_collected == 0
    counts = step_counts(learner, 3 * UPDATES_PER_ROUND)
    # one collection of SIZE x ENVS samples, then UPDATES_PER_ROUND mini-batch updates on it
    expected = [SAMPLES_PER_ROUND * (1 + i // UPDATES_PER_ROUND) for i in range(3 * UPDATES_PER_ROUND)]
    assert counts == expected
    assert learner.num_updates == 3 * UPDATES_PER_ROUND
    assert local_algo(learner).updates_applied == 3 * UPDATES_PER_ROUND


def test_done_after_target_steps(tmp_path):
    learner = Learner(build_scheme(test_envs=False), target_steps=2 * SAMPLES_PER_ROUND + 1)
    try:
        steps = 0
        while not learner.done():
            learner.step()
            steps += 1
            assert steps < 100
        # 3 collections are needed to pass 2 * SAMPLES_PER_ROUND + 1
        assert learner.num_samples_collected == 3 * SAMPLES_PER_ROUND
        assert steps == 2 * UPDATES_PER_ROUND + 1
    finally:
        learner.stop()


def test_step_limit_of_the_environment_ends_a_learner_after_that_many_more_steps(tmp_path, monkeypatch):
    """PYTORCHRL_STEP_LIMIT (what the test of the documented commands sets): done after that
    many env steps more than the learner started, or was restored, with."""
    monkeypatch.setenv("PYTORCHRL_STEP_LIMIT", str(SAMPLES_PER_ROUND + 1))
    learner = Learner(build_scheme(test_envs=False), target_steps=100 * SAMPLES_PER_ROUND, log_dir=str(tmp_path))
    try:
        while not learner.done():
            learner.step()
        assert learner.num_samples_collected == 2 * SAMPLES_PER_ROUND
        learner.save_checkpoint("checkpoint.pt")
        learner.load_checkpoint(str(tmp_path / "checkpoint.pt"))
        assert not learner.done()
        while not learner.done():
            learner.step()
        assert learner.num_samples_collected == 4 * SAMPLES_PER_ROUND
    finally:
        learner.stop()
    monkeypatch.setenv("PYTORCHRL_STEP_LIMIT", "1e3")
    scheme = build_scheme(test_envs=False)
    try:
        with pytest.raises(ValueError, match="PYTORCHRL_STEP_LIMIT must be a positive integer"):
            Learner(scheme, target_steps=10)
    finally:
        scheme.stop()


def test_invalid_target_steps():
    scheme = build_scheme(test_envs=False)
    try:
        for bad in (0, -5, 2.5, "100"):
            with pytest.raises(ValueError):
                Learner(scheme, target_steps=bad)
    finally:
        scheme.stop()


def test_training_changes_the_weights(learner):
    before = {k: v.clone() for k, v in local_actor(learner).state_dict().items()}
    step_counts(learner, UPDATES_PER_ROUND)
    after = local_actor(learner).state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)


# -------------------------------------------------------------------------- metrics
def test_metrics_keys_and_episode_values(learner):
    step_counts(learner, 2 * UPDATES_PER_ROUND)
    m = learner.get_metrics(add_algo_metrics=True, add_episodes_metrics=True, add_scheme_metrics=True,
                            add_time_metrics=True)
    assert all(isinstance(k, str) and k.count("/") == 1 for k in m), list(m)
    for key in ("Episodes/TrainReward", "Episodes/TrainLength", "Time/FPS",
                "Algorithm/Loss", "Algorithm/PolicyLoss", "Algorithm/ValueLoss", "Algorithm/Entropy",
                "Scheme/EnvSteps", "Scheme/Updates"):
        assert key in m, key
    # Every episode of FiveStepEnv has return 5 and length 5; 2 collections of 10 steps x
    # 2 envs hold exactly 8 finished episodes.
    assert m["Episodes/TrainReward"] == 5.0
    assert m["Episodes/TrainLength"] == 5.0
    assert m["Episodes/Episodes"] == 8
    assert m["Scheme/EnvSteps"] == 2 * SAMPLES_PER_ROUND
    assert m["Time/FPS"] > 0
    assert math.isfinite(m["Algorithm/Loss"])
    # algorithm metrics are consumed by get_metrics; the rest stays
    m2 = learner.get_metrics(add_episodes_metrics=True)
    assert "Algorithm/Loss" not in m2 and m2["Episodes/TrainReward"] == 5.0


def test_test_reward_reported_with_test_envs(learner):
    """With test envs, Episodes/TestReward is the deterministic evaluation run every
    ``test_every`` collection rounds (here 1, so the first round already has one)."""
    step_counts(learner, UPDATES_PER_ROUND)
    m = learner.get_metrics(add_episodes_metrics=True)
    assert "Episodes/TestReward" in m, "the in-process scheme never reports its evaluations"
    assert m["Episodes/TestReward"] == 5.0


def test_default_metrics_have_no_episode_or_time_groups(learner):
    learner.step()
    m = learner.get_metrics()
    assert not any(k.startswith(("Episodes/", "Time/")) for k in m)


def test_no_test_reward_without_test_envs():
    learner = Learner(build_scheme(test_envs=False), target_steps=1000)
    try:
        step_counts(learner, UPDATES_PER_ROUND)
        m = learner.get_metrics(add_episodes_metrics=True)
        assert "Episodes/TestReward" not in m
        assert m["Episodes/TrainReward"] == 5.0
    finally:
        learner.stop()


def test_train_reward_is_nan_before_any_episode():
    learner = Learner(build_scheme(test_envs=False), target_steps=1000)
    try:
        m = learner.get_metrics(add_episodes_metrics=True)
        assert math.isnan(m["Episodes/TrainReward"])
    finally:
        learner.stop()


def test_print_info(learner, capsys):
    learner.step()
    learner.print_info(add_time_info=True)
    out = capsys.readouterr().out
    assert "steps" in out and "TrainReward" in out


def test_evaluate(learner):
    assert learner.evaluate(4) == 5.0


# ------------------------------------------------------------------------- hot-swap
def test_lr_hot_swap_reaches_the_algorithm(learner):
    learner.step()
    value = learner.update_algorithm_parameter("lr", 2.5e-4)
    assert value == 2.5e-4
    algo = local_algo(learner)
    assert algo.lr == 2.5e-4
    assert all(g["lr"] == 2.5e-4 for g in algo.optimizer.param_groups)
    assert learner.hot_swaps[-1] == (SAMPLES_PER_ROUND, "algorithm", "lr", 2.5e-4)
    step_counts(learner, UPDATES_PER_ROUND)        # training goes on with it
    assert algo.optimizer.param_groups[0]["lr"] == 2.5e-4


def test_unknown_hot_swap_changes_nothing(learner):
    learner.step()
    before = dict(local_algo(learner).hyperparameters)
    swaps = list(learner.hot_swaps)
    with pytest.raises(ValueError) as err:
        learner.update_algorithm_parameter("learning_rate", 1e-4)
    assert "lr" in str(err.value) and "learning_rate" in str(err.value)
    with pytest.raises(TypeError):
        learner.update_algorithm_parameter("lr", "small")
    with pytest.raises(ValueError) as err:
        learner.update_storage_parameter("length", 4)
    assert "size" in str(err.value)
    assert local_algo(learner).hyperparameters == before
    assert local_algo(learner).optimizer.param_groups[0]["lr"] == before["lr"]
    assert local_storage(learner).size == SIZE
    assert learner.hot_swaps == swaps


def test_storage_size_hot_swap_changes_rollout_length(learner):
    step_counts(learner, UPDATES_PER_ROUND)            # exactly one round consumed
    assert learner.update_storage_parameter("size", 4) == 4
    counts = step_counts(learner, 2 * UPDATES_PER_ROUND)
    new = 4 * ENVS
    assert counts[0] == SAMPLES_PER_ROUND + new
    assert counts[-1] == SAMPLES_PER_ROUND + 2 * new


def test_replace_storage_component(learner):
    step_counts(learner, 2)                            # in the middle of a round
    learner.replace_agent_component("storage", VanillaOnPolicyBuffer.create_factory(size=3))
    assert isinstance(local_storage(learner), VanillaOnPolicyBuffer)
    start = learner.num_samples_collected
    counts = step_counts(learner, 2 * UPDATES_PER_ROUND)
    # the half-used round is dropped; training continues with rollouts of the new size
    assert counts[0] == start + 3 * ENVS
    assert counts[-1] == start + 2 * 3 * ENVS
    assert learner.hot_swaps[-1][1:3] == ("component", "storage")
    with pytest.raises(ValueError):
        learner.replace_agent_component("critic", VanillaOnPolicyBuffer.create_factory(size=3))


def test_replace_algo_component(learner):
    learner.step()
    new_factory, _ = PPO.create_factory(lr=7e-5, num_epochs=1, num_mini_batch=1)
    learner.replace_agent_component("algo", new_factory)
    algo = local_algo(learner)
    assert algo.optimizer.param_groups[0]["lr"] == 7e-5 and algo.num_epochs == 1
    before = {k: v.clone() for k, v in local_actor(learner).state_dict().items()}
    start = learner.num_samples_collected
    learner.step()
    learner.step()
    assert learner.num_samples_collected == start + 2 * SAMPLES_PER_ROUND   # one update per round now
    assert any(not torch.equal(before[k], v) for k, v in local_actor(learner).state_dict().items())


# -------------------------------------------------------------------------- saving
def test_save_model_writes_loadable_state_dict(learner, tmp_path):
    step_counts(learner, UPDATES_PER_ROUND)
    path = learner.save_model()
    assert os.path.isfile(path)
    assert os.path.dirname(path) == learner.log_dir
    state = torch.load(path, map_location="cpu")
    actor = local_actor(learner)
    fresh = OnPolicyActor.create_factory(actor.input_space, actor.action_space, "PPO",
                                         feature_extractor_network=MLP,
                                         feature_extractor_kwargs={"hidden_sizes": [16]})("cpu")
    fresh.load_state_dict(state)
    obs = torch.randn(5, 3)
    with torch.no_grad():
        for a, b in zip(actor.get_action(obs, deterministic=True), fresh.get_action(obs, deterministic=True)):
            torch.testing.assert_close(a, b)
    # an absolute name goes where it says; no temporary file is left behind
    other = learner.save_model(str(tmp_path / "elsewhere.pt"))
    assert os.path.isfile(other)
    assert not [f for f in os.listdir(learner.log_dir) if f.endswith(".tmp")]
    # restart_model builds an actor from the file
    restarted = OnPolicyActor.create_factory(actor.input_space, actor.action_space, "PPO", restart_model=path,
                                             feature_extractor_network=MLP,
                                             feature_extractor_kwargs={"hidden_sizes": [16]})("cpu")
    with torch.no_grad():
        torch.testing.assert_close(restarted.get_value(obs), actor.get_value(obs))


# ----------------------------------------------------------------------- variants
def test_a2c_and_box_action_space_run_in_process():
    learner = Learner(build_scheme(env_fn=make_gym_env, env_kwargs={"env_id": "Pendulum-v1"}, test_envs=False,
                                   algo_cls=A2C, num_epochs=1, num_mini_batch=1),
                      target_steps=3 * SAMPLES_PER_ROUND)
    try:
        while not learner.done():
            learner.step()
        # A2C: one update per collection
        assert learner.num_updates == 3 and learner.num_samples_collected == 3 * SAMPLES_PER_ROUND
    finally:
        learner.stop()


def test_context_manager_stops_the_scheme():
    del CLOSED[:]
    with Learner(build_scheme(), target_steps=100) as learner:
        learner.step()
        closed_while_running = len(CLOSED)
    # every train (ENVS) and test (1) environment is closed on leaving the block
    assert len(CLOSED) - closed_while_running == ENVS + 1
