"""Sequence replay: a flashbax trajectory buffer of time-major rollouts, sampled as
fixed-length sequences of consecutive steps of one environment (MuZero's unrolls,
replayed V-trace/IMPALA sequences).

Like `podracer.replay.buffer`'s, the state lives on one device: an agent keeps it in
`AgentState.local`, and under a runner each learner device holds, fills and samples its own.

Layout: a `[T, B, ...]` rollout is appended as one stream of `T * B` steps in time-major
order (step `t` of environment `b` at stream position `n * B + b`, `n` the step's time
since the start), in one row of a flashbax trajectory buffer (`add_batch_size = 1`). Step
`t + k` of the same environment is then `k * B` positions further on, so a sequence of
length L is the strided slice `s, s + B, ..., s + (L - 1) B`, taken from any start `s`
whose slice lies wholly in the data still held and never crosses the write head. The state
does not depend on B (the number of environments per device), which only the rollouts
reveal: `sample` takes it as a static argument, and it must stay the same for the life of
the buffer (each device sees the same share of environments every update).

Items are any NamedTuple with boolean `terminated` and `truncated` fields (`[...]` per step),
e.g. a `podracer.types.Trajectory`; a sample says which of its steps belong to the episode
its first step belongs to.

Lookahead (`lookahead=True`, for items with an `obs` field but no `next_obs`, MuZero's):
the `B` slots after the write head hold each environment's next observation (`stash`), the
one its next step should start from: the next add overwrites them, with that very
observation where the stream goes on, and before it `stashed` tells whether it did. Where
the buffer has wrapped those slots are its oldest steps, which are then no longer sampled.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import flashbax as fbx
import jax
import jax.numpy as jnp

from podracer.types import Array, PRNGKey


class SequenceSample(NamedTuple):
    """`batch_size` sequences of `sequence_length` steps, time-major.

    items:        the stored pytree, each leaf `[L, M, ...]`.
    same_episode: `bool [L, M]`: step t is in the episode of step 0 (no episode ended at a
                  step before t; step 0 is always True). Steps after an end belong to the
                  next episode of the same environment.
    """

    items: Any
    same_episode: Array


class SequenceReplay(NamedTuple):
    """A sequence buffer as pure functions over its state.

    init:       `(example step, no batch axes) -> state` (empty).
    add:        `(state, steps [T, B, ...]) -> state`; continues each environment's stream
                from the previous add; the oldest steps are overwritten.
    sample:     `(state, key, num_envs) -> SequenceSample`; `num_envs` = B of the adds
                (static). Only valid once `can_sample` holds.
    can_sample: `(state, num_envs) -> bool []`: at least one whole sequence is held.
    size:       `(state) -> int32 []`: steps held (with lookahead, the oldest the stash took included).
    newest:     `(state, num_envs) -> steps [num_envs, ...]`: each environment's newest
                stored step (meaningful once `num_envs` steps are held).
    end_streams: `(state, ended [num_envs], values=None) -> state`: each environment's newest
                stored step is marked truncated where `ended` (and it has not already ended):
                its stream does not go on into the next add (the environment restarted), so
                no sequence treats the two streams as one episode. `values`, `{field: [num_envs]}`,
                are written to the steps it marks (a truncated step's bootstrap).
    stash:      `(state, obs [B, ...]) -> state` (lookahead): each environment's next
                observation, in the slots after the write head; call it after each add.
    stashed:    `(state, num_envs) -> obs [num_envs, ...]` (lookahead): what the last `stash`
                held (meaningful once something was stashed after the latest add).
    """

    init: Callable[[Any], Any]
    add: Callable[[Any, Any], Any]
    sample: Callable[[Any, PRNGKey, int], SequenceSample]
    can_sample: Callable[[Any, int], Array]
    size: Callable[[Any], Array]
    newest: Callable[[Any, int], Any]
    end_streams: Callable[..., Any]
    stash: Callable[[Any, Any], Any]
    stashed: Callable[[Any, int], Any]


def max_capacity(batch_size: int) -> int:
    """The largest capacity that samples `batch_size` sequences exactly: stratified sampling
    (`stratified_starts`) counts positions in int32, up to `batch_size ** 2 + capacity`."""
    return 2**31 - 1 - batch_size**2


def make_sequence_replay(capacity: int, sequence_length: int, batch_size: int,
                         lookahead: bool = False) -> SequenceReplay:
    """A buffer of `capacity` steps (all environments of a device together) that samples
    `batch_size` sequences of `sequence_length` steps, uniformly over every (environment,
    start) pair held, stratified (`stratified_starts`). One add must fit: `T * B <= capacity`; a sequence spans
    `(sequence_length - 1) * B + 1` stream positions, which must fit too (and, with
    `lookahead`, `B` more: the stash's)."""
    if min(capacity, sequence_length, batch_size) < 1:
        raise ValueError("capacity, sequence_length and batch_size must be >= 1")
    if capacity > max_capacity(batch_size):
        raise ValueError(f"capacity {capacity} is too large for exact stratified sampling of {batch_size} sequences "
                         f"(at most {max_capacity(batch_size)})")
    buffer = fbx.make_trajectory_buffer(
        add_batch_size=1, sample_batch_size=1, sample_sequence_length=1, period=1, min_length_time_axis=1,
        max_length_time_axis=capacity,
    )

    def add(state: Any, steps: Any) -> Any:
        stream = jax.tree.map(lambda x: x.reshape((1, -1) + x.shape[2:]), steps)  # [T, B] -> [1, T * B]
        return buffer.add(state, stream)

    def size(state: Any) -> Array:
        return jnp.where(state.is_full, capacity, state.current_index).astype(jnp.int32)

    def span(num_envs: int) -> int:
        return (sequence_length - 1) * num_envs + 1

    def stashed_over(state: Any, num_envs: int) -> Array:
        """The oldest steps held whose slots the stash took (the buffer has wrapped onto them)."""
        return jnp.maximum(num_envs - (capacity - size(state)), 0) if lookahead else jnp.int32(0)

    def can_sample(state: Any, num_envs: int) -> Array:
        return size(state) - stashed_over(state, num_envs) >= span(num_envs)

    def sample(state: Any, key: PRNGKey, num_envs: int) -> SequenceSample:
        need = span(num_envs) + (num_envs if lookahead else 0)
        if need > capacity:
            raise ValueError(f"a sequence of {sequence_length} steps of {num_envs} interleaved environments "
                             f"spans {need} steps, more than the capacity {capacity}")
        skip = stashed_over(state, num_envs)
        oldest = jnp.where(state.is_full, state.current_index, 0) + skip  # physical position of the oldest step
        num_starts = jnp.maximum(size(state) - skip - span(num_envs) + 1, 1)
        start = oldest + stratified_starts(key, num_starts, batch_size)
        positions = (start[None, :] + num_envs * jnp.arange(sequence_length)[:, None]) % capacity  # [L, M]
        items = jax.tree.map(lambda x: x[0, positions], state.experience)
        return SequenceSample(items, same_episode(items.terminated | items.truncated))

    def newest_positions(state: Any, num_envs: int) -> Array:
        return (state.current_index - num_envs + jnp.arange(num_envs)) % capacity  # env b's at index b

    def newest(state: Any, num_envs: int) -> Any:
        return jax.tree.map(lambda x: x[0, newest_positions(state, num_envs)], state.experience)

    def end_streams(state: Any, ended: Array, values: dict[str, Array] | None = None) -> Any:
        positions = newest_positions(state, ended.shape[0])
        last = newest(state, ended.shape[0])
        cut = ended & (size(state) >= ended.shape[0]) & ~last.terminated & ~last.truncated
        experience = state.experience._replace(truncated=state.experience.truncated.at[0, positions].set(
            last.truncated | cut))
        for name, value in (values or {}).items():
            stored = getattr(experience, name)
            new = jnp.where(cut, value.astype(stored.dtype), getattr(last, name))
            experience = experience._replace(**{name: stored.at[0, positions].set(new)})
        return state.replace(experience=experience)

    def lookahead_positions(state: Any, num_envs: int) -> Array:
        if not lookahead:
            raise ValueError("stash and stashed need a buffer made with lookahead=True")
        return (state.current_index + jnp.arange(num_envs)) % capacity  # env b's at index b

    def stash(state: Any, obs: Any) -> Any:
        positions = lookahead_positions(state, jax.tree.leaves(obs)[0].shape[0])
        stored = jax.tree.map(lambda x, o: x.at[0, positions].set(o.astype(x.dtype)), state.experience.obs, obs)
        return state.replace(experience=state.experience._replace(obs=stored))

    def stashed(state: Any, num_envs: int) -> Any:
        positions = lookahead_positions(state, num_envs)
        return jax.tree.map(lambda x: x[0, positions], state.experience.obs)

    return SequenceReplay(buffer.init, add, sample, can_sample, size, newest, end_streams, stash, stashed)


def stratified_starts(key: PRNGKey, num_starts: Array, batch_size: int) -> Array:
    """`int32 [batch_size]` in `[0, num_starts)`: one uniform draw from each of `batch_size`
    equal strata of the starts, `(i * num_starts + r_i) // batch_size` with `r_i` uniform in
    `[0, num_starts)`. Every start is as likely as with independent draws, with less
    variance; and when `num_starts` divides `batch_size` each start is taken exactly
    `batch_size / num_starts` times (no sampling noise: what makes an update's result
    independent of how its batch is split over devices). Integer arithmetic, exact while
    `batch_size ** 2 + num_starts < 2 ** 31`."""
    i = jnp.arange(batch_size, dtype=jnp.int32)
    r = jax.random.randint(key, (batch_size,), 0, num_starts)
    whole, rest = num_starts // batch_size, num_starts % batch_size
    return i * whole + (i * rest + r) // batch_size


def same_episode(done: Array) -> Array:
    """`bool [L, ...]`: no step before t ended an episode (`done [L, ...]` = terminated or
    truncated after that step); True at t = 0."""
    ended_before = jnp.cumsum(done.astype(jnp.int32), axis=0) - done.astype(jnp.int32)
    return ended_before == 0
