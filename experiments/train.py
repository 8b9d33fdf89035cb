"""`train(config)` and `resume(run_dir)`: the entry points the command line and notebooks share.

`train` validates the config (before anything compiles), prepares the run directory
(resolved config, metrics.jsonl, TensorBoard events, checkpoints) and hands the config to
the runner of its architecture. `resume` continues a run from its latest checkpoint with
the config saved in its directory; the result is the same as if it had never stopped.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
from typing import Any, Callable

from podracer import config as config_lib
from podracer import distributed
from podracer.checkpoint import Checkpointer, NoCheckpointError, Progress, checkpoint_dir
from podracer.config import Config, ConfigError
from podracer.logging import ConsoleProgress, JsonlSink, MultiSink, TensorBoardSink, WandbSink, wandb_available

MetricsCallback = Callable[[dict[str, Any]], None]


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


def config_types() -> list[type]:
    """Config classes a saved config.json may name: every registered algorithm's config and
    every architecture's."""
    from anakin.config import AnakinConfig
    from podracer.agents import registry
    from sebulba.config import SebulbaConfig

    archs = (AnakinConfig, SebulbaConfig)
    return sorted({*registry.config_classes(), *archs}, key=lambda cls: cls.__name__)


def load_run_config(run_dir: str) -> Config:
    """The resolved config a run directory was written with (its `config.json`)."""
    path = os.path.join(run_dir, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{run_dir!r} is not a run directory (no config.json)") from None
    except (OSError, json.JSONDecodeError) as error:
        raise ConfigError(f"cannot read {path}: {error}") from None
    return config_lib.from_dict(data, config_types())


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


def check_logging(config: Config) -> None:
    """Logging requests that cannot work are config errors, raised before anything runs."""
    if config.log.wandb and not wandb_available():
        raise ConfigError("log.wandb is set but wandb is not installed; `pip install wandb` or drop --log.wandb")


def make_sinks(config: Config, run_dir: str, console: bool, progress: Progress | None) -> MultiSink:
    keep_rows = None if progress is None else progress.rows
    sinks: list[Any] = [JsonlSink(os.path.join(run_dir, "metrics.jsonl"), keep_rows=keep_rows)]
    if config.log.tensorboard:
        sinks.append(TensorBoardSink(os.path.join(run_dir, "tensorboard")))
    if config.log.wandb:
        sinks.append(WandbSink(config.log.wandb_project, run_dir, config_lib.to_dict(config)))
    if console:
        sinks.append(ConsoleProgress(config.total_env_steps, initial=0 if progress is None else progress.env_steps))
    return MultiSink(sinks)


def train(
    config: Config,
    name: str = "run",
    console: bool | None = None,
    on_metrics: MetricsCallback | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> Any:
    """Train as `podracer train` does and return the runner's `TrainResult`.

    Writes `config.run_dir` (default `runs/<name>-<time>`), checkpoints included.
    `console` overrides `config.log.console` (notebooks may prefer False). `should_stop`
    is polled between host calls: when it returns True the run checkpoints and returns
    with `stopped=True` (`resume(run_dir)` continues it).
    """
    runner = runner_for(config)
    distributed.initialize(config.distributed)
    runner.setup(config)  # raises ConfigError before anything is compiled or written
    check_logging(config)
    run_dir = config.run_dir or default_run_dir(name)
    config = dataclasses.replace(config, run_dir=run_dir)
    if distributed.is_leader():  # one process writes the run directory
        prepare_run_dir(run_dir, config)
    return _run(runner, config, console, on_metrics, should_stop, progress=None)


def resume(
    run_dir: str,
    console: bool | None = None,
    on_metrics: MetricsCallback | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> Any:
    """Continue the run in `run_dir` from its latest checkpoint, with its saved config.

    metrics.jsonl continues where the checkpoint left it (rows written after that
    checkpoint are replaced, never duplicated). Raises ConfigError when there is no
    checkpoint or it does not match the config.
    """
    config = dataclasses.replace(load_run_config(run_dir), run_dir=run_dir)
    runner = runner_for(config)
    distributed.initialize(config.distributed)
    runner.setup(config)
    check_logging(config)
    with Checkpointer(checkpoint_dir(run_dir), read_only=True) as checkpoints:
        if checkpoints.latest_step() is None:
            raise NoCheckpointError(f"no checkpoint to resume from in {os.path.join(run_dir, 'checkpoints')}")
        progress = checkpoints.progress()
    return _run(runner, config, console, on_metrics, should_stop, progress=progress)


def _run(
    runner: Any,
    config: Config,
    console: bool | None,
    on_metrics: MetricsCallback | None,
    should_stop: Callable[[], bool] | None,
    progress: Progress | None,
) -> Any:
    run_dir = config.run_dir
    if distributed.is_leader():
        sink = make_sinks(config, run_dir, config.log.console if console is None else console, progress)
    else:
        sink = MultiSink([])

    def write(row: dict[str, Any]) -> None:
        sink.write(row)
        if on_metrics is not None:
            on_metrics(row)

    checkpoints = Checkpointer(checkpoint_dir(run_dir), keep=config.checkpoint.keep)
    try:
        result = runner.train(config, on_metrics=write, checkpointer=checkpoints, should_stop=should_stop,
                              resume=progress is not None)
    finally:
        checkpoints.close()
        sink.close()
    return result._replace(run_dir=run_dir)
