"""Observation normalisation held by the actors (``normalize_observations``).

The statistics are exactly numpy's mean and variance of the observations merged; every
input of the actor is normalised (acting on the numpy fast path and in torch, values,
training batches, the target networks' bootstrap); they travel with the acting weights and
in saved models; the learner merges each rollout's moments when it publishes a version
(relabelled HER copies are not observations and are not counted); images are refused.
"""

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OffPolicyActor, OnPolicyActor
from pytorchrl.agent.actors.normalization import ObservationNormalizer
from pytorchrl.agent.algorithms import PPO, SAC
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.spaces import UnsupportedSpaceError, packed_space
from pytorchrl.agent.storages import HERBuffer, ReplayBuffer
from pytorchrl.envs import make_gym_env
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), dtype=np.float32)
BOX = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
SMALL = {"hidden_sizes": [16, 16]}


def _data(n, seed, offset=50.0, scale=20.0):
    """Observations far from zero mean and unit variance (where normalisation matters)."""
    rng = np.random.default_rng(seed)
    return (offset + scale * rng.standard_normal((n, 4)) * np.array([1.0, 0.1, 3.0, 0.01])).astype(np.float32)


def _manual(obs, mean, var, clip=10.0):
    return np.clip((obs - mean.astype(np.float32)) / np.sqrt(var.astype(np.float32) + np.float32(1e-8)), -clip, clip)


def _pair(actor_cls, name, action_space, **kwargs):
    """An actor that normalises (statistics of ``_data``) and a twin without normalisation
    holding the same network weights."""
    torch.manual_seed(0)
    actor = actor_cls("cpu", OBS, action_space, name, normalize_observations=True, **kwargs)
    torch.manual_seed(0)
    plain = actor_cls("cpu", OBS, action_space, name, **kwargs)
    plain.load_state_dict({k: v for k, v in actor.state_dict().items() if not k.startswith("obs_norm.")})
    obs = _data(300, 1)
    actor.merge_observation_moments(ObservationNormalizer.moments(obs))
    return actor, plain


def test_statistics_are_numpy_mean_and_variance_of_the_observations_merged():
    actor = OffPolicyActor("cpu", OBS, BOX, "SAC", normalize_observations=True)
    assert int(actor.obs_norm.count) == 0
    batches = [_data(n, s) for s, n in enumerate((1, 37, 500, 2))]
    for batch in batches:
        actor.merge_observation_moments(ObservationNormalizer.moments(batch))
    every = np.concatenate(batches).astype(np.float64)
    assert int(actor.obs_norm.count) == len(every)
    np.testing.assert_allclose(actor.obs_norm.mean.numpy(), every.mean(0), rtol=1e-12)
    np.testing.assert_allclose(actor.obs_norm.var.numpy(), every.var(0), rtol=1e-10)
    with pytest.raises(ValueError, match="observation statistics of size"):
        actor.merge_observation_moments(ObservationNormalizer.moments(np.zeros((3, 5))))
    with pytest.raises(ValueError, match="does not normalise its observations"):
        OffPolicyActor("cpu", OBS, BOX, "SAC").merge_observation_moments(ObservationNormalizer.moments(batches[0]))


@pytest.mark.parametrize("fast", [True, False], ids=["numpy-acting", "torch-acting"])
def test_on_policy_acting_and_values_read_normalised_observations(fast):
    actor, plain = _pair(OnPolicyActor, "PPO", gym.spaces.Discrete(3), feature_extractor_kwargs=SMALL)
    obs = _data(64, 2)
    manual = _manual(obs, actor.obs_norm.mean.numpy(), actor.obs_norm.var.numpy())
    assert np.abs(manual).max() > 1.0 and np.abs(manual).max() <= 10.0
    if fast:
        assert actor.build_fast_acting() is not None
        acting = actor.act
    else:
        def acting(o, deterministic):
            return actor._torch_acting(o, None, deterministic)
    action, extras, _ = acting(obs, deterministic=True)
    ref_action, ref_extras, _ = plain._torch_acting(manual, None, True)
    np.testing.assert_array_equal(action, ref_action)
    np.testing.assert_allclose(extras[prl.VAL], ref_extras[prl.VAL], atol=1e-5)
    np.testing.assert_allclose(extras[prl.LOGP], ref_extras[prl.LOGP], atol=1e-5)
    # Bootstrap values, on whichever path ``values`` takes.
    np.testing.assert_allclose(actor.values(obs), ref_extras[prl.VAL], atol=1e-5)
    # And unnormalised inputs give other outputs: the test sees the normalisation.
    assert not np.allclose(plain._torch_acting(obs, None, True)[1][prl.VAL], ref_extras[prl.VAL], atol=1e-3)


@pytest.mark.parametrize("numpy_update", [True, False], ids=["numpy-update", "torch-update"])
def test_ppo_training_batches_are_normalised(numpy_update):
    actor, plain = _pair(OnPolicyActor, "PPO", gym.spaces.Discrete(3), feature_extractor_kwargs=SMALL,
                         shared_policy_value_network=False)
    algo = PPO("cpu", actor, None, numpy_update=numpy_update)
    ref = PPO("cpu", plain, None, numpy_update=False)
    assert (algo.update_engine is not None) == numpy_update
    obs = _data(64, 3)
    g = torch.Generator().manual_seed(0)
    batch = {prl.OBS: torch.from_numpy(obs), prl.ACT: torch.randint(0, 3, (64, 1), generator=g),
             prl.LOGP: -torch.rand(64, 1, generator=g), prl.VAL: torch.randn(64, 1, generator=g),
             prl.RET: torch.randn(64, 1, generator=g), prl.ADV: torch.randn(64, 1, generator=g)}
    manual = _manual(obs, actor.obs_norm.mean.numpy(), actor.obs_norm.var.numpy())
    _, info = algo.compute_gradients(batch, return_grads=False)
    _, info_ref = ref.compute_gradients({**batch, prl.OBS: torch.from_numpy(manual)}, return_grads=False)
    for key, value in info_ref.items():
        assert info[key] == pytest.approx(value, abs=1e-5, rel=1e-4), key
    for p, q in zip(algo.actor.parameters(), ref.actor.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=2e-6, rtol=1e-4)


@pytest.mark.parametrize("numpy_update", [True, False], ids=["numpy-update", "torch-update"])
def test_sac_acting_training_and_target_read_normalised_observations(numpy_update):
    actor, plain = _pair(OffPolicyActor, "SAC", BOX, common_feature_extractor_kwargs=SMALL)
    obs, obs2 = _data(64, 4), _data(64, 5)
    mean, var = actor.obs_norm.mean.numpy(), actor.obs_norm.var.numpy()
    for a in (actor, plain):
        a.warmup.fill_(0.0)
    assert actor.build_fast_acting() is not None
    np.testing.assert_allclose(actor.act(obs, deterministic=True)[0],
                               plain._torch_acting(_manual(obs, mean, var), None, True)[0], atol=1e-5)
    algo = SAC("cpu", actor, None, numpy_update=numpy_update)
    ref = SAC("cpu", plain, None, numpy_update=False)
    assert (algo.update_engine is not None) == numpy_update
    # The target networks normalise with the actor's running statistics, not a frozen copy.
    assert algo.target.obs_norm is actor.obs_norm
    g = torch.Generator().manual_seed(0)
    batch = {prl.OBS: torch.from_numpy(obs), prl.OBS2: torch.from_numpy(obs2), prl.ACT: torch.rand(64, 2, generator=g),
             prl.REW: torch.randn(64, 1, generator=g), prl.DISCOUNT: torch.full((64, 1), 0.99)}
    torch.manual_seed(1)
    _, info = algo.compute_gradients(batch, return_grads=False)
    torch.manual_seed(1)
    _, info_ref = ref.compute_gradients({**batch, prl.OBS: torch.from_numpy(_manual(obs, mean, var)),
                                         prl.OBS2: torch.from_numpy(_manual(obs2, mean, var))}, return_grads=False)
    for key, value in info_ref.items():
        assert info[key] == pytest.approx(value, abs=1e-5, rel=1e-4), key
    for p, q in zip(algo.trainable_parameters(), ref.trainable_parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=2e-6, rtol=1e-4)


def test_statistics_travel_with_the_acting_weights_and_in_saved_models(tmp_path):
    for actor_cls, name, space, kwargs in [(OnPolicyActor, "PPO", gym.spaces.Discrete(3),
                                            {"feature_extractor_kwargs": SMALL}),
                                           (OffPolicyActor, "SAC", BOX, {"common_feature_extractor_kwargs": SMALL})]:
        learner, _ = _pair(actor_cls, name, space, **kwargs)
        algo_cls = PPO if name == "PPO" else SAC
        learner_algo = algo_cls("cpu", learner, None)
        weights = learner_algo.get_acting_weights()
        assert {"obs_norm.mean", "obs_norm.var", "obs_norm.count"} <= set(weights), name
        torch.manual_seed(0)
        collector = actor_cls("cpu", OBS, space, name, normalize_observations=True, **kwargs)
        obs = _data(16, 6)
        collector.act(obs)        # a numpy program built before the weights come keeps reading them
        algo_cls("cpu", collector, None).set_acting_weights(weights)
        for key in ("mean", "var", "count"):
            torch.testing.assert_close(getattr(collector.obs_norm, key), getattr(learner.obs_norm, key))
        learner.warmup.fill_(0.0) if name == "SAC" else None
        collector.warmup.fill_(0.0) if name == "SAC" else None
        np.testing.assert_allclose(collector.act(obs, deterministic=True)[0],
                                   learner.act(obs, deterministic=True)[0], atol=1e-6)
        path = tmp_path / f"{name}.state_dict"
        torch.save(learner.state_dict(), path)
        restored = actor_cls("cpu", OBS, space, name, normalize_observations=True, restart_model=str(path), **kwargs)
        torch.testing.assert_close(restored.obs_norm.mean, learner.obs_norm.mean)
        assert int(restored.obs_norm.count) == 300


def test_image_observations_are_refused_in_one_line():
    image = gym.spaces.Box(0, 255, (3, 84, 84), dtype=np.uint8)
    for build in (lambda: OnPolicyActor.create_factory(image, gym.spaces.Discrete(2), "PPO",
                                                        normalize_observations=True),
                  lambda: OffPolicyActor("cpu", image, gym.spaces.Discrete(2), "DDQN", normalize_observations=True)):
        with pytest.raises(UnsupportedSpaceError, match="image observations .*scale uint8 pixels by 1/255") as exc:
            build()
        assert "\n" not in str(exc.value)
    with pytest.raises(UnsupportedSpaceError, match="no float Box key"):
        OnPolicyActor("cpu", gym.spaces.Dict({"a": gym.spaces.Discrete(3)}), gym.spaces.Discrete(2), "PPO",
                      normalize_observations=True)
    with pytest.raises(ValueError, match="observation_clip=5.0 has no effect without normalize_observations"):
        OffPolicyActor.create_factory(OBS, BOX, "SAC", observation_clip=5.0)


def test_dict_observations_normalise_their_float_keys_only():
    space = gym.spaces.Dict({"pos": gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32),
                             "flag": gym.spaces.Discrete(3), "bits": gym.spaces.MultiBinary(2)})
    norm = ObservationNormalizer(packed_space(space), clip=5.0)
    packing = packed_space(space).packing
    rows = np.stack([packing.pack({"pos": np.array([10.0 + i, -3.0 * i], np.float32), "flag": i % 3,
                                   "bits": np.array([i % 2, 1], np.int8)}) for i in range(20)])
    norm.merge(norm.moments(rows))
    out = norm(torch.from_numpy(rows)).numpy()
    floats = np.zeros(packing.size, dtype=bool)
    entry = next(e for e in packing.entries if e.key == "pos")
    floats[entry.start:entry.stop] = True
    np.testing.assert_array_equal(out[:, ~floats], rows[:, ~floats])      # indices and bits as they were
    np.testing.assert_allclose(out[:, floats], _manual(rows, norm.mean.numpy(), norm.var.numpy(), 5.0)[:, floats],
                               rtol=1e-6)


def _sac_learner(storage_factory, env_id="Pendulum-v1"):
    torch.manual_seed(0)
    train, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": env_id}, vec_env_size=1, seed=0)
    algo_factory, name = SAC.create_factory(update_every=1, num_updates=1, start_steps=20, mini_batch_size=16,
                                            test_every=10 ** 9)
    actor_factory = OffPolicyActor.create_factory(obs_space, action_space, name, normalize_observations=True,
                                                  common_feature_extractor_kwargs={"hidden_sizes": [16]})
    scheme = Scheme(algo_factory=algo_factory, actor_factory=actor_factory, storage_factory=storage_factory,
                    train_envs_factory=train)
    return Learner(scheme, target_steps=10 ** 6)


def test_the_learner_merges_every_collected_observation_once_when_it_publishes():
    learner = _sac_learner(ReplayBuffer.create_factory(size=1000))
    worker = learner.update_worker.local_worker
    try:
        versions = []
        for _ in range(40):
            learner.step()
            versions.append(worker.version)
        storage = worker.storage
        stored = storage._arrays[prl.OBS][:storage.num_items].astype(np.float64)
        # The last round's observations wait for the next publication (its training used
        # the statistics it was collected with).
        count = int(worker.actor.obs_norm.count)
        assert count == storage.num_items - 1
        np.testing.assert_allclose(worker.actor.obs_norm.mean.numpy(), stored[:count].mean(0), rtol=1e-10)
        np.testing.assert_allclose(worker.actor.obs_norm.var.numpy(), stored[:count].var(0), rtol=1e-8)
        assert versions == sorted(versions) and versions[-1] > versions[0]
    finally:
        learner.stop()


def test_her_relabelled_copies_are_not_counted():
    learner = _sac_learner(HERBuffer.create_factory(size=5000, n_sampled_goal=4), env_id="PointReach-v0")
    worker = learner.update_worker.local_worker
    try:
        for _ in range(80):
            learner.step()
        storage = worker.storage
        assert storage.num_items > storage.num_inserted          # relabelled copies are stored
        assert int(worker.actor.obs_norm.count) == storage.num_inserted - 1
    finally:
        learner.stop()


def test_the_configuration_builds_normalising_actors_and_refuses_what_cannot_apply(tmp_path):
    from pytorchrl.config import ConfigError, build_learner, validate_config
    base = {"seed": 0, "env": {"id": "Pendulum-v1", "vec_env_size": 1},
            "algorithm": {"name": "SAC", "start_steps": 10, "mini_batch_size": 8, "update_every": 1, "num_updates": 1},
            "storage": {"size": 1000}, "learner": {"target_steps": 30}}
    config = validate_config({**base, "actor": {"normalize_observations": True, "observation_clip": 5.0,
                                                "hidden_sizes": [8]}})
    learner = build_learner(config, log_dir=str(tmp_path))
    try:
        actor = learner.update_worker.local_worker.actor
        assert actor.obs_norm is not None and actor.obs_norm.clip == 5.0
        while not learner.done():
            learner.step()
        assert int(actor.obs_norm.count) > 0
    finally:
        learner.stop()
    with pytest.raises(ConfigError, match="actor.observation_clip.*no effect without actor.normalize_observations"):
        validate_config({**base, "actor": {"observation_clip": 5.0}})
    with pytest.raises(ConfigError, match="actor.normalize_observations.*decentralized_update_execution"):
        validate_config({**base, "algorithm": {"name": "PPO"}, "storage": {"size": 16},
                         "actor": {"normalize_observations": True},
                         "scheme": {"num_grad_workers": 2, "decentralized_update_execution": True}})
