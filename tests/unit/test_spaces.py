"""Spaces beyond Box and Discrete (pytorchrl.agent.spaces): MultiDiscrete and MultiBinary
action heads, Dict and Tuple observations packed in one vector and read by DictNet, and
the one-line refusal of the spaces no actor supports. Real gymnasium environments
(DictCartPole-v1, MultiDiscreteCartPole-v1), real torch, the in-process scheme."""

import logging

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Bernoulli, Categorical, Independent, kl_divergence

import pytorchrl as prl
from pytorchrl import cli
from pytorchrl.agent.actors import OffPolicyActor, OnPolicyActor
from pytorchrl.agent.actors.distributions import BernoulliHead, MultiCategorical, MultiCategoricalHead
from pytorchrl.agent.actors.feature_extractors import CNN, MLP, DictNet
from pytorchrl.agent.algorithms import DDQN, PPO
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.notices import forget_notices
from pytorchrl.agent.spaces import (PackedBox, PackedObservation, UnsupportedSpaceError, pack_env,
                                    packed_space)
from pytorchrl.agent.storages import GAEBuffer, ReplayBuffer, VTraceBuffer
from pytorchrl.envs import make_gym_env
from pytorchrl.scheme import transport
from pytorchrl.scheme.collection.c_worker import CWorker

from cli_helpers import REPO, tiny, write_config

EXAMPLE = f"{REPO}/examples/configs/ppo_dict_cartpole.yaml"
IMAGE_DICT = gym.spaces.Dict({"camera": gym.spaces.Box(0, 255, (40, 48, 3), dtype=np.uint8),
                              "speed": gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32),
                              "gear": gym.spaces.Discrete(4)})


# ------------------------------------------------------------------ action heads
def test_multi_categorical_head_sums_independent_categoricals():
    torch.manual_seed(0)
    head = MultiCategoricalHead(5, [2, 3, 4])
    features = torch.randn(7, 5)
    action, logp = head.sample(features)
    assert action.shape == (7, 3) and action.dtype == torch.int64 and logp.shape == (7, 1)
    assert (action >= 0).all() and (action < torch.tensor([2, 3, 4])).all()
    logits = head.linear(features).split([2, 3, 4], dim=-1)
    parts = [Categorical(logits=lg) for lg in logits]
    expected_logp = sum(c.log_prob(action[:, k]) for k, c in enumerate(parts))
    expected_entropy = sum(c.entropy() for c in parts)
    lp, ent = head.log_prob_entropy(features, action)
    torch.testing.assert_close(logp[:, 0], expected_logp)
    torch.testing.assert_close(lp[:, 0], expected_logp)
    torch.testing.assert_close(ent[:, 0], expected_entropy)
    dist = head.distribution(features)
    assert isinstance(dist, MultiCategorical) and dist.batch_shape == (7,)
    torch.testing.assert_close(dist.log_prob(action), expected_logp)
    torch.testing.assert_close(dist.entropy(), expected_entropy)
    other = MultiCategoricalHead(5, [2, 3, 4]).distribution(features)
    torch.testing.assert_close(kl_divergence(dist, other),
                               sum(kl_divergence(a, b) for a, b in zip(dist.components, other.components)))
    greedy, _ = head.sample(features, deterministic=True)
    assert torch.equal(greedy, torch.stack([lg.argmax(-1) for lg in logits], dim=-1))


def test_bernoulli_head_sums_independent_bits():
    torch.manual_seed(0)
    head = BernoulliHead(5, 4)
    features = torch.randn(6, 5)
    action, logp = head.sample(features)
    assert action.shape == (6, 4) and action.dtype == torch.float32 and logp.shape == (6, 1)
    assert set(action.unique().tolist()) <= {0.0, 1.0}
    reference = Independent(Bernoulli(logits=head.linear(features)), 1)
    lp, ent = head.log_prob_entropy(features, action)
    torch.testing.assert_close(logp[:, 0], reference.log_prob(action))
    torch.testing.assert_close(lp[:, 0], reference.log_prob(action))
    torch.testing.assert_close(ent[:, 0], reference.entropy())
    torch.testing.assert_close(head.distribution(features).log_prob(action), reference.log_prob(action))
    greedy, _ = head.sample(features, deterministic=True)
    assert torch.equal(greedy, (head.linear(features) > 0).float())


@pytest.mark.parametrize("space,stored,env_shape,env_dtype", [
    (gym.spaces.MultiDiscrete([2, 3], start=[1, -1]), (2,), (2,), np.int64),
    (gym.spaces.MultiDiscrete([[2, 3], [4, 5]]), (4,), (2, 2), np.int64),
    (gym.spaces.MultiBinary(3), (3,), (3,), np.int8),
])
def test_the_actor_stores_vectors_and_gives_the_env_actions_of_its_space(space, stored, env_shape, env_dtype):
    torch.manual_seed(0)
    actor = OnPolicyActor.create_factory(gym.spaces.Box(-1, 1, (4,)), space, "PPO")("cpu")
    obs = np.random.default_rng(0).uniform(-1, 1, (64, 4)).astype(np.float32)
    env_action, extras, _ = actor.act(obs)
    assert extras[prl.ACT].shape == (64,) + stored and extras[prl.LOGP].shape == (64, 1)
    assert env_action.shape == (64,) + env_shape and env_action.dtype == env_dtype
    assert all(space.contains(a) for a in env_action)
    logp, entropy, value = actor.evaluate_actions(torch.as_tensor(obs), torch.as_tensor(extras[prl.ACT]))
    np.testing.assert_allclose(logp.detach().numpy(), extras[prl.LOGP], rtol=1e-5, atol=1e-6)
    assert entropy.shape == value.shape == (64, 1)


# ------------------------------------------------------------------ observations
def test_packing_round_trip_with_images_channels_first():
    packing = PackedObservation(IMAGE_DICT)
    obs = IMAGE_DICT.sample()
    vector = packing.pack(obs)
    assert vector.shape == (40 * 48 * 3 + 3 + 1,) and vector.dtype == np.float32
    parts = packing.unpack(vector[None])
    np.testing.assert_array_equal(parts["camera"][0], np.transpose(obs["camera"], (2, 0, 1)))
    np.testing.assert_array_equal(parts["speed"][0], obs["speed"])
    assert parts["gear"][0, 0] == obs["gear"]
    tuple_space = gym.spaces.Tuple((gym.spaces.Box(-1, 1, (2,)), gym.spaces.MultiBinary(3)))
    obs = tuple_space.sample()
    parts = PackedObservation(tuple_space).unpack(PackedObservation(tuple_space).pack(obs)[None])
    np.testing.assert_array_equal(parts[0][0], obs[0])
    np.testing.assert_array_equal(parts[1][0], obs[1])


def test_dict_net_reads_the_vector_keys_with_one_mlp_and_each_image_with_a_cnn():
    net = DictNet(packed_space(IMAGE_DICT), hidden_sizes=[16], image_kwargs={"hidden_size": 32})
    assert type(net.mlp) is MLP and [type(n) for n in net.cnns] == [CNN]
    # gear (a Discrete: 1 value) and speed (3) in one vector: the MLP's input.
    assert net.mlp.net[1].in_features == 4 and not net.vector_only
    assert net.num_outputs == 16 + 32
    packing = net.packing
    batch = np.stack([packing.pack(IMAGE_DICT.sample()) for _ in range(3)])
    assert net(torch.as_tensor(batch)).shape == (3, 48)
    # The MLP sees the vector keys only: changing the image changes the CNN's features only.
    changed = batch.copy()
    changed[:, packing.entries[0].start:packing.entries[0].stop] += 1.0      # camera
    a, b = net(torch.as_tensor(batch)).detach(), net(torch.as_tensor(changed)).detach()
    assert torch.equal(a[:, :16], b[:, :16]) and not torch.equal(a[:, 16:], b[:, 16:])
    # The MLP reads gear then speed, in the packing order.
    vector = torch.as_tensor(batch)[:, [packing.entries[1].start] + list(range(packing.entries[2].start,
                                                                                 packing.entries[2].stop))]
    torch.testing.assert_close(a[:, :16], net.mlp(vector).detach())


def test_dict_net_of_vector_keys_is_one_mlp_over_the_packed_vector_as_the_flat_form():
    space = gym.spaces.Dict({"position": gym.spaces.Box(-1, 1, (2,)), "velocity": gym.spaces.Box(-1, 1, (2,))})
    torch.manual_seed(0)
    net = DictNet(packed_space(space), hidden_sizes=[8, 8])
    assert net.vector_only and len(net.cnns) == 0 and net.num_outputs == 8
    torch.manual_seed(0)
    flat = MLP(gym.spaces.Box(-1, 1, (4,)), hidden_sizes=[8, 8], activation="tanh")
    obs = torch.randn(5, 4)
    # The same network as the flat form's MLP, weight for weight.
    torch.testing.assert_close(net(obs), flat(obs))


def _collector(env_id, storage_factory, algorithm_name="PPO", compress=False, **actor_kwargs):
    train, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": env_id}, vec_env_size=2, seed=0)
    algo_factory, name = PPO.create_factory(num_epochs=1, num_mini_batch=1)
    actor_factory = OnPolicyActor.create_factory(obs_space, action_space, name, **actor_kwargs)
    return CWorker(0, 0, algo_factory, actor_factory, storage_factory, train_envs_factory=train,
                   compress_data_to_send=compress), obs_space


@pytest.mark.parametrize("storage_factory,actor_kwargs", [
    (GAEBuffer.create_factory(size=8), {}),
    (VTraceBuffer.create_factory(size=8), {}),
    (GAEBuffer.create_factory(size=8), {"recurrent_net": "GRU"}),
], ids=["gae", "vtrace", "recurrent"])
def test_dict_observations_round_trip_through_the_storages_and_compression(storage_factory, actor_kwargs):
    torch.manual_seed(0)
    worker, obs_space = _collector("DictCartPole-v1", storage_factory, **actor_kwargs)
    assert isinstance(obs_space, PackedBox) and obs_space.shape == (4,)
    data, _ = worker.collect_data()
    obs = np.asarray(data[prl.OBS])
    assert obs.shape == (8, 2, 4)
    # The packed rows are CartPole's states: position keys (x, angle), velocity keys.
    parts = obs_space.packing.unpack(obs.reshape(-1, 4))
    assert set(parts) == {"position", "velocity"}
    assert np.all(np.abs(parts["position"][:, 0]) <= 4.8) and np.all(np.abs(parts["position"][:, 1]) <= 0.42)
    # lz4 carries them exactly (compress=True compresses every array).
    packed = transport.pack(data, compress=True)
    assert packed.items[prl.OBS][0] == "lz4"
    back = transport.unpack(packed)
    for key, value in data.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(back[key], value), key
    # A storage that receives them yields the same observations in its batches.
    _check_batches_hold(worker.storage, back, obs)


def _check_batches_hold(storage, data, obs):
    """``storage`` given ``data`` yields, over its batches, exactly the rows of ``obs``."""
    storage.clear()
    storage.add_data(data)
    seen = np.concatenate([np.asarray(batch[prl.OBS]).reshape(-1, 4) for batch in storage.batches()])
    assert sorted(map(tuple, seen)) == sorted(map(tuple, obs.reshape(-1, 4)))


def test_dict_observations_round_trip_through_the_replay_buffer():
    torch.manual_seed(0)
    train, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": "DictCartPole-v1"},
                                                           vec_env_size=2, seed=0)
    algo_factory, name = DDQN.create_factory(start_steps=0, mini_batch_size=16, update_every=8)
    worker = CWorker(0, 0, algo_factory, OffPolicyActor.create_factory(obs_space, action_space, name),
                     ReplayBuffer.create_factory(size=1000), train_envs_factory=train)
    data, _ = worker.collect_data()
    obs = np.asarray(data[prl.OBS]).reshape(-1, 4)
    assert obs.shape[0] >= 8
    replay = worker.storage
    replay.add_data(transport.unpack(transport.pack(data, compress=True)))
    batch = next(iter(replay.batches()))
    rows = {tuple(r) for r in obs}
    sampled = np.asarray(batch[prl.OBS]).reshape(-1, 4)
    assert sampled.shape == (16, 4) and all(tuple(r) in rows for r in sampled)


def test_off_policy_actors_read_dict_observations_as_one_vector():
    _, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": "DictCartPole-v1"})
    actor = OffPolicyActor.create_factory(obs_space, action_space, "DDQN")("cpu")
    env_action, _, _ = actor.act(np.zeros((3, 4), dtype=np.float32))
    assert env_action.shape == (3, 1)


def test_pytorchrl_trains_resumes_and_evaluates_the_dict_example(tmp_path, capsys):
    run = tmp_path / "run"
    assert cli.main(["train", EXAMPLE, "learner.target_steps=512", "algorithm.num_epochs=2",
                     "--run-dir", str(run), "--progress", "plain"]) == 0
    assert (run / "checkpoint.pt").exists() and (run / "model.state_dict").exists()
    assert cli.main(["resume", str(run), "learner.target_steps=1024", "--progress", "plain"]) == 0
    capsys.readouterr()
    assert cli.main(["evaluate", str(run), "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "episode 2/2" in out and "mean return" in out


def test_evaluate_plays_a_multidiscrete_policy(tmp_path, capsys):
    run = tmp_path / "run"
    assert cli.main(["train", EXAMPLE, "env.id=MultiDiscreteCartPole-v1", "learner.target_steps=256",
                     "algorithm.num_epochs=1", "--run-dir", str(run), "--progress", "plain"]) == 0
    capsys.readouterr()
    assert cli.main(["evaluate", str(run), "--episodes", "1"]) == 0
    assert "episode 1/1" in capsys.readouterr().out


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize("make,match", [
    (lambda: OnPolicyActor.create_factory(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Dict({"a": gym.spaces.Discrete(2)}),
                                          "PPO"), r"^PPO does not support the action space Dict\("),
    (lambda: OnPolicyActor.create_factory(gym.spaces.Text(5), gym.spaces.Discrete(2), "A2C"),
     r"^A2C does not support the observation space Text \(supported: Box, "),
    (lambda: OnPolicyActor.create_factory(gym.spaces.Graph(gym.spaces.Box(-1, 1, (2,)), None), gym.spaces.Discrete(2),
                                          "PPO"), r"^PPO does not support the observation space Graph"),
    (lambda: OffPolicyActor.create_factory(gym.spaces.Box(-1, 1, (4,)), gym.spaces.MultiDiscrete([2, 3]), "DDQN"),
     r"^DDQN does not support the action space MultiDiscrete\(\[2 3\]\) \(supported: Discrete\)$"),
    (lambda: OffPolicyActor.create_factory(gym.spaces.Box(-1, 1, (4,)), gym.spaces.MultiBinary(3), "SAC"),
     r"^SAC does not support the action space MultiBinary\(3\) \(supported: Discrete, Box\)$"),
    (lambda: packed_space(gym.spaces.Dict({"a": gym.spaces.Dict({"b": gym.spaces.Discrete(2)})})),
     r"^PackedObservation \(key 'a'\) does not support the observation space Dict\("),
])
def test_unsupported_spaces_are_refused_in_one_line(make, match):
    with pytest.raises(UnsupportedSpaceError, match=match) as info:
        make()
    assert "\n" not in str(info.value)


def _ddqn(**sections):
    """The tiny command-line configuration with DDQN and a replay buffer, sections updated."""
    config = tiny(**sections)
    config["algorithm"] = {"name": "DDQN"}
    config["storage"] = {"name": "ReplayBuffer", "size": 1000}
    return config


def test_the_command_line_refuses_an_unsupported_space_with_exit_2_and_one_line(tmp_path, capsys):
    config = _ddqn(env={"id": "MultiDiscreteCartPole-v1", "vec_env_size": 1, "test_env": False})
    run = tmp_path / "run"
    assert cli.main(["train", write_config(tmp_path, config), "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: DDQN does not support the action space MultiDiscrete([2 3]) (supported: Discrete)"]
    assert not (run / "checkpoint.pt").exists()


def test_dict_feature_extractor_is_refused_for_off_policy_algorithms(tmp_path, capsys):
    config = _ddqn(env={"id": "DictCartPole-v1"}, actor={"feature_extractor": "dict"})
    assert cli.main(["train", write_config(tmp_path, config), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("config error: actor.feature_extractor: dict")


# ------------------------------------------------------------------ fast paths
def test_dict_observations_of_vectors_take_the_numpy_fast_paths(caplog):
    forget_notices()
    torch.manual_seed(0)
    with caplog.at_level(logging.INFO, logger="pytorchrl"):
        worker, _ = _collector("DictCartPole-v1", GAEBuffer.create_factory(size=16),
                               shared_policy_value_network=False)
        data, _ = worker.collect_data()
        assert worker.algo.update_engine is not None and worker.actor._acting != worker.actor._torch_acting
    assert not [r for r in caplog.records if "not used" in r.getMessage()]
    obs, act = data[prl.OBS].reshape(32, -1), data[prl.ACT].reshape(32, -1)
    logp, _, _ = worker.actor.evaluate_actions(obs, act)
    torch.testing.assert_close(logp, data[prl.LOGP].reshape(32, 1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("env_id,reason", [
    ("MultiDiscreteCartPole-v1", "policy head MultiCategoricalHead for the action space MultiDiscrete([2 3])"),
])
def test_fast_paths_step_aside_for_these_spaces_and_say_so_once(env_id, reason, caplog):
    forget_notices()
    torch.manual_seed(0)
    with caplog.at_level(logging.INFO, logger="pytorchrl"):
        worker, _ = _collector(env_id, GAEBuffer.create_factory(size=16))
        worker.collect_data()
        worker.collect_data()
        algo = worker.algo
        assert algo.update_engine is None
    acting = [r for r in caplog.records if "numpy acting not used" in r.getMessage()]
    assert len(acting) == 1 and acting[0].levelno == logging.WARNING and reason in acting[0].getMessage()
    updating = [r for r in caplog.records if "numpy update not used" in r.getMessage()]
    assert len(updating) == 1 and updating[0].levelno == logging.WARNING
    # The torch path computes what the storage trains on: log-probabilities of the actions taken.
    data, _ = worker.collect_data()
    obs, act = data[prl.OBS].reshape(32, -1), data[prl.ACT].reshape(32, -1)
    logp, _, _ = worker.actor.evaluate_actions(obs, act)
    torch.testing.assert_close(logp, data[prl.LOGP].reshape(32, 1), rtol=1e-5, atol=1e-5)


def test_evaluation_envs_are_packed_as_the_training_envs():
    env = pack_env(make_gym_env("DictCartPole-v1"))
    _, _, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": "DictCartPole-v1"})
    assert env.observation_space == obs_space
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4,) and obs.dtype == np.float32
    plain, _ = make_gym_env("CartPole-v1").reset(seed=0)
    np.testing.assert_allclose(obs, plain[[0, 2, 1, 3]])     # position (x, angle), velocity (x', angle')


def test_attraction_kl_floors_every_component_of_a_multidiscrete_policy():
    from pytorchrl.agent.algorithms.policy_loss_addons import floored
    # A component whose probability underflows to 0 would make the KL infinite.
    sharp = MultiCategorical([torch.tensor([[0.0, -200.0]]), torch.tensor([[0.0, 0.0, -200.0]])])
    policy = MultiCategorical([torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, 0.0, 0.0]])])
    assert torch.isinf(kl_divergence(policy, sharp)).all()
    kl = kl_divergence(policy, floored(sharp, 1e-6))
    assert torch.isfinite(kl).all() and kl.item() > 0
    for component in floored(sharp, 1e-6).components:
        assert component.probs.min() >= 1e-6 * 0.99


def test_dict_feature_extractor_is_refused_for_flat_observations(tmp_path, capsys):
    config = tiny(actor={"feature_extractor": "dict"})           # PPO on CartPole-v1: a Box
    assert cli.main(["train", write_config(tmp_path, config), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["config error: actor.feature_extractor: dict reads Dict or Tuple observations with PPO or A2C; "
                   "PPO's observations are Box((4,), float32)"]


def test_keys_lists_the_dict_feature_extractor(capsys):
    assert cli.main(["keys"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("feature_extractor:"))
    assert "'dict'" in line and "dict (Dict/Tuple observations: the vector keys through one MLP" in line
