"""The benchmark's outputs: `results.md` (markdown table), `results.json`, learning curves."""

from __future__ import annotations

import json
import os
import platform
from typing import Any, Sequence

import jax
import numpy as np

from experiments.benchmarks.published import published
from experiments.plot import plot_runs


def _millions(steps: int) -> str:
    return f"{steps / 1e6:.1f}M" if steps >= 100_000 else f"{steps:,}"


def _cell(returns: Sequence[float]) -> str:
    values = np.asarray(returns, float)
    if values.size < 2:
        return f"{values.mean():.1f}"
    return f"{values.mean():.1f} ± {values.std(ddof=1) / np.sqrt(values.size):.1f}"


def table_rows(records: list[dict[str, Any]]) -> tuple[list[str], list[list[str]], list[str]]:
    """`(header, rows, sources)`: one row per preset; per milestone podracer's mean ± standard
    error over seeds and the published value beside it (— where none exists)."""
    count = max(len(r["evaluations"]) for r in records)
    targets = {tuple(e["target"] for e in r["evaluations"]) for r in records}
    same = len(targets) == 1
    header = ["preset", "env", "seeds"]
    for i in range(count):
        label = f"~{_millions(records[0]['evaluations'][i]['target'])}" if same else f"milestone {i + 1}"
        header += [label, "published"]
    header += ["train wall time", "env steps/s"]
    rows, sources = [], []
    for record in records:
        row = [f"`{record['preset']}`", record["env"], str(record["seeds"])]
        for e in record["evaluations"]:
            at = "" if same and e["env_steps"] == e["target"] else f" @{_millions(e['env_steps'])}"
            row.append(_cell(e["returns"]) + at)
            ref = published(record["algorithm"], record["env"], e["env_steps"])
            row.append("—" if ref is None else f"{ref.value:g}")
            if ref is not None and ref.source not in sources:
                sources.append(ref.source)
        row += ["", ""] * (count - len(record["evaluations"]))
        last = record["evaluations"][-1]
        row.append(f"{last['train_wall_s'] / 60:.1f} min")
        row.append("—" if record.get("sps") is None else f"{record['sps']:,.0f}")
        rows.append(row)
    return header, rows, sources


def markdown(records: list[dict[str, Any]]) -> str:
    header, rows, sources = table_rows(records)
    policies = sorted({f"{r['algorithm']}: {r['policy']}" for r in records})
    episodes = sorted({r["episodes"] for r in records})
    lines = [
        "# Benchmark results",
        "",
        "Evaluation return, mean ± standard error over the seeds trained in one program "
        f"(`arch.num_seeds`); each seed's return is the mean of {', '.join(map(str, episodes))} episodes run with "
        f"`podracer evaluate`'s code (policy: {'; '.join(policies)}). Wall time is the training's, all seeds "
        f"together, on {_machine()}; env steps/s counts every seed.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    if sources:
        lines += ["", "Published: " + "; ".join(sources) + "."]
    return "\n".join(lines) + "\n"


def _machine() -> str:
    device = jax.devices()[0]
    if device.platform == "cpu":
        return f"CPU ({os.cpu_count()} cores, {platform.processor() or platform.machine()})"
    return f"{device.device_kind} ({device.platform})"


def write_report(out: str, records: list[dict[str, Any]]) -> str:
    """Write `out/results.md`, `out/results.json` and one learning-curve plot per environment
    (`out/<env>.png`); returns the markdown's path."""
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "results.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write(markdown(records))
    with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(records, f, indent=2)
    by_env: dict[str, list[str]] = {}
    for record in records:
        by_env.setdefault(record["env"], []).append(record["preset"])
    for env, names in by_env.items():
        plot_runs([os.path.join(out, "runs", name) for name in names], os.path.join(out, f"{env}.png"),
                  labels=names, title=env)
    return path
