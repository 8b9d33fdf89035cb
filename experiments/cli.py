"""The `podracer` command: list, train (and resume), evaluate, plot, bench, and the commands
and benchmarks that applications register (`experiments.commands`).

User errors (unknown preset or field, bad value, impossible sizes, unwritable run dir, a
checkpoint from another config) exit with status 2 and one line on stderr naming the
problem, before anything compiles. A run that diverges (non-finite loss), or a process
of a multi-process run that waited on the others past `distributed.timeout_s`, exits with
status 1 and one line. SIGTERM/SIGINT stop a run after a checkpoint; it exits with
128 + the signal number and `podracer train --resume RUN_DIR` continues it.
Plugins (the `podracer.plugins` entry points, `podracer.plugins`) are loaded before the
command line is parsed, since they may add commands; `$PODRACER_IMPORT` names modules every
command imports next (user environments, algorithms and presets:
`cli_process.import_user_modules`). An error type an application registered
(`experiments.commands.register_command_error`) ends a command with one line and the status
it was registered with. The commands live in
`cli_train` (train, resume, launch-local) and `cli_commands` (the rest); the grammar in
`cli_parser`.
"""

from __future__ import annotations

import os
import sys
import traceback
import warnings

from experiments.cli_commands import (
    check_bench_options,
    cmd_bench,
    cmd_bench_gpu,
    cmd_bench_table,
    cmd_evaluate,
    cmd_list,
    cmd_plot,
)
from experiments.cli_parser import USAGE_ERROR, build_parser, fail, preset_and_overrides
from experiments.cli_process import (
    import_user_modules,
    joined_other_processes,
    leave_the_run,
    use_compilation_cache,
    use_cpu_devices,
)
from experiments.cli_train import cmd_launch_local, cmd_train, cmd_train_help, resolve_config
from experiments.commands import bench_commands, command_error_types, commands, describe_command_error
from experiments.report import cmd_report
from experiments.startup import StartupError
from podracer.config import ConfigError
from podracer.distributed import ANNOUNCE_TIMEOUT_S, DistributedError, failure, followed, process_id
from podracer.plugins import PluginError, load_plugins
from podracer.runner import NonFiniteError

__all__ = ["main", "resolve_config", "use_compilation_cache"]

RUN_FAILED = 1



def main(argv: list[str] | None = None) -> None:
    try:
        load_plugins()
    except PluginError as error:
        fail(str(error))
    registered, benches = commands(), bench_commands()
    parser = build_parser()
    tokens = list(sys.argv[1:] if argv is None else argv)
    if not tokens:  # what the command can do, rather than "a command is required"
        parser.print_help(sys.stderr)
        raise SystemExit(USAGE_ERROR)
    args, rest = parser.parse_known_args(tokens)
    if args.command in ("train", "launch-local"):
        own = ("--resume", "--cpu-devices") + (("-n", "--num-processes") if args.command == "launch-local" else ())
        args.preset, rest = preset_and_overrides(tokens[tokens.index(args.command) + 1:], own)
        rest = [token for token in rest if token not in ("-h", "--help")]  # a flag, taken by the parser
    use_cpu_devices(getattr(args, "cpu_devices", None) if args.command in ("train", "bench") else None)
    # After --cpu-devices: a user module may start JAX's backend (a jnp constant at import).
    import_user_modules()
    if args.command in ("train", "evaluate", "bench") or (args.command in registered
                                                          and registered[args.command].compiles):
        use_compilation_cache()
    # EnvPool builds Gymnasium spaces from float64 bounds; Gymnasium warns on every one.
    warnings.filterwarnings("ignore", message=".*precision lowered by casting to float32", category=UserWarning)
    if args.command not in ("train", "bench", "launch-local") and rest:
        fail(f"unexpected arguments: {' '.join(rest)}")
    if args.command == "bench":
        check_bench_options(args, parser)
    code = 0
    try:
        if args.command == "list":
            cmd_list()
        elif args.command == "train" and args.help:
            cmd_train_help(parser, args.preset, rest)
        elif args.command == "train":
            code = cmd_train(args.preset, args.resume, rest)
        elif args.command == "evaluate":
            cmd_evaluate(args)
        elif args.command == "plot":
            cmd_plot(args)
        elif args.command == "report":
            cmd_report(args)
        elif args.command == "launch-local":
            cmd_launch_local(args.preset, args.resume, rest, args.num_processes, args.cpu_devices)
        elif args.command == "bench" and args.arch in benches:
            code = benches[args.arch].run(args, rest) or 0
        elif args.command == "bench" and args.arch == "gpu":
            cmd_bench_gpu(args.out, args.smoke)
        elif args.command == "bench" and args.arch == "table":
            code = cmd_bench_table(args, rest)
        elif args.command == "bench":
            cmd_bench(args.arch, args.preset, rest, args.json, args.seconds, args.compare_reference)
        elif args.command in registered:
            code = registered[args.command].run(args) or 0
    except StartupError as error:  # every process of a multi-process run meets it (checked together)
        fail(str(error))
    except ConfigError as error:  # in a multi-process run, maybe this process's alone (a damaged shard)
        if joined_other_processes():
            leave_the_run(USAGE_ERROR, f"podracer: error: {error}")
        fail(str(error))
    except NonFiniteError as error:
        leave_the_run(RUN_FAILED, f"podracer: error: {error}")
    except command_error_types() as error:  # an application's, registered with the status it ends in
        leave_the_run(*describe_command_error(error))
    except DistributedError as error:
        leave_the_run(RUN_FAILED, f"podracer: error: {error}")
    except KeyboardInterrupt:
        print("podracer: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except BrokenPipeError:  # the output was piped into a reader that closed early (`| head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush is quiet
        raise SystemExit(code) from None
    except Exception:
        if not joined_other_processes():
            raise
        failed = failure(ANNOUNCE_TIMEOUT_S)
        if failed is not None:  # this error follows another process's failure (a broken connection to it)
            leave_the_run(RUN_FAILED, f"podracer: error: {followed(failed, process_id())}")
        # Its notes name the wait on the other processes, if any.
        leave_the_run(RUN_FAILED, traceback.format_exc().rstrip("\n"))
    if code:
        raise SystemExit(code)


if __name__ == "__main__":
    main()
