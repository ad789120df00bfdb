"""OffPolicyActor: the networks each algorithm gets, actions (shapes, bounds, dtypes) for
Box and Discrete spaces, deterministic mode, exploration noise (Gaussian,
Ornstein-Uhlenbeck reset at episode ends), dueling heads, ensembles of critics, the
errors for combinations it does not serve, and restart_model."""

import math
import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn

from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.actors.feature_extractors.mlp import MLP
from pytorchrl.agent.algorithms import DDPG, DDQN, SAC, TD3
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import ReplayBuffer
from pytorchrl.envs import make_gym_env
from pytorchrl.scheme.collection.c_worker import CWorker

OBS = gym.spaces.Box(-5.0, 5.0, (3,), dtype=np.float32)
BOX = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 5.0], np.float32))
DISC = gym.spaces.Discrete(4)


def build(algo, space, **kw):
    kw.setdefault("common_feature_extractor_kwargs", {"hidden_sizes": [16]})
    return OffPolicyActor.create_factory(OBS, space, algo, **kw)("cpu")


def observations(n=64, seed=0):
    return np.random.default_rng(seed).uniform(-5, 5, (n, 3)).astype(np.float32)


def acting(actor):
    """The actor with its warm-up switched off (as after the first update)."""
    actor.warmup.fill_(0.0)
    return actor


# ------------------------------------------------------------------ actions
@pytest.mark.parametrize("algo", ["DDPG", "TD3", "SAC"])
@pytest.mark.parametrize("warmup", [True, False])
def test_box_actions_have_the_shape_and_bounds_of_the_space(algo, warmup):
    actor = build(algo, BOX)
    if not warmup:
        acting(actor)
    for deterministic in (False, True):
        a, extras, state = actor.act(observations(500), None, deterministic=deterministic)
        assert a.shape == (500, 2) and a.dtype == np.float32
        assert (a >= BOX.low).all() and (a <= BOX.high).all()
        assert extras == {}
    if warmup:
        a = actor.act(observations(4000))[0]
        # uniform over the box: the whole range is used on both dimensions
        assert (a.min(0) < BOX.low + 0.05).all() and (a.max(0) > BOX.high - 0.05).all()


@pytest.mark.parametrize("algo", ["DDQN", "SAC"])
@pytest.mark.parametrize("warmup", [True, False])
def test_discrete_actions_are_integer_indices(algo, warmup):
    actor = build(algo, DISC)
    if not warmup:
        acting(actor)
    actor.epsilon.fill_(1.0 if warmup else 0.0)
    for deterministic in (False, True):
        a = actor.act(observations(400), None, deterministic=deterministic)[0]
        assert a.shape == (400, 1) and a.dtype == np.int64
        assert a.min() >= 0 and a.max() < 4
    if warmup:
        counts = np.bincount(actor.act(observations(4000))[0][:, 0], minlength=4)
        assert counts.min() > 850, counts


def test_deterministic_sac_box_action_is_the_squashed_mean():
    actor = acting(build("SAC", BOX))
    obs = observations(32)
    a1 = actor.act(obs, deterministic=True)[0]
    a2 = actor.act(obs, deterministic=True)[0]
    np.testing.assert_array_equal(a1, a2)
    with torch.no_grad():
        mean = actor.policy_output(torch.as_tensor(obs))[:, :2]
    low, high = BOX.low, BOX.high
    expected = np.tanh(mean.numpy()) * (high - low) / 2 + (high + low) / 2
    np.testing.assert_allclose(a1, expected, rtol=1e-5, atol=1e-6)
    # sampled actions differ from it and from each other
    s1, s2 = actor.act(obs)[0], actor.act(obs)[0]
    assert not np.allclose(s1, s2) and not np.allclose(s1, a1)


def test_deterministic_discrete_sac_is_the_most_probable_action():
    actor = acting(build("SAC", DISC))
    obs = observations(64)
    with torch.no_grad():
        best = actor.policy_output(torch.as_tensor(obs)).argmax(1).numpy()
    np.testing.assert_array_equal(actor.act(obs, deterministic=True)[0][:, 0], best)


def test_deterministic_ddqn_is_greedy_whatever_epsilon_and_warm_up():
    actor = build("DDQN", DISC)
    actor.epsilon.fill_(1.0)
    obs = observations(64)
    with torch.no_grad():
        best = actor.q_values(torch.as_tensor(obs))[0].argmax(1).numpy()
    np.testing.assert_array_equal(actor.act(obs, deterministic=True)[0][:, 0], best)
    acting(actor).epsilon.fill_(0.0)
    np.testing.assert_array_equal(actor.act(obs)[0][:, 0], best)


# ------------------------------------------------------------------ noise
def test_gaussian_noise_scale_and_deterministic_mode():
    actor = acting(build("TD3", BOX, noise="Gauss", noise_kwargs={"sigma": 0.05}))
    with torch.no_grad():
        for p in actor.policy_net.parameters():
            p.zero_()                               # mean action: the centre of the box
    obs = observations(20000)
    a = actor.act(obs)[0]
    centre, half = (BOX.high + BOX.low) / 2, (BOX.high - BOX.low) / 2
    np.testing.assert_allclose(a.mean(0), centre, atol=0.01)
    np.testing.assert_allclose(a.std(0), 0.05 * half, rtol=0.05)   # sigma in half-range units
    np.testing.assert_allclose(actor.act(obs[:5], deterministic=True)[0], np.tile(centre, (5, 1)), atol=1e-6)
    assert actor.initial_state(3) is None


def test_deterministic_policies_default_to_gaussian_noise_and_no_noise_means_none():
    assert build("DDPG", BOX).noise == "Gauss"
    assert build("SAC", BOX).noise is None
    actor = acting(build("DDPG", BOX, noise="NoNoise"))
    obs = observations(16)
    np.testing.assert_array_equal(actor.act(obs)[0], actor.act(obs, deterministic=True)[0])


def test_ou_noise_state_evolves_and_resets():
    sigma, theta, dt = 0.3, 0.15, 0.01
    actor = acting(build("DDPG", BOX, noise="OU", noise_kwargs={"sigma": sigma, "theta": theta, "dt": dt}))
    state = actor.initial_state(2000)
    assert state.shape == (2000, 2) and not state.any()
    obs = observations(2000)
    det = actor.act(obs, deterministic=True)[0]
    a, _, state1 = actor.act(obs, state)
    # one step from 0: N(0, sigma^2 dt) per dimension
    np.testing.assert_allclose(state1.std(0), sigma * math.sqrt(dt), rtol=0.06)
    # the action is the deterministic one moved by the noise (in half-range units)
    half = (BOX.high - BOX.low) / 2
    inside = (np.abs((det - (BOX.high + BOX.low) / 2) / half) < 0.9).all(1)
    np.testing.assert_allclose(((a - det) / half)[inside], state1[inside], atol=1e-5)
    # the noise keeps its memory: the next state is correlated with this one
    _, _, state2 = actor.act(obs, state1.copy())
    assert np.corrcoef(state1[:, 0], state2[:, 0])[0, 1] > 0.5
    # reset_state zeroes exactly the rows of the environments whose episode ended
    reset = actor.reset_state(state2.copy(), [0, 5])
    assert not reset[[0, 5]].any()
    np.testing.assert_array_equal(reset[1:5], state2[1:5])
    np.testing.assert_array_equal(reset[6:], state2[6:])


def test_ou_noise_is_reset_at_episode_ends_by_a_collector():
    """Pendulum with episodes of 5 steps, rollouts of 5 steps: every rollout ends with
    all episodes ending, so the state a collector carries into the next rollout is the
    initial one; a rollout of 3 steps leaves it running."""
    train, act_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": "Pendulum-v1", "max_episode_steps": 5},
                                                        vec_env_size=2, seed=0)
    algo_f, name = DDPG.create_factory(update_every=10, start_steps=0)
    actor_f = OffPolicyActor.create_factory(obs_space, act_space, name, noise="OU",
                                            noise_kwargs={"sigma": 0.5},
                                            common_feature_extractor_kwargs={"hidden_sizes": [8]})
    worker = CWorker(0, 0, algo_f, actor_f, ReplayBuffer.create_factory(size=100), train_envs_factory=train)
    try:
        assert worker.state.shape == (2, 1) and not worker.state.any()
        worker.collect_train_data(3)
        assert (worker.state != 0).all()            # 3 steps into the episodes: running noise
        worker.collect_train_data(2)                # the episodes end at step 5: reset
        assert not worker.state.any()
        _, info = worker.collect_data()
        assert [length for _, length in info["episodes"]] == [5, 5]
        assert not worker.state.any()
    finally:
        worker.stop()


# ------------------------------------------------------------------ networks
def test_dueling_head_is_value_plus_centred_advantages():
    actor = build("DDQN", DISC, dueling=True)
    obs = torch.as_tensor(observations(8))
    with torch.no_grad():
        raw = actor.critics(obs)[0]                 # [V, A_0 .. A_3]
        q = actor.q_values(obs)[0]
    assert raw.shape == (8, 5) and q.shape == (8, 4)
    adv = raw[:, 1:]
    torch.testing.assert_close(q, raw[:, :1] + adv - adv.mean(1, keepdim=True))
    torch.testing.assert_close(q.mean(1), raw[:, 0])
    with pytest.raises(ValueError, match="dueling"):
        build("SAC", DISC, dueling=True)


@pytest.mark.parametrize("algo,space,critics,out", [("SAC", BOX, 3, 1), ("TD3", BOX, 3, 1), ("SAC", DISC, 3, 4),
                                                    ("DDPG", BOX, 1, 1), ("DDQN", DISC, 1, 4)])
def test_num_critics(algo, space, critics, out):
    actor = build(algo, space, num_critics=3)
    assert actor.num_critics == critics
    obs = torch.as_tensor(observations(5))
    a = torch.zeros(5, 2) if actor.critic_kind == "qsa" and not actor.discrete else None
    with torch.no_grad():
        q = actor.q_values(obs, a)
    assert q.shape == (critics, 5, out)
    if critics > 1:
        assert not torch.allclose(q[0], q[1])         # independent networks


def test_num_critics_must_be_positive():
    with pytest.raises(ValueError, match="num_critics"):
        build("TD3", BOX, num_critics=0)


def test_observation_feature_extractor_is_used_by_critics_and_policy():
    actor = build("SAC", BOX, obs_feature_extractor=MLP, obs_feature_extractor_kwargs={"hidden_sizes": [7]})
    assert isinstance(actor.critic_obs_net, MLP) and isinstance(actor.policy_obs_net, MLP)
    assert actor.critic_obs_net is not actor.policy_obs_net
    a = acting(actor).act(observations(10))[0]
    assert a.shape == (10, 2)
    algo = SAC("cpu", actor, start_steps=0)
    groups = algo.parameter_groups()
    ids = lambda ps: {id(p) for p in ps}   # noqa: E731
    assert ids(actor.critic_obs_net.parameters()) <= ids(groups["q"])
    assert ids(actor.policy_obs_net.parameters()) <= ids(groups["pi"])


class NoSize(nn.Module):
    def __init__(self, space):
        super().__init__()
        self.lin = nn.Linear(3, 4)


def test_a_feature_extractor_without_num_outputs_is_refused():
    with pytest.raises(ValueError, match="num_outputs"):
        build("DDQN", DISC, obs_feature_extractor=NoSize)


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize("algo,space,match", [
    ("DDQN", BOX, r"DDQN does not support the action space Box.*\(supported: Discrete\)"),
    ("DQN", BOX, r"DQN does not support the action space Box.*\(supported: Discrete\)"),
    ("DDPG", DISC, r"DDPG does not support the action space Discrete\(4\) \(supported: Box\)"),
    ("TD3", DISC, r"TD3 does not support the action space Discrete\(4\) \(supported: Box\)"),
    ("PPO", DISC, "OffPolicyActor serves"),
    ("SAC", gym.spaces.MultiDiscrete([2, 3]), r"SAC does not support the action space MultiDiscrete\(\[2 3\]\) "
                                              r"\(supported: Discrete, Box\)"),
])
def test_wrong_algorithm_and_space_combinations(algo, space, match):
    with pytest.raises(ValueError, match=match):
        build(algo, space)


def test_unknown_noise_is_refused():
    with pytest.raises(ValueError, match="noise must be one of"):
        build("TD3", BOX, noise="Pink")


def test_recurrent_actors_are_ddqn_only_and_memories_by_name():
    """(Recurrent DDQN itself: tests/unit/test_r2d2.py.)"""
    for algo, space in (("SAC", BOX), ("TD3", BOX), ("DDPG", BOX), ("SAC", DISC)):
        with pytest.raises(ValueError, match=f"^recurrent_net is supported for DDQN only .*; {algo} actors are "
                                             f"feed-forward$"):
            OffPolicyActor.create_factory(OBS, space, algo, recurrent_net="GRU")
        with pytest.raises(ValueError, match="supported for DDQN only"):
            OffPolicyActor("cpu", OBS, space, algo, recurrent_nets=True)
    with pytest.raises(ValueError, match="unknown memory network <class 'torch.nn.modules.rnn.GRU'>"):
        OffPolicyActor.create_factory(OBS, DISC, "DDQN", recurrent_net=nn.GRU)   # torch's, not a MemoryNetwork
    with pytest.raises(ValueError, match=r"sequence_overlap must be in \[0, 1\), got 1.0"):
        OffPolicyActor.create_factory(OBS, DISC, "DDQN", recurrent_net="GRU", sequence_overlap=1.0)
    assert build("DDQN", DISC, recurrent_nets=True).is_recurrent     # older scripts' switch: a GRU


@pytest.mark.parametrize("algo_cls,algo,space", [(DDQN, "DDQN", DISC), (SAC, "SAC", BOX), (TD3, "TD3", BOX)])
def test_algorithm_and_actor_mismatch_is_refused(algo_cls, algo, space):
    other = {"DDQN": ("SAC", DISC), "SAC": ("TD3", BOX), "TD3": ("SAC", BOX)}[algo]
    with pytest.raises(ValueError, match="needs an OffPolicyActor"):
        algo_cls("cpu", build(*other))


# ------------------------------------------------------------------ weights
def test_restart_model_loads_a_saved_state(tmp_path):
    src = build("TD3", BOX)
    src.warmup.fill_(0.0)
    path = tmp_path / "model.pt"
    torch.save(src.state_dict(), path)
    torch.manual_seed(123)                           # another initialisation
    dst = build("TD3", BOX, restart_model=str(path))
    for k, v in src.state_dict().items():
        assert torch.equal(v, dst.state_dict()[k]), k
    obs = observations(8)
    np.testing.assert_array_equal(src.act(obs, deterministic=True)[0], dst.act(obs, deterministic=True)[0])
    assert float(dst.warmup) == 0.0


def test_restart_model_of_another_architecture_fails(tmp_path):
    path = tmp_path / "model.pt"
    torch.save(build("TD3", BOX).state_dict(), path)
    with pytest.raises((ValueError, RuntimeError), match="size mismatch"):
        build("TD3", BOX, common_feature_extractor_kwargs={"hidden_sizes": [5]}, restart_model=str(path))


def test_factory_is_picklable_and_builds_equal_architectures():
    factory = OffPolicyActor.create_factory(OBS, BOX, "SAC", num_critics=2,
                                            common_feature_extractor_kwargs={"hidden_sizes": [8]})
    clone = pickle.loads(pickle.dumps(factory))
    a, b = factory("cpu"), clone("cpu")
    assert {k: v.shape for k, v in a.state_dict().items()} == {k: v.shape for k, v in b.state_dict().items()}


def test_acting_weights_load_into_another_actor():
    src, dst = acting(build("SAC", BOX)), build("SAC", BOX)
    dst.load_acting_state_dict(src.acting_state_dict())
    obs = observations(8)
    np.testing.assert_array_equal(src.act(obs, deterministic=True)[0], dst.act(obs, deterministic=True)[0])
    assert float(dst.warmup) == 0.0
    # the critics were not sent: they stay as they were built
    assert not all(torch.equal(x, y) for x, y in zip(src.critics.parameters(), dst.critics.parameters()))
