"""Metric sinks: JSON lines, TensorBoard, Weights & Biases, and a console progress bar.

A sink is anything with `write(row: dict)` and `close()`. Rows are flat dicts with at
least `env_steps`, `sps`, `wall_s` and `episode_return` (None when no episode finished).
"""

from __future__ import annotations

import json
import math
import os
import sys
import uuid
from typing import Any, Protocol

from tqdm import tqdm

# wandb is an optional extra, and tensorboardX takes about 0.15 s (protobuf) to import for a
# command that may write no TensorBoard log: both are imported by the sink that uses them.


class Sink(Protocol):
    """Where metrics rows go: one `write` per row, `close` at the end of the run."""

    def write(self, row: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """Appends one JSON object per row to a file, flushed at once (a crash loses nothing).

    `keep_rows` first cuts the file to its first `keep_rows` lines: when resuming a run,
    the rows written after the checkpoint it continues from are written again; a new run
    gives 0 (rows of an earlier attempt that left no checkpoint go). The cut happens at the
    first write, so a resume that fails before training loses nothing.
    """

    def __init__(self, path: str, keep_rows: int | None = None):
        self._path = path
        self._keep_rows = keep_rows
        self._file = open(path, "a", encoding="utf-8")

    def write(self, row: dict[str, Any]) -> None:
        if self._keep_rows is not None:
            self._truncate(self._keep_rows)
            self._keep_rows = None
        self._file.write(json.dumps(_finite(row)) + "\n")
        self._file.flush()

    def _truncate(self, rows: int) -> None:
        self._file.close()
        with open(self._path, "r", encoding="utf-8") as f:
            kept = f.readlines()[:rows]
        with open(self._path, "w", encoding="utf-8") as f:
            f.writelines(line if line.endswith("\n") else line + "\n" for line in kept)
        self._file = open(self._path, "a", encoding="utf-8")

    def close(self) -> None:
        self._file.close()


def read_jsonl(path: str) -> list[dict[str, Any]]:
    """The rows of a metrics.jsonl file (a torn last line, from a crash, is skipped)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


class TensorBoardSink:
    """Every numeric field as a scalar against `env_steps`; a list of numbers (a
    multi-seed run's `episode_return_per_seed`) as one scalar per entry, `NAME/K`.

    `purge_step` (as `JsonlSink`'s `keep_rows`): TensorBoard drops what earlier event files
    in `logdir` hold at `env_steps >= purge_step`, so a resumed run's rows after its
    checkpoint, written again, appear once; a new run gives 0."""

    def __init__(self, logdir: str, purge_step: int | None = None):
        from tensorboardX import SummaryWriter

        self._writer = SummaryWriter(logdir, purge_step=purge_step)

    def write(self, row: dict[str, Any]) -> None:
        step = int(row["env_steps"])
        for name, value in row.items():
            if name == "env_steps":
                continue
            if isinstance(value, (list, tuple)):
                for k, entry in enumerate(value):
                    if _is_number(entry):
                        self._writer.add_scalar(f"{name}/{k}", entry, step)
            elif _is_number(value):
                self._writer.add_scalar(name, value, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbSink:
    """Every numeric field to a Weights & Biases run, against `env_steps`.

    The W&B run id is kept in `RUN_DIR/wandb_id`, so a resumed run continues the same
    W&B run.
    """

    def __init__(self, project: str, run_dir: str, config: dict[str, Any]):
        import wandb

        id_path = os.path.join(run_dir, "wandb_id")
        if os.path.exists(id_path):
            with open(id_path, encoding="utf-8") as f:
                run_id = f.read().strip()
        else:
            run_id = uuid.uuid4().hex[:12]
            with open(id_path, "w", encoding="utf-8") as f:
                f.write(run_id)
        self._run = wandb.init(project=project, name=os.path.basename(os.path.abspath(run_dir)), dir=run_dir,
                               config=config, id=run_id, resume="allow")

    def write(self, row: dict[str, Any]) -> None:
        numbers = {k: v for k, v in _finite(row).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        self._run.log(numbers, step=int(row["env_steps"]))

    def close(self) -> None:
        self._run.finish()


def wandb_available() -> bool:
    """Whether `import wandb` works (checked before a run that asks for W&B starts)."""
    try:
        import wandb  # noqa: F401
    except ImportError:
        return False
    return True


class ConsoleProgress:
    """A progress bar over the env-step budget, showing steps/s and the recent return."""

    def __init__(self, total_env_steps: int, initial: int = 0):
        self._bar = tqdm(
            total=total_env_steps, initial=initial, unit="step", unit_scale=True,
            dynamic_ncols=True, file=sys.stderr, mininterval=0.5,
            disable=None if os.environ.get("CI") else False,
        )

    def write(self, row: dict[str, Any]) -> None:
        self._bar.update(int(row["env_steps"]) - self._bar.n)
        ret = row.get("episode_return")
        self._bar.set_postfix_str(
            f"{row['sps']:,.0f} steps/s  return {'-' if ret is None else f'{ret:.1f}'}", refresh=False
        )

    def close(self) -> None:
        self._bar.close()


class MultiSink:
    """Every row to every sink."""

    def __init__(self, sinks: list[Sink]):
        self.sinks = sinks

    def write(self, row: dict[str, Any]) -> None:
        for sink in self.sinks:
            sink.write(row)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def _is_number(value: Any) -> bool:
    """An int or a float, not a bool (None, a missing seed's return, is not one)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(row: dict[str, Any]) -> dict[str, Any]:
    """JSON has no NaN/inf: write them as null."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
