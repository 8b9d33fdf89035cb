"""The reset oracle for recurrent cores: the learner's unroll over a trajectory that crosses
episode boundaries (at the first and last steps too) equals running the network separately
on each episode from the initial state, and equals the actor's step-by-step states."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.networks.recurrent import ResetCore, unroll

pytestmark = pytest.mark.timeout(120)

T, B, D = 12, 5, 3


def trajectory(seed: int):
    """Observations `[T, B, D]`, episode ends `[T, B]` with an end at `t = 0` and `t = T - 1`
    in some columns, a column with no end, and `first [B]` (episode began at `t = 0`)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(T, B, D)).astype(np.float32)
    end = rng.random((T, B)) < 0.2
    end[0, 0] = end[T - 1, 1] = True
    end[:, 2] = False
    end[1:3, 3] = True  # two ends in a row: a one-step episode
    first = np.array([True, False, False, True, False])
    return x, end, first


def starts_from_ends(first, end):
    """`start [T, B]`: `first [B]` at `t = 0`, then `end[t - 1]` (what a runner records)."""
    return jnp.concatenate([jnp.asarray(first)[None], jnp.asarray(end)[:-1]], axis=0)


def per_episode(core, params, state0, x, end, first):
    """Oracle: each column cut into episodes, each run on its own from the initial state (the
    first one from `state0` unless the episode began at `t = 0`)."""
    out = np.zeros((T, B, core.size), np.float32)
    for b in range(B):
        begins = [0] + [t + 1 for t in range(T - 1) if end[t, b]]
        for i, s in enumerate(begins):
            e = begins[i + 1] if i + 1 < len(begins) else T
            state = jax.tree.map(lambda a: a[b:b + 1], state0) if (i == 0 and not first[b]) \
                else core.initial_state(1)
            for t in range(s, e):  # no resets inside an episode
                state, y = core.apply(params, state, x[t, b:b + 1], jnp.zeros(1, bool))
                out[t, b] = y[0]
    return out


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.costly
def test_unroll_equals_each_episode_run_from_the_initial_state(kind):
    core = ResetCore(kind, size=4)
    x, end, first = trajectory(0)
    params = core.init(jax.random.key(0), core.initial_state(B), x[0], jnp.zeros(B, bool))
    state0 = jax.tree.map(lambda a: jax.random.normal(jax.random.key(1), a.shape), core.initial_state(B))
    _, y = jax.jit(lambda p, s: unroll(core, p, s, x, starts_from_ends(first, end)))(
        params, state0)
    np.testing.assert_allclose(y, per_episode(core, params, state0, x, end, first), rtol=1e-5, atol=1e-6)
    # The reset matters: without it the unroll differs wherever an episode began mid-sequence.
    _, y_no_reset = unroll(core, params, state0, x, jnp.zeros((T, B), bool))
    assert not np.allclose(y_no_reset[:, 0], y[:, 0])


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_actor_step_by_step_states_equal_the_learners_unroll_of_the_next_sequence(kind):
    """An actor steps 2T observations one at a time, resetting after each end; the learner
    unrolls the second sequence from the state the actor had at its start (stored with the
    trajectory) and gets the actor's outputs."""
    core = ResetCore(kind, size=4)
    (x1, end1, first), (x2, end2, _) = trajectory(2), trajectory(3)
    params = core.init(jax.random.key(0), core.initial_state(B), x1[0], jnp.zeros(B, bool))
    step = jax.jit(lambda s, x, start: core.apply(params, s, x, start))
    state, start, acted, sequence_start = core.initial_state(B), jnp.asarray(first), [], None
    for t, (x, end) in enumerate(zip(np.concatenate([x1, x2]), np.concatenate([end1, end2]), strict=True)):
        if t == T:
            sequence_start, first2 = state, start
        state, y = step(state, x, start)
        acted.append(y)
        start = jnp.asarray(end)
    _, y2 = unroll(core, params, sequence_start, x2, starts_from_ends(first2, end2))
    np.testing.assert_allclose(y2, np.stack(acted[T:]), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(first2, end1[-1])
