"""The one builder of a metrics.jsonl row, so that the keys every runner writes are the same.

Every row starts with `SHARED_KEYS` (README, "metrics.jsonl"):

- `env_steps` (int): env steps of one seed so far, over every session of the run;
- `sps` (float): env steps per second (all seeds') over the row's interval;
- `wall_s` (float): training wall time so far, over every session;
- `episode_return`, `episode_length` (float, or None when no episode ended in the
  interval): means over the episodes that ended (with seeds: the mean of the seeds' means);
- `episodes` (int): how many episodes ended in the interval (all seeds, all processes);

then, with more than one seed, `episode_return_per_seed` (list of float or None), the
agent's metrics (float: means over the row's updates, or over its gradient steps for an
algorithm's `step_metrics`, see `agent_means`) and what the runner adds of its own
(Sebulba's timings). None of those may reuse a shared key.
"""

from __future__ import annotations

import time
from typing import Any, Collection, Mapping

import numpy as np

from podracer.runner.episodes import EpisodeStats

SHARED_KEYS: dict[str, tuple[type, ...]] = {
    "env_steps": (int,),
    "sps": (float,),
    "wall_s": (float,),
    "episode_return": (float, type(None)),
    "episode_length": (float, type(None)),
    "episodes": (int,),
}


def metrics_row(env_steps: int, sps: float, wall_s: float, episodes: EpisodeStats, agent: Mapping[str, Any], /,
                **extra: Any) -> dict[str, Any]:
    """One metrics.jsonl row: the shared keys, typed as `SHARED_KEYS` says, then the rest.

    episodes: the interval's `EpisodeStats`, scalars or `[S]` per seed.
    agent:    the agent's metrics, already averaged over the interval's updates.
    extra:    the runner's own keys, written last.
    """
    count = np.atleast_1d(np.asarray(episodes.count))
    with np.errstate(invalid="ignore", divide="ignore"):
        per_seed = np.where(count > 0, np.atleast_1d(np.asarray(episodes.return_sum)) / np.maximum(count, 1), np.nan)
        lengths = np.where(count > 0, np.atleast_1d(np.asarray(episodes.length_sum)) / np.maximum(count, 1), np.nan)
    row: dict[str, Any] = {
        "env_steps": int(env_steps),
        "sps": float(sps),
        "wall_s": float(wall_s),
        "episode_return": _mean_or_none(per_seed),
        "episode_length": _mean_or_none(lengths),
        "episodes": int(count.sum()),
    }
    if per_seed.size > 1:
        row["episode_return_per_seed"] = [None if np.isnan(r) else float(r) for r in per_seed]
    for name, value in [*((name, float(value)) for name, value in agent.items()), *extra.items()]:
        if name in row:
            raise ValueError(f"metrics row: {name!r} is already a key of the row")
        row[name] = value
    return row


GRADIENT_STEPS = "gradient_steps"  # the metric that counts an update's gradient steps


def agent_means(sums: Mapping[str, Any], num_updates: int, step_metrics: Collection[str] = (),
                step_sums: Mapping[str, Any] | None = None) -> dict[str, float]:
    """The agent's metrics over a row of `num_updates` updates, from their sums over those
    updates (each a scalar, or `[S]` per seed: the row shows the mean of the seeds').

    Most are means over the updates. `step_metrics` (`Algorithm.step_metrics`: a replay
    agent's loss, TD error, ...) are means over the update's gradient steps, and an update
    may take none (before `learning_starts`, or at a fractional replay ratio): they are
    averaged over the row's gradient steps instead, from `step_sums[name]`, the sum over
    the updates of the metric times the update's `gradient_steps`; 0 in a row that took
    none. Without `step_sums` every metric is a mean over updates.
    """
    steps = np.asarray(sums.get(GRADIENT_STEPS, 0.0), np.float64)
    means = {}
    for name, total in sums.items():
        if step_sums is not None and name in step_metrics and name in step_sums:
            weighted = np.asarray(step_sums[name], np.float64)
            means[name] = float(np.mean(np.where(steps > 0, weighted / np.maximum(steps, 1.0), 0.0)))
        else:
            means[name] = float(np.mean(np.asarray(total, np.float64)) / num_updates)
    return means


def check_row(row: Mapping[str, Any]) -> None:
    """Raise ValueError unless `row` carries every shared key with its documented type."""
    for name, types in SHARED_KEYS.items():
        if name not in row:
            raise ValueError(f"metrics row has no {name!r}")
        if type(row[name]) not in types:
            raise ValueError(f"metrics row: {name!r} is {type(row[name]).__name__}, not "
                             f"{' or '.join(t.__name__ for t in types)}")


def _mean_or_none(values: np.ndarray) -> float | None:
    values = values[~np.isnan(values)]
    return float(values.mean()) if values.size else None


class Clock:
    """Wall time of a run over all its sessions (`offset_s` from the earlier ones), and the
    time since the last row."""

    def __init__(self, offset_s: float = 0.0):
        self.last = time.perf_counter()
        self.start = self.last - offset_s

    def lap(self, now: float) -> tuple[float, float]:
        """`(seconds since the previous lap, run wall time)` at `now` (`time.perf_counter()`)."""
        interval, self.last = now - self.last, now
        return interval, now - self.start

    def wall_s(self) -> float:
        """The run's wall time now."""
        return time.perf_counter() - self.start
