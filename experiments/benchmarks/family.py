"""A preset held out on a family of tasks, scored over the family.

    python -m experiments.benchmarks.family PRESET [--tasks auto|FAMILY] [--sweep agent.FIELD=V1,V2 ...]
        [--seeds 2] [--steps N] [--tail 0.25] [--only TASK] --out DIR [--report-only]

Trains `PRESET` retargeted to every task of the family (`--env.id`, and for the partially
observed family `--env.observe`), one program per task with every sweep setting and seed
in it, into `DIR/runs/<task>`; then writes `DIR/family.md` (per task each setting's raw
and normalised return, and the IQM over the family with its interval) and
`DIR/family.json` (the same, with `podracer report`'s whole result). Scores are normalised
per task by `experiments.benchmarks.published.TASK_SCALES` (random policy = 0, reference
= 1). `--report-only` reports the runs already in `DIR/runs`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any, Sequence

import numpy as np

from experiments import report as rl_report
from experiments.presets import PRESETS
from podracer.config import ConfigError

# Each family's tasks: (gymnax id, observed entries; empty: all).
FAMILIES: dict[str, tuple[tuple[str, tuple[int, ...]], ...]] = {
    "classic-control": (("CartPole-v1", ()), ("Acrobot-v1", ()), ("MountainCar-v0", ())),
    # Positions only: velocities must be inferred from memory.
    "classic-control-masked": (("CartPole-v1", (0, 2)), ("Acrobot-v1", (0, 1, 2, 3)), ("MountainCar-v0", (0,))),
    "classic-control-continuous": (("Pendulum-v1", ()), ("MountainCarContinuous-v0", ())),
}


def family_of(preset: str) -> str:
    """The family a preset is held out on: the continuous one for a continuous task, the
    partially observed one for a preset that masks its observation, else classic control."""
    env = PRESETS[preset]().env
    if env.id in {task for task, _ in FAMILIES["classic-control-continuous"]}:
        return "classic-control-continuous"
    return "classic-control-masked" if env.observe else "classic-control"


def task_dir(out: str, task: str) -> str:
    return os.path.join(out, "runs", task)


def train_command(
    preset: str, task: str, observe: Sequence[int], out: str, seeds: int, steps: int | None, sweeps: Sequence[str]
) -> list[str]:
    """The `podracer train` command line of one task's program."""
    command = [
        sys.executable,
        "-m",
        "podracer",
        "train",
        preset,
        "--env.id",
        task,
        "--run-dir",
        task_dir(out, task),
        "--arch.num-seeds",
        str(seeds),
        "--log.tensorboard",
        "false",
    ]
    if observe:
        command += ["--env.observe", ",".join(map(str, observe))]
    if steps is not None:
        command += ["--total-env-steps", str(steps)]
    for sweep in sweeps:
        command += ["--sweep", sweep]
    return command


def run_family(
    preset: str, family: str, out: str, seeds: int, steps: int | None, sweeps: Sequence[str], only: Sequence[str] = ()
) -> dict:
    """Train every task's program (or those in `only`), one after another; `{task: wall seconds}`."""
    walls = {}
    for task, observe in FAMILIES[family]:
        if only and task not in only:
            continue
        command = train_command(preset, task, observe, out, seeds, steps, sweeps)
        print("$", " ".join(command[1:]), flush=True)
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        walls[task] = time.perf_counter() - start
    return walls


def per_task(run_dirs: Sequence[str], label: str, tail: float) -> dict[str, dict[str, list[float]]]:
    """`{setting: {task: [raw score per seed]}}`, settings named as `podracer report` names them."""
    table: dict[str, dict[str, list[float]]] = {}
    for run_dir in run_dirs:
        task, _, groups = rl_report.run_scores(run_dir, label, tail)
        for setting, scores in groups.items():
            table.setdefault(setting, {})[task] = scores
    return table


def family_report(out: str, label: str, tail: float = 0.25, reps: int = 2000) -> dict[str, Any]:
    """`podracer report` over every task directory of `out/runs`, pooled under `label`,
    with each setting's raw scores per task beside it."""
    runs = os.path.join(out, "runs")
    run_dirs = sorted(os.path.join(runs, name) for name in os.listdir(runs))
    if not run_dirs:
        raise ConfigError(f"{runs!r} holds no run directories")
    result = rl_report.report(run_dirs, [label] * len(run_dirs), tail, reps=reps)
    result["raw"] = per_task(run_dirs, label, tail)
    return result


def _cell(values: Sequence[float], digits: int) -> str:
    array = np.asarray(values, float)
    error = array.std(ddof=1) / np.sqrt(array.size) if array.size > 1 else 0.0
    return f"{array.mean():.{digits}f} ± {error:.{digits}f}"


def markdown(result: dict[str, Any]) -> str:
    """Per task each setting's raw return and normalised score (mean ± standard error over
    seeds), then the IQM, mean and optimality gap over the family with 95% intervals."""
    tasks = result["tasks"]
    header = "| setting | " + " | ".join(tasks) + " | IQM over the family |"
    lines = [header, "|" + "---|" * (len(tasks) + 2)]
    ordered = sorted(result["settings"], key=lambda name: -result["settings"][name]["iqm"]["value"])
    for name in ordered:
        scores = np.asarray(result["scores"][name])
        cells = [f"{_cell(result['raw'][name][task], 1)} ({_cell(scores[:, i], 2)})" for i, task in enumerate(tasks)]
        iqm = result["settings"][name]["iqm"]
        lines.append(
            f"| {name} | " + " | ".join(cells) + f" | {iqm['value']:.2f} [{iqm['ci'][0]:.2f}, {iqm['ci'][1]:.2f}] |"
        )
    if result["normalised"]:
        scale = ", ".join(f"{task} {result['random'][task]:g} -> {result['references'][task]:g}" for task in tasks)
        lines += ["", f"Cells: raw return (normalised score), mean ± standard error over seeds. Normalised: {scale}."]
    return "\n".join(lines) + "\n\n" + rl_report.markdown(result)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("preset", choices=sorted(PRESETS), metavar="PRESET")
    parser.add_argument("--tasks", default="auto", choices=["auto", *FAMILIES], help="the family (auto: the preset's)")
    parser.add_argument("--sweep", action="append", default=[], help="agent.FIELD=V1,V2,... (repeatable)")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=None, help="env steps per member (default: the preset's)")
    parser.add_argument("--tail", type=float, default=0.25, help="fraction of the metrics rows scored")
    parser.add_argument("--reps", type=int, default=2000, help="bootstrap resamples")
    parser.add_argument("--only", action="append", default=[], metavar="TASK", help="train only this task (repeatable)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--report-only", action="store_true", help="report the runs already in OUT/runs")
    args = parser.parse_args(argv)
    family = family_of(args.preset) if args.tasks == "auto" else args.tasks
    walls = (
        {}
        if args.report_only
        else run_family(args.preset, family, args.out, args.seeds, args.steps, args.sweep, args.only)
    )
    result = family_report(args.out, args.preset, args.tail, args.reps)
    result.update(preset=args.preset, family=family, sweep=args.sweep, seeds=args.seeds, steps=args.steps)
    if walls:
        result["wall_s"] = walls
    with open(os.path.join(args.out, "family.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    text = markdown(result)
    with open(os.path.join(args.out, "family.md"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text, end="")
    return result


if __name__ == "__main__":
    main()
