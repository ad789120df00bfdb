"""Collector-side pre-processing (EXARL's ASYNC workflow): DDQN's Bellman targets computed
by the collector with the weights it acted with (``algorithm.targets_on_collector``).

The collector's targets equal the learner's for the same weights; with the switch on the
learner fits the stored targets and computes none (torch and numpy updates); the target
network travels to the collectors with the acting weights and follows the learner's
target updates; configurations that cannot use it are refused (the exarl-async workflow
learning CartPole: tests/learning/test_learning_collector_targets.py).
"""

import os

import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.algorithms import DDQN
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import NStepReplayBuffer
from pytorchrl.config import ConfigError, load_config, validate_config
from pytorchrl.envs import make_gym_env
from pytorchrl.scheme.collection.c_worker import CWorker

from cli_helpers import EXARL, pytorchrl_in_process, tiny, write_config

EXARL_ASYNC = os.path.join(EXARL, "exarl-async.yaml")
KW = dict(lr=1e-3, gamma=0.9, polyak=0.0, num_updates=4, update_every=40, start_steps=0, mini_batch_size=16,
          target_update_interval=1, initial_epsilon=0.5, test_every=10 ** 9, loss="mse")


def make_worker(index=0, targets=True, numpy_update=False, n_step=1):
    """A CWorker with DDQN on 2 CartPole envs (n-step replay: the targets bootstrap from
    OBS2 with the storage's DISCOUNT whatever n is)."""
    torch.manual_seed(0)
    train, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": "CartPole-v1"}, vec_env_size=2,
                                                           seed=index)
    algo_factory, name = DDQN.create_factory(**KW, targets_on_collector=targets, numpy_update=numpy_update)
    actor_factory = OffPolicyActor.create_factory(obs_space, action_space, name,
                                                  common_feature_extractor_kwargs={"hidden_sizes": [32, 32]})
    return CWorker(index, 0, algo_factory, actor_factory, NStepReplayBuffer.create_factory(size=1000, n_step=n_step),
                   train_envs_factory=train)


def perturb_target(algo, scale=1.5):
    """Make the target network differ from the Q-network (as after training)."""
    with torch.no_grad():
        for p in algo.target.parameters():
            p.mul_(scale).add_(0.01)


def strip(data):
    return {k: v for k, v in data.items() if k != prl.TARGET}


@pytest.mark.parametrize("n_step", [1, 3])
def test_collector_targets_equal_the_learner_targets(n_step):
    learner = make_worker(targets=True, n_step=n_step)
    perturb_target(learner.algo)
    collector = make_worker(index=1, targets=True, n_step=n_step)
    collector.set_weights(learner.algo.get_acting_weights(), version=1)
    for _ in range(2):   # the second rollout completes the n-step windows of the first
        data, _ = collector.collect_data()
    assert data[prl.TARGET].shape == data[prl.REW].shape and data[prl.TARGET].dtype == torch.float32
    assert len(data[prl.REW]) > 0

    # The learner computing them itself (switch off) from the same weights: the same targets.
    reference = make_worker(targets=False, n_step=n_step)
    reference.algo.set_weights(learner.algo.get_weights())
    expected = reference.algo.bellman_targets(data[prl.REW], data[prl.OBS2], data[prl.DISCOUNT])
    assert torch.equal(data[prl.TARGET], expected)
    assert not torch.equal(expected, data[prl.REW])     # targets bootstrap (not the rewards alone)
    # ... and so the same loss: fitted to the stored targets, or recomputed.
    stored, _ = learner.algo.compute_loss(data)
    recomputed, _ = reference.algo.compute_loss(strip(data))
    assert float(stored.detach()) == float(recomputed.detach())


def test_numpy_update_fits_the_stored_targets():
    torch_learner = make_worker(targets=False, numpy_update=False)
    numpy_learner = make_worker(targets=True, numpy_update=True)
    perturb_target(torch_learner.algo)
    numpy_learner.algo.set_weights(torch_learner.algo.get_weights())
    data, _ = numpy_learner.collect_data()
    assert numpy_learner.algo.update_engine is not None   # the numpy update supports stored targets
    assert torch_learner.algo.update_engine is None
    grads_np, info_np = numpy_learner.algo.compute_gradients(data)
    grads_t, info_t = torch_learner.algo.compute_gradients(strip(data))
    assert info_np["Loss"] == pytest.approx(info_t["Loss"], rel=1e-5)
    for a, b in zip(grads_np, grads_t):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("numpy_update", [False, True])
def test_learner_loss_uses_the_stored_targets(numpy_update):
    worker = make_worker(targets=True, numpy_update=numpy_update)
    data, _ = worker.collect_data()
    algo = worker.algo
    with torch.no_grad():
        q = algo.actor.q_values(data[prl.OBS])[0].gather(1, data[prl.ACT].long())
    # Targets equal to Q(s, a): nothing to fit (a learner recomputing them would see a loss).
    _, info = algo.compute_gradients({**data, prl.TARGET: q.clone()})
    assert info["Loss"] == pytest.approx(0.0, abs=1e-10)
    assert all(float(p.grad.abs().max()) < 1e-6 for p in algo.trainable_parameters() if p.grad is not None)
    # Every target one lower: the squared error is exactly 1.
    _, info = algo.compute_gradients({**data, prl.TARGET: q - 1.0})
    assert info["Loss"] == pytest.approx(1.0, rel=1e-5)
    with pytest.raises(KeyError, match="targets_on_collector=True\\) needs the collectors' targets"):
        algo.compute_loss(strip(data))


def test_collector_target_network_follows_the_learner():
    learner = make_worker(targets=True)
    collector = make_worker(index=1, targets=True)
    # Only in this mode does the target network travel with the acting weights.
    assert any(k.startswith("algo.target.") for k in learner.algo.get_acting_weights())
    assert not any(k.startswith("algo.") for k in make_worker(targets=False).algo.get_acting_weights())

    data, _ = collector.collect_data()
    before = collector.algo.preprocess_rollout(strip(data))[prl.TARGET].clone()
    # One real update on the learner (target_update_interval 1, hard copy): new target network.
    old_target = [p.clone() for p in learner.algo.target.parameters()]
    learner_data, _ = learner.collect_data()
    for batch in [learner_data]:
        learner.algo.compute_gradients(batch, return_grads=False)
        assert learner.algo.apply_gradients()
    assert any(not torch.equal(a, b) for a, b in zip(old_target, learner.algo.target.parameters()))
    collector.set_weights(learner.algo.get_acting_weights(), version=1)
    for mine, theirs in zip(collector.algo.target.parameters(), learner.algo.target.parameters()):
        assert torch.equal(mine, theirs)
    after = collector.algo.preprocess_rollout(strip(data))[prl.TARGET]
    assert not torch.equal(before, after)
    assert torch.equal(after, learner.algo.bellman_targets(data[prl.REW], data[prl.OBS2], data[prl.DISCOUNT]))


def test_the_switch_is_fixed_and_checked():
    worker = make_worker(targets=True)
    with pytest.raises(ValueError, match="'targets_on_collector' is fixed"):
        worker.update_algorithm_parameter("targets_on_collector", False)
    with pytest.raises(TypeError, match="targets_on_collector must be true or false"):
        DDQN.create_factory(targets_on_collector=1)[0]("cpu", worker.actor)


def test_configurations_that_cannot_use_it_are_refused(tmp_path):
    # On-policy algorithms (and the other off-policy ones) have no such hyperparameter.
    for name, storage in (("PPO", "GAEBuffer"), ("SAC", "ReplayBuffer")):
        config = tiny()
        config["algorithm"] = {"name": name, "targets_on_collector": True}
        config["storage"] = {"name": storage, "size": 100}
        with pytest.raises(ConfigError, match=f"algorithm.targets_on_collector: unknown key of {name}"):
            validate_config(config)
    with pytest.raises(ConfigError, match="targets_on_collector"):
        validate_config(load_config(EXARL_ASYNC, ["algorithm.targets_on_collector=2"]))
    proc = pytorchrl_in_process("train", write_config(tmp_path), "algorithm.targets_on_collector=true", cwd=tmp_path)
    assert proc.returncode == 2 and "targets_on_collector" in proc.stderr and "Traceback" not in proc.stderr
