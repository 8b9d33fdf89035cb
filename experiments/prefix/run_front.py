"""The Pareto front a prefix-adder run found, written into its run directory when it ends
(a run-end hook, `experiments.run_end`, registered by `experiments.prefix.plugin`).

The designs are those of the run's host environments in this process, the leading one of a
multi-process run (every graph they costed: under Sebulba, with synthesis or analytic
costs; `experiments.prefix.host_env.found_front`) and the
greedy designs of its final policy (`experiments.prefix.run_designs.collect_run_designs`,
which also serves Anakin's runs, whose environments run inside the compiled program). The
run directory then holds:

    designs.jsonl       the designs, with their cost model (`podracer prefix-front` reads it)
    front/*.v           each design on the front as a Verilog module adding two N-bit numbers
    front/front.csv     one row per design on the front: its Verilog file, area, delay, the
                        cost model and the toolchain that costed it
"""

from __future__ import annotations

import csv
import os
from typing import Any

from experiments.prefix.front import (
    DESIGNS_FILE,
    Design,
    front_designs,
    read_designs,
    write_designs,
    write_verilog_front,
)
from experiments.prefix.host_env import found_front, parse_host_id
from experiments.prefix.run_designs import collect_run_designs
from experiments.prefix.synthesis import find_synthesis
from podracer.config import Config

FRONT_DIR = "front"
FRONT_TABLE = "front.csv"


def toolchain(model: str) -> str:
    """The tools behind a cost model, for people: the synthesis toolchain, flow and cell
    library (with its hash), or the analytic model's definition.

    Args:
        model: "analytic-<fanout weight>" or "synthesis:<identity>".

    Returns:
        One line.
    """
    if model.startswith("synthesis:"):
        record = find_synthesis().record()
        return f"{record['toolchain']} ({record['flow']}) on {record['liberty']} (sha256 {record['liberty_sha256']})"
    return f"analytic: area = prefix nodes, delay = logic levels (fanout weight {model.removeprefix('analytic-')})"


def write_front(run_dir: str, designs: list[Design], model: str) -> list[Design]:
    """Write `designs.jsonl`, the front's Verilog and `front/front.csv` into `run_dir`.

    Args:
        run_dir: the run's directory.
        designs: every design to record, costed under `model`.
        model: their cost model.

    Returns:
        The designs on the front, by area.
    """
    write_designs(os.path.join(run_dir, DESIGNS_FILE), designs, model)
    front = front_designs(designs)
    paths = write_verilog_front(front, os.path.join(run_dir, FRONT_DIR))
    tools = toolchain(model)
    with open(os.path.join(run_dir, FRONT_DIR, FRONT_TABLE), "w", newline="") as f:
        table = csv.writer(f)
        table.writerow(["verilog", "bits", "area", "delay", "cost_model", "toolchain"])
        for path, design in zip(paths, front):
            table.writerow([os.path.basename(path), design.nodes.shape[0], f"{design.area:g}", f"{design.delay:g}",
                            model, tools])
    return front


def write_run_front(config: Config, run_dir: str, result: Any) -> None:
    """The run-end hook: for a run on a prefix-adder environment, collect its designs and
    write its front (see the module docstring); any other run is left alone.

    Args:
        config: the run's config.
        run_dir: its directory, its last checkpoint written.
        result: the runner's result (unused: a stopped run's front is written too).
    """
    spec = parse_host_id(config.env.id)
    if spec is None:
        return
    collect_run_designs(run_dir)
    greedy, model = read_designs(run_dir)
    write_front(run_dir, greedy + found_front(spec["bits"], model, forget=True), model)
