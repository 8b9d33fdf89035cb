"""The prefix-adder application's commands: `podracer prefix-baseline` (a search and its
Pareto front), `podracer prefix-front` (the front of a search or a training run) and
`podracer bench prefix` (the agent against the baselines on a budget of syntheses),
registered by `experiments.prefix.plugin`. Every command line loads the plugin, so the
modules that do the work are imported when a command runs, not here."""

from __future__ import annotations

import argparse
import json
import os

from experiments.cli_parser import fail
from experiments.cli_train import resolve_config
from experiments.prefix import bench
from experiments.prefix.fronts import run_baseline, show_front
from experiments.presets import all_presets


def add_baseline_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `podracer prefix-baseline`.

    Args:
        parser: the subcommand's parser.
    """
    parser.add_argument("--bits", type=int, default=32, help="adder width N (default 32)")
    parser.add_argument("--method", choices=["anneal", "random", "local"], default="anneal",
                        help="anneal (simulated annealing), random (random legal graphs) or local (Pareto "
                             "local search: random edits of designs on the front found so far)")
    parser.add_argument("--budget", type=int, default=500, help="distinct designs evaluated (default 500)")
    parser.add_argument("--out", required=True, metavar="DIR", help="writes designs.jsonl, front.png, front/*.v")
    parser.add_argument("--cost", choices=["synthesis", "analytic"], default="synthesis",
                        help="Yosys/ABC synthesis (default) or the analytic model (node count, logic level)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=None, help="synthesis processes (default: every CPU)")
    parser.add_argument("--cache", default=None, metavar="FILE",
                        help="synthesis cache (default $PODRACER_PREFIX_CACHE or "
                             "~/.cache/podracer/prefix-synthesis-<toolchain hash>.jsonl)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def add_front_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `podracer prefix-front`.

    Args:
        parser: the subcommand's parser.
    """
    parser.add_argument("run_dir", metavar="DIR", help="a directory with designs.jsonl, or a prefix-adder training "
                        "run (its latest checkpoint's greedy designs are collected into DIR/designs.jsonl first)")
    parser.add_argument("--out", default=None, metavar="FILE.png", help="the plot (default DIR/front.png)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """The options only `podracer bench prefix` reads, added to the `bench` parser.

    Args:
        parser: the `bench` parser.
    """
    parser.add_argument("--bits", type=int, default=16,
                        help="prefix: adder width; the preset defaults to dqn-prefix<bits>-front-sebulba (default 16)")
    parser.add_argument("--budget", type=int, default=None,
                        help="prefix: unique syntheses the agent trains for; the baselines get the agent's count")
    parser.add_argument("--run-dir", default=None, metavar="RUN",
                        help="prefix: read a finished run (with RUN/synthesis-cache.jsonl) instead of training")
    parser.add_argument("--baseline-seeds", type=int, default=1, metavar="K", help="prefix: seeds per baseline")
    parser.add_argument("--workers", type=int, default=None, help="prefix: synthesis processes (default: every CPU)")


BENCH_READS = ("json", "preset", "out", "bits", "budget", "run_dir", "baseline_seeds", "workers")


def run_baseline_command(args: argparse.Namespace) -> None:
    """`podracer prefix-baseline`: search, then print (or `--json`) its front.

    Args:
        args: the parsed command line.
    """
    if args.workers is not None and args.workers < 1:
        fail(f"--workers must be >= 1, got {args.workers}")
    if args.cost != "synthesis" and (args.cache is not None or args.workers is not None):
        fail("--cache and --workers apply to --cost synthesis (the analytic model runs in this process)")
    summary = run_baseline(args.bits, args.method, args.budget, args.out, args.cost, args.seed, args.workers,
                           args.cache)
    _print_front(summary, args.json)


def run_front_command(args: argparse.Namespace) -> None:
    """`podracer prefix-front DIR`: plot and write the front, then print (or `--json`) it.

    Args:
        args: the parsed command line.
    """
    _print_front(show_front(args.run_dir, args.out), args.json)


def _print_front(summary: dict, as_json: bool) -> None:
    if as_json:
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


def run_bench_command(args: argparse.Namespace, overrides: list[str]) -> None:
    """`podracer bench prefix`: train the agent on a budget of syntheses (or read a finished
    run) and compare its front with the baselines'.

    Args:
        args: the parsed command line.
        overrides: `--section.field VALUE` words for the agent's preset.
    """
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
        if args.preset is None and bench.default_preset(args.bits) not in all_presets():
            fail(f"--bits {args.bits}: no preset {bench.default_preset(args.bits)}; name one and the width, e.g. "
                 f"--preset {bench.default_preset(16)} --env.id PrefixAdderSynth-{args.bits}")
        config = resolve_config(args.preset or bench.default_preset(args.bits), overrides)
        bench.check_agent_config(config, args.bits)
    elif overrides or args.preset:
        fail("bench prefix --run-dir reads a finished run: no preset or overrides")
    table = bench.compare(args.out, args.budget, config, args.run_dir, range(args.baseline_seeds), args.workers,
                          log=lambda line: print(line, flush=True) if not args.json else None)
    print(json.dumps(table) if args.json else bench.format_table(table))
