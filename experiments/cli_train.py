"""`podracer train` (a preset with overrides, or `--resume RUN_DIR`) and `podracer
launch-local`: resolving the config, the run's summary line and the stop line's resume hint."""

from __future__ import annotations

import argparse
import difflib
import os
import signal
import sys

import jax

from experiments import train as train_lib
from experiments.cli_parser import fail
from experiments.help import format_help
from experiments.launch import launch_local
from experiments.overrides import apply_overrides, split_overrides
from experiments.presets import all_presets
from experiments.signals import stop_on_signals
from experiments.sweep import split_population_args, train_each, with_population_args
from podracer import distributed
from podracer.config import Config
from podracer.logging import read_jsonl


def resolve_config(preset: str, overrides: list[str]):
    presets = all_presets()

    if preset not in presets:
        close = difflib.get_close_matches(preset, list(presets), n=1)
        hint = f"; did you mean {close[0]}?" if close else "; run `podracer list`"
        fail(f"unknown preset {preset!r}{hint}")
    args = split_population_args(overrides)  # --sweep, --sweep-samples (--sweep-each: cmd_train)
    return apply_overrides(with_population_args(presets[preset](), args.sweeps, args.samples), args.rest)


def cmd_train_help(parser: argparse.ArgumentParser, preset: str | None, overrides: list[str]) -> None:
    """`podracer train [PRESET [overrides]] --help`: the preset's every field (after any
    overrides given with it), or the command's own usage without a preset."""
    if preset is None:
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        print(commands.choices["train"].format_help())
        return
    print(format_help(preset, resolve_config(preset, overrides)))


def cmd_train(preset: str | None, resume_dir: str | None, overrides: list[str]) -> int:
    if preset is None and resume_dir is None:
        fail("give a preset to train, or --resume RUN_DIR")
    config = resolve_config(preset, overrides) if preset is not None and resume_dir is None else None
    session = resume_distributed(preset, overrides) if resume_dir is not None else None
    each = split_population_args(overrides).each if config is not None else []
    if each:
        return cmd_train_each(preset, config, each)
    with stop_on_signals() as stop:
        if config is not None:
            result = train_lib.train(config, name=preset, should_stop=stop)
        else:
            result = train_lib.resume(resume_dir, should_stop=stop, distributed_config=session)
    env_steps = result.env_steps
    if result.stopped:
        by = stop.name if stop.signum is not None else "a signal to another process of the run"
        print(f"podracer: stopped by {by} at {env_steps:,} env steps, checkpoint saved; "
              f"continue with: {resume_command(result.run_dir)}", file=sys.stderr)
        return 128 + (stop.signum or signal.SIGTERM)
    if not distributed.is_leader():  # process 0 alone reports a multi-process run
        return 0
    steps = f"{env_steps:,}" if isinstance(env_steps, int) else env_steps
    print(f"done: {steps} env steps, final return {final_return(result.run_dir)}, run dir {result.run_dir}")
    return 0


def cmd_train_each(preset: str, config, each: list[str]) -> int:
    """`podracer train PRESET --sweep-each ...`: one program per setting, one after another."""
    with stop_on_signals() as stop:
        results = train_each(config, each, preset, should_stop=stop)
    if results[-1].stopped:
        print(f"podracer: stopped by {stop.name} after {len(results) - 1} finished settings; continue this one "
              f"with: {resume_command(results[-1].run_dir)}", file=sys.stderr)
        return 128 + (stop.signum or signal.SIGTERM)
    for result in results:
        print(f"done: {result.run_dir}, final return {final_return(result.run_dir)}")
    parent = os.path.dirname(results[0].run_dir)
    print(f"compare them with: podracer report {' '.join(r.run_dir for r in results)} (in {parent})")
    return 0


def resume_command(run_dir: str) -> str:
    """The command that continues a stopped run on what it ran on: the same number of
    processes and (fake CPU) devices, which a checkpoint's per-device state needs."""
    fake = jax.default_backend() == "cpu" and jax.local_device_count() > 1
    devices = f" --cpu-devices {jax.local_device_count()}" if fake else ""
    processes = distributed.process_count()
    if processes == 1:
        return f"podracer train --resume {run_dir}{devices}"
    return (f"podracer launch-local -n {processes}{devices} --resume {run_dir} (on a cluster, podracer train "
            f"--resume {run_dir} with --distributed.* in each of the run's {processes} processes)")


def final_return(run_dir: str) -> str:
    """The last logged `episode_return` of the run, all its sessions included (a resumed
    run's rows continue those before it; a finished run resumed again logs none), or `-`."""
    path = os.path.join(run_dir, "metrics.jsonl")
    rows = read_jsonl(path) if os.path.exists(path) else []
    last = next((row["episode_return"] for row in reversed(rows) if row.get("episode_return") is not None), None)
    text = "-" if last is None else f"{last:.1f}"
    return "0.0" if text == "-0.0" else text


def resume_distributed(preset: str | None, overrides: list[str]):
    """The `distributed` section of a resumed session: only `--distributed.*` overrides
    may come with `--resume` (which process this is, where the coordinator is); the rest
    of the config is the run's saved one."""
    names = [name for name, _ in split_overrides(overrides)]
    if preset is not None or any(not name.startswith("distributed.") for name in names):
        extra = ([preset] if preset is not None else []) + overrides
        fail(f"--resume continues a run with its saved config (only --distributed.* may be given); "
              f"unexpected arguments: {' '.join(extra)}")
    return apply_overrides(Config(agent=None, arch=None), overrides).distributed


def cmd_launch_local(preset: str | None, resume_dir: str | None, overrides: list[str], num_processes: int,
                     cpu_devices: int | None) -> None:
    if num_processes < 1:
        fail(f"-n must be >= 1, got {num_processes}")
    if cpu_devices is not None and cpu_devices < 1:
        fail(f"--cpu-devices must be >= 1, got {cpu_devices}")
    if (preset is None) == (resume_dir is None):
        fail("give a preset to train, or --resume RUN_DIR (not both)")
    owned = {f"--distributed.{name}" for name in ("coordinator", "num-processes", "num_processes", "process-id",
                                                  "process_id")}
    given = next((arg.split("=")[0] for arg in overrides if arg.split("=")[0] in owned), None)
    if given is not None:
        fail(f"{given}: launch-local sets the coordinator, the number of processes and their ids itself "
             "(-n); to set them, start each process with podracer train")
    if resume_dir is not None:
        resume_distributed(None, overrides)  # fail here, once, rather than in every process
        train_args = ["--resume", resume_dir, *overrides]
    else:
        resolve_config(preset, overrides)
        train_args = [preset, *overrides]
    raise SystemExit(launch_local(train_args, num_processes, cpu_devices))
