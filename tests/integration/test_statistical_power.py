"""Randomised invariants checked on every one of many independent draws, each draw a key.

A bug that breaks 1% of draws survives `n` independent draws with probability `0.99**n`:
`n >= 688` makes that below 0.001. Every check here takes at least 1024 draws (`0.99**1024
< 4e-5`), all under one compiled, vmapped function, from fixed keys, so the tests are
deterministic.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer import ops
from podracer.agents import minibatches

pytestmark = pytest.mark.timeout(120)

DRAWS = 1024  # a bug breaking 1% of draws passes with p = 0.99**1024 < 4e-5


def keys(seed: int, n: int = DRAWS) -> jax.Array:
    return jax.random.split(jax.random.key(seed), n)


@pytest.mark.parametrize("size", [7, 512, 3000])
def test_random_permutation_is_a_permutation_for_every_key(size):
    """`random_permutation` over 1024 keys at sizes of one, two and three radix passes:
    every draw is a permutation of `range(size)` (a tie mishandled in one pass, or a lost
    element, shows as a repeated index)."""
    perms = np.asarray(jax.jit(jax.vmap(lambda key: minibatches.random_permutation(key, size)))(keys(size)))
    np.testing.assert_array_equal(np.sort(perms, axis=1), np.broadcast_to(np.arange(size), perms.shape))
    if size > 7:  # 7! = 5040 permutations: 1024 draws repeat some by chance
        assert len({p.tobytes() for p in perms}) == DRAWS  # no two keys give the same permutation


def test_shuffled_minibatches_hold_every_row_once_and_whole_for_every_key():
    """`shuffled_minibatches` over 1024 keys: each draw's minibatches hold every row of the
    flat batch exactly once, each row's leaves together (flat transitions)."""
    N, M = 24, 4
    batch = {"id": jnp.arange(N), "x": jnp.arange(N, dtype=jnp.float32)[:, None] * jnp.array([1.0, -1.0])}
    drawn = jax.jit(jax.vmap(lambda key: minibatches.shuffled_minibatches(key, batch, M)))(keys(1))
    ids, x = np.asarray(drawn["id"]), np.asarray(drawn["x"])
    assert ids.shape == (DRAWS, M, N // M) and x.shape == (DRAWS, M, N // M, 2)
    np.testing.assert_array_equal(np.sort(ids.reshape(DRAWS, N), axis=1), np.broadcast_to(np.arange(N), (DRAWS, N)))
    np.testing.assert_array_equal(x[..., 0], ids)
    np.testing.assert_array_equal(x[..., 1], -ids)


def test_sequence_minibatches_hold_whole_sequences_for_every_key():
    """`sequence_minibatches` (recurrent PPO, IMPALA) over 1024 keys: every minibatch holds
    whole `[T]` sequences in time order, a leaf without a time axis of length T (a core state
    `[1, B, ...]`) goes with its sequence, and every sequence appears exactly once."""
    T, B, M = 5, 8, 2
    steps = {
        "time": jnp.broadcast_to(jnp.arange(T)[:, None], (T, B)),
        "env": jnp.broadcast_to(jnp.arange(B), (T, B)),
        "core": jnp.arange(B, dtype=jnp.float32)[None, :, None] * jnp.ones((1, 1, 3)),
    }
    drawn = jax.device_get(jax.jit(jax.vmap(lambda key: minibatches.sequence_minibatches(key, steps, M)))(keys(2)))
    assert drawn["time"].shape == (DRAWS, M, T, B // M) and drawn["core"].shape == (DRAWS, M, 1, B // M, 3)
    np.testing.assert_array_equal(drawn["time"], np.broadcast_to(np.arange(T)[:, None], drawn["time"].shape))
    env = drawn["env"]
    np.testing.assert_array_equal(env, np.broadcast_to(env[:, :, :1], env.shape))  # one env per column
    np.testing.assert_array_equal(drawn["core"][:, :, 0, :, 0], env[:, :, 0])
    columns = env[:, :, 0].reshape(DRAWS, B)
    np.testing.assert_array_equal(np.sort(columns, axis=1), np.broadcast_to(np.arange(B), (DRAWS, B)))


@pytest.mark.parametrize("masked", [False, True])
def test_epsilon_greedy_invariants_hold_on_every_draw(masked):
    """`epsilon_greedy` over 1024 keys x 8 rows of values (and legal-action masks, one row
    with a single legal action): with epsilon 0 every action is the (legal) argmax; with
    epsilon 0.5 and 1 every action is legal (in range); at epsilon 0.5 both kinds occur."""
    A = 5
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.normal(size=(8, A)), jnp.float32)
    legal = rng.uniform(size=(8, A)) < 0.5
    legal[0] = [False, False, True, False, False]
    legal[np.arange(8), rng.integers(0, A, 8)] = True
    legal = jnp.asarray(legal) if masked else None
    draw = jax.jit(jax.vmap(ops.epsilon_greedy, in_axes=(0, None, None, None)))
    best = np.asarray(ops.masked_argmax(q, legal))
    allowed = np.ones((8, A), bool) if legal is None else np.asarray(legal)
    for epsilon, seed in [(0.0, 3), (0.5, 4), (1.0, 5)]:
        actions = np.asarray(draw(keys(seed), q, jnp.float32(epsilon), legal))  # [DRAWS, 8]
        assert actions.dtype == np.int32 and ((actions >= 0) & (actions < A)).all()
        assert allowed[np.arange(8), actions].all(), "an illegal action was drawn"
        if epsilon == 0.0:
            np.testing.assert_array_equal(actions, np.broadcast_to(best, actions.shape))
        if epsilon == 0.5:
            explored = actions != best
            assert explored[:, 1:].any() and (~explored).any()
