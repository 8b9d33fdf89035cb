"""`TrainResult`: what `train` returns, under either architecture."""

from __future__ import annotations

from typing import Any, NamedTuple

from podracer.types import Agent


class TrainResult(NamedTuple):
    """A finished (or stopped) run.

    `state` is the runner's final device state: Anakin's `RunnerState` (every leaf with a
    leading seed axis `[S, ...]`; the agent at `state.agent`), Sebulba's learner `AgentState`
    (placed with `sebulba.learner.state_specs`).
    """

    metrics: list[dict[str, Any]]  # the rows written to metrics.jsonl, in order (see `metrics_row`)
    state: Any
    agent: Agent
    run_dir: str | None = None  # set by `experiments.train`
    stopped: bool = False  # True when `should_stop` ended the run early
    env_steps: int = 0  # env steps the run has taken (one seed's), over every session (checkpoint saved)
