"""`podracer report RUN_DIR...`: aggregate results with the estimators of Agarwal et al.
2021 ("Deep Reinforcement Learning at the Edge of the Statistical Precipice"), from the
`rliable` package: IQM, median, mean and optimality gap with stratified bootstrap
confidence intervals, performance profiles and the probability of improvement between
settings.

A *run* of rliable is one trained agent: a seed of a run directory, or a member of a
population (`podracer.population`). Its score on a task (an environment id) is the mean
episode return over the last `tail` of its metrics rows. Runs are grouped into settings:
a run directory's label (its directory's name, or `--labels`; the same label on several
directories pools them, e.g. one directory per task), and within a population run its
members' hyperparameters (`LABEL lr=0.001`; each setting's seeds its runs). The
sub-runs of `--sweep-each` are labelled by their directories (`num_epochs=2`). Where every task
has a scale (`experiments.benchmarks.published.task_scale`: MinAtar, gymnax-blines'
published PPO return = 1 and return 0 = 0; classic control, its solved threshold = 1 and
a random policy's return = 0), scores are normalised by it and the optimality gap is taken
below 1; otherwise raw returns are aggregated and the gap is below `--gap-threshold` if
given.
"""

from __future__ import annotations

import json
import os
from typing import Any, Sequence

import numpy as np

from experiments.benchmarks.published import TaskScale, task_scale
from experiments.plot import default_labels
from experiments.run_dir import load_run_config
from podracer.config import ConfigError
from podracer.logging import read_jsonl

# rliable (the `report` extra) and matplotlib (about 0.35 s to import) are imported where used.
ESTIMATORS = ("iqm", "median", "mean", "optimality_gap")
# `--by best|median`: one score per run directory, from its members' (or seeds') scores.
REDUCTIONS = {"best": np.max, "median": np.median}
BY = ("setting", "run", *REDUCTIONS)


def run_scores(run_dir: str, label: str, tail: float,
               by: str = "setting") -> tuple[str, str, dict[str, list[float]]]:
    """`(task, algorithm, {setting label: [score per seed]})` of one run directory; with
    `by="run"` every member of a population is one run of the directory's label (a PBT
    population against a grid, say); with `by="best"` or `by="median"` the directory is one
    run of its label, scored by its best or its median member (seeds count as members), so
    that several directories, say 4 seeds of a whole PBT-against-grid experiment, give the
    intervals over experiments. The best member is chosen on the scores it is reported by:
    an optimistic estimate of what the population's selection would give on fresh runs."""
    config = load_run_config(run_dir)
    path = os.path.join(run_dir, "metrics.jsonl")
    rows = read_jsonl(path) if os.path.exists(path) else []
    if not rows:
        raise ConfigError(f"{run_dir!r} has no metrics rows to report")
    last = rows[-max(1, int(round(len(rows) * tail))):]
    algorithm = type(config.agent).__name__.removesuffix("Config").lower()
    if "members" in rows[-1]:
        scores = _tail_means([[m["episode_return"] for m in row["members"]] for row in last])
    else:
        scores = _tail_means([row.get("episode_return_per_seed") or [row.get("episode_return")] for row in last])
    if "members" in rows[-1] and by == "setting":
        groups: dict[str, list[float]] = {}
        for member, score in zip(rows[-1]["members"], scores):
            name = " ".join(f"{k}={v:g}" for k, v in member["hypers"].items())
            groups.setdefault(f"{label} {name}", []).append(score)
        return config.env.id, algorithm, groups
    if by in REDUCTIONS:
        finite = [score for score in scores if np.isfinite(score)]
        scores = [float(REDUCTIONS[by](finite))] if finite else [float("nan")]
    return config.env.id, algorithm, {label: scores}


def _tail_means(rows: list[list[float | None]]) -> list[float]:
    values = np.array([[np.nan if v is None else v for v in row] for row in rows], float)
    with np.errstate(invalid="ignore"):
        means = np.nanmean(values, axis=0) if values.size else values
    return [float(v) for v in means]


def score_matrices(run_dirs: Sequence[str], labels: Sequence[str] | None = None, tail: float = 0.1,
                   by: str = "setting") -> tuple[dict[str, np.ndarray], list[str], dict[str, TaskScale] | None]:
    """`({setting: scores [runs, tasks]}, tasks, scales or None)`: each setting's runs
    (trimmed to the fewest any of its tasks has) by task, normalised where every task has a
    scale (`experiments.benchmarks.published.task_scale`): `(return - random) / (reference - random)`."""
    if labels is not None and len(labels) != len(run_dirs):
        raise ConfigError(f"--labels: got {len(labels)} labels for {len(run_dirs)} runs")
    table: dict[str, dict[str, list[float]]] = {}
    steps: dict[str, tuple[str, int]] = {}
    for run_dir, label in zip(run_dirs, labels or default_labels(run_dirs)):
        task, algorithm, groups = run_scores(run_dir, label, tail, by)
        rows = read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
        steps[task] = (algorithm, rows[-1]["env_steps"])
        for setting, scores in groups.items():
            table.setdefault(setting, {}).setdefault(task, []).extend(scores)
    tasks = sorted({task for by_task in table.values() for task in by_task})
    scales = {task: task_scale(steps[task][0], task, steps[task][1]) for task in tasks}
    normalise = all(scale is not None for scale in scales.values())
    matrices = {}
    for setting, by_task in table.items():
        missing = [task for task in tasks if task not in by_task]
        if missing:
            raise ConfigError(f"setting {setting!r} has no runs on {', '.join(missing)}; give every setting "
                              "every task (or report the tasks apart)")
        runs = min(len(v) for v in by_task.values())
        scores = np.array([by_task[task][:runs] for task in tasks], float).T
        if normalise:
            low = np.array([scales[task].random for task in tasks])
            scores = (scores - low) / (np.array([scales[task].reference for task in tasks]) - low)
        matrices[setting] = scores
    return matrices, tasks, (scales if normalise else None)


def stratified_bootstrap(statistic: Any, matrices: Sequence[np.ndarray], reps: int,
                         seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`(point, interval [2, ...])`: `statistic(*matrices)` and its 95% percentile interval
    over `reps` stratified bootstrap resamples (Agarwal et al. 2021: each task's runs are
    resampled with replacement, apart from the other tasks'), seeded, so that the same
    report twice is the same. rliable's `get_interval_estimates` does this through the
    `arch` package, whose releases that import alongside pandas 3 it refuses."""
    rng = np.random.default_rng(seed)
    point = np.asarray(statistic(*matrices))
    samples = []
    for _ in range(reps):
        resampled = []
        for m in matrices:
            runs, tasks = m.shape
            picks = rng.integers(0, runs, size=(runs, tasks))
            resampled.append(np.take_along_axis(m, picks, axis=0))
        samples.append(statistic(*resampled))
    return point, np.percentile(np.asarray(samples), [2.5, 97.5], axis=0)


def aggregate(matrices: dict[str, np.ndarray], gap_threshold: float | None, reps: int = 2000,
              seed: int = 0) -> dict[str, dict[str, Any]]:
    """Per setting, each estimator's point estimate (rliable's `aggregate_iqm`, `_median`,
    `_mean`, `_optimality_gap`) and its 95% stratified bootstrap interval."""
    metrics = _rliable()

    def estimators(scores: np.ndarray) -> np.ndarray:
        values = [metrics.aggregate_iqm(scores), metrics.aggregate_median(scores), metrics.aggregate_mean(scores)]
        gap = metrics.aggregate_optimality_gap(scores, gap_threshold) if gap_threshold is not None else np.nan
        return np.array(values + [gap])

    out = {}
    for name, scores in matrices.items():
        point, interval = stratified_bootstrap(estimators, [np.nan_to_num(scores)], reps, seed)
        out[name] = {"runs": int(scores.shape[0])}
        for i, estimator in enumerate(ESTIMATORS):
            value = float(point[i])
            out[name][estimator] = None if np.isnan(value) else {
                "value": value, "ci": [float(interval[0, i]), float(interval[1, i])]}
    return out


def improvement(matrices: dict[str, np.ndarray], pairs: Sequence[tuple[str, str]], reps: int = 2000,
                seed: int = 0) -> list[dict[str, Any]]:
    """P(X > Y) (rliable's `probability_of_improvement`: the probability that a run of X
    scores above a run of Y on a task, averaged over tasks) with its 95% stratified
    bootstrap interval, for each pair."""
    metrics = _rliable()
    out = []
    for x, y in pairs:
        point, interval = stratified_bootstrap(metrics.probability_of_improvement,
                                               [np.nan_to_num(matrices[x]), np.nan_to_num(matrices[y])], reps, seed)
        out.append({"x": x, "y": y, "probability": float(point), "ci": [float(v) for v in interval]})
    return out


def profiles(matrices: dict[str, np.ndarray], points: int = 101) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """`(tau [P], {setting: fraction of its runs and tasks scoring above tau [P]})`: the
    performance profiles of Agarwal et al. 2021 (rliable's score distributions)."""
    finite = {name: np.nan_to_num(m) for name, m in matrices.items()}
    values = np.concatenate([m.ravel() for m in finite.values()])
    tau = np.linspace(min(0.0, values.min()), values.max() * 1.05 + 1e-9, points)
    return tau, {name: np.mean(m[..., None] > tau, axis=(0, 1)) for name, m in finite.items()}


def report(run_dirs: Sequence[str], labels: Sequence[str] | None = None, tail: float = 0.1,
           gap_threshold: float | None = None, compare: Sequence[str] | None = None,
           reps: int = 2000, by: str = "setting") -> dict[str, Any]:
    """Everything `podracer report` prints: tasks, references and random-policy returns
    (None: raw returns), per
    setting the four estimators with intervals, the probability of improvement of
    `compare` (two settings) or of each pair when there are at most 6 settings, the
    performance profiles and every run's scores (`[runs, tasks]` per setting)."""
    if not 0 < tail <= 1:
        raise ConfigError(f"--tail must be in (0, 1], got {tail}")
    if by not in BY:
        raise ConfigError(f"--by must be one of {', '.join(BY)}, got {by!r}")
    matrices, tasks, scales = score_matrices(run_dirs, labels, tail, by)
    threshold = 1.0 if scales is not None and gap_threshold is None else gap_threshold
    names = list(matrices)
    if compare is not None:
        unknown = [name for name in compare if name not in matrices]
        if len(compare) != 2 or unknown:
            raise ConfigError(f"--compare takes two settings of: {'; '.join(names)}" +
                              (f" (no {unknown[0]!r})" if unknown else ""))
        pairs = [tuple(compare)]
    else:
        pairs = [(x, y) for i, x in enumerate(names) for y in names[i + 1:]] if len(names) <= 6 else []
    tau, curves = profiles(matrices)
    references = None if scales is None else {task: scale.reference for task, scale in scales.items()}
    random = None if scales is None else {task: scale.random for task, scale in scales.items()}
    return {"tasks": tasks, "references": references, "random": random, "normalised": scales is not None,
            "optimality_threshold": threshold, "settings": aggregate(matrices, threshold, reps),
            "probability_of_improvement": improvement(matrices, pairs, reps),
            "performance_profiles": {"tau": tau.tolist(), **{name: c.tolist() for name, c in curves.items()}},
            "scores": {name: m.tolist() for name, m in matrices.items()}}


def markdown(result: dict[str, Any]) -> str:
    """The report as a Markdown table (IQM first, as Agarwal et al. recommend)."""

    def cell(entry: dict[str, Any] | None) -> str:
        if entry is None:
            return "—"
        low, high = entry["ci"]
        return f"{entry['value']:.3g} [{low:.3g}, {high:.3g}]"

    unit = "normalised score (random policy = 0, reference = 1)" if result["normalised"] else "episode return"
    lines = [f"Tasks: {', '.join(result['tasks'])}. Scores: {unit}; 95% stratified bootstrap intervals.", "",
             "| setting | runs | IQM | median | mean | optimality gap |", "|---|---|---|---|---|---|"]
    ordered = sorted(result["settings"].items(), key=lambda item: -(item[1]["iqm"] or {"value": -np.inf})["value"])
    for name, entry in ordered:
        lines.append(f"| {name} | {entry['runs']} | " + " | ".join(cell(entry[e]) for e in ESTIMATORS) + " |")
    if result["probability_of_improvement"]:
        lines += ["", "| X | Y | P(X > Y) |", "|---|---|---|"]
        for p in result["probability_of_improvement"]:
            lines.append(f"| {p['x']} | {p['y']} | {p['probability']:.2f} [{p['ci'][0]:.2f}, {p['ci'][1]:.2f}] |")
    return "\n".join(lines) + "\n"


def write_figures(result: dict[str, Any], out: str) -> list[str]:
    """`out/profiles.png` (performance profiles) and `out/intervals.png` (IQM, median, mean
    and optimality gap with their intervals); returns their paths."""
    from matplotlib.figure import Figure

    matrices = {name: np.array(scores) for name, scores in result["scores"].items()}
    os.makedirs(out, exist_ok=True)
    tau, curves = profiles(matrices)
    figure = Figure(figsize=(7, 4))
    ax = figure.subplots()
    for name, curve in curves.items():
        ax.plot(tau, curve, label=name)
    ax.set_xlabel("normalised score (tau)" if result["normalised"] else "episode return (tau)")
    ax.set_ylabel("fraction of runs with score > tau")
    ax.legend(fontsize=7)
    paths = [os.path.join(out, "profiles.png")]
    figure.savefig(paths[0], dpi=150, bbox_inches="tight")
    names = list(result["settings"])
    figure = Figure(figsize=(12, 0.5 + 0.4 * len(names)))
    for ax, estimator in zip(figure.subplots(1, 4), ESTIMATORS):
        for row, name in enumerate(names):
            entry = result["settings"][name][estimator]
            if entry is not None:
                ax.plot(entry["ci"], [row, row], color="#0072B2", linewidth=6, alpha=0.5)
                ax.plot([entry["value"]], [row], "k|", markersize=12)
        ax.set_yticks(range(len(names)), names if estimator == "iqm" else [""] * len(names), fontsize=7)
        ax.set_title(estimator.replace("_", " "))
    paths.append(os.path.join(out, "intervals.png"))
    figure.savefig(paths[1], dpi=150, bbox_inches="tight")
    return paths


def write_report(result: dict[str, Any], out: str) -> list[str]:
    """`out/report.md`, `out/report.json` and the figures; returns every path written."""
    os.makedirs(out, exist_ok=True)
    paths = [os.path.join(out, "report.md"), os.path.join(out, "report.json")]
    with open(paths[0], "w", encoding="utf-8") as f:
        f.write(markdown(result))
    with open(paths[1], "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    return paths + write_figures(result, out)


def _rliable() -> Any:
    """rliable's `metrics` module (the `report` extra), or a one-line ConfigError."""
    try:
        from rliable import metrics
    except ImportError as error:
        raise ConfigError(f"podracer report needs rliable: pip install 'podracer[report]' ({error})") from None
    return metrics


def cmd_report(args: Any) -> None:
    """`podracer report`: the Markdown table (or `--json`), and with `--out` the files."""
    if args.reps < 100:
        raise ConfigError(f"--reps must be >= 100, got {args.reps}")
    result = report(args.run_dirs, args.labels, args.tail, args.gap_threshold, args.compare, args.reps, args.by)
    if args.out is not None:
        result["files"] = write_report(result, args.out)
    print(json.dumps(result) if args.json else markdown(result), end="\n" if args.json else "")
