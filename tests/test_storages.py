"""On-policy storages (GAEBuffer, VanillaOnPolicyBuffer) through their public methods.

Collection side: reset_rollout / insert_transition (+ next observation) / finish_rollout /
get_data. Learner side: add_data / before_gradients / generate_batches / after_gradients.
"""

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.algorithms import PPO
from pytorchrl.agent.storages import GAEBuffer, VanillaOnPolicyBuffer, compute_gae

from _util import make_actor, random_rollout, record_step, write_rollout

OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float32)
DISCRETE = gym.spaces.Discrete(3)
BOX = gym.spaces.Box(low=-1.0, high=1.0, shape=(2,), dtype=np.float32)
STORAGES = [GAEBuffer, VanillaOnPolicyBuffer]


def build(storage_cls=GAEBuffer, action_space=DISCRETE, size=5, gamma=0.9, **kwargs):
    actor = make_actor(OBS_SPACE, action_space)
    algo = PPO.create_factory(gamma=gamma)[0]("cpu", actor, None)
    return storage_cls.create_factory(size=size, **kwargs)("cpu", actor, algo, None), actor, algo


def fill(storage, T, N, action_space=DISCRETE, seed=0, offset=0.0):
    r = random_rollout(T, N, obs_dim=3, action_space=action_space, seed=seed, offset=offset)
    write_rollout(storage, **r)
    return r


def all_samples_obs_key(batch):
    return batch[prl.OBS][:, 0]


# ------------------------------------------------------------------ collection side
@pytest.mark.parametrize("storage_cls", STORAGES)
def test_discrete_rollout_get_data(storage_cls):
    storage, actor, _ = build(storage_cls, DISCRETE, size=5)
    r = fill(storage, T=5, N=2)
    data = storage.get_data()
    assert data[prl.OBS].shape == (5, 2, 3)
    assert data[prl.ACT].shape == (5, 2, 1)
    assert data[prl.ACT].dtype == torch.int64
    assert data[prl.VAL].shape[:2] == (6, 2)          # one more: the bootstrap value
    for key in (prl.LOGP, prl.REW, prl.TERM, prl.TRUNC, prl.TRUNC_VAL):
        assert data[key].shape[:2] == (5, 2), key
    # The stored values are the recorded ones, step by step.
    torch.testing.assert_close(data[prl.OBS], r["obs"][:5])
    torch.testing.assert_close(data[prl.ACT], r["act"])
    torch.testing.assert_close(data[prl.LOGP].reshape(5, 2), r["logp"].reshape(5, 2))
    torch.testing.assert_close(data[prl.VAL].reshape(6, 2), r["val"].reshape(6, 2))
    torch.testing.assert_close(data[prl.REW].reshape(5, 2), r["rew"])
    torch.testing.assert_close(data[prl.TERM].reshape(5, 2).float(), r["term"])
    torch.testing.assert_close(data[prl.TRUNC].reshape(5, 2).float(), r["trunc"])
    torch.testing.assert_close(data[prl.TRUNC_VAL].reshape(5, 2), r["trunc_val"].reshape(5, 2))
    for v in data.values():
        assert v.device.type == "cpu"


@pytest.mark.parametrize("storage_cls", STORAGES)
def test_box_rollout_get_data(storage_cls):
    storage, _, _ = build(storage_cls, BOX, size=4)
    r = fill(storage, T=4, N=3, action_space=BOX)
    data = storage.get_data()
    assert data[prl.ACT].shape == (4, 3, 2)
    assert data[prl.ACT].dtype == torch.float32
    # Actions are stored as given (random_rollout draws some outside the [-1, 1] bounds).
    assert data[prl.ACT].abs().max() > 1.0
    torch.testing.assert_close(data[prl.ACT], r["act"])
    assert data[prl.VAL].shape[:2] == (5, 3)


def test_get_data_is_a_snapshot():
    """Data handed out must not change when the storage records the next rollout (the
    in-process scheme adds it to the very same storage object)."""
    storage, _, _ = build(size=4)
    fill(storage, T=4, N=2, seed=1)
    data = storage.get_data()
    saved = {k: v.clone() for k, v in data.items()}
    fill(storage, T=4, N=2, seed=2, offset=1000.0)
    for k in saved:
        torch.testing.assert_close(data[k], saved[k], msg=f"{k} changed")


def test_rollout_cut_short_returns_k_steps():
    storage, _, _ = build(size=6)
    r = random_rollout(6, 2, action_space=DISCRETE, seed=3)
    storage.reset_rollout(r["obs"][0])
    k = 4
    for t in range(k):
        record_step(storage, r["act"][t], r["logp"][t], r["val"][t], r["rew"][t], r["term"][t].bool(),
                    r["trunc"][t].bool(), r["obs"][t + 1], r["trunc_val"][t])
    last_value = torch.full((2, 1), 7.5)
    storage.finish_rollout(last_value)
    data = storage.get_data()
    assert data[prl.OBS].shape[0] == k
    assert data[prl.REW].shape[0] == k
    assert data[prl.VAL].shape[0] == k + 1
    torch.testing.assert_close(data[prl.VAL][k].reshape(2, 1), last_value)
    torch.testing.assert_close(data[prl.OBS], r["obs"][:k])


def test_empty_rollout_is_ignored_by_add_data():
    storage, _, _ = build(size=4)
    storage.reset_rollout(torch.zeros(2, 3))
    storage.finish_rollout(torch.zeros(2, 1))
    empty = storage.get_data()
    assert empty[prl.REW].shape[0] == 0
    learner, _, _ = build(size=4)
    learner.add_data(empty)
    learner.before_gradients()
    assert learner.num_samples == 0
    assert list(learner.generate_batches(num_mini_batch=1)) == []


# -------------------------------------------------------------------- learner side
def collect_several(learner_storage, shapes, seed=0):
    """Add one rollout per (T, N) in ``shapes``, as from several collectors; returns them."""
    rollouts = []
    for i, (T, N) in enumerate(shapes):
        col, _, _ = build(size=T)
        r = fill(col, T, N, seed=seed + i, offset=10_000.0 * i)
        learner_storage.add_data(col.get_data())
        rollouts.append(r)
    return rollouts


SHAPES = [(5, 2), (3, 2), (4, 3)]     # 10 + 6 + 12 = 28 samples


@pytest.mark.parametrize("storage_cls", STORAGES)
def test_add_data_of_different_lengths(storage_cls):
    learner, _, algo = build(storage_cls, size=5)
    rollouts = collect_several(learner, SHAPES)
    learner.before_gradients()
    assert learner.num_samples == 28
    (batch,) = list(learner.generate_batches(num_mini_batch=1, num_epochs=1))
    for key in (prl.OBS, prl.ACT, prl.LOGP, prl.VAL, prl.RET, prl.ADV):
        assert batch[key].shape[0] == 28, key
    # Every rollout's targets are computed on that rollout alone (its own bootstrap value).
    lam = learner.gae_lambda if storage_cls is GAEBuffer else 1.0
    order = torch.argsort(batch[prl.OBS][:, 0])
    adv_sorted = batch[prl.ADV][order].reshape(-1)
    expected = []
    for r in rollouts:
        T, N = r["rew"].shape
        adv, _ = compute_gae(r["rew"].unsqueeze(-1), r["val"], r["term"].unsqueeze(-1),
                             r["trunc"].unsqueeze(-1), r["trunc_val"], algo.gamma, lam)
        expected.append(adv.reshape(-1))        # row-major (t, n) = sorted order of obs keys
    torch.testing.assert_close(adv_sorted, torch.cat(expected))
    torch.testing.assert_close(batch[prl.RET], batch[prl.ADV] + batch[prl.VAL])


def epochs_of(batches, n):
    """Split a list of batches into epochs of ``n`` samples each."""
    epochs, cur, count = [], [], 0
    for b in batches:
        cur.append(b)
        count += b[prl.OBS].shape[0]
        if count >= n:
            assert count == n, "a mini-batch straddles two epochs"
            epochs.append(cur)
            cur, count = [], 0
    assert not cur, "samples left over after the last full epoch"
    return epochs


@pytest.mark.parametrize("mini_batch_size,expected_sizes", [(8, [8, 8, 8, 4]), (7, [7, 7, 7, 7]),
                                                            (28, [28]), (100, [28])])
def test_generate_batches_mini_batch_size(mini_batch_size, expected_sizes):
    learner, _, _ = build(size=5)
    collect_several(learner, SHAPES)
    learner.before_gradients()
    all_keys = torch.sort(torch.cat([b[prl.OBS][:, 0] for b in learner.generate_batches(1, None, 1)]))[0]
    batches = list(learner.generate_batches(num_mini_batch=3, mini_batch_size=mini_batch_size, num_epochs=3))
    epochs = epochs_of(batches, 28)
    assert len(epochs) == 3
    for epoch in epochs:
        assert [b[prl.OBS].shape[0] for b in epoch] == expected_sizes
        keys = torch.sort(torch.cat([all_samples_obs_key(b) for b in epoch]))[0]
        torch.testing.assert_close(keys, all_keys)     # every sample exactly once
        for b in epoch:   # rows stay aligned across keys
            torch.testing.assert_close(b[prl.RET], b[prl.ADV] + b[prl.VAL])


@pytest.mark.parametrize("num_mini_batch", [1, 2, 4, 7])
def test_generate_batches_num_mini_batch_divisible(num_mini_batch):
    learner, _, _ = build(size=5)
    collect_several(learner, SHAPES)
    learner.before_gradients()
    batches = list(learner.generate_batches(num_mini_batch=num_mini_batch, num_epochs=2))
    epochs = epochs_of(batches, 28)
    assert len(epochs) == 2
    for epoch in epochs:
        assert len(epoch) == num_mini_batch
        keys = torch.cat([all_samples_obs_key(b) for b in epoch])
        assert keys.unique().numel() == 28


@pytest.mark.parametrize("num_mini_batch,num_samples", [(3, 28), (3, 14), (5, 28)])
def test_generate_batches_num_mini_batch_not_divisible(num_mini_batch, num_samples):
    """``num_mini_batch`` mini-batches per epoch covering every sample once, also when the
    number of samples is not a multiple of it."""
    learner, _, _ = build(size=5)
    collect_several(learner, SHAPES if num_samples == 28 else [(7, 2)])
    learner.before_gradients()
    assert learner.num_samples == num_samples
    batches = list(learner.generate_batches(num_mini_batch=num_mini_batch, num_epochs=1))
    keys = torch.cat([all_samples_obs_key(b) for b in batches])
    sizes = [b[prl.OBS].shape[0] for b in batches]
    assert keys.numel() == num_samples and keys.unique().numel() == num_samples, \
        f"an epoch covered {keys.unique().numel()} of {num_samples} samples (mini-batch sizes {sizes})"
    assert len(sizes) == num_mini_batch, f"{len(sizes)} mini-batches {sizes}, asked for {num_mini_batch}"


def test_generate_batches_shuffles_and_generator_reproduces():
    learner, _, _ = build(size=5)
    collect_several(learner, SHAPES)
    learner.before_gradients()
    run = lambda seed: [b[prl.OBS][:, 0] for b in learner.generate_batches(
        num_mini_batch=4, num_epochs=2, generator=torch.Generator().manual_seed(seed))]
    a, b, c = run(1), run(1), run(2)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y)
    assert any(not torch.equal(x, y) for x, y in zip(a, c))
    # the two epochs are shuffled differently
    assert not torch.equal(torch.cat(a[:4]), torch.cat(a[4:]))


def test_after_gradients_empties_storage():
    learner, _, _ = build(size=5)
    collect_several(learner, SHAPES)
    learner.before_gradients()
    assert learner.num_samples == 28
    learner.after_gradients()
    assert learner.num_samples == 0
    assert list(learner.generate_batches(num_mini_batch=1)) == []
    # the next round holds only the new data
    collect_several(learner, [(2, 2)])
    learner.before_gradients()
    assert learner.num_samples == 4


# ---------------------------------------------------------------- hyperparameters
@pytest.mark.parametrize("storage_cls", STORAGES)
def test_update_storage_parameter_unknown_name(storage_cls):
    storage, _, _ = build(storage_cls, size=5)
    with pytest.raises(ValueError) as err:
        storage.update_storage_parameter("sise", 3)
    msg = str(err.value)
    assert "sise" in msg and "size" in msg
    if storage_cls is GAEBuffer:
        assert "gae_lambda" in msg
    assert storage.size == 5


@pytest.mark.parametrize("name,value", [("size", "big"), ("size", 2.5), ("size", True), ("gae_lambda", "high"),
                                        ("gae_lambda", None)])
def test_update_storage_parameter_wrong_type(name, value):
    storage, _, _ = build(GAEBuffer, size=5, gae_lambda=0.9)
    with pytest.raises(TypeError):
        storage.update_storage_parameter(name, value)
    assert storage.size == 5 and storage.gae_lambda == 0.9


@pytest.mark.parametrize("name,value", [("size", 0), ("size", -3), ("gae_lambda", 1.5), ("gae_lambda", -0.1)])
def test_update_storage_parameter_out_of_range(name, value):
    storage, _, _ = build(GAEBuffer, size=5, gae_lambda=0.9)
    with pytest.raises(ValueError):
        storage.update_storage_parameter(name, value)
    assert storage.size == 5 and storage.gae_lambda == 0.9


def test_update_storage_parameter_converts_types():
    storage, _, _ = build(GAEBuffer, size=5, gae_lambda=0.9)
    storage.update_storage_parameter("size", 4.0)     # a whole float is an int
    assert storage.size == 4 and isinstance(storage.size, int)
    storage.update_storage_parameter("gae_lambda", 1)  # an int is a float
    assert storage.gae_lambda == 1.0 and isinstance(storage.gae_lambda, float)


def test_gae_lambda_hot_swap_changes_targets():
    learner, _, algo = build(GAEBuffer, size=5, gae_lambda=0.95)
    rollouts = collect_several(learner, [(5, 2)])
    learner.update_storage_parameter("gae_lambda", 0.0)
    learner.before_gradients()
    (batch,) = list(learner.generate_batches(1))
    r = rollouts[0]
    adv, _ = compute_gae(r["rew"].unsqueeze(-1), r["val"], r["term"].unsqueeze(-1), r["trunc"].unsqueeze(-1),
                         r["trunc_val"], algo.gamma, 0.0)
    torch.testing.assert_close(batch[prl.ADV][torch.argsort(batch[prl.OBS][:, 0])].reshape(-1), adv.reshape(-1))


def test_size_hot_swap_applies_on_next_rollout():
    storage, _, _ = build(size=5)
    r = random_rollout(5, 2, action_space=DISCRETE, seed=4)
    storage.reset_rollout(r["obs"][0])
    for t in range(2):
        record_step(storage, r["act"][t], r["logp"][t], r["val"][t], r["rew"][t], r["term"][t].bool(),
                    r["trunc"][t].bool(), r["obs"][t + 1], r["trunc_val"][t])
    storage.update_storage_parameter("size", 3)
    assert storage.size == 3
    # The rollout in progress keeps its room for 5 steps.
    for t in range(2, 5):
        record_step(storage, r["act"][t], r["logp"][t], r["val"][t], r["rew"][t], r["term"][t].bool(),
                    r["trunc"][t].bool(), r["obs"][t + 1], r["trunc_val"][t])
    storage.finish_rollout(r["val"][5])
    data = storage.get_data()
    assert data[prl.REW].shape[0] == 5
    torch.testing.assert_close(data[prl.OBS], r["obs"][:5])
    # The next rollout has the new size and is recorded correctly.
    r2 = random_rollout(3, 2, action_space=DISCRETE, seed=5)
    write_rollout(storage, **r2)
    data2 = storage.get_data()
    assert data2[prl.REW].shape[0] == 3
    assert data2[prl.VAL].shape[0] == 4
    torch.testing.assert_close(data2[prl.OBS], r2["obs"][:3])
    # and growing it again works too
    storage.update_storage_parameter("size", 7)
    r3 = random_rollout(7, 2, action_space=DISCRETE, seed=6)
    write_rollout(storage, **r3)
    assert storage.get_data()[prl.REW].shape[0] == 7


def test_invalid_construction():
    actor = make_actor(OBS_SPACE, DISCRETE)
    algo = PPO.create_factory()[0]("cpu", actor, None)
    with pytest.raises(ValueError):
        GAEBuffer.create_factory(size=0)("cpu", actor, algo, None)
    with pytest.raises(ValueError):
        GAEBuffer.create_factory(size=4, gae_lambda=1.5)("cpu", actor, algo, None)
    with pytest.raises(ValueError):
        VanillaOnPolicyBuffer.create_factory(size=2.5)("cpu", actor, algo, None)
