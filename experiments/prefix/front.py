"""Pareto fronts of prefix adders: dominance, 2-D hypervolume, designs on disk, Verilog out.

A *design* is a legal graph with its cost `(area, delay)` under one cost model (synthesis
with a flow and library, or the analytic model). Searches and runs write the designs they
evaluated to `DIR/designs.jsonl`, one JSON object a line:

    {"bits": 8, "area": 3482.0, "delay": 1255.9, "model": "synthesis:<identity>",
     "grid": ["1", "11", "101", ...]}

`grid[i]` is row i of the lower triangle, `grid[i][j] == "1"` where node (i, j) exists.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from experiments.prefix.graph import check_graph, is_legal
from experiments.prefix.netlist import to_verilog

DESIGNS_FILE = "designs.jsonl"
_FRONT_FILE = re.compile(r"^adder\d+_\d+_area.*_delay.*\.v$")  # what `write_verilog_front` names


class Design(NamedTuple):
    nodes: np.ndarray  # bool [N, N]
    area: float
    delay: float


def pareto_front(points: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated points of `[P, 2]` (both minimised), sorted by the first
    objective; of equal points, the first is kept."""
    points = np.asarray(points, np.float64).reshape(-1, 2)
    order = np.lexsort((points[:, 1], points[:, 0]))  # by area, then delay
    front, best_delay = [], np.inf
    for index in order:
        if points[index, 1] < best_delay:
            front.append(index)
            best_delay = points[index, 1]
    return np.asarray(front, np.int64)


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether point `a` dominates `b` (no worse in both, better in one; minimised)."""
    return a[0] <= b[0] and a[1] <= b[1] and (a[0] < b[0] or a[1] < b[1])


def hypervolume(points: np.ndarray, reference: Sequence[float]) -> float:
    """The area dominated by `points [P, 2]` (minimised) and bounded by `reference`: the
    2-D hypervolume indicator (Zitzler and Thiele 1998). Points not better than the
    reference in both objectives add nothing."""
    points = np.asarray(points, np.float64).reshape(-1, 2)
    ref_x, ref_y = float(reference[0]), float(reference[1])
    inside = points[(points[:, 0] < ref_x) & (points[:, 1] < ref_y)]
    if inside.size == 0:
        return 0.0
    front = inside[pareto_front(inside)]  # x ascending, y descending
    xs = np.append(front[1:, 0], ref_x)
    return float(np.sum((xs - front[:, 0]) * (ref_y - front[:, 1])))


def grid_rows(nodes: np.ndarray) -> list[str]:
    return ["".join("1" if nodes[i, j] else "0" for j in range(i + 1)) for i in range(nodes.shape[0])]


def nodes_from_rows(rows: Sequence[str]) -> np.ndarray:
    """The grid `bool [N, N]` of rows of 0/1 (`grid_rows`); ValueError unless it is a legal
    prefix graph of at least 2 bits."""
    n = len(rows)
    if n < 2:
        raise ValueError(f"a prefix graph needs at least 2 rows (bits), got {n}")
    nodes = np.zeros((n, n), bool)
    for i, row in enumerate(rows):
        if len(row) != i + 1 or set(row) - {"0", "1"}:
            raise ValueError(f"grid row {i} must be {i + 1} characters of 0/1, got {row!r}")
        nodes[i, : i + 1] = [c == "1" for c in row]
    check_graph(nodes)
    if not is_legal(nodes):
        raise ValueError("the grid is not a legal prefix graph")
    return nodes


def write_designs(path: str, designs: Iterable[Design], model: str, append: bool = False) -> None:
    """Write designs as JSON lines (see the module docstring)."""
    with open(path, "a" if append else "w") as f:
        for d in designs:
            row = {"bits": int(d.nodes.shape[0]), "area": float(d.area), "delay": float(d.delay), "model": model,
                   "grid": grid_rows(d.nodes)}
            f.write(json.dumps(row) + "\n")


def read_designs(path: str) -> tuple[list[Design], str]:
    """`(designs, model)` from a designs file (a directory means `DIR/designs.jsonl`).
    Raises ValueError naming the problem: no file, no designs, mixed widths or models."""
    if os.path.isdir(path):
        path = os.path.join(path, DESIGNS_FILE)
    if not os.path.exists(path):
        raise ValueError(f"{path} does not exist (a prefix-adder search or run writes it)")
    designs, models, widths = [], set(), set()
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                design = Design(nodes_from_rows(row["grid"]), float(row["area"]), float(row["delay"]))
                if design.nodes.shape[0] != int(row["bits"]):
                    raise ValueError(f"bits is {row['bits']} but the grid has {design.nodes.shape[0]} rows")
                if not (np.isfinite(design.area) and np.isfinite(design.delay)):
                    raise ValueError(f"area and delay must be finite, got {design.area}, {design.delay}")
                designs.append(design)
                models.add(row["model"])
                widths.add(int(row["bits"]))
            except (ValueError, KeyError, TypeError) as error:
                raise ValueError(f"{path}:{number}: not a design ({error})") from None
    if not designs:
        raise ValueError(f"{path} holds no designs")
    if len(models) > 1 or len(widths) > 1:
        raise ValueError(f"{path} mixes cost models {sorted(models)} or widths {sorted(widths)}")
    return designs, models.pop()


def front_designs(designs: Sequence[Design]) -> list[Design]:
    """The designs on the Pareto front, by area."""
    points = np.array([[d.area, d.delay] for d in designs])
    return [designs[i] for i in pareto_front(points)]


def write_verilog_front(designs: Sequence[Design], directory: str) -> list[str]:
    """Write each design as `DIR/adder<N>_<k>_area<A>_delay<D>.v`, a module
    `adder<N>_<k>(a, b, s)` adding two N-bit numbers; the paths written. Modules an earlier
    call wrote there are removed first, so the directory holds this front only."""
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        if _FRONT_FILE.match(name):
            os.remove(os.path.join(directory, name))
    paths = []
    for k, d in enumerate(designs):
        n = d.nodes.shape[0]
        module = f"adder{n}_{k}"
        path = os.path.join(directory, f"{module}_area{d.area:g}_delay{d.delay:g}.v")
        with open(path, "w") as f:
            f.write(f"// area {d.area:g}, delay {d.delay:g}\n" + to_verilog(d.nodes, module))
        paths.append(path)
    return paths
