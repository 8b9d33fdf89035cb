"""Replay buffers: insertion order, overwriting, what is sampled, priorities and weights."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer import replay as replay_lib
from podracer.replay import importance_weights


def make_replay(*args, **kwargs) -> replay_lib.Replay:
    """`podracer.replay.make_replay` with every function jitted: run eagerly, a buffer's
    many small ops would each compile on their own (seconds per test on 2 cores)."""
    return replay_lib.Replay(*(jax.jit(fn) for fn in replay_lib.make_replay(*args, **kwargs)))


def items(values):
    """Items that are just their own id, as a float array `[N]` with an obs `[N, 2]`."""
    values = jnp.asarray(values, jnp.float32)
    return {"id": values, "obs": jnp.stack([values, -values], axis=-1)}


EXAMPLE = {"id": jnp.zeros(()), "obs": jnp.zeros((2,))}


def many_samples(replay, state, n=16, key=jax.random.key(0), beta=0.4):
    """`n` batches drawn with different keys, concatenated (a batch is at most the capacity)."""
    return _many_samples(replay, state, key, n, beta)


@jax.jit(static_argnums=(0, 3))
def _many_samples(replay, state, key, n, beta):
    samples = jax.vmap(replay.sample, in_axes=(None, 0, None))(state, jax.random.split(key, n), beta)
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), samples)


@pytest.mark.parametrize("prioritized", [False, True])
def test_insert_overwrites_oldest_and_samples_only_inserted(prioritized):
    replay = make_replay(capacity=8, batch_size=8, prioritized=prioritized)
    state = replay.init(EXAMPLE)
    assert int(replay.size(state)) == 0
    state = replay.add(state, items(np.arange(1, 6)))  # 1..5
    assert int(replay.size(state)) == 5
    sample = many_samples(replay, state)
    assert set(np.asarray(sample.items["id"]).tolist()) <= {1, 2, 3, 4, 5}
    np.testing.assert_array_equal(sample.items["obs"][:, 1], -sample.items["obs"][:, 0])  # items stay whole
    state = replay.add(state, items(np.arange(6, 12)))  # 6..11: 1, 2, 3 are overwritten
    assert int(replay.size(state)) == 8
    assert sorted(np.asarray(state.experience["id"]).ravel().tolist()) == list(range(4, 12))
    ids = np.asarray(many_samples(replay, state).items["id"])
    assert set(ids.tolist()) <= set(range(4, 12)) and len(set(ids.tolist())) >= 6


def test_uniform_weights_are_one():
    replay = make_replay(capacity=8, batch_size=4)
    state = replay.add(replay.init(EXAMPLE), items(np.arange(8)))
    np.testing.assert_array_equal(replay.sample(state, jax.random.key(0), 0.4).weights, 1.0)


def test_prioritized_sampling_follows_priorities():
    replay = make_replay(capacity=4, batch_size=4, prioritized=True, priority_exponent=1.0)
    state = replay.add(replay.init(EXAMPLE), items([10, 20, 30, 40]))
    ids = [10, 20, 30, 40]  # held at buffer indices 0..3
    # Priorities 1 : 3 : 0 : 0 (alpha = 1).
    state = replay.set_priorities(state, jnp.arange(4), jnp.array([1.0, 3.0, 0.0, 0.0]))
    sample = many_samples(replay, state, n=128, key=jax.random.key(1), beta=1.0)
    drawn = np.asarray(sample.items["id"])
    assert set(drawn.tolist()) <= {ids[0], ids[1]}
    assert 0.68 < np.mean(drawn == ids[1]) < 0.82
    # Importance weights (N P)^-1 normalised by the max: P = 1/4 -> 1, P = 3/4 -> 1/3.
    expected = np.where(drawn == ids[0], 1.0, 1.0 / 3.0)
    np.testing.assert_allclose(sample.weights, expected, rtol=1e-5)
    np.testing.assert_array_equal(np.take(ids, sample.indices), drawn)  # indices are buffer positions


def test_importance_weights_hand_computed():
    w = importance_weights(jnp.array([0.5, 0.25, 0.25]), jnp.int32(4), jnp.float32(0.5))
    # (4 * 0.5)^-0.5 = 0.7071, (4 * 0.25)^-0.5 = 1: normalised by the max (1).
    np.testing.assert_allclose(w, [2 ** -0.5, 1.0, 1.0], rtol=1e-6)


def test_per_seed_buffers_under_vmap():
    """Buffers stacked over seeds (Anakin's seed axis) add and sample independently."""
    replay = make_replay(capacity=8, batch_size=8, prioritized=True)
    state = jax.tree.map(lambda x: jnp.stack([x, x]), replay.init(EXAMPLE))
    state = jax.jit(jax.vmap(replay.add))(state, {"id": jnp.array([[1.0] * 4, [2.0] * 4]), "obs": jnp.zeros((2, 4, 2))})
    sample = jax.jit(jax.vmap(replay.sample, in_axes=(0, 0, None)))(
        state, jax.random.split(jax.random.key(0), 2), 0.4)
    np.testing.assert_array_equal(sample.items["id"][0], 1.0)
    np.testing.assert_array_equal(sample.items["id"][1], 2.0)
