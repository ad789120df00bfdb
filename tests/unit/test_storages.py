"""On-policy storages (GAEBuffer, VanillaOnPolicyBuffer) through their public methods.

Collection side: start / current_obs / insert / finish (bootstrap values asked of the
algorithm) / get_data. Learner side: add_data / ready / batches (the algorithm's epochs and
mini-batches, then the data is forgotten) / clear; prepare + generate_batches underneath.

The algorithm is a ``TablePPO`` (tests/_util.py): its ``bootstrap`` answers the values the
test registered for exact observations, so rollouts get explicit bootstrap values.
"""

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.storages import GAEBuffer, VanillaOnPolicyBuffer, compute_gae
from pytorchrl.agent.storages.base import FINAL_OBS

from _util import (TablePPO, close_rollout, final_obs_of, make_actor, random_rollout, record_rollout_step,
                   record_step, write_rollout)

OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float32)
DISCRETE = gym.spaces.Discrete(3)
BOX = gym.spaces.Box(low=-1.0, high=1.0, shape=(2,), dtype=np.float32)
STORAGES = [GAEBuffer, VanillaOnPolicyBuffer]


def build(storage_cls=GAEBuffer, action_space=DISCRETE, size=5, gamma=0.9, algo_kwargs=None, **kwargs):
    actor = make_actor(OBS_SPACE, action_space)
    algo = TablePPO.create_factory(gamma=gamma, **(algo_kwargs or {}))[0]("cpu", actor, None)
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
    storage, _, algo = build(size=6)
    r = random_rollout(6, 2, action_space=DISCRETE, seed=3)
    storage.start(r["obs"][0])
    k = 4
    for t in range(k):
        record_rollout_step(storage, t, **r)
    assert not storage.full
    last_value = torch.full((2, 1), 7.5)
    close_rollout(storage, r["obs"][k], last_value)
    data = storage.get_data()
    assert data[prl.OBS].shape[0] == k
    assert data[prl.REW].shape[0] == k
    assert data[prl.VAL].shape[0] == k + 1
    torch.testing.assert_close(data[prl.VAL][k].reshape(2, 1), last_value)
    torch.testing.assert_close(data[prl.VAL][:k], r["val"][:k])
    torch.testing.assert_close(data[prl.TRUNC_VAL], r["trunc_val"][:k])
    torch.testing.assert_close(data[prl.OBS], r["obs"][:k])
    # the bootstrap was asked for the observation after the last recorded step
    (asked, _), = algo.bootstrap_calls
    np.testing.assert_array_equal(asked[:2], r["obs"][k].numpy())


@pytest.mark.parametrize("reused", [False, True], ids=["fresh", "reused"])
def test_empty_rollout_is_ignored_by_add_data(reused):
    """A rollout cut before its first step (a straggler preempted at once) yields empty
    data, on a fresh storage as well as on one that recorded a rollout before."""
    storage, _, _ = build(size=4)
    if reused:
        fill(storage, T=4, N=2, seed=7, offset=500.0)
    storage.start(torch.zeros(2, 3))
    close_rollout(storage, torch.zeros(2, 3), torch.zeros(2, 1))
    empty = storage.get_data()
    assert empty[prl.REW].shape[0] == 0
    assert empty[prl.OBS].shape[0] == 0
    assert empty[prl.VAL].shape[0] == 1       # only the bootstrap value
    learner, _, _ = build(size=4)
    learner.add_data(empty)
    assert not learner.ready()
    learner.prepare()
    assert learner.num_samples == 0
    assert list(learner.batches()) == []


# ------------------------------------------------------- collection-side protocol
def test_current_obs_follows_the_steps():
    storage, _, _ = build(size=4)
    r = random_rollout(4, 2, action_space=DISCRETE, seed=8)
    first = r["obs"][0].clone()
    storage.start(first)
    first += 1000.0                            # start copies: the caller may reuse its array
    np.testing.assert_array_equal(storage.current_obs(), r["obs"][0].numpy())
    for t in range(4):
        record_rollout_step(storage, t, **r)
        # the next action is taken from the observation after step t (the reset one where
        # an episode ended)
        np.testing.assert_array_equal(storage.current_obs(), r["obs"][t + 1].numpy())
    close_rollout(storage, r["obs"][4], r["val"][4])
    nxt = storage.next_rollout_obs()
    np.testing.assert_array_equal(nxt, r["obs"][4].numpy())
    storage.start(nxt)
    np.testing.assert_array_equal(storage.current_obs(), r["obs"][4].numpy())


@pytest.mark.parametrize("storage_cls", STORAGES)
def test_finish_bootstraps_last_and_truncated_final_obs_in_one_call(storage_cls):
    """``finish`` asks ``bootstrap`` once, for the observations after the last step (in env
    order) followed by the final observations of the truncated steps, not of the terminated
    ones; the state given to ``finish`` reaches ``bootstrap``."""
    storage, _, algo = build(storage_cls, size=6)
    T, N = 6, 3
    r = random_rollout(T, N, action_space=DISCRETE, seed=2)
    truncated = [(t, n) for t in range(T) for n in range(N) if r["trunc"][t, n]]
    terminated = [(t, n) for t in range(T) for n in range(N) if r["term"][t, n]]
    assert truncated and terminated, "the rollout must hold both kinds of episode ends"
    storage.start(r["obs"][0])
    for t in range(T):
        record_rollout_step(storage, t, **r)
    assert algo.bootstrap_calls == []          # nothing is asked before finish
    state = object()
    close_rollout(storage, r["obs"][T], r["val"][T], state=state)
    assert len(algo.bootstrap_calls) == 1
    asked, asked_state = algo.bootstrap_calls[0]
    assert asked_state is state
    assert asked.shape == (N + len(truncated), 3)
    np.testing.assert_array_equal(asked[:N], r["obs"][T].numpy())
    expected = np.stack([final_obs_of(r["obs"], t, n) for t, n in truncated])
    rest = asked[N:]
    np.testing.assert_array_equal(rest[np.argsort(rest[:, 0])], expected[np.argsort(expected[:, 0])])
    for t, n in terminated:
        assert not (asked == final_obs_of(r["obs"], t, n)).all(axis=1).any(), f"asked for terminated {(t, n)}"
    # and the answers land where they belong
    data = storage.get_data()
    torch.testing.assert_close(data[prl.VAL][T], r["val"][T])
    torch.testing.assert_close(data[prl.TRUNC_VAL], r["trunc_val"])
    # the next rollout asks once more, for its own observations only
    r2 = random_rollout(T, N, action_space=DISCRETE, seed=9, offset=5000.0)
    write_rollout(storage, **r2)
    assert len(algo.bootstrap_calls) == 2
    n_trunc2 = int(r2["trunc"].sum())
    assert algo.bootstrap_calls[1][0].shape == (N + n_trunc2, 3)
    np.testing.assert_array_equal(algo.bootstrap_calls[1][0][:N], r2["obs"][T].numpy())


def test_table_bootstrap_fails_loudly_on_unregistered_obs():
    """The helper algorithm never invents a value: a truncated step whose final observation
    nobody registered makes ``finish`` fail, while a terminated one is never asked for."""
    storage, _, _ = build(size=2)
    obs = torch.arange(9, dtype=torch.float32).reshape(3, 1, 3)
    act, logp, val = torch.zeros(1, 1, dtype=torch.int64), torch.zeros(1, 1), torch.zeros(1, 1)
    ended = torch.tensor([True])
    storage.start(obs[0])
    record_step(storage, act, logp, val, torch.ones(1), ended, ~ended, obs[1], {0: np.full(3, -1.0, np.float32)})
    record_step(storage, act, logp, val, torch.ones(1), ~ended, ended, obs[2], {0: np.full(3, -2.0, np.float32)})
    storage.algorithm.register_values(obs[2], [0.0])
    with pytest.raises(KeyError, match="no value registered"):
        storage.finish()
    storage.algorithm.register_values(np.full((1, 3), -2.0, np.float32), [3.0])
    storage.finish()                            # -1 (terminated) is still not registered
    torch.testing.assert_close(storage.get_data()[prl.TRUNC_VAL].reshape(-1), torch.tensor([0.0, 3.0]))


@pytest.mark.parametrize("key", TablePPO.acting_extras)
@pytest.mark.parametrize("at_step", [0, 2])
def test_insert_without_a_declared_extra_raises_key_error(key, at_step):
    storage, _, algo = build(size=4)
    assert key in algo.acting_extras
    r = random_rollout(4, 2, action_space=DISCRETE, seed=10)
    storage.start(r["obs"][0])
    for t in range(at_step):
        record_rollout_step(storage, t, **r)
    step = {prl.ACT: r["act"][at_step], prl.LOGP: r["logp"][at_step], prl.VAL: r["val"][at_step],
            prl.REW: r["rew"][at_step], prl.TERM: torch.zeros(2, dtype=torch.bool),
            prl.TRUNC: torch.zeros(2, dtype=torch.bool), prl.OBS2: r["obs"][at_step + 1], FINAL_OBS: {}}
    del step[key]
    with pytest.raises(KeyError) as err:
        storage.insert(step)
    assert repr(key) in str(err.value)


def test_full():
    storage, _, _ = build(size=3)
    assert not storage.full                      # nothing started
    r = random_rollout(3, 2, action_space=DISCRETE, seed=11)
    storage.start(r["obs"][0])
    for t in range(3):
        assert not storage.full, t
        record_rollout_step(storage, t, **r)
    assert storage.full
    close_rollout(storage, r["obs"][3], r["val"][3])
    assert storage.full
    storage.start(storage.next_rollout_obs())   # a new rollout is empty again
    assert not storage.full


@pytest.mark.parametrize("storage_cls", STORAGES)
def test_rollout_steps(storage_cls):
    storage, _, _ = build(storage_cls, size=5)
    assert storage.rollout_steps(1) == storage.rollout_steps(8) == 5   # steps per environment
    storage.update_storage_parameter("size", 3)
    assert storage.rollout_steps(2) == 3
    r = random_rollout(3, 2, action_space=DISCRETE, seed=12)
    storage.start(r["obs"][0])
    for t in range(3):
        record_rollout_step(storage, t, **r)
    assert storage.full                         # the rollout holds rollout_steps steps


# -------------------------------------------------------------------- learner side
def rollouts_data(shapes, seed=0):
    """One rollout per (T, N) in ``shapes``, as from several collectors: (rollouts, data)."""
    rollouts, datas = [], []
    for i, (T, N) in enumerate(shapes):
        col, _, _ = build(size=T)
        rollouts.append(fill(col, T, N, seed=seed + i, offset=10_000.0 * i))
        datas.append(col.get_data())
    return rollouts, datas


def collect_several(learner_storage, shapes, seed=0):
    """Add one rollout per (T, N) in ``shapes``, as from several collectors; returns them."""
    rollouts, datas = rollouts_data(shapes, seed)
    for data in datas:
        learner_storage.add_data(data)
    return rollouts


def obs_keys(rollouts):
    """Sorted keys (first observation coordinate) of every sample of ``rollouts``."""
    return torch.sort(torch.cat([r["obs"][:r["rew"].shape[0], :, 0].reshape(-1) for r in rollouts]))[0]


SHAPES = [(5, 2), (3, 2), (4, 3)]     # 10 + 6 + 12 = 28 samples
ONE_BATCH = {"num_mini_batch": 1, "num_epochs": 1}


@pytest.mark.parametrize("storage_cls", STORAGES)
def test_add_data_of_different_lengths(storage_cls):
    learner, _, algo = build(storage_cls, size=5, algo_kwargs=ONE_BATCH)
    rollouts = collect_several(learner, SHAPES)
    learner.prepare()
    assert learner.num_samples == 28
    (batch,) = list(learner.batches())
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
def test_batches_mini_batch_size(mini_batch_size, expected_sizes):
    learner, _, _ = build(size=5, algo_kwargs={"num_mini_batch": 3, "mini_batch_size": mini_batch_size,
                                               "num_epochs": 3})
    all_keys = obs_keys(collect_several(learner, SHAPES))
    batches = list(learner.batches())
    epochs = epochs_of(batches, 28)
    assert len(epochs) == 3
    for epoch in epochs:
        assert [b[prl.OBS].shape[0] for b in epoch] == expected_sizes
        keys = torch.sort(torch.cat([all_samples_obs_key(b) for b in epoch]))[0]
        torch.testing.assert_close(keys, all_keys)     # every sample exactly once
        for b in epoch:   # rows stay aligned across keys
            torch.testing.assert_close(b[prl.RET], b[prl.ADV] + b[prl.VAL])


@pytest.mark.parametrize("num_mini_batch", [1, 2, 4, 7])
def test_batches_num_mini_batch_divisible(num_mini_batch):
    learner, _, _ = build(size=5, algo_kwargs={"num_mini_batch": num_mini_batch, "num_epochs": 2})
    collect_several(learner, SHAPES)
    batches = list(learner.batches())
    epochs = epochs_of(batches, 28)
    assert len(epochs) == 2
    for epoch in epochs:
        assert len(epoch) == num_mini_batch
        keys = torch.cat([all_samples_obs_key(b) for b in epoch])
        assert keys.unique().numel() == 28


@pytest.mark.parametrize("num_mini_batch,num_samples", [(3, 28), (3, 14), (5, 28)])
def test_batches_num_mini_batch_not_divisible(num_mini_batch, num_samples):
    """``num_mini_batch`` mini-batches per epoch covering every sample once, also when the
    number of samples is not a multiple of it."""
    learner, _, _ = build(size=5, algo_kwargs={"num_mini_batch": num_mini_batch, "num_epochs": 1})
    collect_several(learner, SHAPES if num_samples == 28 else [(7, 2)])
    learner.prepare()
    assert learner.num_samples == num_samples
    batches = list(learner.batches())
    keys = torch.cat([all_samples_obs_key(b) for b in batches])
    sizes = [b[prl.OBS].shape[0] for b in batches]
    assert keys.numel() == num_samples and keys.unique().numel() == num_samples, \
        f"an epoch covered {keys.unique().numel()} of {num_samples} samples (mini-batch sizes {sizes})"
    assert len(sizes) == num_mini_batch, f"{len(sizes)} mini-batches {sizes}, asked for {num_mini_batch}"


def test_batches_follow_algorithm_hot_swaps():
    """``batches()`` reads num_epochs / num_mini_batch / mini_batch_size from the algorithm
    each round, so a hot-swap applies to the next round."""
    learner, _, algo = build(size=5, algo_kwargs={"num_epochs": 2, "num_mini_batch": 4})
    rollouts, datas = rollouts_data(SHAPES)
    all_keys = obs_keys(rollouts)

    def round_sizes():
        for data in datas:
            learner.add_data(data)
        epochs = epochs_of(list(learner.batches()), 28)
        for epoch in epochs:
            keys = torch.sort(torch.cat([all_samples_obs_key(b) for b in epoch]))[0]
            torch.testing.assert_close(keys, all_keys)
        return [[b[prl.OBS].shape[0] for b in epoch] for epoch in epochs]

    assert round_sizes() == [[7, 7, 7, 7]] * 2
    algo.update_algorithm_parameter("num_epochs", 3)
    algo.update_algorithm_parameter("num_mini_batch", 2)
    assert round_sizes() == [[14, 14]] * 3
    algo.update_algorithm_parameter("mini_batch_size", 8)    # takes precedence over num_mini_batch
    assert round_sizes() == [[8, 8, 8, 4]] * 3
    # a hot-swap between add_data and batches() applies to the data already received
    for data in datas:
        learner.add_data(data)
    algo.update_algorithm_parameter("num_epochs", 1)
    algo.update_algorithm_parameter("mini_batch_size", 10)
    assert [b[prl.OBS].shape[0] for b in learner.batches()] == [10, 10, 8]


def test_generate_batches_shuffles_and_generator_reproduces():
    learner, _, _ = build(size=5)
    collect_several(learner, SHAPES)
    learner.prepare()
    run = lambda seed: [b[prl.OBS][:, 0] for b in learner.generate_batches(
        num_mini_batch=4, num_epochs=2, generator=torch.Generator().manual_seed(seed))]
    a, b, c = run(1), run(1), run(2)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y)
    assert any(not torch.equal(x, y) for x, y in zip(a, c))
    # the two epochs are shuffled differently
    assert not torch.equal(torch.cat(a[:4]), torch.cat(a[4:]))


def test_batches_shuffle_with_the_storage_generator():
    learner, _, _ = build(size=5, algo_kwargs={"num_mini_batch": 4, "num_epochs": 2})
    _, datas = rollouts_data(SHAPES)

    def run(seed):
        for data in datas:
            learner.add_data(data)
        learner.generator = torch.Generator().manual_seed(seed)
        return [b[prl.OBS][:, 0] for b in learner.batches()]

    a, b, c = run(1), run(1), run(2)
    assert len(a) == 8
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y)
    assert any(not torch.equal(x, y) for x, y in zip(a, c))
    assert not torch.equal(torch.cat(a[:4]), torch.cat(a[4:]))


def test_ready_and_batches_exhaustion_empty_the_storage():
    learner, _, algo = build(size=5, algo_kwargs={"num_mini_batch": 2, "num_epochs": 2})
    assert not learner.ready()                  # empty
    assert list(learner.batches()) == []
    collect_several(learner, SHAPES)
    assert learner.ready()
    batches = learner.batches()
    assert learner.ready()                      # nothing is consumed before iterating
    first = next(batches)
    assert first[prl.OBS].shape[0] == 14
    rest = list(batches)
    assert len(rest) == 3
    # exhausted: the data was trained on and is forgotten
    assert not learner.ready()
    assert learner.num_samples == 0
    assert list(learner.batches()) == []
    # the next round holds only the new data
    collect_several(learner, [(2, 2)], seed=20)
    assert learner.ready()
    algo.update_algorithm_parameter("num_mini_batch", 1)
    algo.update_algorithm_parameter("num_epochs", 1)
    (batch,) = list(learner.batches())
    assert batch[prl.OBS].shape[0] == 4
    assert not learner.ready()


def test_clear_forgets_received_data():
    learner, _, _ = build(size=5, algo_kwargs=ONE_BATCH)
    collect_several(learner, SHAPES)
    assert learner.ready()
    learner.clear()
    assert not learner.ready()
    assert list(learner.batches()) == []
    # also once prepared
    collect_several(learner, SHAPES)
    learner.prepare()
    assert learner.num_samples == 28
    learner.clear()
    assert learner.num_samples == 0 and not learner.ready()
    assert list(learner.generate_batches(num_mini_batch=1)) == []
    # the next round holds only the new data
    new = collect_several(learner, [(2, 2)], seed=30)
    (batch,) = list(learner.batches())
    torch.testing.assert_close(torch.sort(batch[prl.OBS][:, 0])[0], obs_keys(new))


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
    learner, _, algo = build(GAEBuffer, size=5, gae_lambda=0.95, algo_kwargs=ONE_BATCH)
    rollouts = collect_several(learner, [(5, 2)])
    learner.update_storage_parameter("gae_lambda", 0.0)
    (batch,) = list(learner.batches())
    r = rollouts[0]
    adv, _ = compute_gae(r["rew"].unsqueeze(-1), r["val"], r["term"].unsqueeze(-1), r["trunc"].unsqueeze(-1),
                         r["trunc_val"], algo.gamma, 0.0)
    torch.testing.assert_close(batch[prl.ADV][torch.argsort(batch[prl.OBS][:, 0])].reshape(-1), adv.reshape(-1))


def test_size_hot_swap_applies_on_next_rollout():
    storage, _, _ = build(size=5)
    r = random_rollout(5, 2, action_space=DISCRETE, seed=4)
    storage.start(r["obs"][0])
    for t in range(2):
        record_rollout_step(storage, t, **r)
    storage.update_storage_parameter("size", 3)
    assert storage.size == 3
    # The rollout in progress keeps its room for 5 steps.
    assert not storage.full
    for t in range(2, 5):
        record_rollout_step(storage, t, **r)
    assert storage.full
    close_rollout(storage, r["obs"][5], r["val"][5])
    data = storage.get_data()
    assert data[prl.REW].shape[0] == 5
    torch.testing.assert_close(data[prl.OBS], r["obs"][:5])
    # The next rollout has the new size and is recorded correctly.
    r2 = random_rollout(3, 2, action_space=DISCRETE, seed=5)
    write_rollout(storage, **r2)
    assert storage.full
    data2 = storage.get_data()
    assert data2[prl.REW].shape[0] == 3
    assert data2[prl.VAL].shape[0] == 4
    torch.testing.assert_close(data2[prl.OBS], r2["obs"][:3])
    torch.testing.assert_close(data2[prl.VAL], r2["val"])
    # and growing it again works too
    storage.update_storage_parameter("size", 7)
    r3 = random_rollout(7, 2, action_space=DISCRETE, seed=6)
    write_rollout(storage, **r3)
    assert storage.get_data()[prl.REW].shape[0] == 7


def test_invalid_construction():
    actor = make_actor(OBS_SPACE, DISCRETE)
    algo = TablePPO.create_factory()[0]("cpu", actor, None)
    with pytest.raises(ValueError):
        GAEBuffer.create_factory(size=0)("cpu", actor, algo, None)
    with pytest.raises(ValueError):
        GAEBuffer.create_factory(size=4, gae_lambda=1.5)("cpu", actor, algo, None)
    with pytest.raises(ValueError):
        VanillaOnPolicyBuffer.create_factory(size=2.5)("cpu", actor, algo, None)
