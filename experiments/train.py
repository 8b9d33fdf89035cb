"""`train(config)` and `resume(run_dir)`: the entry points the command line and notebooks share.

`train` validates the config (before anything compiles), prepares the run directory
(resolved config, metrics.jsonl, TensorBoard events, checkpoints, and `environment.json`
where the rewards depend on more than the config: a synthesis-reward prefix adder's
toolchain and cell library) and hands the config to the runner of its architecture.
`resume` continues a run from its latest checkpoint with the config saved in its
directory, on an installation with the same `environment.json`; the result is the same as
if it had never stopped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import warnings
from typing import Any, Callable, Iterator

import jax

from anakin import runner as anakin_runner
from anakin.config import AnakinConfig
from experiments import startup
from experiments.presets import PRESETS
from experiments.run_dir import (
    check_env_record,
    default_run_dir,
    latest_progress,
    load_run_config,
    prepare_run_dir,
)
from experiments.run_end import run_end_hooks
from experiments.signals import StopRequest
from experiments.watchdog import Watchdog
from podracer import config as config_lib
from podracer import distributed
from podracer.checkpoint import Checkpointer, Progress, checkpoint_dir
from podracer.config import Config, ConfigError, DistributedConfig
from podracer.distributed import NO_WAITS, Waits
from podracer.logging import ConsoleProgress, JsonlSink, MultiSink, TensorBoardSink, WandbSink, wandb_available
from podracer.parallel import make_mesh
from podracer.pbt import LineageSink
from podracer.runner.sizes import update_sizes
from podracer.runner.warm_start import check_source
from sebulba import runner as sebulba_runner
from sebulba.config import SebulbaConfig

MetricsCallback = Callable[[dict[str, Any]], None]


def runner_for(config: Config) -> Any:
    """The runner module (`anakin.runner`, `sebulba.runner`) for `config.arch`."""
    if isinstance(config.arch, AnakinConfig):
        return anakin_runner
    if isinstance(config.arch, SebulbaConfig):
        return sebulba_runner
    raise ConfigError(f"arch: no runner for {type(config.arch).__name__}")


def check_logging(config: Config) -> None:
    """Logging requests that cannot work are config errors, raised before anything runs."""
    if config.log.wandb and not wandb_available():
        raise ConfigError("log.wandb is set but wandb is not installed; `pip install wandb` or drop --log.wandb")


def make_sinks(config: Config, run_dir: str, console: bool, progress: Progress | None) -> MultiSink:
    keep_rows = 0 if progress is None else progress.rows  # a new run starts a fresh metrics.jsonl
    sinks: list[Any] = [JsonlSink(os.path.join(run_dir, "metrics.jsonl"), keep_rows=keep_rows)]
    if config.population.pbt_every:
        updates = None if progress is None else progress.updates
        sinks.append(LineageSink(os.path.join(run_dir, "lineage.jsonl"), updates))
    if config.log.tensorboard:
        # Rows up to the checkpoint's env steps stay; later ones are written again.
        purge_step = 0 if progress is None else progress.env_steps + 1
        sinks.append(TensorBoardSink(os.path.join(run_dir, "tensorboard"), purge_step=purge_step))
    if config.log.wandb:
        sinks.append(WandbSink(config.log.wandb_project, run_dir, config_lib.to_dict(config)))
    if console:  # over the env steps the run will take: whole updates, up to total_env_steps
        steps_per_update, num_updates = update_sizes(config)
        initial = 0 if progress is None else progress.env_steps
        sinks.append(ConsoleProgress(steps_per_update * num_updates, initial=initial))
    return MultiSink(sinks)


def train(
    config: Config,
    name: str = "run",
    console: bool | None = None,
    on_metrics: MetricsCallback | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> Any:
    """Train as `podracer train` does and return the runner's `TrainResult`.

    Writes `config.run_dir` (default `runs/<name>-<time>`), checkpoints included; a
    ConfigError if that directory already holds another run's checkpoints (`resume` it).
    `console` overrides `config.log.console` (notebooks may prefer False). `should_stop`
    is polled between host calls: when it returns True the run checkpoints and returns
    with `stopped=True` (`resume(run_dir)` continues it). With several processes
    (`config.distributed`) every process calls it; they agree on the config and the run
    directory first (see `experiments.startup`), and no wait on another process outlasts
    `distributed.timeout_s` (see `experiments.watchdog`).
    """
    runner = runner_for(config)
    warn_if_no_learning(config)
    with run_session(config.distributed, should_stop) as waits:
        timeout_s = config.distributed.timeout_s
        defaulted = not config.run_dir
        given = config.run_dir or (default_run_dir(name) if distributed.is_leader() else None)
        config = startup.agree_on_config(config, given, None, timeout_s)
        prepared = check_setup(runner, config, waits, new_run=True)
        startup.check_shared_storage(config.run_dir, lambda: prepare_run_dir(config.run_dir, config, defaulted),
                                     timeout_s)
        return _run(runner, config, prepared, console, on_metrics, should_stop, None, waits)


def warn_if_no_learning(config: Config) -> None:
    """A `UserWarning` when a replay agent's `learning_starts` (env steps of one seed, as the
    budget) is above the env steps the run takes (`total_env_steps` rounded down to whole
    updates; an update learns once the steps so far, its own included, reach
    `learning_starts`): such a run takes no gradient step, and its rows' per-step metrics
    read 0.0. Not an error: filling a buffer without learning is a use."""
    starts = getattr(config.agent, "learning_starts", None)
    if not isinstance(starts, int):
        return
    try:  # the env steps the run takes: whole updates, up to total_env_steps
        steps_per_update, num_updates = update_sizes(config)
    except ConfigError:
        return  # not even one update: the runner's setup names total_env_steps
    run_steps = steps_per_update * num_updates
    # An update learns once the env steps so far, its own included, reach learning_starts.
    if starts > run_steps:
        warnings.warn(f"agent.learning_starts ({starts}) is above the {run_steps} env steps this run takes "
                      f"(total_env_steps {config.total_env_steps} in whole updates of {steps_per_update}): "
                      "this run takes no gradient step", stacklevel=3)


def resume(
    run_dir: str,
    console: bool | None = None,
    on_metrics: MetricsCallback | None = None,
    should_stop: Callable[[], bool] | None = None,
    distributed_config: DistributedConfig | None = None,
) -> Any:
    """Continue the run in `run_dir` from its latest checkpoint, with its saved config.

    metrics.jsonl continues where the checkpoint left it (rows written after that
    checkpoint are replaced, never duplicated). Raises ConfigError when there is no
    checkpoint or it does not match the config. The saved config's `distributed` section
    describes the session that wrote it; this session's is `distributed_config`
    (default: one process), so a multi-process run resumes with every process given
    `run_dir` and its own `--distributed.*` settings.
    """
    dist = distributed_config or DistributedConfig()
    with run_session(dist, should_stop) as waits:
        saved, error = startup.attempt(lambda: load_run_config(run_dir))
        config = dataclasses.replace(saved or _placeholder(), run_dir=run_dir, distributed=dist)
        config = startup.agree_on_config(config, run_dir, error, dist.timeout_s, resume=True)
        runner = runner_for(config)
        prepared = check_setup(runner, config, waits)
        startup.check_shared_storage(run_dir, lambda: None, dist.timeout_s)
        with waits.waiting("reading the latest checkpoint"):
            progress, error = startup.attempt(lambda: latest_progress(run_dir, config))
        values = startup.gather("checkpoint", {"updates": getattr(progress, "updates", None), "error": error},
                                dist.timeout_s)
        startup.check_same_checkpoint(values, run_dir)
        return _run(runner, config, prepared, console, on_metrics, should_stop, progress, waits)


def check_setup(runner: Any, config: Config, waits: Waits, new_run: bool = False) -> Any:
    """Step 3 of `experiments.startup`: the runner's checks on every process (for a new
    run, also that `checkpoint.init_from` holds parameters that fit the agent). Returns the runner's
    `setup(config)`, which the runner then uses (a run sets up once)."""
    if distributed.process_count() > 1:
        with waits.waiting("every process's devices"):
            jax.devices()  # every process joins the backend's device exchange here

    def checks() -> Any:
        prepared = runner.setup(config)
        check_logging(config)
        if not new_run:
            check_env_record(config.run_dir, config)
        if new_run and config.checkpoint.init_from is not None:
            check_source(config.checkpoint.init_from, prepared.agent, config.checkpoint.init_member)
        return prepared

    prepared, error = startup.attempt(checks)
    startup.gather("setup", {"error": error}, config.distributed.timeout_s)
    return prepared


@contextlib.contextmanager
def run_session(config: DistributedConfig, should_stop: Callable[[], bool] | None) -> Iterator[Waits]:
    """Join the run's processes; with several, watch every wait on the others (and a stop
    signal) for the session's duration, and announce an error that ends this process's
    session to the others (but for a start-up check's, which every process raises).
    Yields the `Waits` that the runner marks."""
    if not distributed.is_multiprocess(config):
        distributed.new_session()
        yield NO_WAITS
        return
    watchdog = Watchdog(config.process_id, config.timeout_s, config.stop_timeout_s).start()
    unlisten = should_stop.listen(watchdog.notice_signal) if isinstance(should_stop, StopRequest) else None
    try:
        where = config.coordinator if config.coordinator != "auto" else "the cluster's coordinator"
        with watchdog.waiting(f"all {config.num_processes} processes to join the run at {where}"):
            distributed.initialize(config)
        distributed.new_session()
        watchdog.connected = True
        yield watchdog
    except Exception as error:
        # A failure of this process alone (a damaged shard only it reads) is told to the
        # others, whose watchdogs end them at once; not one that follows another's.
        if watchdog.connected and not isinstance(error, startup.StartupError) and \
                distributed.failure(distributed.ANNOUNCE_TIMEOUT_S) is None:
            distributed.announce_failure(failure_line(error))
        raise
    finally:
        if unlisten is not None:
            unlisten()
        watchdog.close()


def failure_line(error: BaseException) -> str:
    """`error` in one line for the other processes: a ConfigError's message as it is, any
    other error with its type."""
    text = (str(error).strip().splitlines() or [""])[0]
    return text if isinstance(error, ConfigError) else f"{type(error).__name__}: {text}"


class WatchedCheckpoints:
    """A `Checkpointer` whose saves and restores are waits on the other processes (orbax
    synchronises every process around each)."""

    def __init__(self, checkpointer: Checkpointer, waits: Waits):
        self._checkpointer, self._waits = checkpointer, waits

    def save(self, state: Any, progress: Progress) -> None:
        with self._waits.waiting(f"the checkpoint of update {progress.updates}"):
            self._checkpointer.save(state, progress)

    def restore(self, target: Any) -> tuple[Any, Progress]:
        with self._waits.waiting("restoring the latest checkpoint"):
            return self._checkpointer.restore(target)

    def latest_step(self) -> int | None:
        return self._checkpointer.latest_step()


def connect_all_devices(timeout_s: float) -> None:
    if distributed.process_count() > 1:
        distributed.connect(make_mesh(jax.devices()), timeout_s)


def record_layout(run_dir: str, prepared: Any, console: bool) -> None:
    """A Sebulba run with `arch.layout="auto"`: write the layout chosen for this host, with
    the rates it was chosen from, to `run_dir/layout.json` (each session measures again and
    rewrites it) and print why it was chosen; nothing for any other run.

    Args:
      run_dir: the run directory.
      prepared: the runner's `setup(config)`.
      console: print the reason on the console.
    """
    layout = getattr(prepared, "layout", None)  # Anakin's setup has none
    choice = getattr(layout, "auto", None)
    if choice is None:
        return
    record = {"num_actor_threads": layout.num_actor_threads, "envs_per_thread": layout.envs_per_thread,
              "env_threads": layout.env_threads, **choice.to_dict()}
    with open(os.path.join(run_dir, "layout.json"), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2)
    if console:
        print(choice.reason, flush=True)


def _placeholder() -> Config:
    """A config to publish while this process could not read the saved one (its error is
    published with it)."""
    return next(iter(PRESETS.values()))()


def _run(
    runner: Any,
    config: Config,
    prepared: Any,
    console: bool | None,
    on_metrics: MetricsCallback | None,
    should_stop: Callable[[], bool] | None,
    progress: Progress | None,
    waits: Waits = NO_WAITS,
) -> Any:
    run_dir = config.run_dir
    if distributed.is_leader():
        record_layout(run_dir, prepared, config.log.console if console is None else console)
        sink = make_sinks(config, run_dir, config.log.console if console is None else console, progress)
    else:
        sink = MultiSink([])

    def write(row: dict[str, Any]) -> None:
        sink.write(row)
        if on_metrics is not None:
            on_metrics(row)

    with waits.waiting("every process to connect its devices"):
        connect_all_devices(config.distributed.timeout_s)  # orbax's barriers span every device
    with waits.waiting("opening the checkpoint directory"):
        checkpoints = Checkpointer(checkpoint_dir(run_dir), keep=config.checkpoint.keep,
                                   run_config=config_lib.to_dict(config))
    try:
        result = runner.train(config, on_metrics=write, checkpointer=WatchedCheckpoints(checkpoints, waits),
                              should_stop=should_stop, resume=progress is not None, waits=waits, prepared=prepared)
    finally:
        with waits.waiting("closing the checkpoint directory"):
            checkpoints.close()
        sink.close()
    result = result._replace(run_dir=run_dir)
    if distributed.is_leader():
        for hook in run_end_hooks():
            hook(config, run_dir, result)
    return result
