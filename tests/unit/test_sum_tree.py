"""SumTree and importance_weights (prioritized replay) against plain numpy references.

Every random input comes from a seeded numpy Generator. Exact comparisons of ``find`` use
integer priorities and grid values on multiples of 1/4, for which every float64 sum and
difference is exact, so the tree and the cumsum reference must agree to the leaf, boundaries
included.
"""

import numpy as np
import pytest

from pytorchrl.agent.storages.sum_tree import SumTree, importance_weights

CAPACITIES = [1, 2, 5, 8, 1000]


def reference_find(priorities, values):
    """Leaf i with cumsum[i - 1] <= v < cumsum[i]; side='right' skips zero leaves."""
    return np.searchsorted(np.cumsum(priorities), values, side="right")


def random_updates(tree, reference, rng, rounds, integer=False):
    """Batches of random updates with repeated indices, applied to tree and reference."""
    for _ in range(rounds):
        k = int(rng.integers(1, 2 * tree.capacity + 2))
        idx = rng.integers(0, tree.capacity, size=k)  # k > capacity forces repeats
        if integer:
            p = rng.integers(0, 5, size=k).astype(np.float64)
        else:
            p = rng.random(k) * 10
            p[rng.random(k) < 0.2] = 0.0
        tree.update(idx, p)
        for i, v in zip(idx, p):  # sequential writes: the last one wins
            reference[i] = v


# ---------------------------------------------------------------------- construction
@pytest.mark.parametrize("capacity", CAPACITIES)
def test_new_tree_is_empty(capacity):
    tree = SumTree(capacity)
    assert tree.capacity == capacity
    assert tree.total() == 0.0
    assert tree.min() == np.inf
    np.testing.assert_array_equal(tree.get(np.arange(capacity)), np.zeros(capacity))


@pytest.mark.parametrize("capacity", [0, -3, 2.0, True, "4", None])
def test_bad_capacity(capacity):
    with pytest.raises(ValueError):
        SumTree(capacity)


# ---------------------------------------------------------------------- update / total / min / get
@pytest.mark.parametrize("capacity", CAPACITIES)
def test_total_min_get_match_reference_after_random_updates(capacity):
    rng = np.random.default_rng(capacity)
    tree, reference = SumTree(capacity), np.zeros(capacity)
    for _ in range(20):
        random_updates(tree, reference, rng, rounds=5)
        np.testing.assert_array_equal(tree.get(np.arange(capacity)), reference)
        assert tree.total() == pytest.approx(reference.sum(), rel=1e-12, abs=1e-12)
        positive = reference[reference > 0]
        assert tree.min() == (positive.min() if positive.size else np.inf)


def test_repeated_index_last_value_wins():
    tree = SumTree(5)
    tree.update([3, 1, 3, 3, 1], [1.0, 2.0, 7.0, 4.0, 0.5])
    np.testing.assert_array_equal(tree.get([0, 1, 2, 3, 4]), [0.0, 0.5, 0.0, 4.0, 0.0])
    assert tree.total() == 4.5
    assert tree.min() == 0.5
    # Last wins also when the last value is 0: the leaf leaves the min tree.
    tree.update([1, 1], [9.0, 0.0])
    assert tree.get(1) == 0.0
    assert tree.total() == 4.0
    assert tree.min() == 4.0


def test_min_ignores_zeros_and_recovers_when_min_leaf_is_zeroed():
    tree = SumTree(6)
    tree.update(np.arange(6), [0.0, 3.0, 0.0, 0.25, 2.0, 0.0])
    assert tree.min() == 0.25
    tree.update([3], [0.0])
    assert tree.min() == 2.0
    tree.update([1, 4], [0.0, 0.0])
    assert tree.min() == np.inf
    assert tree.total() == 0.0


def test_total_does_not_drift_over_many_updates():
    # Inner nodes are recomputed from their children, not adjusted by deltas: after
    # thousands of updates, resetting to small values leaves an exact small total.
    rng = np.random.default_rng(1)
    tree = SumTree(64)
    for _ in range(300):
        tree.update(rng.integers(0, 64, size=16), rng.random(16) * 1e6)
    tree.update(np.arange(64), np.full(64, 0.125))
    assert tree.total() == 8.0
    assert tree.min() == 0.125


def test_scalar_priority_broadcasts_and_any_shape_works():
    tree = SumTree(10)
    tree.update(np.array([[0, 2], [4, 6]]), 1.5)
    np.testing.assert_array_equal(tree.get([[0, 1], [2, 4]]), [[1.5, 0.0], [1.5, 1.5]])
    assert tree.total() == 6.0
    tree.update([], [])  # an empty batch is a no-op
    assert tree.total() == 6.0


@pytest.mark.parametrize(
    "indices, priorities",
    [
        ([0, 1], [1.0, -0.5]),  # negative
        ([0, 1], [1.0, np.nan]),  # NaN
        ([0, 1], [1.0, np.inf]),  # infinite
        ([0, 5], [1.0, 1.0]),  # index == capacity
        ([-1, 0], [1.0, 1.0]),  # negative index
        ([0.0, 1.0], [1.0, 1.0]),  # float indices
        ([0, 1, 2], [1.0, 1.0]),  # shapes do not match
    ],
)
def test_update_refuses_bad_input_and_leaves_tree_unchanged(indices, priorities):
    tree = SumTree(5)
    tree.update([0, 1, 2], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError):
        tree.update(indices, priorities)
    np.testing.assert_array_equal(tree.get(np.arange(5)), [1.0, 2.0, 3.0, 0.0, 0.0])
    assert tree.total() == 6.0
    assert tree.min() == 1.0


def test_get_refuses_out_of_range():
    tree = SumTree(5)
    for bad in ([5], [-1], [0.5]):
        with pytest.raises(ValueError):
            tree.get(bad)


# ---------------------------------------------------------------------- find
@pytest.mark.parametrize("capacity", [1, 5, 1000])
def test_find_matches_searchsorted_on_dense_grid(capacity):
    rng = np.random.default_rng(10 + capacity)
    tree, reference = SumTree(capacity), np.zeros(capacity)
    random_updates(tree, reference, rng, rounds=3, integer=True)
    if reference.sum() == 0:
        tree.update([0], [1.0])
        reference[0] = 1.0
    total = reference.sum()
    assert tree.total() == total  # integers: the sum is exact
    grid = np.arange(0.0, total, 0.25)  # hits every boundary cumsum[i] exactly
    found = tree.find(grid)
    np.testing.assert_array_equal(found, reference_find(reference, grid))
    assert np.all(reference[found] > 0)
    # Every positive leaf is reachable, no zero leaf is.
    assert set(found.tolist()) == set(np.flatnonzero(reference).tolist())


def test_find_boundaries_belong_to_the_right_leaf():
    tree = SumTree(5)
    tree.update(np.arange(5), [2.0, 0.0, 1.0, 0.0, 3.0])  # cumsum 2, 2, 3, 3, 6
    values = [0.0, 1.999, 2.0, 2.5, 3.0, 5.999]
    np.testing.assert_array_equal(tree.find(values), [0, 0, 2, 2, 4, 4])


def test_find_random_float_priorities_within_rounding_of_reference():
    rng = np.random.default_rng(3)
    p = rng.random(777) * rng.integers(0, 2, size=777)  # about half are zero
    tree = SumTree(777)
    tree.update(np.arange(777), p)
    values = rng.random(20_000) * tree.total()
    found = tree.find(values)
    assert np.all(p[found] > 0)
    cumsum = np.cumsum(p)
    lower = np.concatenate([[0.0], cumsum[:-1]])[found]
    tol = 1e-9 * tree.total()
    assert np.all(lower - tol <= values) and np.all(values < cumsum[found] + tol)
    # Away from boundaries (all but a vanishing fraction) the leaf is exactly the reference's.
    assert np.mean(found == reference_find(p, values)) > 0.999


@pytest.mark.parametrize("capacity", [1, 5, 1000])
def test_find_right_edge_clamps_to_last_positive_leaf(capacity):
    tree = SumTree(capacity)
    p = np.zeros(capacity)
    p[: max(1, capacity // 2)] = 0.1  # zeros (and padding) after the last positive leaf
    tree.update(np.arange(capacity), p)
    last = np.flatnonzero(p)[-1]
    total = tree.total()
    edge = [np.nextafter(total, 0), total, np.nextafter(total, np.inf), 2 * total]
    found = tree.find(edge)
    assert found[0] <= last
    np.testing.assert_array_equal(found[1:], [last] * 3)


def test_find_output_shape_and_errors():
    tree = SumTree(4)
    with pytest.raises(ValueError, match="total priority is 0"):
        tree.find([0.0])
    tree.update([1, 2], [1.0, 1.0])
    assert tree.find(np.zeros((2, 3))).shape == (2, 3)
    assert tree.find(1.5).shape == ()
    assert tree.find(1.5) == 2
    for bad in ([-0.1], [np.nan], [np.inf]):
        with pytest.raises(ValueError):
            tree.find(bad)


# ---------------------------------------------------------------------- sample
def test_sample_frequencies_match_priorities():
    rng = np.random.default_rng(7)
    p = np.array([5.0, 0.0, 1.0, 3.0, 0.0, 0.5, 7.0, 2.5, 0.0, 1.0, 4.0])
    tree = SumTree(p.size)
    tree.update(np.arange(p.size), p)
    counts = np.zeros(p.size)
    for _ in range(200):
        idx, prio = tree.sample(999, rng)  # 999 segments: not a multiple of the leaves
        np.testing.assert_array_equal(prio, p[idx])
        counts += np.bincount(idx, minlength=p.size)
    assert counts.sum() == 199_800
    assert np.all(counts[p == 0] == 0)
    # Stratification makes this far tighter than 200k independent draws would (~1e-3).
    np.testing.assert_allclose(counts / counts.sum(), p / p.sum(), atol=5e-4)


def test_sample_is_stratified():
    # Equal priorities and one segment per leaf: segment k holds exactly leaf k.
    tree = SumTree(1000)
    tree.update(np.arange(1000), 2.0)
    idx, prio = tree.sample(1000, np.random.default_rng(0))
    np.testing.assert_array_equal(idx, np.arange(1000))
    np.testing.assert_array_equal(prio, np.full(1000, 2.0))


def test_sample_one_draw_per_segment_and_sorted():
    rng = np.random.default_rng(11)
    p = rng.integers(0, 4, size=300).astype(np.float64)
    tree = SumTree(300)
    tree.update(np.arange(300), p)
    batch = 64
    draw_rng, replay_rng = np.random.default_rng(5), np.random.default_rng(5)
    idx, _ = tree.sample(batch, draw_rng)
    # The values it must have used: one uniform draw inside each of the equal segments.
    segment = p.sum() / batch
    values = (np.arange(batch) + replay_rng.random(batch)) * segment
    np.testing.assert_array_equal(idx, reference_find(p, values))
    assert np.all(np.diff(idx) >= 0)
    lower = np.concatenate([[0.0], np.cumsum(p)[:-1]])
    k = np.arange(batch)
    # Each leaf drawn overlaps its segment [k * segment, (k + 1) * segment).
    assert np.all(lower[idx] < (k + 1) * segment) and np.all(np.cumsum(p)[idx] > k * segment)


def test_sample_is_reproducible_for_a_seed():
    tree = SumTree(50)
    tree.update(np.arange(50), np.arange(50, dtype=np.float64))
    a = tree.sample(32, np.random.default_rng(123))[0]
    b = tree.sample(32, np.random.default_rng(123))[0]
    np.testing.assert_array_equal(a, b)
    assert 0 not in a  # leaf 0 has priority 0


def test_sample_errors():
    tree = SumTree(3)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="total priority is 0"):
        tree.sample(4, rng)
    tree.update([0], [1.0])
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError):
            tree.sample(bad, rng)


# ---------------------------------------------------------------------- importance weights
def test_importance_weights_by_hand():
    # p = [1, 2, 4, 8], total 15, N = 4, beta = 0.5, P_min = 1/15.
    # w_i = (4 * p_i / 15) ** -0.5 / (4 / 15) ** -0.5 = (1 / p_i) ** 0.5.
    w = importance_weights([1.0, 2.0, 4.0, 8.0], 15.0, 1.0, 4, 0.5)
    assert w.dtype == np.float32
    np.testing.assert_allclose(w, [1.0, 2**-0.5, 0.5, 8**-0.5], rtol=1e-6)
    # The literal formula of the paper gives the same numbers.
    p = np.array([3.0, 0.5, 6.0])
    total, n, beta = 20.0, 7, 0.4
    literal = (n * p / total) ** -beta / (n * 0.5 / total) ** -beta
    np.testing.assert_allclose(importance_weights(p, total, 0.5, n, beta), literal, rtol=1e-6)


def test_importance_weights_range_and_beta_limits():
    rng = np.random.default_rng(2)
    tree = SumTree(100)
    tree.update(np.arange(100), rng.random(100) + 1e-3)
    _, prio = tree.sample(256, rng)
    w = importance_weights(prio, tree.total(), tree.min(), 100, 0.7)
    assert np.all(w > 0) and np.all(w <= 1)
    np.testing.assert_array_equal(importance_weights(prio, tree.total(), tree.min(), 100, 0.0), 1)
    # The leaf with the minimum priority gets weight exactly 1.
    assert importance_weights([tree.min()], tree.total(), tree.min(), 100, 1.0)[0] == 1.0


@pytest.mark.parametrize(
    "args",
    [
        ([1.0], 2.0, 1.0, 2, -0.1),  # beta < 0
        ([1.0], 2.0, 1.0, 2, 1.1),  # beta > 1
        ([1.0], 0.0, 1.0, 2, 0.5),  # total 0
        ([1.0], 2.0, 0.0, 2, 0.5),  # min priority 0
        ([1.0], 2.0, np.inf, 2, 0.5),  # min priority of an empty tree
        ([0.5], 2.0, 1.0, 2, 0.5),  # priority below the minimum (weight > 1)
        ([0.0], 2.0, 1.0, 2, 0.5),  # priority 0
        ([3.0], 2.0, 1.0, 2, 0.5),  # priority above the total
        ([np.nan], 2.0, 1.0, 2, 0.5),  # NaN
        ([1.0], 2.0, 1.0, 0, 0.5),  # no items
    ],
)
def test_importance_weights_errors(args):
    with pytest.raises(ValueError):
        importance_weights(*args)
