"""What the `podracer` command sets up in its process before a command runs, and how it
leaves a multi-process run: user modules (`$PODRACER_IMPORT`), the CPU's device split, JAX's
persistent compilation cache. JAX is imported with podracer; what is set here must come before
its backends start (on first use), not before it is imported."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from typing import NoReturn

import jax

from experiments.cli_parser import fail
from podracer import distributed
from podracer.plugins import PluginError, import_modules, modules_to_import


def import_user_modules() -> list[str]:
    """Import the modules named in `$PODRACER_IMPORT` (comma-separated, importable from the
    current directory or PYTHONPATH), so that the environments, algorithms and presets they
    register exist for every command (and for launch-local's processes, which inherit it).
    A module that fails to import is a usage error naming it."""
    names = modules_to_import()
    try:
        import_modules(names)
    except PluginError as error:
        fail(str(error))
    return names


def use_cpu_devices(count: int | None) -> None:
    """Make the CPU backend N devices; before anything initialises JAX's backends."""
    if count is None:
        return
    if count < 1:
        fail(f"--cpu-devices must be >= 1, got {count}")
    jax.config.update("jax_num_cpu_devices", count)


COMPILATION_CACHE_ENV = "PODRACER_COMPILATION_CACHE"
COMPILATION_CACHE_MAX_ENV = "PODRACER_COMPILATION_CACHE_MAX_MB"
COMPILATION_CACHE_MAX_MB = 2048


def use_compilation_cache() -> str | None:
    """Turn on JAX's persistent compilation cache for a command that compiles, so that running
    a program compiled before (the same preset and sizes again: another seed, a resumed or
    repeated run, each process of a local multi-process run) loads it instead of compiling.
    The directory is `$PODRACER_COMPILATION_CACHE`, default `~/.cache/podracer/jax`; `off`
    disables it. The directory is bounded: past `$PODRACER_COMPILATION_CACHE_MAX_MB` (default
    2048) JAX deletes the least recently used programs. A cache the user configured for JAX
    itself (`JAX_COMPILATION_CACHE_DIR`, or `jax.config` in a notebook) is left as it is,
    bound included. Returns the directory in use, or None."""
    configured = jax.config.jax_compilation_cache_dir
    if configured:
        return configured
    choice = os.environ.get(COMPILATION_CACHE_ENV, "").strip()
    if choice.lower() in ("off", "0", "false", "no"):
        return None
    max_mb = _cache_max_mb()
    directory = os.path.expanduser(choice or os.path.join("~", ".cache", "podracer", "jax"))
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError:  # a read-only home: compile as before
        return None
    # -1: JAX's default, unbounded. JAX's bound needs filelock (a dependency; a checkout
    # used without reinstalling may lack it, and JAX would then turn the whole cache off).
    if jax.config.jax_compilation_cache_max_size == -1 and importlib.util.find_spec("filelock") is not None:
        _backfill_access_times(directory)
        jax.config.update("jax_compilation_cache_max_size", max_mb * 2**20)
    jax.config.update("jax_compilation_cache_dir", directory)
    return directory


def _backfill_access_times(directory: str) -> None:
    """Give every program in `directory` that has none the access-time file JAX's bounded
    cache keeps beside it (its modification time): a directory an unbounded cache filled
    (an earlier podracer, or JAX's default) would otherwise fail every write (JAX reads each
    program's access time to choose what to evict), and nothing new would be cached."""
    try:
        names = set(os.listdir(directory))
        for name in names:
            key = name.removesuffix("-cache")
            if key != name and f"{key}-atime" not in names:
                mtime_ns = os.stat(os.path.join(directory, name)).st_mtime_ns
                with open(os.path.join(directory, f"{key}-atime"), "wb") as f:
                    f.write(mtime_ns.to_bytes(8, "little"))
    except OSError:  # another process evicting it meanwhile, a read-only directory: JAX copes or warns
        pass


def _cache_max_mb() -> int:
    text = os.environ.get(COMPILATION_CACHE_MAX_ENV, "").strip()
    if not text:
        return COMPILATION_CACHE_MAX_MB
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        fail(f"{COMPILATION_CACHE_MAX_ENV} must be a whole number of megabytes >= 1, got {text!r}")
    return value


def joined_other_processes() -> bool:
    return jax.distributed.is_initialized()


def leave_the_run(code: int, message: str | None = None) -> NoReturn:
    """Print `message` (if any) to stderr and exit with `code`. From a multi-process run
    that failed here (a lost or stuck process, a wait past its deadline, an error of this
    process alone), exit at once: the ordinary exit would first wait in JAX's shutdown
    barrier for processes that may never come. The others, told of the failure
    (`experiments.train.run_session`), leave too; process 0, whose exit ends the
    coordination service, leaves last (`distributed.leave`). If the watchdog is leaving
    already (a deadline, or another process's failure), its line is the one: this thread
    prints nothing and waits for it to end the process."""
    if not joined_other_processes():
        if message:
            print(message, file=sys.stderr)
        raise SystemExit(code)
    if not distributed.start_leaving():
        time.sleep(LEAVING_S)  # the watchdog's thread ends the process meanwhile
    elif message:
        print(message, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    distributed.leave()
    os._exit(code)


# Longer than the watchdog takes to leave (its announcements and process 0's wait for the others).
LEAVING_S = 30.0
