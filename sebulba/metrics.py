"""Metrics rows of a Sebulba run: the rows every runner writes (`podracer.runner.metrics_row`)
plus where the time went.

Timings are means over the interval of a row: actor timings in seconds per rollout
(`actor_env_wait_s`: waiting for the environments; `actor_inference_s`: choosing actions;
`actor_param_wait_s`: waiting for parameters new enough; `actor_queue_wait_s`: waiting
for room in the queue), learner timings in seconds per update (`learner_wait_s`: waiting
for trajectories; `learner_update_s`: the compiled update). `queue_depth` is the mean
number of trajectories left waiting after each update took its own; `policy_lag` /
`policy_lag_max` how many updates behind the acting parameters were.

A host environment that measures itself (`metrics()`, see `podracer.envs.host.env_metrics`)
adds its numbers prefixed `env_`, as the latest rollout of the row saw them (cumulative
since the environment was made): e.g. an environment whose rewards come from a pool of
reward workers reports `env_<rewards computed>`, `env_cache_hit_rate` and
`env_reward_wait_s` (seconds the actors waited on rewards).

Episode statistics count the episodes of every process; timings are this process's.

`sps` counts the env steps of the updates in a row over the time from the previous row
(or from the start of the earliest rollout they learned from, if earlier: trajectories
that waited in a queue were collected before the row began) to this one: it never claims
more steps per second than the actors took. With several processes the rollouts' start
times are this process's (every process acts alike).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Collection

import numpy as np

from podracer.runner import Clock, EpisodeStats, agent_means, metrics_row
from podracer.runner.metrics import GRADIENT_STEPS
from sebulba.learner import UpdateRecord

ACTOR_TIMINGS = ("env_wait_s", "inference_s", "param_wait_s", "queue_wait_s")


class MetricsReporter:
    """Accumulates `UpdateRecord`s and `emit`s a row every `updates_per_log` updates and
    after the last one. `step_metrics`: the algorithm's (`Algorithm.step_metrics`), averaged
    over the row's gradient steps."""

    def __init__(self, steps_per_update: int, updates_per_log: int, num_updates: int,
                 emit: Callable[[dict[str, Any]], None], first_update: int = 0, wall_offset_s: float = 0.0,
                 step_metrics: Collection[str] = ()) -> None:
        self.step_metrics = tuple(step_metrics)
        self.steps_per_update = steps_per_update
        self.updates_per_log = updates_per_log
        self.num_updates = num_updates
        self.emit = emit
        self.clock = Clock(wall_offset_s)  # a resumed run's wall time goes on
        self.last_update = first_update
        self.rows = 0  # rows emitted so far, in this session
        self._records: list[UpdateRecord] = []

    def __call__(self, record: UpdateRecord) -> None:
        self._records.append(record)
        if record.update % self.updates_per_log == 0 or record.update == self.num_updates:
            self.flush()

    def flush(self) -> None:
        """Emit a row for the updates since the last one, if any (a run that stops between
        two log points logs its last updates before it checkpoints)."""
        if self._records:
            self.rows += 1
            self.emit(self.row())

    def row(self) -> dict[str, Any]:
        records, self._records = self._records, []
        now = time.perf_counter()
        update = records[-1].update
        since = min([self.clock.last] + [item.started for r in records for item in r.items])
        _, wall_s = self.clock.lap(now)
        sps = (update - self.last_update) * self.steps_per_update / max(now - since, 1e-9)
        episodes = sum((r.episodes for r in records), EpisodeStats.host_zeros())
        self.last_update = update
        return metrics_row(update * self.steps_per_update, sps, wall_s, episodes,
                           record_means(records, self.step_metrics),
                           **timing_means(records), **latest_env_metrics(records))


def record_means(records: list[UpdateRecord], step_metrics: Collection[str] = ()) -> dict[str, float]:
    """The agent's metrics over the records' updates: means over updates, and over gradient
    steps for `step_metrics` (`podracer.runner.agent_means`)."""
    names = records[0].metrics.keys()
    sums = {name: sum(float(np.mean(r.metrics[name])) for r in records) for name in names}
    step_sums = None
    if GRADIENT_STEPS in names:
        step_sums = {name: sum(float(np.mean(r.metrics[name])) * float(np.mean(r.metrics[GRADIENT_STEPS]))
                               for r in records) for name in step_metrics if name in names}
    return agent_means(sums, len(records), step_metrics, step_sums)


def latest_env_metrics(records: list[UpdateRecord]) -> dict[str, float]:
    """The host environment's own numbers (`env_` + name) from the latest rollout learned."""
    items = [item for r in records for item in r.items]
    latest = max(items, key=lambda item: item.started)
    return {f"env_{name}": value for name, value in latest.env_metrics.items()}


def timing_means(records: list[UpdateRecord]) -> dict[str, float]:
    """Where the time went (see the module's docstring)."""
    items = [item for r in records for item in r.items]
    lags = [lag for r in records for lag in r.policy_lag]
    row = {f"actor_{name}": float(np.mean([item.timings[name] for item in items])) for name in ACTOR_TIMINGS}
    row.update(
        learner_wait_s=float(np.mean([r.wait_s for r in records])),
        learner_update_s=float(np.mean([r.update_s for r in records])),
        queue_depth=float(np.mean([r.queue_depth for r in records])),
        policy_lag=float(np.mean(lags)),
        policy_lag_max=int(max(lags)),
    )
    return row
