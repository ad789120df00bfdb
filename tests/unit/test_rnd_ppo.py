"""RND-PPO: the maths of its parts (intrinsic reward normalisation, non-episodic intrinsic
GAE, the observation warm-up, the predictor mask, both value heads, where gradients go),
its factory and configuration, and short runs in one process (recurrent and CNN actors).
With Ray collectors: tests/distributed/test_rnd_ppo_ray.py; from the command line:
tests/cli/test_cli_rnd_ppo.py."""

import inspect
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent import accel
from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.algorithms import ALGORITHMS, RND_PPO
from pytorchrl.agent.algorithms.policy_loss_addons import PolicyLossAddOn
from pytorchrl.agent.algorithms.rnd_ppo import OBS_MEAN, OBS_STD, RND_OBS
from pytorchrl.agent.env import VecEnv
from pytorchrl.envs.gym_env import make_gym_env
from pytorchrl.agent.storages import GAEBuffer, VTraceBuffer
from pytorchrl.agent.storages.on_policy import compute_intrinsic_gae
from pytorchrl.config import ConfigError, build_learner, describe_schema, validate_config
from pytorchrl.scheme.collection.c_worker import CWorker

from _util import make_actor

from rnd_ppo_helpers import ROLLOUT, WARM_UP, short_config, train_rnd, train_and_save, assert_same_statistics

OBS_SPACE = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT_SPACE = gym.spaces.Discrete(2)


def _algo(envs=None, **kwargs):
    torch.manual_seed(0)
    actor = make_actor(OBS_SPACE, ACT_SPACE, "RND_PPO")
    kwargs.setdefault("intrinsic_rewards_target_network_kwargs", {"hidden_sizes": [8]})
    kwargs.setdefault("intrinsic_rewards_predictor_network_kwargs", {"hidden_sizes": [8]})
    return RND_PPO(device="cpu", actor=actor, envs=envs, **kwargs)


def _batch(algo, n=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, 3, generator=g)
    return {prl.OBS: obs, prl.ACT: torch.randint(0, 2, (n, 1), generator=g), prl.LOGP: torch.full((n, 1), -0.69),
            prl.VAL: torch.zeros(n, 1), prl.RET: torch.randn(n, 1, generator=g), prl.ADV: torch.randn(n, 1, generator=g),
            prl.IVAL: torch.zeros(n, 1), prl.IRET: torch.randn(n, 1, generator=g),
            prl.IADV: torch.randn(n, 1, generator=g), prl.IREW: torch.rand(n, 1, generator=g),
            RND_OBS: algo.normalize_observations(obs, torch.zeros(3), torch.ones(3))}


def test_intrinsic_rewards_are_divided_by_the_running_std_of_non_episodic_intrinsic_returns():
    algo = _algo(gamma_intrinsic=0.5)
    e1 = np.array([[1.0, 2.0], [3.0, 0.0]])
    e2 = np.array([[1.0, 1.0]])
    r1 = algo.normalize_intrinsic_rewards(e1)
    returns = [1.0, 2.0, 0.5 * 1 + 3, 0.5 * 2 + 0]          # per env, across the rollout
    np.testing.assert_allclose(r1, e1 / np.std(returns), rtol=1e-5)
    r2 = algo.normalize_intrinsic_rewards(e2)                # the returns carry over to the next rollout
    returns += [0.5 * 3.5 + 1, 0.5 * 1.0 + 1]
    np.testing.assert_allclose(r2, e2 / np.std(returns), rtol=1e-5)
    assert algo.int_return_rms.count == 6


def test_intrinsic_gae_ignores_episode_ends_where_the_extrinsic_one_stops():
    T, gamma, lam = 3, 0.9, 0.8
    irew = torch.tensor([1.0, 0.0, 2.0]).reshape(T, 1, 1)
    ival = torch.tensor([0.5, 1.0, 0.2, 0.3]).reshape(T + 1, 1, 1)
    adv, ret = compute_intrinsic_gae(irew, ival, gamma, lam)
    delta = [irew[t, 0, 0].item() + gamma * ival[t + 1, 0, 0].item() - ival[t, 0, 0].item() for t in range(T)]
    hand = [0.0] * T
    acc = 0.0
    for t in reversed(range(T)):
        acc = delta[t] + gamma * lam * acc
        hand[t] = acc
    np.testing.assert_allclose(adv.reshape(-1).numpy(), hand, rtol=1e-6)
    np.testing.assert_allclose(ret.reshape(-1).numpy(), np.array(hand) + ival[:-1].reshape(-1).numpy(), rtol=1e-6)

    # Through the storage: an episode ends after step 0 (terminated): the extrinsic GAE
    # stops there, the intrinsic one goes on as by hand.
    algo = _algo(gamma=gamma, gamma_intrinsic=gamma)
    storage = GAEBuffer(device="cpu", actor=algo.actor, algorithm=algo, envs=None, size=T, gae_lambda=lam)
    one = torch.ones(T, 1, 1)
    chunk = {prl.OBS: torch.zeros(T, 1, 3), prl.ACT: torch.zeros(T, 1, 1, dtype=torch.int64), prl.LOGP: 0 * one,
             prl.VAL: torch.zeros(T + 1, 1, 1), prl.REW: one, prl.TERM: torch.tensor([1.0, 0, 0]).reshape(T, 1, 1),
             prl.TRUNC: 0 * one, prl.TRUNC_VAL: 0 * one, prl.IREW: irew, prl.IVAL: ival,
             OBS_MEAN: torch.zeros(3), OBS_STD: torch.ones(3)}
    samples = storage.rollout_samples(chunk, gamma)
    np.testing.assert_allclose(samples[prl.IADV].reshape(-1).numpy(), hand, rtol=1e-6)
    assert samples[prl.ADV][0, 0, 0].item() == pytest.approx(1.0)          # r_0 only: the episode ended
    assert samples[prl.ADV][1, 0, 0].item() == pytest.approx(1 + gamma * lam * 1)


def rnd_factories(env_id="CartPole-v1", vec_env_size=2, size=4, **algo_kwargs):
    """(algo, actor, storage, train envs) factories of a small RND_PPO."""
    train, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": env_id},
                                                           vec_env_size=vec_env_size, seed=0)
    algo_kwargs.setdefault("intrinsic_rewards_target_network_kwargs", {"hidden_sizes": [8]})
    algo_kwargs.setdefault("intrinsic_rewards_predictor_network_kwargs", {"hidden_sizes": [8]})
    algo, name = RND_PPO.create_factory(**algo_kwargs)
    actor = OnPolicyActor.create_factory(obs_space, action_space, name,
                                         feature_extractor_kwargs={"hidden_sizes": [8]})
    return algo, actor, GAEBuffer.create_factory(size=size), train


def test_the_warm_up_takes_steps_times_length_random_steps_of_every_environment_once():
    # 50 random steps of 2 CartPoles: episodes end; a rollout of 4 steps from a reset cannot.
    algo, actor, storage, train = rnd_factories(pre_normalization_steps=10, pre_normalization_length=5)
    worker = CWorker(1, 0, algo, actor, storage, train_envs_factory=train)
    try:
        rnd = worker.algo
        assert rnd.obs_rms.count == 0          # not when built: a resumed run restores the statistics first
        _, info = worker.collect_data()
        assert rnd.obs_rms.count == 10 * 5 * 2 + 4 * 2
        assert info["episodes"] == []          # the warm-up is no training: not recorded
        low, high = worker.envs_train.observation_space.low, worker.envs_train.observation_space.high
        assert np.all(rnd.obs_rms.mean >= low) and np.all(rnd.obs_rms.mean <= high)
        assert rnd.warm_up(worker.envs_train) is False       # already warm: nothing more
        worker.collect_data()
        assert rnd.obs_rms.count == 100 + 2 * 4 * 2
    finally:
        worker.stop()


def test_the_predictor_trains_on_a_random_predictor_proportion_of_each_mini_batch():
    algo = _algo(predictor_proportion=0.25)
    torch.manual_seed(1)
    mask = algo.predictor_mask(20000, "cpu")
    assert set(mask.unique().tolist()) <= {0.0, 1.0} and abs(mask.mean().item() - 0.25) < 0.02
    batch = _batch(algo)
    errors = algo.rnd_errors(batch[RND_OBS]).detach()
    torch.manual_seed(2)
    _, info = algo.compute_loss(batch)
    torch.manual_seed(2)
    kept = algo.predictor_mask(32, "cpu")
    assert info["PredictorLoss"] == pytest.approx(((kept * errors).sum() / kept.sum()).item(), rel=1e-5)
    algo.predictor_proportion = 0.0
    _, info = algo.compute_loss(batch)
    assert info["PredictorLoss"] == 0.0


def test_both_value_heads_have_their_loss_and_gradients_reach_the_predictor_never_the_target():
    algo = _algo(value_loss_coef=0.5, use_clipped_value_loss=False)   # the plain errors checked below
    batch = _batch(algo)
    _, _, value, ivalue = algo.actor.evaluate_with_int_value(batch[prl.OBS], batch[prl.ACT])
    loss, info = algo.compute_loss(batch)
    assert info["ValueLoss"] == pytest.approx(0.5 * (value - batch[prl.RET]).pow(2).mean().item(), rel=1e-5)
    assert info["IntValueLoss"] == pytest.approx(0.5 * (ivalue - batch[prl.IRET]).pow(2).mean().item(), rel=1e-5)
    target_before = [p.clone() for p in algo.rnd_target.parameters()]
    predictor_before = [p.clone() for p in algo.rnd_predictor.parameters()]
    grads, _ = algo.compute_gradients(batch)
    params = algo.trainable_parameters()
    assert not {id(p) for p in algo.rnd_target.parameters()} & {id(p) for p in params}
    assert all(not p.requires_grad and p.grad is None for p in algo.rnd_target.parameters())
    by_id = {id(p): g for p, g in zip(params, grads)}
    assert all(by_id[id(p)].abs().sum() > 0 for p in algo.rnd_predictor.parameters())
    assert all(by_id[id(p)].abs().sum() > 0 for p in algo.actor.ivalue_head.parameters())
    # The intrinsic value head learns from the intrinsic value loss alone.
    algo.value_loss_coef = 0.0
    algo.compute_gradients(batch, return_grads=False)
    assert all(p.grad is None or p.grad.abs().sum() == 0 for p in algo.actor.ivalue_head.parameters())
    algo.value_loss_coef = 0.5
    assert algo.apply_gradients(grads)
    assert all(torch.equal(a, b) for a, b in zip(target_before, algo.rnd_target.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(predictor_before, algo.rnd_predictor.parameters()))


def test_the_fast_paths_step_aside_and_policy_loss_addons_add_their_term():
    algo = _algo()
    assert algo.update_engine is None and algo.fused_loss is None
    assert "overridden" in accel.reason_not_applied(algo, "update")

    class Push(PolicyLossAddOn):
        def setup(self, device):
            pass

        def compute_loss_term(self, actor, actor_dist, data):
            return 0.1 * actor_dist.entropy().mean()

    with_addon = _algo(policy_loss_addons=[Push()])
    batch = _batch(algo)
    torch.manual_seed(3)
    loss0, info0 = algo.compute_loss(batch)
    torch.manual_seed(3)
    loss1, info1 = with_addon.compute_loss(batch)
    assert info1["AddOnLoss/Push"] > 0
    assert loss1.item() == pytest.approx(loss0.item() + info1["AddOnLoss/Push"], rel=1e-5)


def test_the_factory_takes_pytorchrl_keyword_names_and_the_config_its_keys():
    names = ["lr", "num_epochs", "clip_param", "entropy_coef", "value_loss_coef", "max_grad_norm", "num_mini_batch",
             "use_clipped_value_loss", "gamma", "gamma_intrinsic", "ext_adv_coeff", "int_adv_coeff",
             "predictor_proportion", "pre_normalization_steps", "pre_normalization_length",
             "intrinsic_rewards_network", "intrinsic_rewards_target_network_kwargs",
             "intrinsic_rewards_predictor_network_kwargs", "eps", "test_every", "num_test_episodes",
             "policy_loss_addons"]
    assert set(names) <= set(inspect.signature(RND_PPO.__init__).parameters)
    factory, name = RND_PPO.create_factory(
        lr=1e-3, num_epochs=2, clip_param=0.1, entropy_coef=0.0, value_loss_coef=0.5, max_grad_norm=0.5,
        num_mini_batch=2, use_clipped_value_loss=True, gamma=0.98, gamma_intrinsic=0.97, ext_adv_coeff=1.5,
        int_adv_coeff=0.5, predictor_proportion=0.5, pre_normalization_steps=1, pre_normalization_length=4,
        intrinsic_rewards_network="MLP", intrinsic_rewards_target_network_kwargs={"hidden_sizes": [8]},
        intrinsic_rewards_predictor_network_kwargs={"hidden_sizes": [8]})
    assert name == "RND_PPO" and ALGORITHMS["RND_PPO"] is RND_PPO
    algo = factory("cpu", make_actor(OBS_SPACE, ACT_SPACE, "RND_PPO"), None)
    assert (algo.gamma_intrinsic, algo.int_adv_coeff, algo.value_clip) == (0.97, 0.5, 0.1)
    with pytest.raises(ValueError, match="intrinsic value head"):
        factory("cpu", make_actor(OBS_SPACE, ACT_SPACE, "PPO"), None)
    with pytest.raises(ValueError, match="predictor_proportion"):
        _algo(predictor_proportion=-0.5)
    with pytest.raises(ValueError, match="VTraceBuffer computes no intrinsic returns"):
        VTraceBuffer("cpu", algo.actor, algo, None, size=8)
    everything = _algo(predictor_proportion=2.0)          # pytorchrl's default: every sample
    assert everything.predictor_mask(1000, "cpu").sum() == 1000
    schema = describe_schema()
    for key in names[9:18]:
        assert f"{key}:" in schema, key
    with pytest.raises(ConfigError, match="predictor_proportion"):
        validate_config({"env": {"id": "MountainCar-v0"}, "algorithm": {"name": "RND_PPO", "predictor_proportion": "x"}})
    with pytest.raises(ConfigError, match="gamma_intrinsik"):
        validate_config({"env": {"id": "MountainCar-v0"}, "algorithm": {"name": "RND_PPO", "gamma_intrinsik": 0.9}})


def test_recurrent_and_cnn_actors_train_with_intrinsic_rewards(tmp_path):
    _, infos = train_rnd(short_config("actor.recurrent_net=GRU", "actor.recurrent_hidden_size=8"))
    assert infos and all(math.isfinite(i["IntValueLoss"]) and math.isfinite(i["PredictorLoss"]) for i in infos)
    assert any(i["IntrinsicReward"] > 0 for i in infos)
    actor = make_actor(gym.spaces.Box(0, 255, (1, 36, 36), np.uint8), ACT_SPACE, "RND_PPO")
    algo = RND_PPO("cpu", actor, intrinsic_rewards_network="CNN")
    obs = torch.randint(0, 255, (4, 2, 1, 36, 36), dtype=torch.uint8)
    data = algo.preprocess_rollout({prl.OBS: obs})
    assert data[prl.IREW].shape == (4, 2, 1) and torch.isfinite(data[prl.IREW]).all()
    assert data[OBS_MEAN].shape == (1, 36, 36)


# ------------------------------------------------------------------ checkpoints


def test_a_resumed_run_starts_from_the_saved_statistics_without_warming_up(tmp_path):
    saved = train_and_save(short_config("learner.target_steps=192"), tmp_path / "checkpoint.pt")
    assert saved["obs_rms"]["count"] == WARM_UP + 3 * ROLLOUT and saved["int_returns"].shape == (2,)
    resumed = build_learner(short_config("learner.target_steps=256"))
    try:
        collector = resumed.update_worker.local_worker.col_workers.local_worker()
        assert collector.algo.obs_rms.count == 0
        resumed.load_checkpoint(str(tmp_path / "checkpoint.pt"))
        assert_same_statistics(collector.get_collector_state(), saved)
        steps = resumed.num_samples_collected
        resumed.step()
        # One rollout's observations and no warm-up's.
        assert resumed.num_samples_collected == steps + ROLLOUT
        assert collector.algo.obs_rms.count == saved["obs_rms"]["count"] + ROLLOUT
        assert collector.algo.int_return_rms.count == saved["int_return_rms"]["count"] + ROLLOUT
    finally:
        resumed.stop()
    # The checkpoint of another algorithm's run keeps none; its state is refused by RND_PPO.
    with pytest.raises(ValueError, match=r"RND_PPO's collector state lacks \['int_return_rms', 'int_returns'\]"):
        _algo().load_collector_state({"obs_rms": saved["obs_rms"]})
    with pytest.raises(ValueError, match=r"saved observation statistics have shape \(2,\), this run's \(3,\)"):
        _algo().load_collector_state(saved)
