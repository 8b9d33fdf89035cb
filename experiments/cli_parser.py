"""The `podracer` command line's grammar: its commands and options (`build_parser`), the
split of a command's optional PRESET from its `--section.field VALUE` overrides, and the
one-line usage error (exit status 2) that every bad input ends in."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

USAGE_ERROR = 2

CPU_DEVICES_HELP = ("split the CPU into N JAX devices (e.g. 3 for Sebulba's 1 actor + 2 learners: "
                    "two learner devices keep two cores busy where one XLA:CPU program does not)")


def fail(message: str) -> NoReturn:
    """A user error: one line on stderr, exit status 2."""
    print(f"podracer: error: {message}", file=sys.stderr)
    raise SystemExit(USAGE_ERROR)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        # No abbreviations: an override such as `--seed 1` must never be taken for a
        # command's own option it abbreviates (`bench --seeds`).
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:  # one line, no usage dump
        fail(message)


def _version() -> str:
    import podracer

    return podracer.__version__


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="podracer", description="Podracer: scalable RL in JAX (Anakin and Sebulba).")
    parser.add_argument("--version", action="version", version=f"podracer {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    commands.add_parser("list", help="presets, environments, algorithms")

    train = commands.add_parser(
        "train", help="train a preset, or resume a run", allow_abbrev=False, add_help=False,
        description="podracer train PRESET [--section.field VALUE ...] | podracer train --resume RUN_DIR",
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
    evaluate.add_argument("--agent-seed", type=int, default=0, help="which of the run's seeds (default 0)")
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

    launch = commands.add_parser(
        "launch-local", help="run a preset as N local processes (jax.distributed on 127.0.0.1)",
        description="podracer launch-local -n N PRESET [--section.field VALUE ...]",
    )
    launch.add_argument("-n", "--num-processes", type=int, required=True)
    launch.add_argument("--cpu-devices", type=int, default=None, help="fake CPU devices per process")
    launch.add_argument("--resume", metavar="RUN_DIR", help="continue the multi-process run in RUN_DIR")
    launch.add_argument("preset", nargs="?")

    baseline = commands.add_parser(
        "prefix-baseline", help="prefix adders: annealing, random or Pareto local search, and its Pareto front",
        description="podracer prefix-baseline --bits 32 --method anneal --budget 500 --out DIR",
    )
    baseline.add_argument("--bits", type=int, default=32, help="adder width N (default 32)")
    baseline.add_argument("--method", choices=["anneal", "random", "local"], default="anneal",
                          help="anneal (simulated annealing), random (random legal graphs) or local (Pareto "
                               "local search: random edits of designs on the front found so far)")
    baseline.add_argument("--budget", type=int, default=500, help="distinct designs evaluated (default 500)")
    baseline.add_argument("--out", required=True, metavar="DIR", help="writes designs.jsonl, front.png, front/*.v")
    baseline.add_argument("--cost", choices=["synthesis", "analytic"], default="synthesis",
                          help="Yosys/ABC synthesis (default) or the analytic model (node count, logic level)")
    baseline.add_argument("--seed", type=int, default=0)
    baseline.add_argument("--workers", type=int, default=None, help="synthesis processes (default: every CPU)")
    baseline.add_argument("--cache", default=None, metavar="FILE",
                          help="synthesis cache (default $PODRACER_PREFIX_CACHE or "
                               "~/.cache/podracer/prefix-synthesis.jsonl)")
    baseline.add_argument("--json", action="store_true", help="print one JSON object")

    front = commands.add_parser("prefix-front", help="the Pareto front of a prefix-adder search or run",
                                description="podracer prefix-front DIR [--out FILE.png]")
    front.add_argument("run_dir", metavar="DIR", help="a directory with designs.jsonl, or a prefix-adder training run "
                       "(its latest checkpoint's greedy designs are collected into DIR/designs.jsonl first)")
    front.add_argument("--out", default=None, metavar="FILE.png", help="the plot (default DIR/front.png)")
    front.add_argument("--json", action="store_true", help="print one JSON object")

    bench = commands.add_parser(
        "bench", help="throughput against the physical limit; `bench table`: results over presets x seeds",
        description="podracer bench anakin|sebulba [--preset NAME] [--json] | "
                    "podracer bench table --presets A B ... --seeds N --out DIR [overrides] | "
                    "podracer bench prefix --bits N --budget SYNTHESES --out DIR [--run-dir RUN] [overrides] | "
                    "podracer bench gpu --out FILE [--smoke]",
    )
    bench.add_argument("arch", choices=["anakin", "sebulba", "table", "prefix", "gpu"])
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
    bench.add_argument("--bits", type=int, default=16,
                       help="prefix: adder width; the preset defaults to dqn-prefix<bits>-front-sebulba (default 16)")
    bench.add_argument("--budget", type=int, default=None,
                       help="prefix: unique syntheses the agent trains for; the baselines get the agent's count")
    bench.add_argument("--run-dir", default=None, metavar="RUN",
                       help="prefix: read a finished run (with RUN/synthesis-cache.jsonl) instead of training")
    bench.add_argument("--baseline-seeds", type=int, default=1, metavar="K", help="prefix: seeds per baseline")
    bench.add_argument("--workers", type=int, default=None, help="prefix: synthesis processes (default: every CPU)")
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
