"""`podracer plot RUN_DIR --lineage --out FILE.png`: a PBT run's lineage, each swept
hyperparameter of each member over env steps (from the metrics rows' `members`), with a
marker where a member copied another (from `lineage.jsonl`, `podracer.pbt`)."""

from __future__ import annotations

import os

import numpy as np

from experiments.plot import COLORS
from podracer.config import ConfigError
from podracer.logging import read_jsonl

# matplotlib is imported by the functions that draw: it takes about 0.35 s, which the commands that
# import this module without drawing need not spend.


def plot_lineage(run_dir: str, out: str) -> None:
    """Draw the lineage of the population run in `run_dir` into `out`."""
    from matplotlib.figure import Figure

    path = os.path.join(run_dir, "metrics.jsonl")
    rows = [row for row in (read_jsonl(path) if os.path.exists(path) else []) if "members" in row]
    if not rows:
        raise ConfigError(f"{run_dir!r} has no population rows (train with --sweep) to draw a lineage from")
    lineage_path = os.path.join(run_dir, "lineage.jsonl")
    events = read_jsonl(lineage_path) if os.path.exists(lineage_path) else []
    fields = list(rows[0]["members"][0]["hypers"])
    steps = np.array([row["env_steps"] for row in rows], float)
    figure = Figure(figsize=(8, 2.5 * len(fields) + 0.5))
    axes = np.atleast_1d(figure.subplots(len(fields), 1, sharex=True))
    for ax, field in zip(axes, fields):
        values = np.array([[m["hypers"][field] for m in row["members"]] for row in rows], float)
        for member in range(values.shape[1]):
            ax.step(steps, values[:, member], where="post", color=COLORS[member % len(COLORS)], linewidth=1)
        for event in events:
            for copy in event["copies"]:
                ax.plot([event["env_steps"]], [copy["hypers"][field]], "o", markersize=3,
                        color=COLORS[copy["from"] % len(COLORS)])
        ax.set_ylabel(field)
        if values.min() > 0 and values.max() / values.min() > 10:
            ax.set_yscale("log")
    axes[-1].set_xlabel("Environment steps")
    axes[0].set_title(f"PBT lineage: {len(events)} exploit steps (dots: a copy, in its source's colour)")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    figure.savefig(out, dpi=150, bbox_inches="tight")
