"""Replay buffers for off-policy agents: flashbax item buffers behind one small interface.

A buffer holds independent items (here n-step transitions). Its state is a pytree that
lives on one device: an agent keeps it in `AgentState.local`, so under a runner each
learner device holds, fills and samples its own shard of the experience.

Uniform replay (Lin 1992; Mnih et al. 2015) samples items uniformly with replacement.
Prioritized replay (Schaul et al. 2016) samples item i with probability
`P(i) = p_i^alpha / sum_k p_k^alpha`, new items at the highest priority seen so far, and
corrects the bias with importance weights `w_i = (N P(i))^-beta / max_j w_j`.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import flashbax as fbx
from flashbax.buffers import sum_tree
import jax
import jax.numpy as jnp

from podracer.types import Array, PRNGKey


class Transition(NamedTuple):
    """One replay item: `target = reward + discount * Q(next_obs, .)`, shapes `[...]` per item
    and `[N, ...]` for a batch (`reward` may be an n-step return)."""

    obs: Array
    action: Array
    reward: Array
    discount: Array
    next_obs: Array


class ReplaySample(NamedTuple):
    """A sampled batch `[M, ...]`, where it lives in the buffer, and importance weights `[M]`
    (all ones for uniform replay)."""

    items: Any
    indices: Array
    weights: Array


class Replay(NamedTuple):
    """A replay buffer as pure functions over its state (flashbax's model).

    init:           `(example item without batch axis) -> state` (empty).
    add:            `(state, items [N, ...]) -> state`; the oldest items are overwritten.
    sample:         `(state, key, beta) -> ReplaySample` of `batch_size` items.
    set_priorities: `(state, indices [M], priorities [M]) -> state` (identity if uniform).
    size:           `(state) -> int32` items currently held.
    """

    init: Callable[[Any], Any]
    add: Callable[[Any, Any], Any]
    sample: Callable[[Any, PRNGKey, Array], ReplaySample]
    set_priorities: Callable[[Any, Array, Array], Any]
    size: Callable[[Any], Array]


def make_replay(
    capacity: int, batch_size: int, prioritized: bool = False, priority_exponent: float = 0.6
) -> Replay:
    """A uniform or prioritized item buffer of `capacity` items sampling `batch_size`."""
    if prioritized:
        buffer = fbx.make_prioritised_item_buffer(
            max_length=capacity, min_length=1, sample_batch_size=batch_size, add_sequences=True,
            priority_exponent=priority_exponent, device="cpu",  # the portable sum-tree code path
        )
    else:
        buffer = fbx.make_item_buffer(
            max_length=capacity, min_length=1, sample_batch_size=batch_size, add_sequences=True,
        )

    def size(state: Any) -> Array:
        return jnp.where(state.is_full, capacity, state.current_index).astype(jnp.int32)

    def sample(state: Any, key: PRNGKey, beta: Array) -> ReplaySample:
        if not prioritized:
            drawn = buffer.sample(state, key)
            ones = jnp.ones((batch_size,), jnp.float32)
            return ReplaySample(drawn.experience, jnp.zeros((batch_size,), jnp.int32), ones)
        indices = stratified_indices(state.sum_tree_state, key, batch_size)
        items = jax.tree.map(lambda x: x[0, indices], state.experience)
        probabilities = sum_tree.get_probability(state.sum_tree_state, indices)
        return ReplaySample(items, indices, importance_weights(probabilities, size(state), beta))

    def set_priorities(state: Any, indices: Array, priorities: Array) -> Any:
        if not prioritized:
            return state
        return buffer.set_priorities(state, indices, priorities)

    return Replay(buffer.init, buffer.add, sample, set_priorities, size)


def stratified_indices(tree: sum_tree.SumTreeState, key: PRNGKey, batch_size: int) -> Array:
    """Stratified proportional sampling (Schaul et al. 2016, app. B.2.1): one index from each
    of `batch_size` equal slices of the total priority, found by descending flashbax's sum tree.

    flashbax's own `sum_tree.stratified_sample` descends in a `fori_loop` whose carry starts
    device-invariant and becomes device-varying, which `shard_map(check_vma=True)` rejects;
    this descent is unrolled over the (static) tree depth instead. Returns `[batch_size]`.
    """
    bounds = (jnp.arange(batch_size) + jax.random.uniform(key, (batch_size,))) / batch_size
    query = bounds * tree.nodes[0]
    node = jnp.zeros((batch_size,), jnp.int32)
    for depth in range(1, tree.tree_depth + 1):
        left = 2 * node
        left_sum = tree.nodes[sum_tree.get_tree_index(depth, left)]
        go_left = query < left_sum
        query = jnp.where(go_left, query, query - left_sum)
        node = jnp.where(go_left, left, left + 1)
    return node


def importance_weights(probabilities: Array, size: Array, beta: Array) -> Array:
    """`(N P(i))^-beta`, normalised by the batch's largest (Schaul et al. 2016, alg. 1): `[M]`."""
    weights = (size.astype(jnp.float32) * jnp.maximum(probabilities, 1e-12)) ** -beta
    return jax.lax.stop_gradient(weights / jnp.max(weights))
