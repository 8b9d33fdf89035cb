"""The `podracer` command line's grammar: its commands and options (`build_parser`), the
split of a command's optional PRESET from its `--section.field VALUE` overrides, and the
one-line usage error (exit status 2) that every bad input ends in."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Mapping, NoReturn

import podracer
from experiments import commands as commands_registry
from experiments.commands import BUILTIN_BENCH_COMMANDS
from podracer.config import ConfigError

USAGE_ERROR = 2

CPU_DEVICES_HELP = ("split the CPU into N JAX devices (e.g. 3 for Sebulba's 1 actor + 2 learners: "
                    "two learner devices keep two cores busy where one XLA:CPU program does not)")


def fail(message: str) -> NoReturn:
    """A user error: one line on stderr, exit status 2."""
    print(f"podracer: error: {message}", file=sys.stderr)
    raise SystemExit(USAGE_ERROR)


def as_flags(error: ConfigError, flags: Mapping[str, str]) -> ConfigError:
    """The command line's form of an error from the Python function a command runs: that
    function's messages name its parameters (`max_steps must be in ...`, `evaluate with
    sample=True`), the command's name its flags (`--max-steps must be in ...`).

    Args:
        error: raised by the function.
        flags: each parameter of the function that is a flag of the command -> that flag
            (`{"max_steps": "--max-steps"}`).

    Returns:
        A ConfigError whose message has the parameter it starts with, and any `NAME=True` in
        it, written as the flag; the message is otherwise unchanged.
    """
    message = str(error)
    for name, flag in flags.items():
        if re.match(rf"{re.escape(name)}(?=[ :])", message):
            message = flag + message[len(name):]
        message = message.replace(f"{name}=True", flag)
    return ConfigError(message)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        # No abbreviations: an override such as `--seed 1` must never be taken for a
        # command's own option it abbreviates (`bench --seeds`).
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:  # one line, no usage dump
        fail(message)


def _version() -> str:
    return podracer.__version__


def build_parser() -> argparse.ArgumentParser:
    """The grammar of `podracer`: the built-in commands, then those registered
    (`experiments.commands`; plugins are loaded first).

    Returns:
        The parser; its errors are one-line usage errors (`fail`).
    """
    registered, benches = commands_registry.commands(), commands_registry.bench_commands()
    parser = _Parser(prog="podracer", description="Podracer: scalable RL in JAX (Anakin and Sebulba).")
    parser.add_argument("--version", action="version", version=f"podracer {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    commands.add_parser("list", help="presets, environments, algorithms")

    train = commands.add_parser(
        "train", help="train a preset, or resume a run", allow_abbrev=False, add_help=False,
        description="podracer train PRESET [--section.field VALUE ...] [--sweep agent.field=V1,V2,... ...] "
                    "[--sweep-samples N] | podracer train --resume RUN_DIR",
    )
    train.add_argument("-h", "--help", action="store_true",
                       help="with a preset: every field of its config, with type, value and meaning")
    train.add_argument("preset", nargs="?", help="preset name (see `podracer list`)")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its latest checkpoint")
    train.add_argument("--cpu-devices", type=int, default=None, metavar="N", help=CPU_DEVICES_HELP)

    evaluate = commands.add_parser("evaluate", help="the policy of a run's latest checkpoint")
    evaluate.add_argument("run_dir", metavar="RUN_DIR")
    evaluate.add_argument("--episodes", type=int, default=100, help="episodes to run (default 100)")
    evaluate.add_argument("--seed", type=int, default=0, help="evaluation seed (default 0)")
    evaluate.add_argument("--member", "--agent-seed", dest="agent_seed", type=int, default=0,
                          help="which of the run's members (seeds, or settings x seeds of a sweep; default 0)")
    evaluate.add_argument("--sample", action="store_true",
                          help="sample actions instead of the greedy ones (argmax; a Gaussian's mean)")
    evaluate.add_argument("--step", type=int, metavar="N",
                          help="the checkpoint of update N, one the run kept (default: the latest)")
    evaluate.add_argument("--json", action="store_true", help="print one JSON object")
    evaluate.add_argument("--video", metavar="FILE", help="write one episode as FILE (.gif or .mp4)")
    evaluate.add_argument("--max-steps", type=int, default=100_000, metavar="N",
                          help="an episode still running after N steps ends there, its return so far counted "
                               "(default 100000)")

    plot = commands.add_parser("plot", help="learning curves of runs")
    plot.add_argument("run_dirs", metavar="RUN_DIR", nargs="+")
    plot.add_argument("--out", required=True, metavar="FILE.png")
    plot.add_argument("--labels", nargs="+", help="one label per run; runs with the same label are pooled")
    plot.add_argument("--spread", choices=["stderr", "minmax"], default="stderr",
                      help="shaded band over seeds (default: standard error)")
    plot.add_argument("--smooth", type=int, default=1, help="moving average over this many rows")
    plot.add_argument("--title", default=None)
    plot.add_argument("--by", choices=["run", "setting", "member"], default="run",
                      help="a population's curves: one per run (default), per setting (seeds pooled) or per member")
    plot.add_argument("--lineage", action="store_true",
                      help="a PBT run's hyperparameters of every member over env steps, and who copied whom")

    report = commands.add_parser("report", help="IQM, median, mean, optimality gap with bootstrap CIs (rliable)")
    report.add_argument("run_dirs", metavar="RUN_DIR", nargs="+")
    report.add_argument("--json", action="store_true", help="print one JSON object")
    report.add_argument("--out", metavar="DIR", help="write report.md, report.json, profiles.png, intervals.png")
    report.add_argument("--labels", nargs="+", help="one label per run; runs with the same label are pooled")
    report.add_argument("--compare", nargs=2, metavar=("X", "Y"), help="probability of improvement of X over Y")
    report.add_argument("--tail", type=float, default=0.1, help="score: mean return of this last share of rows")
    report.add_argument("--gap-threshold", type=float, default=None,
                        help="optimality gap below this score (default 1 for normalised scores, else none)")
    report.add_argument("--reps", type=int, default=2000, help="bootstrap resamples (default 2000)")
    report.add_argument("--by", choices=["setting", "run", "best", "median"], default="setting",
                        help="a population's members: grouped by hyperparameters (default), all as its run's, "
                             "or one score per run directory: its best or median member")

    launch = commands.add_parser(
        "launch-local", help="run a preset as N local processes (jax.distributed on 127.0.0.1)",
        description="podracer launch-local -n N PRESET [--section.field VALUE ...]",
    )
    launch.add_argument("-n", "--num-processes", type=int, required=True)
    launch.add_argument("--cpu-devices", type=int, default=None, help="fake CPU devices per process")
    launch.add_argument("--resume", metavar="RUN_DIR", help="continue the multi-process run in RUN_DIR")
    launch.add_argument("preset", nargs="?")

    bench = commands.add_parser(
        "bench", help="throughput against the physical limit; `bench table`: results over presets x seeds",
        description=" | ".join(["podracer bench anakin|sebulba [--preset NAME] [--json]",
                                "podracer bench table --presets A B ... --seeds N --out DIR [overrides]",
                                "podracer bench gpu --out FILE [--smoke]",
                                *(command.usage for command in benches.values() if command.usage)]),
    )
    bench.add_argument("arch", choices=[*BUILTIN_BENCH_COMMANDS, *benches])
    bench.add_argument("--json", action="store_true", help="print one JSON line")
    bench.add_argument("--preset", default=None, help="preset to measure (default: ppo-cartpole-<arch>)")
    bench.add_argument("--seconds", type=float, default=10.0, help="sebulba: seconds measured per quantity")
    bench.add_argument("--cpu-devices", type=int, default=None, metavar="N", help=CPU_DEVICES_HELP)
    bench.add_argument("--compare-reference", action="store_true",
                       help="anakin: also time the hand-written single-file PPO with the same hyperparameters")
    bench.add_argument("--presets", nargs="+", default=None, metavar="PRESET", help="table: presets to train")
    bench.add_argument("--seeds", type=int, default=4, help="table: seeds per preset, one program (default 4)")
    bench.add_argument("--out", default=None, metavar="DIR", help="table: output directory; gpu: the JSON file")
    bench.add_argument("--smoke", action="store_true", help="gpu: every part with tiny sizes and budgets (CPU too)")
    bench.add_argument("--milestones", nargs="+", type=float, default=None, metavar="M",
                       help="table: where to evaluate, fractions of the budget or env steps (default 0.13 0.51 0.99)")
    bench.add_argument("--episodes", type=int, default=128, help="table: evaluation episodes per seed (default 128)")
    bench.add_argument("--policy", choices=["auto", "greedy", "sample"], default="auto",
                       help="table: evaluation policy (auto: sample for PPO/IMPALA, greedy for Q-learning)")
    for command in benches.values():
        command.add_arguments(bench)
    for command in registered.values():
        command.add_arguments(commands.add_parser(command.name, help=command.help, description=command.description))
    return parser


def preset_and_overrides(tokens: list[str], options: tuple[str, ...]) -> tuple[str | None, list[str]]:
    """A command's optional PRESET and its `--section.field VALUE` overrides, in order.

    argparse would take an override's value for the preset when no preset is given
    (`train --resume DIR --distributed.process-id 1`): the preset is the first bare word,
    and only if it comes before every override. `options` (with one value each) are the
    command's own, parsed by argparse."""
    preset, overrides, i = None, [], 0
    while i < len(tokens):
        token = tokens[i]
        if token in options:
            i += 2
            continue
        if not token.startswith(tuple(f"{option}=" for option in options)):
            if preset is None and not overrides and not token.startswith("-"):
                preset = token
            else:
                overrides.append(token)
        i += 1
    return preset, overrides
