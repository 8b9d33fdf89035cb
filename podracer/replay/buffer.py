"""Replay buffers for off-policy agents: flashbax's buffer state behind one small interface.

A buffer holds independent items in a ring of `capacity` slots. Its state is a pytree that
lives on one device: an agent keeps it in `AgentState.local`, so under a runner each
learner device holds, fills and samples its own shard of the experience.

Uniform replay (Lin 1992; Mnih et al. 2015) samples items uniformly with replacement.
Prioritized replay (Schaul et al. 2016) samples item i with probability
`P(i) = p_i^alpha / sum_k p_k^alpha`, new items at the highest priority seen so far, and
corrects the bias with importance weights `w_i = (N P(i))^-beta / max_j w_j`.

The state is flashbax's (`experience [1, capacity, ...]`, `current_index`, `is_full`, and
for prioritized replay a sum tree over `capacity` leaves); adding, sampling and setting
priorities are done here. The sum tree is kept exact: a write sets leaves and then
recomputes each of their ancestors as the sum of its two children (flashbax adds float
deltas, so parents drift away from their children's sums), and the descent never steps
into a subtree of zero mass. Sampled indices are therefore always items held: never a
slot past the end of a partly full buffer, nor one of the leaves a capacity that is not a
power of two leaves empty.

Held-back items: `add(..., hold_back=H)` keeps the newest `H` items out of sampling until
later adds push them back (their priority is 0 meanwhile, and they then enter at the
highest priority); `sample` must be given the same `H`. An agent that forms n-step returns
when it samples (DQN) holds back the steps whose successors have not arrived yet.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import flashbax as fbx
import jax
import jax.numpy as jnp
from flashbax.buffers import sum_tree

from podracer.types import Array, PRNGKey


class Transition(NamedTuple):
    """What a Q-learning loss takes: `target = reward + discount * Q(next_obs, .)`, shapes
    `[...]` per item and `[N, ...]` for a batch (`reward` may be an n-step return)."""

    obs: Array
    action: Array
    reward: Array
    discount: Array
    next_obs: Array


class ReplaySample(NamedTuple):
    """A sampled batch `[M, ...]`, the buffer slots it came from `[M]`, and importance
    weights `[M]` (all ones for uniform replay)."""

    items: Any
    indices: Array
    weights: Array


class Replay(NamedTuple):
    """A replay buffer as pure functions over its state (flashbax's model).

    init:           `(example item without batch axis) -> state` (empty).
    add:            `(state, items [N, ...], hold_back=0) -> state`; the oldest items are
                    overwritten; the newest `hold_back` (static) are not sampled yet.
    sample:         `(state, key, beta, hold_back=0) -> ReplaySample` of `batch_size` items
                    among those held and not held back (there must be at least one).
    get:            `(state, indices [M]) -> items [M, ...]`, the items in those slots.
    newest:         `(state, count) -> indices [count]`: the slots of the `count` (static)
                    items added last, oldest first (items only where that many are held).
    set_priorities: `(state, indices [M], priorities [M]) -> state`; slots that hold no
                    item are ignored (identity if uniform).
    size:           `(state) -> int32` items currently held (held-back ones included).
    """

    init: Callable[[Any], Any]
    add: Callable[..., Any]
    sample: Callable[..., ReplaySample]
    get: Callable[[Any, Array], Any]
    newest: Callable[[Any, int], Array]
    set_priorities: Callable[[Any, Array, Array], Any]
    size: Callable[[Any], Array]


def make_replay(
    capacity: int, batch_size: int, prioritized: bool = False, priority_exponent: float = 0.6
) -> Replay:
    """A uniform or prioritized item buffer of `capacity` items sampling `batch_size`."""
    if prioritized:
        buffer = fbx.make_prioritised_item_buffer(
            max_length=capacity, min_length=1, sample_batch_size=batch_size, add_sequences=True,
            priority_exponent=priority_exponent, device="cpu",
        )
    else:
        buffer = fbx.make_item_buffer(
            max_length=capacity, min_length=1, sample_batch_size=batch_size, add_sequences=True,
        )

    def size(state: Any) -> Array:
        return jnp.where(state.is_full, capacity, state.current_index).astype(jnp.int32)

    def get(state: Any, indices: Array) -> Any:
        return jax.tree.map(lambda x: x[0, indices], state.experience)

    def newest(state: Any, count: int) -> Array:
        return ((state.current_index - count + jnp.arange(count)) % capacity).astype(jnp.int32)

    def add(state: Any, items: Any, hold_back: int = 0) -> Any:
        num = jax.tree.leaves(items)[0].shape[0]
        if num + hold_back > capacity:
            raise ValueError(f"adding {num} items and holding back {hold_back} needs a capacity of at "
                             f"least {num + hold_back}, not {capacity}")
        slots = (state.current_index + jnp.arange(num)) % capacity
        experience = jax.tree.map(lambda x, new: x.at[0, slots].set(new), state.experience, items)
        end = state.current_index + num
        state = state.replace(experience=experience, current_index=(end % capacity).astype(jnp.int32),
                              is_full=state.is_full | (end >= capacity))
        if not prioritized:
            return state
        # The new items and those held back before: those now old enough enter at the highest
        # priority seen so far, the newest `hold_back` wait at 0. Slots that hold nothing
        # (a partly full buffer) are left alone.
        age = jnp.arange(num + hold_back)[::-1]  # 0: the newest item
        slots = (state.current_index - 1 - age) % capacity
        tree = state.sum_tree_state
        values = jnp.where(age < hold_back, 0.0, tree.max_recorded_priority)
        return state.replace(sum_tree_state=set_leaves(tree, slots, values, age < size(state)))

    def sample(state: Any, key: PRNGKey, beta: Array, hold_back: int = 0) -> ReplaySample:
        sampleable = size(state) - hold_back
        if prioritized:
            indices = stratified_indices(state.sum_tree_state, key, batch_size)
            probabilities = sum_tree.get_probability(state.sum_tree_state, indices)
            weights = importance_weights(probabilities, sampleable, beta)
        else:
            oldest = jnp.where(state.is_full, state.current_index, 0)
            offsets = jax.random.randint(key, (batch_size,), 0, jnp.maximum(sampleable, 1))
            indices = ((oldest + offsets) % capacity).astype(jnp.int32)
            weights = jnp.ones((batch_size,), jnp.float32)
        return ReplaySample(get(state, indices), indices, weights)

    def set_priorities(state: Any, indices: Array, priorities: Array) -> Any:
        if not prioritized:
            return state
        held = (indices >= 0) & (indices < size(state))
        values = jnp.where(priorities == 0, 0.0, priorities ** priority_exponent)
        tree = state.sum_tree_state
        tree = tree.replace(max_recorded_priority=jnp.maximum(
            tree.max_recorded_priority, jnp.max(jnp.where(held, values, 0.0))))
        return state.replace(sum_tree_state=set_leaves(tree, indices, values, held))

    def init(example: Any) -> Any:
        # flashbax starts the index as a weakly typed 0 and `add` returns a strong int32: a
        # state of one type from the start keeps a jitted update on it to one compilation.
        state = buffer.init(example)
        return state.replace(current_index=state.current_index.astype(jnp.int32))

    return Replay(init, add, sample, get, newest, set_priorities, size)


def same_observations(a: Any, b: Any) -> Array:
    """`bool [B]`: row b of observation pytree `a [B, ...]` equals row b of `b [B, ...]` in
    every leaf. Replay agents ask it of a stored step's `next_obs` and a new rollout's first
    observation: is the stream going on, or did the environment restart (as Sebulba's do on
    resume, the buffers restored)?"""
    rows = [jnp.all((x == y).reshape(x.shape[0], -1), axis=1)
            for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)]
    return jnp.all(jnp.stack(rows), axis=0)


def set_leaves(tree: sum_tree.SumTreeState, indices: Array, values: Array, keep: Array) -> sum_tree.SumTreeState:
    """Set leaves `indices [M]` to `values [M]` where `keep [M]`, then recompute every
    ancestor of those leaves, level by level, as the sum of its two children: each inner
    node stays exactly the float sum of its children (no drift from added deltas).
    Duplicate indices get one of their values."""
    nodes_size = tree.nodes.shape[0]  # the index of a dropped write
    node = jnp.where(keep, sum_tree.get_tree_index(tree.tree_depth, indices), nodes_size)
    nodes = tree.nodes.at[node].set(values.astype(tree.nodes.dtype), mode="drop")

    def level(_, carry):  # a loop, not unrolled: XLA:CPU compiles unrolled scatters slowly
        nodes, node = carry
        node = jnp.where(node < nodes_size, (node - 1) // 2, nodes_size)
        children = jnp.minimum(2 * node + 1, nodes_size - 2)
        return nodes.at[node].set(nodes[children] + nodes[children + 1], mode="drop"), node

    nodes, _ = jax.lax.fori_loop(0, tree.tree_depth, level, (nodes, node))
    return tree.replace(nodes=nodes)


def stratified_indices(tree: sum_tree.SumTreeState, key: PRNGKey, batch_size: int) -> Array:
    """Stratified proportional sampling (Schaul et al. 2016, app. B.2.1): one index from each
    of `batch_size` equal slices of the total priority, found by descending the sum tree.

    The descent never enters a subtree whose sum is 0, so it ends on a leaf of positive
    priority even where float rounding leaves a query just past a left sum (it would
    otherwise walk into the empty leaves past the last item). flashbax's own
    `sum_tree.stratified_sample` descends in a `fori_loop` whose carry starts
    device-invariant and becomes device-varying, which `shard_map(check_vma=True)`
    rejects; this descent is unrolled over the (static) tree depth. Returns `[batch_size]`.
    """
    bounds = (jnp.arange(batch_size) + jax.random.uniform(key, (batch_size,))) / batch_size
    query = bounds * tree.nodes[0]
    node = jnp.zeros((batch_size,), jnp.int32)
    for depth in range(1, tree.tree_depth + 1):
        left = 2 * node
        left_sum = tree.nodes[sum_tree.get_tree_index(depth, left)]
        right_sum = tree.nodes[sum_tree.get_tree_index(depth, left + 1)]
        go_left = (query < left_sum) | (right_sum <= 0)
        query = jnp.where(go_left, query, query - left_sum)
        node = jnp.where(go_left, left, left + 1)
    return node


def importance_weights(probabilities: Array, size: Array, beta: Array) -> Array:
    """`(N P(i))^-beta`, normalised by the batch's largest (Schaul et al. 2016, alg. 1): `[M]`."""
    weights = (size.astype(jnp.float32) * jnp.maximum(probabilities, 1e-12)) ** -beta
    return jax.lax.stop_gradient(weights / jnp.max(weights))
