"""The classic prefix adders as graphs on the grid (`experiments.prefix.graph`).

For N = 2^k their node counts (prefix operators, inputs excluded) are the textbook ones:
ripple N - 1, Sklansky (N/2) log N, Kogge-Stone N log N - N + 1, Brent-Kung 2N - 2 - log N;
their logic levels N - 1, log N, log N and 2 log N - 2. Other N are built the same way and
legalised (a no-op for N = 2^k).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from experiments.prefix.graph import empty_graph, legalize


def ripple(n: int) -> np.ndarray:
    """Ripple carry: each output from the one below it."""
    return empty_graph(n)


def sklansky(n: int) -> np.ndarray:
    """Sklansky (divide and conquer): at level l, each bit with bit l set joins the block
    below it, from its block's lsb."""
    nodes = empty_graph(n)
    level = 0
    while (1 << level) < n:
        for i in range(n):
            if i >> level & 1:
                nodes[i, (i >> (level + 1)) << (level + 1)] = True
        level += 1
    return legalize(nodes)


def kogge_stone(n: int) -> np.ndarray:
    """Kogge-Stone: at level l, every bit i >= 2^l combines the span ending 2^l below."""
    nodes = empty_graph(n)
    level = 0
    while (1 << level) < n:
        for i in range(1 << level, n):
            nodes[i, max(0, i - (2 << level) + 1)] = True
        level += 1
    return legalize(nodes)


def brent_kung(n: int) -> np.ndarray:
    """Brent-Kung: a binary tree up (spans of 2^(l+1) ending at bits 2^(l+1) - 1 mod
    2^(l+1)), then the outputs filled in down the tree (column 0 always exists)."""
    nodes = empty_graph(n)
    level = 0
    while (2 << level) <= n:
        span = 2 << level
        for i in range(span - 1, n, span):
            nodes[i, i - span + 1] = True
        level += 1
    return legalize(nodes)


BUILDERS: dict[str, Callable[[int], np.ndarray]] = {
    "ripple": ripple,
    "sklansky": sklansky,
    "kogge-stone": kogge_stone,
    "brent-kung": brent_kung,
}


def classic_adders(n: int) -> dict[str, np.ndarray]:
    """Every classic construction at `n` bits, by name."""
    return {name: build(n) for name, build in BUILDERS.items()}
