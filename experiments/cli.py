"""The `podracer` command: list, train (and resume), evaluate, plot, bench.

User errors (unknown preset or field, bad value, impossible sizes, unwritable run dir, a
checkpoint from another config) exit with status 2 and one line on stderr naming the
problem, before anything compiles. A run that diverges (non-finite loss), or a process
of a multi-process run that waited on the others past `distributed.timeout_s`, exits with
status 1 and one line. SIGTERM/SIGINT stop a run after a checkpoint; it exits with
128 + the signal number and `podracer train --resume RUN_DIR` continues it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import traceback
import warnings
from typing import NoReturn

from podracer.checkpoint import NonFiniteError
from podracer.config import ConfigError
from podracer.distributed import DistributedError

USAGE_ERROR = 2
RUN_FAILED = 1


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, no usage dump
        print(f"podracer: error: {message}", file=sys.stderr)
        raise SystemExit(USAGE_ERROR)


def _fail(message: str) -> NoReturn:
    print(f"podracer: error: {message}", file=sys.stderr)
    raise SystemExit(USAGE_ERROR)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="podracer", description="Podracer: scalable RL in JAX (Anakin and Sebulba).")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    commands.add_parser("list", help="presets, environments, algorithms")

    train = commands.add_parser(
        "train", help="train a preset, or resume a run", allow_abbrev=False,
        description="podracer train PRESET [--section.field VALUE ...] | podracer train --resume RUN_DIR",
    )
    train.add_argument("preset", nargs="?", help="preset name (see `podracer list`)")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its latest checkpoint")
    train.add_argument("--cpu-devices", type=int, default=None, metavar="N", help=CPU_DEVICES_HELP)

    evaluate = commands.add_parser("evaluate", help="the policy of a run's latest checkpoint")
    evaluate.add_argument("run_dir", metavar="RUN_DIR")
    evaluate.add_argument("--episodes", type=int, default=100, help="episodes to run (default 100)")
    evaluate.add_argument("--seed", type=int, default=0, help="evaluation seed (default 0)")
    evaluate.add_argument("--agent-seed", type=int, default=0, help="which of the run's seeds (default 0)")
    evaluate.add_argument("--sample", action="store_true", help="sample actions instead of the argmax")
    evaluate.add_argument("--json", action="store_true", help="print one JSON object")
    evaluate.add_argument("--video", metavar="FILE", help="write one episode as FILE (.gif or .mp4)")

    plot = commands.add_parser("plot", help="learning curves of runs")
    plot.add_argument("run_dirs", metavar="RUN_DIR", nargs="+")
    plot.add_argument("--out", required=True, metavar="FILE.png")
    plot.add_argument("--labels", nargs="+", help="one label per run; runs with the same label are pooled")
    plot.add_argument("--spread", choices=["stderr", "minmax"], default="stderr",
                      help="shaded band over seeds (default: standard error)")
    plot.add_argument("--smooth", type=int, default=1, help="moving average over this many rows")
    plot.add_argument("--title", default=None)

    launch = commands.add_parser(
        "launch-local", help="run a preset as N local processes (jax.distributed on 127.0.0.1)",
        description="podracer launch-local -n N PRESET [--section.field VALUE ...]",
    )
    launch.add_argument("-n", "--num-processes", type=int, required=True)
    launch.add_argument("--cpu-devices", type=int, default=None, help="fake CPU devices per process")
    launch.add_argument("--resume", metavar="RUN_DIR", help="continue the multi-process run in RUN_DIR")
    launch.add_argument("preset", nargs="?")

    bench = commands.add_parser("bench", help="throughput against the physical limit")
    bench.add_argument("arch", choices=["anakin", "sebulba"])
    bench.add_argument("--json", action="store_true", help="print one JSON line")
    bench.add_argument("--preset", default=None, help="preset to measure (default: ppo-cartpole-<arch>)")
    bench.add_argument("--seconds", type=float, default=10.0, help="sebulba: seconds measured per quantity")
    bench.add_argument("--cpu-devices", type=int, default=None, metavar="N", help=CPU_DEVICES_HELP)
    return parser


def resolve_config(preset: str, overrides: list[str]):
    from experiments.overrides import apply_overrides
    from experiments.presets import PRESETS

    if preset not in PRESETS:
        import difflib

        close = difflib.get_close_matches(preset, list(PRESETS), n=1)
        hint = f"; did you mean {close[0]}?" if close else f"; run `podracer list`"
        _fail(f"unknown preset {preset!r}{hint}")
    return apply_overrides(PRESETS[preset](), overrides)


def cmd_list() -> None:
    from experiments.presets import PRESETS
    from podracer.agents import ALGORITHMS
    from podracer.envs import jax_env_ids

    print("presets:")
    for name, make in PRESETS.items():
        print(f"  {name:28s} {(make.__doc__ or '').strip().splitlines()[0]}")
    print("algorithms:\n  " + ", ".join(ALGORITHMS))
    print("environments (Anakin, JAX):\n  " + ", ".join(jax_env_ids()))
    from podracer.envs.envpool_env import envpool_ids

    print(f"environments (Sebulba, host): every EnvPool id ({len(envpool_ids())}, e.g. CartPole-v1, Pong-v5, "
          "Breakout-v5) and any Gymnasium id")


def cmd_train(preset: str | None, resume_dir: str | None, overrides: list[str]) -> int:
    from experiments import train as train_lib
    from experiments.signals import stop_on_signals

    if preset is None and resume_dir is None:
        _fail("give a preset to train, or --resume RUN_DIR")
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
              f"continue with: podracer train --resume {result.run_dir}", file=sys.stderr)
        return 128 + (stop.signum or signal.SIGTERM)
    from podracer.distributed import is_leader

    if not is_leader():  # process 0 alone reports a multi-process run
        return 0
    last = next((row for row in reversed(result.metrics) if row.get("episode_return") is not None), None)
    final = "-" if last is None else f"{last['episode_return']:.1f}"
    steps = f"{env_steps:,}" if isinstance(env_steps, int) else env_steps
    print(f"done: {steps} env steps, final return {final}, run dir {result.run_dir}")
    return 0


def resume_distributed(preset: str | None, overrides: list[str]):
    """The `distributed` section of a resumed session: only `--distributed.*` overrides
    may come with `--resume` (which process this is, where the coordinator is); the rest
    of the config is the run's saved one."""
    from experiments.overrides import apply_overrides, split_overrides
    from podracer.config import Config

    names = [name for name, _ in split_overrides(overrides)]
    if preset is not None or any(not name.startswith("distributed.") for name in names):
        extra = ([preset] if preset is not None else []) + overrides
        _fail(f"--resume continues a run with its saved config (only --distributed.* may be given); "
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
        _fail(f"-n must be >= 1, got {num_processes}")
    if (preset is None) == (resume_dir is None):
        _fail("give a preset to train, or --resume RUN_DIR (not both)")
    if resume_dir is not None:
        resume_distributed(None, overrides)  # fail here, once, rather than in every process
        train_args = ["--resume", resume_dir, *overrides]
    else:
        resolve_config(preset, overrides)
        train_args = [preset, *overrides]
    raise SystemExit(launch_local(train_args, num_processes, cpu_devices))


def cmd_bench(arch: str, preset: str | None, overrides: list[str], as_json: bool, seconds: float) -> None:
    config = resolve_config(preset or f"ppo-cartpole-{arch}", overrides)
    if arch == "anakin":
        from experiments.bench import bench_anakin

        result = bench_anakin(config)
    else:
        from sebulba import bench

        result = {"arch": "sebulba", **bench(config, seconds=seconds)}
    if as_json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>10s}: {value}")


CPU_DEVICES_HELP = ("split the CPU into N JAX devices (e.g. 3 for Sebulba's 1 actor + 2 learners: "
                    "two learner devices keep two cores busy where one XLA:CPU program does not)")


def use_cpu_devices(count: int | None) -> None:
    """Make the CPU backend N devices; before anything initialises JAX's backends."""
    if count is None:
        return
    if count < 1:
        _fail(f"--cpu-devices must be >= 1, got {count}")
    import jax

    jax.config.update("jax_num_cpu_devices", count)


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


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    tokens = list(sys.argv[1:] if argv is None else argv)
    args, rest = parser.parse_known_args(tokens)
    if args.command in ("train", "launch-local"):
        own = ("--resume", "--cpu-devices") + (("-n", "--num-processes") if args.command == "launch-local" else ())
        args.preset, rest = preset_and_overrides(tokens[tokens.index(args.command) + 1:], own)
    use_cpu_devices(getattr(args, "cpu_devices", None) if args.command in ("train", "bench") else None)
    # EnvPool builds Gymnasium spaces from float64 bounds; Gymnasium warns on every one.
    warnings.filterwarnings("ignore", message=".*precision lowered by casting to float32", category=UserWarning)
    if args.command not in ("train", "bench", "launch-local") and rest:
        _fail(f"unexpected arguments: {' '.join(rest)}")
    code = 0
    try:
        if args.command == "list":
            cmd_list()
        elif args.command == "train":
            code = cmd_train(args.preset, args.resume, rest)
        elif args.command == "evaluate":
            cmd_evaluate(args)
        elif args.command == "plot":
            cmd_plot(args)
        elif args.command == "launch-local":
            cmd_launch_local(args.preset, args.resume, rest, args.num_processes, args.cpu_devices)
        elif args.command == "bench":
            cmd_bench(args.arch, args.preset, rest, args.json, args.seconds)
    except ConfigError as error:
        _fail(str(error))
    except NonFiniteError as error:
        print(f"podracer: error: {error}", file=sys.stderr)
        raise SystemExit(RUN_FAILED)
    except DistributedError as error:
        print(f"podracer: error: {error}", file=sys.stderr)
        leave_the_run(RUN_FAILED)
    except KeyboardInterrupt:
        print("podracer: interrupted", file=sys.stderr)
        raise SystemExit(130)
    except BrokenPipeError:  # the output was piped into a reader that closed early (`| head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush is quiet
        raise SystemExit(code)
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
