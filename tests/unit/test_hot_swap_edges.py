"""Edges of hot-swapping: a value for a parameter that is None now takes its documented
type; parameters fixed when a component is built are refused by every path before anything
changes (``pytorchrl set`` all or nothing); EREBuffer with its defaults trains DDQN."""

import gymnasium as gym
import pytest

from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.algorithms import A2C, SAC
from pytorchrl.config import build_learner, validate_config
from pytorchrl.config.schema import algorithm_keys, storage_keys
from pytorchrl.tools.live_control import apply_changes

pytestmark = pytest.mark.usefixtures("no_ray_import")


def _learner(algorithm, storage, steps):
    return build_learner(validate_config({"seed": 0, "env": {"id": "CartPole-v1"}, "algorithm": algorithm,
                                          "storage": storage,
                                          "learner": {"target_steps": steps, "tensorboard": False}}))


def test_a_float_into_an_integer_option_that_is_none_is_refused_at_once():
    actor = OnPolicyActor("cpu", gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), "A2C")
    algo = A2C("cpu", actor)
    assert algo.mini_batch_size is None
    with pytest.raises(TypeError, match=r"A2C hyperparameter 'mini_batch_size' expects int or None \(it is None "
                                        r"now\), got 1.0"):
        algo.update_algorithm_parameter("mini_batch_size", 1.0)
    assert algo.mini_batch_size is None
    algo.update_algorithm_parameter("mini_batch_size", 8)
    assert algo.mini_batch_size == 8
    # A number documented as a float takes an integer too, converted.
    sac = SAC("cpu", _sac_actor())
    sac.update_algorithm_parameter("target_entropy", -1)
    assert sac.target_entropy == -1.0 and isinstance(sac.target_entropy, float)


def test_each_class_reads_its_own_hyperparameter_names_once():
    # A subclass read after its parent (RND_PPO after PPO) has its own names, not the
    # parent's: the names are kept per class, in the class itself.
    from pytorchrl.agent.algorithms import PPO, RND_PPO
    ppo, rnd = PPO.hyperparameter_names(), RND_PPO.hyperparameter_names()
    assert set(ppo) < set(rnd) and "int_adv_coeff" in rnd and "int_adv_coeff" not in ppo
    assert PPO.hyperparameter_names() == ppo and ppo is not PPO.hyperparameter_names()   # a copy each time
    ppo.append("not_a_name")
    assert "not_a_name" not in PPO.hyperparameter_names()
    # A hot swap checked on a built algorithm sees the same names.
    actor = OnPolicyActor("cpu", gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), "PPO")
    algo = PPO("cpu", actor)
    assert list(algo.hyperparameters) == PPO.hyperparameter_names()
    algo.update_algorithm_parameter("clip_param", 0.1)
    assert algo.clip_param == 0.1
    with pytest.raises(ValueError, match="not_a_name"):
        algo.update_algorithm_parameter("not_a_name", 1)


def _sac_actor():
    from pytorchrl.agent.actors import OffPolicyActor
    return OffPolicyActor("cpu", gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (1,)), "SAC",
                          common_feature_extractor_kwargs={"hidden_sizes": [8]})


def test_the_learner_refuses_it_before_any_worker_and_trains_on_with_a_valid_one():
    learner = _learner({"name": "A2C"}, {"name": "GAEBuffer", "size": 8}, 10_000)
    try:
        with pytest.raises(TypeError, match="expects int or None"):
            learner.update_algorithm_parameter("mini_batch_size", 1.0)
        learner.update_algorithm_parameter("mini_batch_size", 4)
        for _ in range(3):
            learner.step()
        assert learner.update_worker.local_worker.algo.mini_batch_size == 4
    finally:
        learner.stop()


def test_ere_buffer_with_its_defaults_trains_ddqn():
    learner = _learner({"name": "DDQN", "start_steps": 100, "update_every": 50, "num_updates": 5},
                       {"name": "EREBuffer", "size": 1000}, 400)
    try:
        while not learner.done():
            learner.step()
        storage = learner.update_worker.local_worker.storage
        assert learner.num_updates > 10 and storage._served > 10
    finally:
        learner.stop()


def test_fixed_replay_parameters_are_refused_by_set_before_anything_changes():
    learner = _learner({"name": "DDQN", "start_steps": 50}, {"name": "NStepReplayBuffer", "size": 500,
                                                            "n_step": 3}, 10_000)
    try:
        algo = learner.update_worker.local_worker.algo
        lr = algo.lr
        for change, words in ((("storage.size", 1000), "'size' is fixed once the buffer is built (it is 500)"),
                              (("n_step", 1), "'n_step' is fixed once the buffer is built (it is 3)"),
                              (("numpy_update", False), "'numpy_update' is fixed once the algorithm is built")):
            with pytest.raises(ValueError) as info:
                apply_changes(learner, [("lr", lr / 2), change])
            assert words in str(info.value)
            assert algo.lr == lr and learner.hot_swaps == []    # all or nothing
        assert apply_changes(learner, [("lr", lr / 2), ("storage.size", 500)]) == \
            [("algorithm", "lr", lr / 2), ("storage", "size", 500)]
    finally:
        learner.stop()


def test_the_reference_marks_what_is_fixed():
    assert storage_keys("ReplayBuffer")["size"].doc.endswith("Fixed once built: a hot-swap to another value is "
                                                             "refused.")
    assert "Fixed once built" in storage_keys("NStepReplayBuffer")["n_step"].doc
    assert "Fixed once built" in algorithm_keys("A2C")["numpy_update"].doc
    assert "Fixed once built" not in algorithm_keys("A2C")["lr"].doc
    assert "Fixed once built" not in storage_keys("GAEBuffer")["size"].doc   # an on-policy rollout resizes
