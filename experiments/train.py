"""`train(config)`: the one entry point the command line and notebooks share.

It validates the config (before anything compiles), prepares the run directory
(resolved config, metrics.jsonl, TensorBoard events), and hands the config to the runner
of its architecture.
"""

from __future__ import annotations

import datetime
import json
import os
from typing import Any, Callable

from podracer import config as config_lib
from podracer import distributed
from podracer.config import Config, ConfigError
from podracer.logging import ConsoleProgress, JsonlSink, MultiSink, TensorBoardSink


def runner_for(config: Config) -> Any:
    """The runner module (`anakin.runner`, `sebulba.runner`) for `config.arch`."""
    from anakin.config import AnakinConfig
    from sebulba.config import SebulbaConfig

    if isinstance(config.arch, AnakinConfig):
        from anakin import runner

        return runner
    if isinstance(config.arch, SebulbaConfig):
        from sebulba import runner

        return runner
    raise ConfigError(f"arch: no runner for {type(config.arch).__name__}")


def default_run_dir(name: str) -> str:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join("runs", f"{name}-{stamp}")


def prepare_run_dir(run_dir: str, config: Config) -> None:
    """Create `run_dir` and write the resolved config; ConfigError if it is not writable."""
    try:
        os.makedirs(run_dir, exist_ok=True)
        with open(os.path.join(run_dir, "config.json"), "w", encoding="utf-8") as f:
            json.dump(config_lib.to_dict(config), f, indent=2)
    except OSError as error:
        raise ConfigError(f"run_dir {run_dir!r} is not writable: {error.strerror or error}") from None


def train(
    config: Config,
    name: str = "run",
    console: bool | None = None,
    on_metrics: Callable[[dict[str, Any]], None] | None = None,
) -> Any:
    """Train as `podracer train` does and return the runner's `TrainResult`.

    Writes `config.run_dir` (default `runs/<name>-<time>`). `console` overrides
    `config.log.console` (notebooks may prefer False).
    """
    runner = runner_for(config)
    distributed.initialize(config.distributed)
    runner.setup(config)  # raises ConfigError before anything is compiled or written
    run_dir = config.run_dir or default_run_dir(name)
    sinks: list[Any] = []
    if distributed.is_leader():  # one process writes the run directory
        prepare_run_dir(run_dir, config)
        sinks.append(JsonlSink(os.path.join(run_dir, "metrics.jsonl")))
        if config.log.tensorboard:
            sinks.append(TensorBoardSink(os.path.join(run_dir, "tensorboard")))
        if config.log.console if console is None else console:
            sinks.append(ConsoleProgress(config.total_env_steps))
    sink = MultiSink(sinks)

    def write(row: dict[str, Any]) -> None:
        sink.write(row)
        if on_metrics is not None:
            on_metrics(row)

    try:
        result = runner.train(config, on_metrics=write)
    finally:
        sink.close()
    return result._replace(run_dir=run_dir) if hasattr(result, "run_dir") else result
