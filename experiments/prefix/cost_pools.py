"""Pools that cost prefix graphs under a named cost model: synthesis (Yosys/ABC through the
reward workers and their cache) or the analytic model (node count, logic level). The model
string is stored with each design, so a designs file says how its costs were made."""

from __future__ import annotations

import concurrent.futures as cf
import functools
import math

from experiments.prefix.host_env import CACHE_ENV_VAR, default_cache_path
from experiments.prefix.reward_pool import RewardPool, analytic_cost
from experiments.prefix.synthesis import SynthesisUnavailable, find_synthesis
from podracer.config import ConfigError

COST_MODELS = ("synthesis", "analytic")


def make_pool(cost: str, workers: int | None = None, cache_path: str | None = None,
              fanout_weight: float = 0.0) -> tuple[RewardPool, str]:
    """`(pool, model)` for a cost model name; the model string is stored with each design.
    `fanout_weight` > 0: the analytic delay is the fanout-aware arrival time."""
    if cost == "analytic":
        model = f"analytic-{fanout_weight:g}"
        evaluate = functools.partial(analytic_cost, fanout_weight=fanout_weight)
        return RewardPool(evaluate=evaluate, identity=model, executor=cf.ThreadPoolExecutor(1)), model
    if cost != "synthesis":
        raise ConfigError(f"--cost must be one of {COST_MODELS}, got {cost!r}")
    try:
        spec = find_synthesis()
    except SynthesisUnavailable as error:
        raise ConfigError(str(error)) from None
    try:
        pool = RewardPool(spec, cache_path=cache_path or default_cache_path(), workers=workers)
    except ValueError as error:  # the cache file cannot be used
        raise ConfigError(f"{'--cache' if cache_path else f'${CACHE_ENV_VAR}'}: {error}") from None
    return pool, f"synthesis:{spec.identity}"


def pool_for_model(model: str) -> RewardPool:
    """A pool that costs designs the way `model` (from a designs file) did."""
    if model.startswith("analytic-"):
        try:
            fanout_weight = float(model.removeprefix("analytic-"))
            if not (math.isfinite(fanout_weight) and fanout_weight >= 0):
                raise ValueError(model)
        except ValueError:
            raise ConfigError(f"unknown cost model {model!r} in the designs file") from None
        return make_pool("analytic", fanout_weight=fanout_weight)[0]
    if model.startswith("synthesis:"):
        pool, current = make_pool("synthesis")
        if current != model:
            pool.close()
            raise ConfigError(f"the designs were synthesised with another flow or cell library ({model}) than "
                              f"this machine's ({current})")
        return pool
    raise ConfigError(f"unknown cost model {model!r} in the designs file")
