"""What applications do when a training run ends: hooks that `experiments.train` calls with
the run's config, directory and result, after its last checkpoint is written (on the
leading process of a multi-process run). An application registers one to write what the run
produced in a form of its own (the prefix adders write the Pareto front of the designs the
run found, `experiments.prefix.run_front`)."""

from __future__ import annotations

from typing import Any, Callable

from podracer.config import Config
from podracer.plugins import load_plugins

RunEndHook = Callable[[Config, str, Any], None]

_HOOKS: list[RunEndHook] = []


def register_run_end_hook(hook: RunEndHook) -> None:
    """Call `hook(config, run_dir, result)` when a run that `experiments.train.train` or
    `resume` started returns (finished, or stopped with a checkpoint).

    Args:
        hook: `(config, run_dir, result) -> None`; `result` is the runner's `TrainResult`.
            It decides from the config whether the run is one of its own.
    """
    if hook not in _HOOKS:
        _HOOKS.append(hook)


def run_end_hooks() -> list[RunEndHook]:
    """The registered hooks, in the order registered (plugins loaded first).

    Returns:
        The hooks.
    """
    load_plugins()
    return list(_HOOKS)
