"""`Hooks`: the caller's side of a run, the same for every runner.

A runner calls `emit` with each metrics row as soon as it exists, asks `stop_requested`
between host calls or updates, `save`s checkpoints and, on `resume`, starts from
`start(target)`. The command-line tool fills every hook; a notebook may fill none.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from podracer.checkpoint import Checkpoints, Progress
from podracer.distributed import NO_WAITS, Waits
from podracer.runner.guard import describe_kept
from podracer.runner.warm_start import warm_params

MetricsCallback = Callable[[dict[str, Any]], None]


@dataclasses.dataclass(frozen=True)
class Hooks:
    """on_metrics:   receives each metrics row, in the calling thread.
    checkpointer: saves and restores `(state, Progress)`; None: no checkpoints.
    should_stop:  polled between host calls (Anakin) or updates (Sebulba); when true the run
                  checkpoints and returns with `stopped=True`.
    resume:       continue from the checkpointer's latest checkpoint.
    waits:        marks every wait on other processes (a multi-process run's deadlines).
    """

    on_metrics: MetricsCallback | None = None
    checkpointer: Checkpoints | None = None
    should_stop: Callable[[], bool] | None = None
    resume: bool = False
    waits: Waits = NO_WAITS

    def __post_init__(self) -> None:
        if self.resume and self.checkpointer is None:
            raise ValueError("resume=True needs a checkpointer")

    def emit(self, row: dict[str, Any]) -> None:
        if self.on_metrics is not None:
            self.on_metrics(row)

    def stop_requested(self) -> bool:
        return self.should_stop is not None and bool(self.should_stop())

    def start(self, initial: Any, init_from: str | None = None, seed_axis: bool = False,
              init_member: int | None = None) -> tuple[Any, Progress]:
        """`(state, progress)` to start from: on `resume`, the latest checkpoint shaped and
        placed like `initial`; for a new run `initial`, its agent parameters taken from the
        run `init_from` if given (`podracer.runner.warm_start`; `seed_axis`: `initial`'s
        leaves lead with a seed axis). `initial` has an `agent` (`AgentState`) field."""
        if self.resume:
            return self.checkpointer.restore(initial)
        if init_from is not None:
            params = warm_params(initial.agent.params, init_from, seed_axis, init_member)
            initial = initial._replace(agent=initial.agent.replace(params=params))
        return initial, Progress()

    def save(self, state: Any, progress: Progress) -> None:
        """Checkpoint `state` after `progress.updates` updates (nothing without a checkpointer)."""
        if self.checkpointer is not None:
            self.checkpointer.save(state, progress)

    def describe_kept(self) -> str:
        """The last good checkpoint, for a non-finite value's error message."""
        return describe_kept(self.checkpointer)
