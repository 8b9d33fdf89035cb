"""`podracer.agents.minibatches`: time-major trees joined and flattened, and an epoch's split
into shuffled minibatches of transitions or of whole sequences, against NumPy oracles."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.agents.minibatches import (
    concat_time,
    flatten_time_batch,
    random_permutation,
    sequence_minibatches,
    shuffled_minibatches,
)


def test_concat_time_joins_every_leaf_along_time():
    a = {"x": np.arange(6.0).reshape(2, 3), "y": np.arange(4).reshape(2, 2, 1)}
    b = {"x": -np.arange(6.0).reshape(2, 3), "y": -np.arange(4).reshape(2, 2, 1)}
    got = concat_time(a, b)
    for name in a:
        np.testing.assert_array_equal(got[name], np.concatenate([a[name], b[name]], axis=0))


def test_flatten_time_batch_keeps_the_feature_axes():
    tree = {"obs": np.arange(24.0).reshape(2, 3, 4), "reward": np.arange(6.0).reshape(2, 3)}
    got = flatten_time_batch(tree)
    np.testing.assert_array_equal(got["obs"], np.arange(24.0).reshape(6, 4))
    np.testing.assert_array_equal(got["reward"], np.arange(6.0))


@pytest.mark.parametrize("size, passes", [(8, 1), (512, 2), (10_000, 3), (40_000, 3)])
def test_random_permutation_is_a_radix_sort_of_its_random_words(size, passes):
    """`random_permutation` against NumPy's stable sorts of the same random words: pass `i`
    orders the positions left by pass `i - 1` by the high `32 - b` bits of word `i` (ties
    keep the earlier order), so the last word is the most significant key; `size` sets how
    many passes make at least `2b + 9` random bits (at 10000 rows, `b = 14` leaves 18 random
    bits a word, so the 37 bits take 3 passes: 2 if a word's width were taken as 33 bits);
    int32 indices."""
    key = jax.random.key(size)
    bits = (size - 1).bit_length()
    words = np.asarray(jax.random.bits(key, (passes, size))) >> bits
    expected = np.arange(size)
    for word in words:
        expected = expected[np.argsort(word, kind="stable")]
    got = random_permutation(key, size)
    assert got.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(got), expected)
    with pytest.raises(ValueError, match="at most 2\\^28"):
        random_permutation(key, 2**28 + 1)


def test_sequence_minibatches_keep_whole_sequences_in_the_shuffled_order():
    """`[T, B, ...] -> [M, T, B / M, ...]`: minibatch `m` holds sequences
    `perm[m * B / M: (m + 1) * B / M]`, each whole and in time order, with `perm` the
    permutation `shuffled_minibatches` draws for `B` rows of the same key."""
    T, B, M = 3, 8, 2
    t, b = np.meshgrid(np.arange(T), np.arange(B), indexing="ij")
    batch = {"tb": np.stack([t, b], -1).astype(np.int32), "b": b.astype(np.float32)}
    key = jax.random.key(7)
    got = jax.tree.map(np.asarray, sequence_minibatches(key, batch, M))
    perm = np.asarray(random_permutation(key, B)).reshape(M, B // M)
    assert got["tb"].shape == (M, T, B // M, 2) and got["b"].shape == (M, T, B // M)
    for m in range(M):
        np.testing.assert_array_equal(got["tb"][m], batch["tb"][:, perm[m]])
        np.testing.assert_array_equal(got["b"][m], batch["b"][:, perm[m]])


def test_shuffled_minibatches_split_rows_by_the_permutation():
    batch = {"x": np.arange(24.0).reshape(12, 2), "y": np.arange(12)}
    key = jax.random.key(5)
    got = shuffled_minibatches(key, batch, 4)
    perm = np.asarray(random_permutation(key, 12)).reshape(4, 3)
    np.testing.assert_array_equal(got["x"], batch["x"][perm])
    np.testing.assert_array_equal(got["y"], perm)
    with pytest.raises(ValueError, match="^batch of 12 does not split into 5 minibatches$"):
        shuffled_minibatches(key, batch, 5)
