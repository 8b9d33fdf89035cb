"""`podracer plot RUN_DIR... --out FILE.png`: learning curves, as in a paper.

Two panels: episode return against environment steps and against wall-clock time. Each
curve is the mean over seeds with a shaded spread (standard error, or min-max): the seeds
of one run (`episode_return_per_seed`) and runs given the same label are pooled. Curves
are interpolated onto a common grid, so runs with different logging intervals pool too.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, NamedTuple, Sequence

import numpy as np

from experiments.run_dir import load_run_config
from podracer.config import ConfigError
from podracer.logging import read_jsonl

COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
# matplotlib is imported by the functions that draw: it takes about 0.35 s, which the commands that
# import this module without drawing need not spend.
GRID_POINTS = 200


class Curves(NamedTuple):
    """One run's return curves: `returns [seeds, rows]` against `env_steps` and `wall_s`."""

    env_steps: np.ndarray
    wall_s: np.ndarray
    returns: np.ndarray


def read_curves(run_dir: str) -> Curves:
    """Returns per seed and row from `RUN_DIR/metrics.jsonl` (NaN where no episode ended)."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        raise ConfigError(f"{run_dir!r} has no metrics.jsonl")
    rows = read_jsonl(path)
    if not rows:
        raise ConfigError(f"{path} has no rows yet")

    for number, row in enumerate(rows, 1):
        missing = [key for key in ("env_steps", "wall_s") if not isinstance(row, dict) or row.get(key) is None]
        if missing:
            raise ConfigError(f"{path}: row {number} has no {' or '.join(missing)} (not a podracer metrics row)")
    seeds = max(len(row.get("episode_return_per_seed") or [None]) for row in rows)

    def per_seed(row: dict) -> list[float]:
        # A row without per-seed returns in a multi-seed run (or a metric missing) is NaN there.
        values = row.get("episode_return_per_seed") or [row.get("episode_return") if seeds == 1 else None]
        values = [np.nan if v is None else float(v) for v in values]
        return values + [np.nan] * (seeds - len(values))

    returns = np.array([per_seed(row) for row in rows], dtype=float).T
    return Curves(np.array([r["env_steps"] for r in rows], float), np.array([r["wall_s"] for r in rows], float),
                  returns)


BY = ("run", "setting", "member")


def member_curves(run_dir: str, label: str, by: str) -> dict[str, Curves]:
    """A population run's curves by `setting` (its seeds pooled, labelled by its
    hyperparameters) or by `member` (one curve each), from the rows' `members` entries;
    `{label: the run's curves}` for `run` or a run without a sweep."""
    curves = read_curves(run_dir)
    rows = read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
    members = rows[-1].get("members")
    if by == "run" or not members:
        return {label: curves}
    groups: dict[str, list[int]] = {}
    for member in members:
        hypers = " ".join(f"{k}={v:g}" for k, v in member["hypers"].items())
        name = f"{label} {hypers}" + (f" member {member['member']}" if by == "member" else "")
        groups.setdefault(name, []).append(member["member"])
    return {name: curves._replace(returns=curves.returns[indices]) for name, indices in groups.items()}


def default_label(run_dir: str, name: str | None = None) -> str:
    """`name` (default: the directory's name) with the run's environment when it lacks it."""
    try:
        config = load_run_config(run_dir)
        env = config.env.id
    except ConfigError:
        env = None
    name = os.path.basename(os.path.normpath(run_dir)) if name is None else name
    return name if env is None or env in name else f"{name} ({env})"


def default_labels(run_dirs: Sequence[str | os.PathLike]) -> list[str]:
    """A label per run: its directory's name, or the path as given where different runs share
    that name (`sweep1/ppo`, `sweep2/ppo`), as only runs given the same label are pooled."""
    paths = [os.path.normpath(d) for d in run_dirs]
    names = [os.path.basename(path) for path in paths]
    shared = {name for name in names if len({p for p, n in zip(paths, names) if n == name}) > 1}
    return [default_label(d, path if name in shared else name) for d, path, name in zip(run_dirs, paths, names)]


def pooled(curves: Sequence[Curves], x_field: str, smooth: int) -> tuple[np.ndarray, np.ndarray]:
    """`(grid [G], returns [seeds, G])`: every seed of every run on a common x grid, up to
    the shortest run's end."""
    end = min(getattr(c, x_field)[-1] for c in curves)
    start = min(getattr(c, x_field)[0] for c in curves)
    grid = np.linspace(start, end, GRID_POINTS)
    seeds = []
    for c in curves:
        x = getattr(c, x_field)
        for y in c.returns:
            y = _moving_average(y, smooth)
            ok = ~np.isnan(y)
            if ok.any():
                seeds.append(np.interp(grid, x[ok], y[ok], left=np.nan))
    return grid, np.array(seeds)


def _moving_average(y: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average over the non-NaN values."""
    if window <= 1:
        return y
    out = np.full_like(y, np.nan)
    for i in range(len(y)):
        chunk = y[max(0, i - window + 1): i + 1]
        if (~np.isnan(chunk)).any():
            out[i] = np.nanmean(chunk)
    return out


def band(returns: np.ndarray, spread: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and the lower and upper edges of the shaded band, over seeds."""
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns stay NaN
        mean = np.nanmean(returns, axis=0)
        if spread == "minmax":
            return mean, np.nanmin(returns, axis=0), np.nanmax(returns, axis=0)
        count = np.sum(~np.isnan(returns), axis=0)
        sem = np.nanstd(returns, axis=0, ddof=1) / np.sqrt(np.maximum(count, 1)) if returns.shape[0] > 1 else 0 * mean
    return mean, mean - sem, mean + sem


def plot_figure(
    run_dirs: str | os.PathLike | Sequence[str | os.PathLike], labels: Sequence[str] | None = None,
    spread: str = "stderr", smooth: int = 1, title: str | None = None, by: str = "run",
) -> Any:
    """The runs' learning curves as a matplotlib `Figure` (return against env steps and
    against wall time; mean over seeds and same-label runs, shaded spread). `by` draws a
    population's settings or members apart (`member_curves`). Made without pyplot, so it
    changes no global matplotlib state; show it in a notebook or `savefig` it."""
    if isinstance(run_dirs, (str, os.PathLike)):
        run_dirs = [run_dirs]  # one run, not the characters of its path
    if labels is not None and len(labels) != len(run_dirs):
        raise ConfigError(f"labels: got {len(labels)} labels for {len(run_dirs)} runs")
    if spread not in ("stderr", "minmax"):
        raise ConfigError(f"spread must be stderr or minmax, got {spread!r}")
    if by not in BY:
        raise ConfigError(f"by must be one of {', '.join(BY)}, got {by!r}")
    groups: dict[str, list[Curves]] = {}
    for run_dir, label in zip(run_dirs, labels or default_labels(run_dirs)):
        for name, curves in member_curves(run_dir, label, by).items():
            groups.setdefault(name, []).append(curves)
    return _draw(groups, spread, max(1, smooth), title)


def plot_runs(
    run_dirs: Sequence[str], out: str, labels: Sequence[str] | None = None, spread: str = "stderr",
    smooth: int = 1, title: str | None = None, by: str = "run",
) -> None:
    """Draw the runs' learning curves into `out` (PNG, PDF or SVG, by its suffix)."""
    from matplotlib.backend_bases import FigureCanvasBase

    suffix = os.path.splitext(str(out))[1].lower().lstrip(".")
    if suffix not in FigureCanvasBase.get_supported_filetypes():
        raise ConfigError(f"out {str(out)!r}: write a .png, .pdf or .svg file")
    figure = plot_figure(run_dirs, labels, spread, smooth, title, by)
    directory = os.path.dirname(os.path.abspath(out))
    try:
        os.makedirs(directory, exist_ok=True)
        figure.savefig(out, dpi=200, bbox_inches="tight")
    except OSError as error:
        raise ConfigError(f"out {out!r} is not writable: {error.strerror or error}") from None


def _draw(groups: dict[str, list[Curves]], spread: str, smooth: int, title: str | None):
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter

    style = {
        "font.size": 11, "axes.labelsize": 12, "axes.titlesize": 12, "legend.fontsize": 10,
        "axes.spines.top": False, "axes.spines.right": False, "axes.linewidth": 0.8,
        "xtick.direction": "out", "ytick.direction": "out", "font.family": "DejaVu Sans",
    }
    with matplotlib.rc_context(style):
        figure = Figure(figsize=(10, 3.8), layout="constrained")
        axes = figure.subplots(1, 2, sharey=True)
        for (label, curves), color in zip(groups.items(), _cycle(COLORS)):
            seeds = sum(c.returns.shape[0] for c in curves)
            name = f"{label} (n={seeds})" if seeds > 1 else label
            for ax, field in zip(axes, ("env_steps", "wall_s")):
                grid, returns = pooled(curves, field, smooth)
                if returns.size == 0:
                    continue
                mean, low, high = band(returns, spread)
                ax.plot(grid, mean, color=color, linewidth=1.8, label=name)
                if returns.shape[0] > 1:
                    ax.fill_between(grid, low, high, color=color, alpha=0.2, linewidth=0)
        axes[0].set_xlabel("Environment steps")
        axes[0].xaxis.set_major_formatter(EngFormatter(sep=""))
        axes[1].set_xlabel("Wall-clock time (s)")
        axes[0].set_ylabel("Episode return")
        for ax in axes:
            ax.set_xlim(left=0)
        spread_name = "±1 standard error" if spread == "stderr" else "min–max"
        if axes[0].lines:  # a run with no episode ended yet draws no curve, and no legend
            axes[0].legend(frameon=False, loc="lower right", title=f"mean over seeds, shaded {spread_name}",
                           title_fontsize=9, alignment="left")
        if title:
            figure.suptitle(title)
    return figure


def _cycle(colors: Sequence[str]):
    while True:
        yield from colors
