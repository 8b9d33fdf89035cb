"""`podracer bench prefix`: the agent's Pareto front against simulated annealing, random
search and Pareto local search under one budget of unique syntheses (Roy et al., PrefixRL,
DAC 2021, compare their agent with annealing and random search). Pareto local search is
what an agent restarting from its front
(`--env.params front_restarts=...`) does with random edits instead of a learned policy.

    podracer bench prefix --bits 16 --budget 2000 --out runs/bench-prefix16
    podracer bench prefix --run-dir RUN --out DIR      # a finished run instead of training

1. The agent: the preset (`dqn-prefix<bits>-front-sebulba`, synthesis rewards) trains with
   a fresh synthesis cache of its own, `RUN/synthesis-cache.jsonl`, until it has synthesised
   `--budget` distinct graphs (checked after every update, so it may pass the budget by
   one update's new graphs); then its greedy designs are collected
   (`experiments.prefix.run_designs`) through the same cache. With `--run-dir` a finished run is
   read instead: its directory must hold that cache (train it with
   `PODRACER_PREFIX_CACHE=RUN/synthesis-cache.jsonl`).
2. Budget accounting: the cache holds every distinct graph the agent had synthesised,
   during training (its exploration included), for the reward reference and for the final
   greedy designs. All of them count as its designs, and their number is the budget that
   every baseline then gets (`budget` in the result; `budget_requested` is `--budget`).
3. Simulated annealing, random search and Pareto local search
   (`experiments.prefix.search`) with that budget, one run per baseline seed; searches
   count distinct graphs evaluated, as the agent's count, so their own cache (the user's
   default) saves time but not budget.

Every front is judged with the same reference point (the classic adders' worst area and
delay, `experiments.prefix.fronts.summarize_front`). `OUT/comparison.json` holds the table, and
`OUT/<method>[-seed<k>]/` each method's designs, plot, Verilog front and `front.json`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from experiments.prefix.cost_pools import make_pool
from experiments.prefix.front import write_designs
from experiments.prefix.fronts import check_writable_out, run_baseline, show_front
from experiments.prefix.host_env import CACHE_ENV_VAR, default_cache_path, parse_host_id, shared_reward_pool
from experiments.prefix.reward_pool import cache_designs
from experiments.prefix.run_designs import collect_run_designs
from experiments.train import train
from podracer.config import Config, ConfigError

AGENT_CACHE = "synthesis-cache.jsonl"
BASELINES = ("anneal", "random", "local")
TARGETS = ("sklansky", "brent-kung")  # the classic adders the front must dominate


def default_preset(bits: int) -> str:
    """The agent `--bits` trains by default: restarting from its front, one edit per episode."""
    return f"dqn-prefix{bits}-front-sebulba"


@contextlib.contextmanager
def synthesis_cache(path: str) -> Iterator[None]:
    """Every synthesis pool made inside (the host envs' shared one, the greedy collection's)
    caches in `path`: `$PODRACER_PREFIX_CACHE` set for the while."""
    before = os.environ.get(CACHE_ENV_VAR)
    os.environ[CACHE_ENV_VAR] = path
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(CACHE_ENV_VAR, None)
        else:
            os.environ[CACHE_ENV_VAR] = before


def check_agent_config(config: Config, bits: int | None) -> int:
    """The width the config trains on; ConfigError unless it is a synthesis-reward prefix
    adder (of `bits`, when given)."""
    spec = parse_host_id(config.env.id)
    if spec is None or not spec["synthesis"]:
        raise ConfigError(f"env.id: bench prefix needs a synthesis-reward prefix adder (PrefixAdderSynth-<bits>), "
                          f"got {config.env.id!r}")
    if bits is not None and spec["bits"] != bits:
        raise ConfigError(f"--bits {bits} but the preset trains on {config.env.id}")
    return spec["bits"]


def train_agent(config: Config, budget: int, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train `config` (its `run_dir` set) with a fresh cache in the run directory until
    `budget` distinct graphs were synthesised (or `total_env_steps`), then collect its
    greedy designs through the same cache. What the run did."""
    cache = os.path.join(config.run_dir, AGENT_CACHE)
    if os.path.exists(cache):
        raise ConfigError(f"{config.run_dir!r} already holds a synthesis cache; pass it as --run-dir to read it, "
                          "or choose another --out")
    os.makedirs(config.run_dir, exist_ok=True)
    with synthesis_cache(cache):
        pool = shared_reward_pool()  # the one the host envs will share
        start = time.perf_counter()
        result = train(config, console=False, should_stop=lambda: pool.metrics()["syntheses"] >= budget)
        train_s = time.perf_counter() - start
        trained = pool.metrics()
        log(f"agent: {result.env_steps} env steps, {trained['syntheses']} syntheses in {train_s:.0f} s")
        collected = collect_run_designs(config.run_dir)
    return {"env_steps": int(result.env_steps), "train_s": round(train_s, 1),
            "syntheses_training": int(trained["syntheses"]), "cache_hit_rate": round(trained["cache_hit_rate"], 4),
            "greedy_designs": collected["designs"]}


def agent_designs(run_dir: str, identity: str) -> list:
    """Every distinct graph the run synthesised (`RUN_DIR/synthesis-cache.jsonl`) with the
    flow and library `identity` (this machine's: a cache from another is an error)."""
    path = os.path.join(run_dir, AGENT_CACHE)
    if not os.path.isfile(path):
        raise ConfigError(f"{path} does not exist: bench prefix reads the agent's own synthesis cache (train with "
                          f"{CACHE_ENV_VAR}={path}, or let bench prefix train it)")
    designs = cache_designs(path, identity)
    if not designs:
        raise ConfigError(f"{path} holds no designs synthesised with this machine's flow and cell library")
    return designs


def _row(summary: dict[str, Any]) -> dict[str, Any]:
    return {"hypervolume": round(summary["hypervolume"], 5), "front_size": len(summary["front"]),
            "designs": summary["designs"], **{f"dominates_{name}": name in summary["dominates"] for name in TARGETS},
            "dir": os.path.dirname(summary["plot"])}


def compare(out: str, budget: int | None = None, config: Config | None = None, run_dir: str | None = None,
            baseline_seeds: Sequence[int] = (0,), workers: int | None = None,
            log: Callable[[str], None] = print) -> dict[str, Any]:
    """The comparison (see the module docstring): train `config` until `budget` syntheses
    (its `run_dir` defaults to `OUT/agent-run`), or read the finished `run_dir`; then every
    baseline with the agent's count as its budget. Writes and returns the table."""
    check_writable_out(out)
    trained: dict[str, Any] = {}
    if run_dir is None:
        if config is None or budget is None or budget < 1:
            raise ConfigError(f"--budget must be >= 1 to train the agent, got {budget}")
        check_agent_config(config, None)
        config = dataclasses.replace(config, run_dir=config.run_dir or os.path.join(out, "agent-run"))
        run_dir = config.run_dir
        trained = train_agent(config, budget, log)
    pool, model = make_pool("synthesis", workers)
    try:
        designs = agent_designs(run_dir, pool.identity)
        bits = designs[0].nodes.shape[0]
        spent = len(designs)
        agent_dir = os.path.join(out, "agent")
        os.makedirs(agent_dir, exist_ok=True)
        write_designs(os.path.join(agent_dir, "designs.jsonl"), designs, model)
        rows = {"agent": {**_row(show_front(agent_dir, pool=pool)), **trained, "run_dir": run_dir}}
    finally:
        pool.close()
    log(f"agent: {spent} unique syntheses, hypervolume {rows['agent']['hypervolume']:.4f}")
    cache = default_cache_path()
    for method in BASELINES:
        for seed in baseline_seeds:
            name = method if len(baseline_seeds) == 1 else f"{method}-seed{seed}"
            summary = run_baseline(bits, method, spent, os.path.join(out, name), "synthesis", seed, workers, cache)
            rows[name] = {**_row(summary), "search_s": round(summary["search_s"], 1)}
            log(f"{name}: hypervolume {rows[name]['hypervolume']:.4f}")
    table = {"bits": bits, "budget": spent, "budget_requested": budget, "model": model,
             "baseline_seeds": list(baseline_seeds), "rows": rows, **_verdict(rows)}
    with open(os.path.join(out, "comparison.json"), "w") as f:
        json.dump(table, f, indent=1)
    return table


def _verdict(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Whether the agent's hypervolume beats each baseline's (mean over its seeds), and
    whether its front dominates every target classic."""
    agent = rows["agent"]["hypervolume"]
    means = {m: float(np.mean([r["hypervolume"] for n, r in rows.items() if n.split("-seed")[0] == m]))
             for m in BASELINES}
    return {"baseline_hypervolume": {m: round(v, 5) for m, v in means.items()},
            "agent_beats": {m: agent > v for m, v in means.items()},
            "agent_dominates_targets": all(rows["agent"][f"dominates_{name}"] for name in TARGETS)}


def format_table(table: dict[str, Any]) -> str:
    """The table as text: one line per method."""
    lines = [f"{table['bits']}-bit prefix adders, {table['budget']} unique syntheses each "
             f"(requested {table['budget_requested']}), {table['model'].split(':')[0]} costs",
             f"{'method':<16}{'hypervolume':>12}{'front':>7}  dominates sklansky / brent-kung"]
    for name, row in table["rows"].items():
        marks = " / ".join("yes" if row[f"dominates_{t}"] else "no" for t in TARGETS)
        lines.append(f"{name:<16}{row['hypervolume']:>12.4f}{row['front_size']:>7}  {marks}")
    beats = ", ".join(f"{m}: {'yes' if b else 'no'}" for m, b in table["agent_beats"].items())
    lines.append(f"agent's hypervolume above the baselines' (mean over seeds): {beats}")
    return "\n".join(lines)
