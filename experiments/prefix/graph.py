"""Parallel prefix graphs on the N x N lower-triangular grid (PrefixRL, Roy et al., DAC 2021).

This is the NumPy reference: plain loops, written to be read. The JAX environment
(`experiments.prefix.jax_graph`) computes the same quantities vectorised and is tested
against it; the host environment (Sebulba) and the netlist writers use this module.

A graph is a `bool [N, N]` array `nodes`; `nodes[i, j]` (j <= i) is the node computing the
group generate/propagate of bits j..i (msb i, lsb j). The inputs (diagonal, i == j) and the
outputs (column 0) always exist. Of node (i, j), j < i:

- upper parent: the nearest node (i, k) of the same row with k > j;
- lower parent: (k - 1, j).

A graph is *legal* when every node's lower parent exists. Only nodes with 0 < j < i can be
added or deleted; a node that is another node's lower parent cannot be deleted. After each
action `legalize` inserts missing lower parents: one pass over the rows from the msb down
suffices, because a node inserted into row k - 1 < i is checked when that row's turn comes.

Actions are `kind * N * N + i * N + j` with kind 0 = add, 1 = delete, so a Q-map
`[2, N, N]` flattened is indexed by the action.
"""

from __future__ import annotations

import numpy as np

ADD, DELETE = 0, 1


def empty_graph(n: int) -> np.ndarray:
    """The ripple-carry graph's grid with nothing but inputs and outputs: `bool [n, n]`."""
    if n < 2:
        raise ValueError(f"a prefix graph needs at least 2 bits, got {n}")
    nodes = np.zeros((n, n), bool)
    nodes[np.arange(n), np.arange(n)] = True
    nodes[:, 0] = True
    return nodes


def check_graph(nodes: np.ndarray) -> None:
    """Raise ValueError unless `nodes` is a square lower-triangular grid with its inputs and
    outputs present."""
    nodes = np.asarray(nodes)
    if nodes.ndim != 2 or nodes.shape[0] != nodes.shape[1] or nodes.dtype != bool:
        raise ValueError(f"a prefix graph is a square bool array, got {nodes.dtype} {nodes.shape}")
    if np.triu(nodes, 1).any():
        raise ValueError("a prefix graph has no node above the diagonal (j > i)")
    n = nodes.shape[0]
    if not (nodes[np.arange(n), np.arange(n)].all() and nodes[:, 0].all()):
        raise ValueError("a prefix graph always has its inputs (diagonal) and outputs (column 0)")


def upper_column(nodes: np.ndarray, i: int, j: int) -> int:
    """Column k of the upper parent (i, k) of node (i, j), j < i: the nearest k > j."""
    for k in range(j + 1, i + 1):
        if nodes[i, k]:
            return k
    raise AssertionError("unreachable: the diagonal node (i, i) always exists")


def parents(nodes: np.ndarray, i: int, j: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """`((i, k), (k - 1, j))`: the upper and lower parent of node (i, j), j < i."""
    k = upper_column(nodes, i, j)
    return (i, k), (k - 1, j)


def compute_nodes(nodes: np.ndarray) -> list[tuple[int, int]]:
    """Every present non-input node (i, j), j < i, in an order where parents come first
    (rows ascending, columns descending)."""
    n = nodes.shape[0]
    return [(i, j) for i in range(1, n) for j in range(i - 1, -1, -1) if nodes[i, j]]


def is_legal(nodes: np.ndarray) -> bool:
    return all(nodes[parents(nodes, i, j)[1]] for i, j in compute_nodes(nodes))


def legalize(nodes: np.ndarray) -> np.ndarray:
    """A copy of `nodes` with every missing lower parent inserted (rows msb down, once)."""
    nodes = np.array(nodes, bool)
    n = nodes.shape[0]
    for i in range(n - 1, 0, -1):
        for j in range(i):
            if nodes[i, j]:
                nodes[parents(nodes, i, j)[1]] = True
    return nodes


def fanout(nodes: np.ndarray) -> np.ndarray:
    """`int32 [N, N]`: how many nodes use each node as an upper or a lower parent."""
    count = np.zeros(nodes.shape, np.int32)
    for i, j in compute_nodes(nodes):
        upper, lower = parents(nodes, i, j)
        count[upper] += 1
        count[lower] += 1
    return count


def lower_fanout(nodes: np.ndarray) -> np.ndarray:
    """`int32 [N, N]`: how many nodes use each node as their lower parent."""
    count = np.zeros(nodes.shape, np.int32)
    for i, j in compute_nodes(nodes):
        count[parents(nodes, i, j)[1]] += 1
    return count


def levels(nodes: np.ndarray) -> np.ndarray:
    """`int32 [N, N]`: logic level of each node (inputs 0; absent nodes 0)."""
    return arrival_times(nodes, 0.0).astype(np.int32)


def arrival_times(nodes: np.ndarray, fanout_weight: float) -> np.ndarray:
    """`float32 [N, N]`: a fanout-aware arrival time of each node's output.

    Each node adds `1 + fanout_weight * fanout` to the latest of its parents' arrivals (a
    gate is slower the more gates it drives); an input's own load counts the same way.
    `fanout_weight = 0` gives the logic level.
    """
    load = fanout_weight * fanout(nodes).astype(np.float64)
    time = np.zeros(nodes.shape, np.float64)
    n = nodes.shape[0]
    time[np.arange(n), np.arange(n)] = load[np.arange(n), np.arange(n)]
    for i, j in compute_nodes(nodes):
        upper, lower = parents(nodes, i, j)
        time[i, j] = max(time[upper], time[lower]) + 1.0 + load[i, j]
    return time.astype(np.float32)


def area(nodes: np.ndarray) -> int:
    """Node count: the prefix operators (every present node but the inputs)."""
    return int(np.tril(nodes, -1).sum())


def delay(nodes: np.ndarray, fanout_weight: float = 0.0) -> float:
    """The latest output's arrival time (its logic level when `fanout_weight == 0`)."""
    return float(arrival_times(nodes, fanout_weight)[:, 0].max())


def editable(n: int) -> np.ndarray:
    """`bool [N, N]`: the cells an action may touch, 0 < j < i."""
    i, j = np.indices((n, n))
    return (j > 0) & (j < i)


def deletable(nodes: np.ndarray) -> np.ndarray:
    """`bool [N, N]`: present, editable and nobody's lower parent."""
    return nodes & editable(nodes.shape[0]) & (lower_fanout(nodes) == 0)


def action_mask(nodes: np.ndarray) -> np.ndarray:
    """`bool [2 * N * N]`: legal actions, adds (absent editable cells) then deletes."""
    add = ~nodes & editable(nodes.shape[0])
    return np.concatenate([add.ravel(), deletable(nodes).ravel()])


def decode_action(action: int, n: int) -> tuple[int, int, int]:
    """`(kind, i, j)` of an action index."""
    kind, cell = divmod(int(action), n * n)
    return kind, cell // n, cell % n


def apply_action(nodes: np.ndarray, action: int) -> np.ndarray:
    """The legalised graph after `action`; an illegal action raises ValueError."""
    n = nodes.shape[0]
    if not 0 <= int(action) < 2 * n * n or not action_mask(nodes)[int(action)]:
        kind, i, j = decode_action(action, n) if 0 <= int(action) < 2 * n * n else (None, None, None)
        raise ValueError(f"illegal action {action} ({'add' if kind == ADD else 'delete'} ({i}, {j}))")
    kind, i, j = decode_action(action, n)
    nodes = np.array(nodes, bool)
    nodes[i, j] = kind == ADD
    return legalize(nodes)


def features(nodes: np.ndarray, fanout_weight: float = 0.0) -> np.ndarray:
    """`float32 [N, N, 4]` observation: present, deletable, level / N, fanout / N.

    The level channel holds the arrival time when `fanout_weight > 0` (the delay model the
    rewards use); absent cells are 0 in every channel.
    """
    n = nodes.shape[0]
    present = nodes.astype(np.float32)
    time = arrival_times(nodes, fanout_weight) * present
    return np.stack(
        [present, deletable(nodes).astype(np.float32), time / n, fanout(nodes).astype(np.float32) * present / n],
        axis=-1,
    )


def random_graph(rng: np.random.Generator, n: int, density: float) -> np.ndarray:
    """A random legal graph: each editable cell present with probability `density`, then
    legalised."""
    nodes = empty_graph(n)
    nodes |= editable(n) & (rng.random((n, n)) < density)
    return legalize(nodes)
