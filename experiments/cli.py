"""The `podracer` command: list, train (and resume), evaluate, plot, bench, and the
prefix-adder tools (prefix-baseline, prefix-front).

User errors (unknown preset or field, bad value, impossible sizes, unwritable run dir, a
checkpoint from another config) exit with status 2 and one line on stderr naming the
problem, before anything compiles. A run that diverges (non-finite loss), or a process
of a multi-process run that waited on the others past `distributed.timeout_s`, exits with
status 1 and one line. SIGTERM/SIGINT stop a run after a checkpoint; it exits with
128 + the signal number and `podracer train --resume RUN_DIR` continues it.
`$PODRACER_IMPORT` names modules every command imports first (user environments,
algorithms and presets: `import_user_modules`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import traceback
import warnings
from typing import NoReturn

from experiments.cli_parser import build_parser, fail, preset_and_overrides
from podracer.config import ConfigError
from podracer.distributed import DistributedError
from podracer.envs.prefix.synthesis import SynthesisError
from podracer.runner import NonFiniteError

RUN_FAILED = 1
IMPORT_ENV = "PODRACER_IMPORT"  # modules to import first: user environments, algorithms, presets


def import_user_modules() -> list[str]:
    """Import the modules named in `$PODRACER_IMPORT` (comma-separated, importable from the
    current directory or PYTHONPATH), so that the environments, algorithms and presets they
    register exist for every command (and for launch-local's processes, which inherit it).
    A module that fails to import is a usage error naming it."""
    import importlib

    names = [name.strip() for name in os.environ.get(IMPORT_ENV, "").split(",") if name.strip()]
    if names and "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # `python -m` would have; the console script does not
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - whatever the user's module raised, named
            fail(f"{IMPORT_ENV}: cannot import {name!r}: {type(error).__name__}: {error}".replace("\n", " "))
    return names


def resolve_config(preset: str, overrides: list[str]):
    from experiments.overrides import apply_overrides
    from experiments.presets import PRESETS

    if preset not in PRESETS:
        import difflib

        close = difflib.get_close_matches(preset, list(PRESETS), n=1)
        hint = f"; did you mean {close[0]}?" if close else "; run `podracer list`"
        fail(f"unknown preset {preset!r}{hint}")
    return apply_overrides(PRESETS[preset](), overrides)


def cmd_list(width: int = 100) -> None:
    """Presets grouped by algorithm and architecture, with whole descriptions; then the
    algorithms and environments."""
    import textwrap

    from experiments.presets import PRESETS
    from podracer.agents import algorithms
    from podracer.envs import jax_env_ids
    from podracer.envs.envpool_env import envpool_ids

    names = {algorithm.config: name for name, algorithm in algorithms().items()}
    groups: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for preset, make in PRESETS.items():
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
    print(f"environments (Sebulba, host): EnvPool's ids ({len(envpool_ids())}, e.g. CartPole-v1, Pong-v5, "
          "Breakout-v5, HalfCheetah-v4) and any Gymnasium id, with array observations (not Dict or Tuple) "
          "and Discrete or Box actions, and the prefix adders "
          "PrefixAdder-<N> (analytic costs) and "
          "PrefixAdderSynth-<N> (synthesis rewards)")


def cmd_train_help(parser: argparse.ArgumentParser, preset: str | None, overrides: list[str]) -> None:
    """`podracer train [PRESET [overrides]] --help`: the preset's every field (after any
    overrides given with it), or the command's own usage without a preset."""
    if preset is None:
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        print(commands.choices["train"].format_help())
        return
    from experiments.help import format_help

    print(format_help(preset, resolve_config(preset, overrides)))


def cmd_train(preset: str | None, resume_dir: str | None, overrides: list[str]) -> int:
    from experiments import train as train_lib
    from experiments.signals import stop_on_signals

    if preset is None and resume_dir is None:
        fail("give a preset to train, or --resume RUN_DIR")
    config = resolve_config(preset, overrides) if preset is not None and resume_dir is None else None
    session = resume_distributed(preset, overrides) if resume_dir is not None else None
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
    from podracer.distributed import is_leader

    if not is_leader():  # process 0 alone reports a multi-process run
        return 0
    steps = f"{env_steps:,}" if isinstance(env_steps, int) else env_steps
    print(f"done: {steps} env steps, final return {final_return(result.run_dir)}, run dir {result.run_dir}")
    return 0


def resume_command(run_dir: str) -> str:
    """The command that continues a stopped run on what it ran on: the same number of
    processes and (fake CPU) devices, which a checkpoint's per-device state needs."""
    import jax

    from podracer.distributed import process_count

    fake = jax.default_backend() == "cpu" and jax.local_device_count() > 1
    devices = f" --cpu-devices {jax.local_device_count()}" if fake else ""
    processes = process_count()
    if processes == 1:
        return f"podracer train --resume {run_dir}{devices}"
    return (f"podracer launch-local -n {processes}{devices} --resume {run_dir} (on a cluster, podracer train "
            f"--resume {run_dir} with --distributed.* in each of the run's {processes} processes)")


def final_return(run_dir: str) -> str:
    """The last logged `episode_return` of the run, all its sessions included (a resumed
    run's rows continue those before it; a finished run resumed again logs none), or `-`."""
    from podracer.logging import read_jsonl

    path = os.path.join(run_dir, "metrics.jsonl")
    rows = read_jsonl(path) if os.path.exists(path) else []
    last = next((row["episode_return"] for row in reversed(rows) if row.get("episode_return") is not None), None)
    text = "-" if last is None else f"{last:.1f}"
    return "0.0" if text == "-0.0" else text


def resume_distributed(preset: str | None, overrides: list[str]):
    """The `distributed` section of a resumed session: only `--distributed.*` overrides
    may come with `--resume` (which process this is, where the coordinator is); the rest
    of the config is the run's saved one."""
    from experiments.overrides import apply_overrides, split_overrides
    from podracer.config import Config

    names = [name for name, _ in split_overrides(overrides)]
    if preset is not None or any(not name.startswith("distributed.") for name in names):
        extra = ([preset] if preset is not None else []) + overrides
        fail(f"--resume continues a run with its saved config (only --distributed.* may be given); "
              f"unexpected arguments: {' '.join(extra)}")
    return apply_overrides(Config(agent=None, arch=None), overrides).distributed


def cmd_evaluate(args: argparse.Namespace) -> None:
    from experiments.evaluate import evaluate

    result = evaluate(args.run_dir, episodes=args.episodes, seed=args.seed, agent_seed=args.agent_seed,
                      sample=args.sample, video=args.video)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['env']}: mean return {result['mean_return']:.2f} +- {result['std_return']:.2f} over "
              f"{result['episodes']} episodes ({result['policy']} policy, {result['env_steps']:,} env steps)")
        if args.video:
            print(f"video: {args.video}")


def cmd_plot(args: argparse.Namespace) -> None:
    from experiments.plot import plot_runs

    plot_runs(args.run_dirs, args.out, labels=args.labels, spread=args.spread, smooth=args.smooth, title=args.title)
    print(f"wrote {args.out}")


def cmd_launch_local(preset: str | None, resume_dir: str | None, overrides: list[str], num_processes: int,
                     cpu_devices: int | None) -> None:
    from experiments.launch import launch_local

    if num_processes < 1:
        fail(f"-n must be >= 1, got {num_processes}")
    if cpu_devices is not None and cpu_devices < 1:
        fail(f"--cpu-devices must be >= 1, got {cpu_devices}")
    if (preset is None) == (resume_dir is None):
        fail("give a preset to train, or --resume RUN_DIR (not both)")
    if resume_dir is not None:
        resume_distributed(None, overrides)  # fail here, once, rather than in every process
        train_args = ["--resume", resume_dir, *overrides]
    else:
        resolve_config(preset, overrides)
        train_args = [preset, *overrides]
    raise SystemExit(launch_local(train_args, num_processes, cpu_devices))


def cmd_bench_table(args: argparse.Namespace, overrides: list[str]) -> int:
    from experiments.benchmarks.table import DEFAULT_MILESTONES, run_table
    from experiments.signals import stop_on_signals

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


def cmd_bench_prefix(args: argparse.Namespace, overrides: list[str]) -> None:
    from experiments.benchmarks import prefix

    if args.out is None:
        fail("bench prefix needs --out DIR")
    if args.baseline_seeds < 1:
        fail(f"--baseline-seeds must be >= 1, got {args.baseline_seeds}")
    if args.workers is not None and args.workers < 1:
        fail(f"--workers must be >= 1, got {args.workers}")
    config = None
    if args.run_dir is None:
        if args.budget is None or args.budget < 1:
            fail(f"bench prefix needs --budget >= 1 (unique syntheses) to train the agent, got {args.budget}")
        config = resolve_config(args.preset or prefix.default_preset(args.bits), overrides)
        prefix.check_agent_config(config, args.bits)
    elif overrides or args.preset:
        fail("bench prefix --run-dir reads a finished run: no preset or overrides")
    table = prefix.compare(args.out, args.budget, config, args.run_dir, range(args.baseline_seeds), args.workers,
                           log=lambda line: print(line, flush=True) if not args.json else None)
    print(json.dumps(table) if args.json else prefix.format_table(table))


def cmd_bench(arch: str, preset: str | None, overrides: list[str], as_json: bool, seconds: float,
              compare_reference: bool = False) -> None:
    if compare_reference and arch != "anakin":
        fail("--compare-reference applies to bench anakin")
    if arch == "sebulba" and not (math.isfinite(seconds) and seconds > 0):
        fail(f"--seconds must be a positive number of seconds, got {seconds}")
    config = resolve_config(preset or f"ppo-cartpole-{arch}", overrides)
    if arch == "anakin":
        from experiments.bench import bench_anakin

        result = bench_anakin(config, compare_reference=compare_reference)
    else:
        from sebulba import bench

        result = {"arch": "sebulba", **bench(config, seconds=seconds)}
    if as_json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>10s}: {value}")


def cmd_prefix(args: argparse.Namespace) -> None:
    from experiments import prefix

    if args.command == "prefix-baseline":
        if args.workers is not None and args.workers < 1:
            fail(f"--workers must be >= 1, got {args.workers}")
        summary = prefix.run_baseline(args.bits, args.method, args.budget, args.out, args.cost, args.seed,
                                      args.workers, args.cache)
    else:
        summary = prefix.show_front(args.run_dir, args.out)
    if args.json:
        print(json.dumps(summary))
        return
    if "method" in summary:
        print(f"{summary['method']}: {summary['designs']} designs in {summary['search_s']:.1f} s "
              f"({summary['syntheses_per_s']:.1f} syntheses/s, cache hit rate {summary['cache_hit_rate']:.2f})")
    front = ", ".join(f"({p['area']:g}, {p['delay']:g})" for p in summary["front"])
    print(f"{summary['bits']}-bit front, {len(summary['front'])} designs (area, delay): {front}")
    print(f"hypervolume {summary['hypervolume']:.4f}; dominates: {', '.join(summary['dominates']) or 'none'}")
    print(f"wrote {summary['plot']} and {len(summary['verilog'])} Verilog modules in "
          f"{os.path.dirname(summary['verilog'][0])}")


def use_cpu_devices(count: int | None) -> None:
    """Make the CPU backend N devices; before anything initialises JAX's backends."""
    if count is None:
        return
    if count < 1:
        fail(f"--cpu-devices must be >= 1, got {count}")
    import jax

    jax.config.update("jax_num_cpu_devices", count)


COMPILATION_CACHE_ENV = "PODRACER_COMPILATION_CACHE"


def use_compilation_cache() -> str | None:
    """Turn on JAX's persistent compilation cache for a command that compiles, so that running
    a program compiled before (the same preset and sizes again: another seed, a resumed or
    repeated run, each process of a local multi-process run) loads it instead of compiling.
    The directory is `$PODRACER_COMPILATION_CACHE`, default `~/.cache/podracer/jax`; `off`
    disables it. A cache the user configured for JAX itself (`JAX_COMPILATION_CACHE_DIR`,
    or `jax.config` in a notebook) is left as it is. Returns the directory in use, or None."""
    import jax

    configured = jax.config.jax_compilation_cache_dir
    if configured:
        return configured
    choice = os.environ.get(COMPILATION_CACHE_ENV, "").strip()
    if choice.lower() in ("off", "0", "false", "no"):
        return None
    directory = os.path.expanduser(choice or os.path.join("~", ".cache", "podracer", "jax"))
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError:  # a read-only home: compile as before
        return None
    jax.config.update("jax_compilation_cache_dir", directory)
    return directory


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    tokens = list(sys.argv[1:] if argv is None else argv)
    args, rest = parser.parse_known_args(tokens)
    if args.command in ("train", "launch-local"):
        own = ("--resume", "--cpu-devices") + (("-n", "--num-processes") if args.command == "launch-local" else ())
        args.preset, rest = preset_and_overrides(tokens[tokens.index(args.command) + 1:], own)
        rest = [token for token in rest if token not in ("-h", "--help")]  # a flag, taken by the parser
    use_cpu_devices(getattr(args, "cpu_devices", None) if args.command in ("train", "bench") else None)
    # After --cpu-devices: a user module may start JAX's backend (a jnp constant at import).
    import_user_modules()
    if args.command in ("train", "evaluate", "bench", "prefix-front"):
        use_compilation_cache()
    # EnvPool builds Gymnasium spaces from float64 bounds; Gymnasium warns on every one.
    warnings.filterwarnings("ignore", message=".*precision lowered by casting to float32", category=UserWarning)
    if args.command not in ("train", "bench", "launch-local") and rest:
        fail(f"unexpected arguments: {' '.join(rest)}")
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
        elif args.command == "launch-local":
            cmd_launch_local(args.preset, args.resume, rest, args.num_processes, args.cpu_devices)
        elif args.command == "bench" and args.arch == "prefix":
            cmd_bench_prefix(args, rest)
        elif args.command == "bench" and args.arch == "table":
            code = cmd_bench_table(args, rest)
        elif args.command == "bench":
            cmd_bench(args.arch, args.preset, rest, args.json, args.seconds, args.compare_reference)
        elif args.command in ("prefix-baseline", "prefix-front"):
            cmd_prefix(args)
    except ConfigError as error:
        fail(str(error))
    except NonFiniteError as error:
        print(f"podracer: error: {error}", file=sys.stderr)
        raise SystemExit(RUN_FAILED) from None
    except SynthesisError as error:  # the tools ran and failed: not a usage error, not a bug of ours
        print(f"podracer: error: synthesis failed: {error}".replace("\n", " "), file=sys.stderr)
        if joined_other_processes():
            leave_the_run(RUN_FAILED)
        raise SystemExit(RUN_FAILED) from None
    except DistributedError as error:
        print(f"podracer: error: {error}", file=sys.stderr)
        leave_the_run(RUN_FAILED)
    except KeyboardInterrupt:
        print("podracer: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except BrokenPipeError:  # the output was piped into a reader that closed early (`| head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush is quiet
        raise SystemExit(code) from None
    except Exception:
        if not joined_other_processes():
            raise
        traceback.print_exc()  # its notes name the wait on the other processes, if any
        leave_the_run(RUN_FAILED)
    if code:
        raise SystemExit(code)


def joined_other_processes() -> bool:
    import jax

    return jax.distributed.is_initialized()


def leave_the_run(code: int) -> NoReturn:
    """Exit at once from a multi-process run that failed here (a lost or stuck process, a
    wait past its deadline): the ordinary exit would first wait in JAX's shutdown barrier
    for processes that may never come. Those left are stopped by JAX (or their own
    deadlines) once this one is gone."""
    if not joined_other_processes():
        raise SystemExit(code)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
