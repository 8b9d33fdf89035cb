"""The `podracer` commands around training: list, evaluate, plot and bench (anakin, sebulba,
table, gpu; benchmarks that applications register run through `experiments.commands`)."""

from __future__ import annotations

import argparse
import json
import math
import sys
import textwrap

from experiments.bench import bench_anakin
from experiments.benchmarks.gpu import run_gpu_bench
from experiments.benchmarks.table import DEFAULT_MILESTONES, run_table
from experiments.cli_parser import as_flags, fail
from experiments.cli_train import resolve_config
from experiments.commands import bench_commands
from experiments.evaluate import evaluate
from experiments.lineage import plot_lineage
from experiments.plot import plot_runs
from experiments.presets import all_presets
from experiments.signals import stop_on_signals
from podracer.agents import algorithms
from podracer.config import ConfigError
from podracer.envs import jax_env_ids
from podracer.envs.envpool_env import envpool_ids
from podracer.envs.families import host_env_families
from sebulba import bench


def cmd_list(width: int = 100) -> None:
    """Presets grouped by algorithm and architecture, with whole descriptions; then the
    algorithms and environments."""
    names = {algorithm.config: name for name, algorithm in algorithms().items()}
    groups: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for preset, make in all_presets().items():
        config = make()
        algorithm = names.get(type(config.agent), type(config.agent).__name__)
        arch = type(config.arch).__name__.removesuffix("Config")
        doc = " ".join((make.__doc__ or "").split())
        groups.setdefault((algorithm, arch), []).append((preset, doc))
    print("presets:")
    for (algorithm, arch), presets in sorted(groups.items()):
        print(f"  {algorithm} / {arch}:")
        for preset, doc in presets:
            print(f"    {preset}")
            if doc:
                print(textwrap.fill(doc, width, initial_indent=" " * 8, subsequent_indent=" " * 8))
    print("algorithms:")
    for name, algorithm in algorithms().items():
        spaces = ", ".join(space.__name__ for space in algorithm.action_spaces)
        print(f"  {name:10s} {algorithm.config.__name__}: {spaces}{', action masks' if algorithm.masks else ''}")
    print("environments (Anakin, JAX; brax/* need `pip install podracer[brax]`):")
    print(textwrap.fill(", ".join(jax_env_ids()), width, initial_indent="  ", subsequent_indent="  ",
                        break_on_hyphens=False))
    families = "".join(f", and {family.description or family.name}" for family in host_env_families())
    print(f"environments (Sebulba, host): EnvPool's ids ({len(envpool_ids())}, e.g. CartPole-v1, Pong-v5, "
          "Breakout-v5, HalfCheetah-v4) and any Gymnasium id, with array observations (not Dict or Tuple) "
          f"and Discrete or Box actions{families}")


# The parameters of `evaluate` and `plot_runs` that are flags of their commands, as the flags.
EVALUATE_FLAGS = {"episodes": "--episodes", "seed": "--seed", "agent_seed": "--member/--agent-seed",
                  "sample": "--sample", "video": "--video", "max_steps": "--max-steps", "step": "--step"}
PLOT_FLAGS = {"labels": "--labels", "by": "--by", "out": "--out"}


def cmd_evaluate(args: argparse.Namespace) -> None:
    try:
        result = evaluate(args.run_dir, episodes=args.episodes, seed=args.seed, agent_seed=args.agent_seed,
                          sample=args.sample, video=args.video, max_steps=args.max_steps, step=args.step)
    except ConfigError as error:
        raise as_flags(error, EVALUATE_FLAGS) from None
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['env']}: mean return {result['mean_return']:.2f} +- {result['std_return']:.2f} over "
              f"{result['episodes']} episodes ({result['policy']} policy, update {result['step']}, "
              f"{result['env_steps']:,} env steps)")
        if result["unfinished"]:
            print(f"{result['unfinished']} episodes had not ended after --max-steps {args.max_steps} steps: "
                  "their returns so far are counted")
        if args.video:  # Anakin draws an episode of its own, a host run the first one evaluated
            print(f"video: {args.video} (an episode of return {result['video_return']:.2f})")


def cmd_plot(args: argparse.Namespace) -> None:
    if args.smooth < 1:  # a moving average over no rows
        fail(f"--smooth must be >= 1 (rows averaged), got {args.smooth}")
    if args.lineage:
        if len(args.run_dirs) != 1:
            fail("--lineage draws one run's lineage; give one RUN_DIR")
        plot_lineage(args.run_dirs[0], args.out)
    else:
        try:
            plot_runs(args.run_dirs, args.out, labels=args.labels, spread=args.spread, smooth=args.smooth,
                      title=args.title, by=args.by)
        except ConfigError as error:
            raise as_flags(error, PLOT_FLAGS) from None
    print(f"wrote {args.out}")


# Which built-in `podracer bench` subcommands read each of its options (`--cpu-devices`: all).
BENCH_OPTIONS = {
    "json": ("anakin", "sebulba"),
    "preset": ("anakin", "sebulba"),
    "seconds": ("sebulba",),
    "compare_reference": ("anakin",),
    "presets": ("table",),
    "seeds": ("table",),
    "out": ("table", "gpu"),
    "smoke": ("gpu",),
    "milestones": ("table",),
    "episodes": ("table",),
    "policy": ("table",),
}


def bench_options() -> dict[str, tuple[str, ...]]:
    """Which `podracer bench` subcommands read each of its options: the built-in ones
    (`BENCH_OPTIONS`) and the registered benchmarks (`BenchCommand.reads`).

    Returns:
        Option destination -> the subcommands that read it.
    """
    readers = {name: list(commands) for name, commands in BENCH_OPTIONS.items()}
    for command in bench_commands().values():
        for name in command.reads:
            readers.setdefault(name, []).append(command.name)
    return {name: tuple(commands) for name, commands in readers.items()}


def check_bench_options(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """A one-line error for an option given to a `bench` subcommand that does not read it
    (it would be ignored without a word: `bench table --seconds`, `bench anakin --seeds`)."""
    defaults = parser.parse_known_args(["bench", args.arch])[0]
    for name, commands in bench_options().items():
        if args.arch not in commands and getattr(args, name) != getattr(defaults, name):
            option = "--" + name.replace("_", "-")
            names = ", ".join(commands[:-1]) + " and " * (len(commands) > 1) + commands[-1]
            fail(f"{option} applies to bench {names}, not bench {args.arch}")


def cmd_bench_gpu(out: str | None, smoke: bool) -> None:
    """`podracer bench gpu --out FILE [--smoke]` (see `experiments.benchmarks.gpu`)."""
    if out is None:
        fail("bench gpu needs --out FILE (the JSON records)")
    report = run_gpu_bench(out, smoke=smoke, log=lambda line: print(line, flush=True))
    failed = [record["part"] for record in report["parts"] if record["status"] in ("failed", "timeout")]
    print(f"wrote {out}" + (f" ({', '.join(failed)} did not finish: see their records)" if failed else ""))


def cmd_bench_table(args: argparse.Namespace, overrides: list[str]) -> int:
    if not args.presets or args.out is None:
        fail("bench table needs --presets A [B ...] and --out DIR")
    with stop_on_signals() as stop:
        path = run_table(args.presets, args.seeds, args.out, overrides,
                         milestones=args.milestones or DEFAULT_MILESTONES, episodes=args.episodes,
                         policy=args.policy, user_stop=stop, log=lambda line: print(line, flush=True))
    if path is None:
        print(f"podracer: stopped by {stop.name}, checkpoint saved; the same command continues the benchmark",
              file=sys.stderr)
        return 128 + stop.signum
    print(f"wrote {path}")
    return 0


def cmd_bench(arch: str, preset: str | None, overrides: list[str], as_json: bool, seconds: float,
              compare_reference: bool = False) -> None:
    if arch == "sebulba" and not (math.isfinite(seconds) and seconds > 0):
        fail(f"--seconds must be a positive number of seconds, got {seconds}")
    config = resolve_config(preset or f"ppo-cartpole-{arch}", overrides)
    if arch == "anakin":
        result = bench_anakin(config, compare_reference=compare_reference)
    else:
        result = {"arch": "sebulba", **bench(config, seconds=seconds)}
    if as_json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            if key not in ("layout", "diagnosis", "rounds"):
                print(f"{key:>10s}: {value}")
        if "layout" in result:  # sebulba, arch.layout auto: why this layout
            print(result["layout"]["reason"])
        if "diagnosis" in result:  # sebulba: one line on what bounds it
            print(result["diagnosis"])
