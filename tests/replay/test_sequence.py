"""The sequence replay buffer: consecutive steps of one environment across adds and
wrap-around, never across the write head, uniform (stratified) over what it holds, episode
boundaries."""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.replay.sequence import make_sequence_replay, max_capacity, same_episode, stratified_starts


class Step(NamedTuple):
    time: jax.Array  # the step's time since the start (over every add)
    env: jax.Array
    terminated: jax.Array
    truncated: jax.Array


def rollout(first_time: int, T: int, B: int, ends: dict | None = None) -> Step:
    """Steps `[T, B]` numbered by (time, env); `ends` maps (time, env) to "terminated"/"truncated"."""
    time, env = np.meshgrid(np.arange(first_time, first_time + T), np.arange(B), indexing="ij")
    terminated, truncated = np.zeros((T, B), bool), np.zeros((T, B), bool)
    for (t, b), kind in (ends or {}).items():
        if first_time <= t < first_time + T:
            (terminated if kind == "terminated" else truncated)[t - first_time, b] = True
    return Step(time.astype(np.int32), env.astype(np.int32), terminated, truncated)


EXAMPLE = Step(np.int32(0), np.int32(0), np.bool_(False), np.bool_(False))


@functools.lru_cache(maxsize=None)
def buffer_fns(capacity: int, length: int, batch: int, B: int):
    replay = make_sequence_replay(capacity, length, batch)
    return (replay, jax.jit(replay.add), jax.jit(lambda s, k: replay.sample(s, k, B)),
            jax.jit(lambda s: (replay.size(s), replay.can_sample(s, B))))


@pytest.mark.timeout(120)
def test_sequences_follow_one_env_across_adds_and_wrap_around():
    """Capacity 40 steps (not a multiple of B = 3), sequences of 4, rollouts of 5 x 3: every
    sample is 4 consecutive steps of one environment, from the steps still held, and every
    possible (env, start) is drawn."""
    capacity, L, B, T = 40, 4, 3, 5
    replay, add, sample, size = buffer_fns(capacity, L, 256, B)
    state = replay.init(EXAMPLE)
    assert [int(x) for x in size(state)] == [0, 0]
    for k in range(8):  # 8 adds of 15 steps: the buffer wraps after 2.7 adds
        state = add(state, rollout(T * k, T, B))
        held, ready = (int(x) for x in size(state))
        written = T * B * (k + 1)
        assert held == min(written, capacity)
        assert ready == (held >= (L - 1) * B + 1)
        if not ready:
            continue
        steps = jax.device_get(sample(state, jax.random.key(k)).items)  # [L, M]
        assert steps.time.shape == (L, 256)
        np.testing.assert_array_equal(steps.env, np.broadcast_to(steps.env[0], steps.env.shape))
        np.testing.assert_array_equal(steps.time, steps.time[0] + np.arange(L)[:, None])
        # Only steps still held: stream position time * B + env among the last `capacity` written.
        position = steps.time * B + steps.env
        assert position.min() >= written - capacity and position.max() < written
        starts = set(zip(steps.time[0].tolist(), steps.env[0].tolist()))
        possible = {(n, b) for n in range(T * (k + 1)) for b in range(B)
                    if n * B + b >= written - capacity and (n + L - 1) * B + b < written}
        assert starts <= possible
        if k == 7:
            assert len(possible) == 31 and starts == possible  # 256 uniform draws reach every one


class ObsStep(NamedTuple):
    obs: jax.Array  # the step's time since the start (over every add)
    env: jax.Array
    terminated: jax.Array
    truncated: jax.Array


@pytest.mark.timeout(120)
def test_lookahead_stashes_each_next_observation_and_never_samples_the_steps_it_took():
    """With `lookahead`, each environment's next observation waits in the `B` slots after the
    write head (`stash`, read back by `stashed`) until the next add writes over it; once the
    buffer wraps, those slots are its oldest steps, which are then never sampled (every other
    (env, start) is): capacity 40 (not a multiple of B = 3), sequences of 4, rollouts of 5 x 3."""
    capacity, L, B, T = 40, 4, 3, 5
    # 256 sequences on each of the 8 adds, 2048 draws: a stashed slot sampled 1% of the time passes with p < 2e-9
    replay = make_sequence_replay(capacity, L, 256, lookahead=True)
    add = jax.jit(lambda s, steps, next_obs: replay.stash(replay.add(s, steps), next_obs))
    sample = jax.jit(lambda s, k: replay.sample(s, k, B))
    state = replay.init(ObsStep(np.int32(0), np.int32(0), np.bool_(False), np.bool_(False)))
    for k in range(8):
        steps = rollout(T * k, T, B)
        state = add(state, ObsStep(*steps), np.full((B,), T * (k + 1), np.int32))
        np.testing.assert_array_equal(replay.stashed(state, B), T * (k + 1))
        written = T * B * (k + 1)
        assert bool(replay.can_sample(state, B)) == (min(written, capacity - B) >= (L - 1) * B + 1)
        if not replay.can_sample(state, B):
            continue
        drawn = jax.device_get(sample(state, jax.random.key(k)).items)
        np.testing.assert_array_equal(drawn.env, np.broadcast_to(drawn.env[0], drawn.env.shape))
        np.testing.assert_array_equal(drawn.obs, drawn.obs[0] + np.arange(L)[:, None])
        # Held, and not in a slot the stash took: the last `capacity - B` stream positions written.
        position = drawn.obs * B + drawn.env
        assert position.min() >= written + B - capacity and position.max() < written
        starts = set(zip(drawn.obs[0].tolist(), drawn.env[0].tolist()))
        possible = {(n, b) for n in range(T * (k + 1)) for b in range(B)
                    if n * B + b >= written + B - capacity and (n + L - 1) * B + b < written}
        assert starts <= possible
        if k == 7:
            assert len(possible) == 28 and starts == possible
    with pytest.raises(ValueError, match="lookahead=True"):
        make_sequence_replay(capacity, L, 4).stashed(state, B)


@pytest.mark.timeout(60)
def test_same_episode_marks_steps_after_an_end():
    done = jnp.array([[False, True, False], [True, False, False], [False, False, False], [True, False, True]])
    np.testing.assert_array_equal(same_episode(done), [[1, 1, 1], [1, 0, 1], [0, 0, 1], [0, 0, 1]])
    # 1024 sequences drawn: a mark wrong on 1% of them passes with p = 0.99**1024 < 4e-5
    replay, add, sample, _ = buffer_fns(60, 4, 1024, 2)
    ends = {(1, 0): "terminated", (4, 1): "truncated"}
    state = add(replay.init(EXAMPLE), rollout(0, 8, 2, ends))
    drawn = jax.device_get(sample(state, jax.random.key(0)))
    first, end = drawn.items.time[0], np.where(drawn.items.env[0] == 0, 1, 4)  # [1024]
    expected = (first + np.arange(4)[:, None] <= end) | (first > end)
    np.testing.assert_array_equal(drawn.same_episode, expected)
    # Both kinds of end are boundaries.
    assert not drawn.same_episode.all()


def test_a_sequence_longer_than_the_buffer_is_an_error():
    replay = make_sequence_replay(10, 4, 2)
    state = replay.init(EXAMPLE)
    with pytest.raises(ValueError, match="spans 13 steps"):
        replay.sample(state, jax.random.key(0), 4)


@pytest.mark.timeout(60)
def test_stratified_starts_are_exact_when_the_starts_divide_the_batch():
    """Each of `num_starts` starts is drawn exactly `batch / num_starts` times when that is
    whole, whatever the key (what makes MuZero's update independent of how its batch is
    split over devices); otherwise draw i lies in its stratum `[i n / b, (i + 1) n / b)`, and
    over many keys every start is drawn about equally often."""
    draw = jax.jit(stratified_starts, static_argnums=2)
    for num_starts, batch in [(8, 32), (32, 32), (5, 15), (1, 4)]:
        for seed in range(3):
            starts = np.asarray(draw(jax.random.key(seed), jnp.int32(num_starts), batch))
            np.testing.assert_array_equal(np.bincount(starts, minlength=num_starts), batch // num_starts)
    n, b = 100, 8
    many = np.asarray(jax.vmap(lambda key: draw(key, jnp.int32(n), b))(jax.random.split(jax.random.key(0), 4000)))
    i = np.arange(b)
    assert ((many >= i * n // b) & (many < ((i + 1) * n + b - 1) // b)).all()
    counts = np.bincount(many.ravel(), minlength=n)
    assert counts.min() > 0.7 * counts.mean() and counts.max() < 1.3 * counts.mean(), counts


def test_the_capacity_limit_is_the_largest_that_samples_exactly():
    """`max_capacity(b) = 2**31 - 1 - b**2`: a buffer of that capacity can be made, one more is an error."""
    assert max_capacity(4) == 2**31 - 17
    make_sequence_replay(max_capacity(4), 2, 4)
    with pytest.raises(ValueError, match="too large"):
        make_sequence_replay(max_capacity(4) + 1, 2, 4)


def test_a_buffer_of_one_step_holds_and_samples_it():
    replay = make_sequence_replay(1, 1, 2)
    drawn = jax.jit(lambda key: replay.sample(replay.add(replay.init(EXAMPLE), rollout(5, 1, 1)), key, 1))
    np.testing.assert_array_equal(drawn(jax.random.key(0)).items.time, [[5, 5]])
