"""The `podracer` command: list, train, bench.

User errors (unknown preset or field, bad value, impossible sizes, unwritable run dir)
exit with status 2 and one line on stderr naming the problem, before anything compiles.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import NoReturn

from podracer.config import ConfigError

USAGE_ERROR = 2


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
        "train", help="train a preset", description="podracer train PRESET [--section.field VALUE ...]"
    )
    train.add_argument("preset", help="preset name (see `podracer list`)")

    launch = commands.add_parser(
        "launch-local", help="run a preset as N local processes (jax.distributed on 127.0.0.1)",
        description="podracer launch-local -n N PRESET [--section.field VALUE ...]",
    )
    launch.add_argument("-n", "--num-processes", type=int, required=True)
    launch.add_argument("--cpu-devices", type=int, default=None, help="fake CPU devices per process")
    launch.add_argument("preset")

    bench = commands.add_parser("bench", help="throughput against the physical limit")
    bench.add_argument("arch", choices=["anakin", "sebulba"])
    bench.add_argument("--json", action="store_true", help="print one JSON line")
    bench.add_argument("--preset", default=None, help="preset to measure (default: ppo-cartpole-<arch>)")
    bench.add_argument("--seconds", type=float, default=10.0, help="sebulba: seconds measured per quantity")
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


def cmd_train(preset: str, overrides: list[str]) -> None:
    from experiments.train import train

    config = resolve_config(preset, overrides)
    result = train(config, name=preset)
    from podracer.distributed import is_leader

    if not is_leader():  # process 0 alone reports a multi-process run
        return
    last = next((row for row in reversed(result.metrics) if row.get("episode_return") is not None), None)
    final = "-" if last is None else f"{last['episode_return']:.1f}"
    print(f"done: {result.metrics[-1]['env_steps']:,} env steps, final return {final}, run dir {result.run_dir}")


def cmd_launch_local(preset: str, overrides: list[str], num_processes: int, cpu_devices: int | None) -> None:
    from experiments.launch import launch_local

    if num_processes < 1:
        _fail(f"-n must be >= 1, got {num_processes}")
    resolve_config(preset, overrides)  # fail here, once, rather than in every process
    raise SystemExit(launch_local(preset, overrides, num_processes, cpu_devices))


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


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "list" and rest:
        _fail(f"unexpected arguments: {' '.join(rest)}")
    try:
        if args.command == "list":
            cmd_list()
        elif args.command == "train":
            cmd_train(args.preset, rest)
        elif args.command == "launch-local":
            cmd_launch_local(args.preset, rest, args.num_processes, args.cpu_devices)
        elif args.command == "bench":
            cmd_bench(args.arch, args.preset, rest, args.json, args.seconds)
    except ConfigError as error:
        _fail(str(error))
    except KeyboardInterrupt:
        print("podracer: interrupted", file=sys.stderr)
        raise SystemExit(130)


if __name__ == "__main__":
    main()
