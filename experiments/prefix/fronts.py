"""`podracer prefix-baseline` and `podracer prefix-front`: prefix-adder searches and their
Pareto fronts against the classic adders.

    podracer prefix-baseline --bits 32 --method anneal --budget 500 --out runs/anneal32
    podracer prefix-front runs/anneal32

A baseline writes every design it evaluated to `OUT/designs.jsonl`; `prefix-front DIR`
reads `DIR/designs.jsonl` (any search or run that writes that file; on a training run's
directory without one, it first collects the designs its greedy policy reaches,
`experiments.prefix.run_designs`), plots the front
(area against delay) with the classic adders costed the same way (`DIR/front.png`), writes
each design on the front as a Verilog module adding two N-bit numbers (`DIR/front/*.v`) and
a summary with the hypervolume (`DIR/front.json`).

The hypervolume's reference point is the classic adders' worst area and worst delay
(Kogge-Stone's area, ripple's delay); it is reported as the fraction of that box the front
dominates, so fronts of one width and cost model compare directly.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np

from experiments.prefix.builders import classic_adders
from experiments.prefix.cost_pools import make_pool, pool_for_model
from experiments.prefix.env import MAX_BITS
from experiments.prefix.front import (
    Design,
    dominates,
    front_designs,
    hypervolume,
    read_designs,
    write_designs,
    write_verilog_front,
)
from experiments.prefix.reward_pool import RewardPool
from experiments.prefix.run_designs import collect_run_designs, is_prefix_run
from experiments.prefix.search import METHODS, search
from podracer.config import ConfigError


def summarize_front(designs: list[Design], classics: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """The front, its hypervolume (fraction of the classic box) and the classics it dominates."""
    front = front_designs(designs)
    reference = (max(a for a, _ in classics.values()), max(d for _, d in classics.values()))
    volume = hypervolume(np.array([[d.area, d.delay] for d in front]), reference)
    dominated = [name for name, point in classics.items() if any(dominates((d.area, d.delay), point) for d in front)]
    return {
        "front": [{"area": d.area, "delay": d.delay} for d in front],
        "hypervolume": volume / (reference[0] * reference[1]),
        "hypervolume_reference": list(reference),
        "classics": {name: {"area": a, "delay": d} for name, (a, d) in classics.items()},
        "dominates": dominated,
        "designs": len(designs),
    }


def plot_front(designs: list[Design], summary: dict[str, Any], path: str, title: str) -> None:
    import matplotlib  # here: the backend is chosen before pyplot loads, and only where a front is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    ax.scatter([d.area for d in designs], [d.delay for d in designs], s=8, color="#BBBBBB", label="evaluated")
    front = summary["front"]
    ax.step([p["area"] for p in front], [p["delay"] for p in front], where="post", color="#0072B2")
    ax.scatter([p["area"] for p in front], [p["delay"] for p in front], s=24, color="#0072B2",
               label=f"Pareto front (HV {summary['hypervolume']:.3f})", zorder=3)
    markers = {"ripple": "s", "sklansky": "^", "kogge-stone": "D", "brent-kung": "v"}
    for name, point in summary["classics"].items():
        ax.scatter([point["area"]], [point["delay"]], marker=markers.get(name, "o"), s=60, color="#D55E00", zorder=4)
        ax.annotate(name, (point["area"], point["delay"]), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.set_xlabel("area")
    ax.set_ylabel("delay")
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def show_front(directory: str, out: str | None = None, pool: RewardPool | None = None) -> dict[str, Any]:
    """`podracer prefix-front DIR`: plot, Verilog of the front, `front.json`; the summary.
    On a training run's directory without `designs.jsonl`, the designs of its latest
    checkpoint's greedy rollouts are collected first (`experiments.prefix.run_designs`)."""
    if out is not None:  # before any rollout or synthesis
        check_writable_plot(out)
    collected = collect_run_designs(directory) if os.path.isdir(directory) and is_prefix_run(directory) else None
    try:
        designs, model = read_designs(directory)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    directory = directory if os.path.isdir(directory) else os.path.dirname(directory) or "."
    bits = designs[0].nodes.shape[0]
    owned = pool is None
    pool = pool_for_model(model) if pool is None else pool
    try:
        classic_costs = pool.costs(list(classic_adders(bits).values()))
    finally:
        if owned:
            pool.close()
    classics = {name: (float(a), float(d)) for name, (a, d) in zip(classic_adders(bits), classic_costs)}
    summary = summarize_front(designs, classics)
    summary.update(bits=bits, model=model)
    if collected is not None:
        summary["collected"] = collected
    front_dir = os.path.join(directory, "front")
    summary["verilog"] = write_verilog_front(front_designs(designs), front_dir)
    summary["plot"] = out or os.path.join(directory, "front.png")
    plot_front(designs, summary, summary["plot"], f"{bits}-bit prefix adders ({model.split(':')[0]} cost)")
    with open(os.path.join(directory, "front.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return summary


def check_writable_plot(out: str) -> None:
    """Create the directory of the plot file `out` and check that `out` can be written;
    ConfigError naming `--out` otherwise."""
    try:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "ab"):
            pass
    except OSError as error:
        raise ConfigError(f"--out {out!r} cannot be written: {error.strerror or error}") from None


def check_writable_out(out: str) -> None:
    """Create `out` and check that files can be written there; ConfigError naming `--out`."""
    try:
        os.makedirs(out, exist_ok=True)
        probe = os.path.join(out, ".write-test")
        open(probe, "w").close()
        os.remove(probe)
    except OSError as error:
        raise ConfigError(f"--out {out!r} is not writable: {error.strerror}") from None


def run_baseline(bits: int, method: str, budget: int, out: str, cost: str = "synthesis", seed: int = 0,
                 workers: int | None = None, cache_path: str | None = None) -> dict[str, Any]:
    """`podracer prefix-baseline`: search, write `OUT/designs.jsonl`, then `show_front(OUT)`."""
    if not 3 <= bits <= MAX_BITS:
        raise ConfigError(f"--bits must be in [3, {MAX_BITS}], got {bits}")
    if budget < 1:
        raise ConfigError(f"--budget must be >= 1, got {budget}")
    if method not in METHODS:
        raise ConfigError(f"--method must be one of {METHODS}, got {method!r}")
    check_writable_out(out)
    pool, model = make_pool(cost, workers, cache_path)
    try:
        start = time.perf_counter()
        result = search(method, pool, bits, budget, seed)
        wall = time.perf_counter() - start
        write_designs(os.path.join(out, "designs.jsonl"), result.designs, model)
        summary = show_front(out, pool=pool)
        metrics = pool.metrics()
    finally:
        pool.close()
    summary.update(method=method, budget=budget, seed=seed, search_s=wall, **metrics)
    with open(os.path.join(out, "front.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return summary
