"""Commands that applications and plugins add to the `podracer` command line: subcommands
(`podracer NAME ...`), `podracer bench NAME ...` benchmarks, and error types that end a
command with one line instead of a traceback.

An application registers them when it loads (a `podracer.plugins` entry point, or a module
named in `$PODRACER_IMPORT`); `experiments.cli_parser.build_parser` adds their grammar and
`experiments.cli.main` runs them.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Callable

from podracer.plugins import load_plugins


@dataclasses.dataclass(frozen=True)
class Command:
    """A subcommand, `podracer NAME ...`.

    name:      the subcommand's word.
    add_arguments: adds its arguments to its parser (`argparse.ArgumentParser`).
    run:       `(args) -> exit status or None` (None: 0).
    help:      one line for `podracer --help`.
    description: the usage line of `podracer NAME --help`.
    compiles:  it compiles JAX programs: JAX's persistent compilation cache is turned on first.
    """

    name: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int | None]
    help: str = ""
    description: str = ""
    compiles: bool = False


@dataclasses.dataclass(frozen=True)
class BenchCommand:
    """A benchmark, `podracer bench NAME ...`, which shares the `bench` parser.

    name:          the benchmark's word (beside anakin, sebulba, table).
    add_arguments: adds the options only it reads to the `bench` parser.
    run:           `(args, overrides) -> exit status or None`; `overrides` are the
                   `--section.field VALUE` words left after its options.
    reads:         every `bench` option it reads (by destination: "json", "out", its own),
                   so that an option given to a benchmark that ignores it is an error.
    usage:         its usage line in `podracer bench --help`.
    """

    name: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, list[str]], int | None]
    reads: tuple[str, ...] = ()
    usage: str = ""


@dataclasses.dataclass(frozen=True)
class CommandError:
    """An error type that ends any command with one line `podracer: error: <describe(error)>`
    and exit status `status` (2: the user's input; 1: the run failed)."""

    error_type: type[BaseException]
    status: int
    describe: Callable[[BaseException], str]


_COMMANDS: dict[str, Command] = {}
_BENCH_COMMANDS: dict[str, BenchCommand] = {}
_ERRORS: list[CommandError] = []

BUILTIN_COMMANDS = ("list", "train", "evaluate", "plot", "launch-local", "bench")
BUILTIN_BENCH_COMMANDS = ("anakin", "sebulba", "table", "gpu")


def register_command(command: Command, overwrite: bool = False) -> None:
    """Add a subcommand to `podracer`.

    Args:
        command: what it is called, its arguments and what it runs.
        overwrite: replace a command registered under the same name.

    Raises:
        ValueError: the name is built-in, or taken and `overwrite` is not set.
    """
    _register(_COMMANDS, BUILTIN_COMMANDS, "command", command, overwrite)


def register_bench_command(command: BenchCommand, overwrite: bool = False) -> None:
    """Add a benchmark to `podracer bench`.

    Args:
        command: what it is called, its options and what it runs.
        overwrite: replace a benchmark registered under the same name.

    Raises:
        ValueError: the name is built-in, or taken and `overwrite` is not set.
    """
    _register(_BENCH_COMMANDS, BUILTIN_BENCH_COMMANDS, "bench", command, overwrite)


def _register(table: dict[str, Any], builtins: tuple[str, ...], kind: str, command: Any, overwrite: bool) -> None:
    """Add `command` to `table` by its name, unless the name is built-in or (without
    `overwrite`) taken: ValueError naming the `kind` and the name."""
    if command.name in builtins:
        raise ValueError(f"{kind} {command.name!r} is built-in; choose another name")
    if command.name in table and not overwrite:
        raise ValueError(f"{kind} {command.name!r} is already registered; pass overwrite=True to replace it")
    table[command.name] = command


def register_command_error(error_type: type[BaseException], status: int = 2,
                           describe: Callable[[BaseException], str] = str) -> None:
    """Make every command end with one line, not a traceback, when `error_type` escapes it.

    Args:
        error_type: the exception class (its subclasses included).
        status: the exit status: 2 for the user's input, 1 for a run that failed.
        describe: the line after `podracer: error: ` (newlines become spaces).
    """
    _ERRORS.append(CommandError(error_type, status, describe))


def commands() -> dict[str, Command]:
    """The registered subcommands by name (plugins loaded first).

    Returns:
        The commands, in the order registered.
    """
    load_plugins()
    return dict(_COMMANDS)


def bench_commands() -> dict[str, BenchCommand]:
    """The registered benchmarks by name (plugins loaded first).

    Returns:
        The benchmarks, in the order registered.
    """
    load_plugins()
    return dict(_BENCH_COMMANDS)


def command_error_types() -> tuple[type[BaseException], ...]:
    """The registered error types, for an `except` clause.

    Returns:
        The types, in the order registered.
    """
    return tuple(error.error_type for error in _ERRORS)


def describe_command_error(error: BaseException) -> tuple[int, str]:
    """The exit status and one-line message of a registered error type's instance.

    Args:
        error: an instance of a registered error type.

    Returns:
        `(status, message)`, the message starting `podracer: error: `.
    """
    handler = next(handler for handler in _ERRORS if isinstance(error, handler.error_type))
    return handler.status, f"podracer: error: {handler.describe(error)}".replace("\n", " ")
