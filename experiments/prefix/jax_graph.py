"""The prefix-graph computations of `experiments.prefix.graph`, vectorised in JAX.

Same definitions, same results (tested against the NumPy reference); written for one graph
`bool [N, N]` and batched with `vmap`. Nothing here loops over nodes: per row, an upper
parent is a suffix minimum, legalisation is one `fori_loop` over the rows (msb down) and
arrival times one `scan` over the rows (lsb up), each row's chain of nodes solved with a
cumulative max (a max-plus recurrence).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

Array = jax.Array


def _suffix(x: Array, op, init) -> Array:
    """`op`-reduction of `x[..., j:]` for every j along the last axis (a reverse cumulative
    min/max/sum). One `reduce_window`: compiles much faster than `lax.cummin`'s associative
    scan on CPU, and N is small."""
    n = x.shape[-1]
    window = (1,) * (x.ndim - 1) + (n,)
    padding = ((0, 0),) * (x.ndim - 1) + ((0, n - 1),)
    return lax.reduce_window(x, jnp.asarray(init, x.dtype), op, window, (1,) * x.ndim, padding)


def editable(n: int) -> Array:
    """`bool [N, N]`: the cells an action may touch, 0 < j < i."""
    i, j = jnp.indices((n, n))
    return (j > 0) & (j < i)


def strictly_lower(n: int) -> Array:
    i, j = jnp.indices((n, n))
    return j < i


def upper_columns(nodes: Array) -> Array:
    """`int32 [N, N]`: for each cell (i, j), the nearest column k > j with a node (i, k)
    (N where there is none). For a node, (i, k) is its upper parent."""
    n = nodes.shape[-1]
    cols = jnp.where(nodes, jnp.arange(n, dtype=jnp.int32), n)
    suffix_min = _suffix(cols, lax.min, n)  # min over k >= j
    return jnp.concatenate([suffix_min[..., 1:], jnp.full(nodes.shape[:-1] + (1,), n, jnp.int32)], axis=-1)


def _lower_rows(nodes: Array) -> Array:
    """`int32 [N, N]`: row k - 1 of each compute node's lower parent (N elsewhere)."""
    n = nodes.shape[-1]
    return jnp.where(nodes & strictly_lower(n), upper_columns(nodes) - 1, n)


def lower_fanout(nodes: Array) -> Array:
    """`int32 [N, N]`: how many nodes use each node as their lower parent."""
    n = nodes.shape[-1]
    rows = _lower_rows(nodes)  # [i, j] -> row of the lower parent (column j); N: none
    cols = jnp.broadcast_to(jnp.arange(n), (n, n))
    return jnp.zeros((n, n), jnp.int32).at[rows, cols].add(1, mode="drop")


def fanout(nodes: Array, lower_fan: Array | None = None) -> Array:
    """`int32 [N, N]`: uses as an upper parent (every node off column 0 has exactly one:
    the nearest node to its left) plus uses as a lower parent."""
    n = nodes.shape[-1]
    i, j = jnp.indices((n, n))
    upper = nodes & (j > 0) & (i > 0)
    return upper.astype(jnp.int32) + (lower_fanout(nodes) if lower_fan is None else lower_fan)


def legalize(nodes: Array) -> Array:
    """Insert every missing lower parent: one pass over the rows from the msb down."""
    n = nodes.shape[-1]
    cols = jnp.arange(n)

    def row(t, nodes):
        i = n - 1 - t
        present = nodes[i] & (cols < i)
        cand = jnp.where(nodes[i], cols, n)
        upper = jnp.concatenate([_suffix(cand, lax.min, n)[1:], jnp.array([n])])
        lower_row = jnp.where(present, upper - 1, n)  # [j]
        return nodes | (lower_row[None, :] == cols[:, None])

    return lax.fori_loop(0, n - 1, row, nodes)


def arrival_times(nodes: Array, fanout_weight: float = 0.0, fan: Array | None = None,
                  upper: Array | None = None) -> Array:
    """`float32 [N, N]`: each node's arrival time, `1 + fanout_weight * fanout` after the
    later of its parents (inputs: their own load); 0 for absent cells. With
    `fanout_weight = 0` this is the logic level. `fan`/`upper` may be passed if known."""
    n = nodes.shape[-1]
    cols = jnp.arange(n)
    if fanout_weight:
        load = fanout_weight * (fanout(nodes) if fan is None else fan).astype(jnp.float32)
    else:
        load = jnp.zeros((n, n), jnp.float32)
    upper = upper_columns(nodes) if upper is None else upper
    neg = jnp.float32(-jnp.inf)

    def row(times, i):
        present = nodes[i] & (cols < i)
        lower_row = jnp.clip(upper[i] - 1, 0, n - 1)
        low = times[lower_row, cols]  # arrival of each node's lower parent
        cost = jnp.where(present, 1.0 + load[i], 0.0)
        # w[j]: total cost of the row's nodes in columns j..i-1 (the chain from the input).
        w = _suffix(cost, lax.add, 0.0)
        start = load[i, i]
        term = jnp.where(present, low - w + cost, jnp.where(cols == i, start, neg))
        chain = _suffix(term, lax.max, -jnp.inf) + w
        row_times = jnp.where(present, chain, jnp.where(cols == i, start, 0.0))
        return times.at[i].set(row_times), None

    # The carry starts as `nodes`-derived zeros so that it varies over a shard_map's axes
    # exactly as `nodes` does (a constant carry would not match the varying rows).
    times, _ = lax.scan(row, jnp.zeros((n, n), jnp.float32) + 0.0 * nodes, jnp.arange(n))
    return times


class Analysis(NamedTuple):
    """Everything the environment derives from a graph, computed once."""

    times: Array  # float32 [N, N]: arrival times (levels when fanout_weight == 0)
    fanout: Array  # int32 [N, N]
    deletable: Array  # bool [N, N]
    action_mask: Array  # bool [2 N N]
    area: Array  # float32
    delay: Array  # float32


def analyse(nodes: Array, fanout_weight: float = 0.0) -> Analysis:
    """Arrival times, fanout, deletable nodes, legal actions, area and delay of a graph."""
    n = nodes.shape[-1]
    upper = upper_columns(nodes)
    lower_fan = lower_fanout(nodes)
    fan = fanout(nodes, lower_fan)
    times = arrival_times(nodes, fanout_weight, fan, upper)
    removable = deletable(nodes, lower_fan)
    mask = jnp.concatenate([(~nodes & editable(n)).ravel(), removable.ravel()])
    return Analysis(times, fan, removable, mask, area(nodes).astype(jnp.float32), delay(times))


def area(nodes: Array) -> Array:
    """Node count (prefix operators, inputs excluded): int32 scalar."""
    return (nodes & strictly_lower(nodes.shape[-1])).sum(dtype=jnp.int32)


def delay(times: Array) -> Array:
    """The latest output (column 0) of `arrival_times`."""
    return times[:, 0].max()


def deletable(nodes: Array, lower_fan: Array) -> Array:
    return nodes & editable(nodes.shape[-1]) & (lower_fan == 0)


def action_mask(nodes: Array) -> Array:
    """`bool [2 * N * N]`: adds (absent editable cells), then deletes."""
    n = nodes.shape[-1]
    add = ~nodes & editable(n)
    return jnp.concatenate([add.ravel(), deletable(nodes, lower_fanout(nodes)).ravel()])


def apply_action(nodes: Array, action: Array, mask: Array | None = None) -> tuple[Array, Array]:
    """`(next_nodes, legal)`: the legalised graph after `action`; an illegal action leaves
    the graph as it is. `mask` (the graph's `action_mask`) may be passed if known."""
    n = nodes.shape[-1]
    legal = (action_mask(nodes) if mask is None else mask)[action]
    kind, cell = action // (n * n), action % (n * n)
    i, j = cell // n, cell % n
    changed = legalize(nodes.at[i, j].set(kind == 0))
    return jnp.where(legal, changed, nodes), legal


def features(nodes: Array, analysis: Analysis) -> Array:
    """`float32 [N, N, 4]`: present, deletable, arrival time / N, fanout / N."""
    n = nodes.shape[-1]
    present = nodes.astype(jnp.float32)
    channels = [present, analysis.deletable.astype(jnp.float32), analysis.times * present / n,
                analysis.fanout.astype(jnp.float32) * present / n]
    return jnp.stack(channels, axis=-1)
