"""Baselines for prefix-adder design: random search, simulated annealing and Pareto local
search under a budget of unique syntheses (the issue's yardstick for the RL agent).

Both evaluate designs through a `RewardPool` (synthesis or analytic costs) in batches, so
the pool's workers run in parallel, and count each distinct graph once against the budget,
however often it is proposed. Every design evaluated is kept; the result is judged by its
Pareto front (`experiments.prefix.front`).

Simulated annealing (Kirkpatrick et al. 1983) runs one chain per area weight w in an even
spread over (0, 1), each minimising `w area / area_ref + (1 - w) delay / delay_ref`
(Sklansky as the reference), so together the chains cover the trade-off curve. A move is one
random legal action (add or delete a node, then legalise), as the environment's; chains
start from the classic adders in turn and cool geometrically as the budget is spent.

Pareto local search (Paquete et al. 2004, in its simplest form) keeps no chains: each
proposal is a design drawn uniformly from the Pareto front of everything evaluated so far
(the classic adders to begin with), edited by 1 to `max_moves` random legal actions. It is
what the agent's exploration does when its episodes restart from the front it found
(`PrefixHostEnv(front_restarts=...)`), without the learned policy, so it tells what the
policy adds.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from experiments.prefix import graph as G
from experiments.prefix.builders import BUILDERS, sklansky
from experiments.prefix.front import Design, front_designs
from experiments.prefix.reward_pool import RewardPool, graph_key


class SearchResult(NamedTuple):
    designs: list[Design]  # every distinct design evaluated, in order
    budget: int
    reference: tuple[float, float]  # Sklansky's (area, delay)


class BudgetedCosts:
    """Costs from a pool, at most `budget` distinct graphs; repeats are free."""

    def __init__(self, pool: RewardPool, budget: int, timeout_s: float = 600.0) -> None:
        if budget < 1:
            raise ValueError(f"budget must be >= 1, got {budget}")
        self.pool, self.budget, self.timeout_s = pool, budget, timeout_s
        self.designs: dict[str, Design] = {}

    @property
    def left(self) -> int:
        return self.budget - len(self.designs)

    def evaluate(self, graphs: list[np.ndarray]) -> list[tuple[float, float] | None]:
        """Costs of `graphs` (in parallel); None for new graphs beyond the budget."""
        keys = [graph_key(g, self.pool.identity) for g in graphs]
        new: dict[str, np.ndarray] = {}
        for key, g in zip(keys, graphs):
            if key not in self.designs and key not in new and len(new) < self.left:
                new[key] = g
        costs = self.pool.costs(list(new.values()), self.timeout_s) if new else np.zeros((0, 2))
        for (key, g), (area, delay) in zip(new.items(), costs):
            self.designs[key] = Design(np.array(g, bool), float(area), float(delay))
        return [(self.designs[k].area, self.designs[k].delay) if k in self.designs else None for k in keys]


def _reference(pool: RewardPool, bits: int, timeout_s: float) -> tuple[float, float]:
    area, delay = pool.costs([sklansky(bits)], timeout_s)[0]
    return float(area), float(delay)


def random_search(pool: RewardPool, bits: int, budget: int, seed: int = 0, batch: int = 8,
                  max_density: float = 0.3, timeout_s: float = 600.0) -> SearchResult:
    """Random legal graphs (each editable cell with probability ~ U(0, max_density), then
    legalised) until `budget` distinct ones are evaluated."""
    rng = np.random.default_rng(seed)
    costs = BudgetedCosts(pool, budget, timeout_s)
    tries = 0
    while costs.left > 0 and tries < 50 * budget:
        graphs = [G.random_graph(rng, bits, rng.random() * max_density) for _ in range(min(batch, costs.left))]
        costs.evaluate(graphs)
        tries += len(graphs)
    return SearchResult(list(costs.designs.values()), budget, _reference(pool, bits, timeout_s))


def _random_move(rng: np.random.Generator, nodes: np.ndarray) -> np.ndarray:
    return G.apply_action(nodes, int(rng.choice(np.flatnonzero(G.action_mask(nodes)))))


def anneal(pool: RewardPool, bits: int, budget: int, seed: int = 0, chains: int = 8,
           start_temperature: float = 0.05, end_temperature: float = 0.002,
           timeout_s: float = 600.0) -> SearchResult:
    """Simulated annealing, `chains` chains with area weights `(k + 0.5) / chains`, until
    `budget` distinct graphs are evaluated (or 50 x budget proposals)."""
    rng = np.random.default_rng(seed)
    costs = BudgetedCosts(pool, budget, timeout_s)
    area_ref, delay_ref = _reference(pool, bits, timeout_s)
    chains = max(1, min(chains, budget))
    weights = (np.arange(chains) + 0.5) / chains
    starts = list(BUILDERS.values())
    current = [starts[k % len(starts)](bits) for k in range(chains)]

    def scalar(cost: tuple[float, float], w: float) -> float:
        return w * cost[0] / area_ref + (1 - w) * cost[1] / delay_ref

    current_cost = costs.evaluate(current)
    value = [math.inf if c is None else scalar(c, w) for c, w in zip(current_cost, weights)]
    proposals = 0
    while costs.left > 0 and proposals < 50 * budget:
        progress = 1.0 - costs.left / budget
        temperature = start_temperature * (end_temperature / start_temperature) ** progress
        candidates = [_random_move(rng, g) for g in current]
        proposals += len(candidates)
        for k, cost in enumerate(costs.evaluate(candidates)):
            if cost is None:
                continue
            new_value = scalar(cost, weights[k])
            if new_value <= value[k] or rng.random() < math.exp(-(new_value - value[k]) / temperature):
                current[k], value[k] = candidates[k], new_value
    return SearchResult(list(costs.designs.values()), budget, (area_ref, delay_ref))


def pareto_local_search(pool: RewardPool, bits: int, budget: int, seed: int = 0, batch: int = 8,
                        max_moves: int = 3, timeout_s: float = 600.0) -> SearchResult:
    """Random edits (1 to `max_moves` legal actions) of designs drawn from the current
    Pareto front, `batch` at a time, until `budget` distinct graphs are evaluated (or 50 x
    budget proposals)."""
    rng = np.random.default_rng(seed)
    costs = BudgetedCosts(pool, budget, timeout_s)
    costs.evaluate([build(bits) for build in BUILDERS.values()])
    proposals = 0
    while costs.left > 0 and proposals < 50 * budget:
        front = front_designs(list(costs.designs.values()))
        graphs = []
        for _ in range(min(batch, costs.left)):
            nodes = front[rng.integers(len(front))].nodes
            for _ in range(rng.integers(1, max_moves + 1)):
                nodes = _random_move(rng, nodes)
            graphs.append(nodes)
        costs.evaluate(graphs)
        proposals += len(graphs)
    return SearchResult(list(costs.designs.values()), budget, _reference(pool, bits, timeout_s))


_SEARCHES = {"anneal": anneal, "random": random_search, "local": pareto_local_search}
METHODS = tuple(_SEARCHES)


def search(method: str, pool: RewardPool, bits: int, budget: int, seed: int = 0, **kwargs) -> SearchResult:
    """A search by name: `anneal`, `random` or `local` (Pareto local search)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    return _SEARCHES[method](pool, bits, budget, seed, **kwargs)
