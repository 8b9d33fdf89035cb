"""Metric sinks: JSON lines, TensorBoard, and a console progress bar.

A sink is anything with `write(row: dict)` and `close()`. Rows are flat dicts with at
least `env_steps`, `sps`, `wall_s` and `episode_return` (None when no episode finished).
"""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Any, Protocol


class Sink(Protocol):
    def write(self, row: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """Appends one JSON object per row to a file, flushed at once (a crash loses nothing)."""

    def __init__(self, path: str):
        self._file = open(path, "a", encoding="utf-8")

    def write(self, row: dict[str, Any]) -> None:
        self._file.write(json.dumps(_finite(row)) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TensorBoardSink:
    """Every numeric field as a scalar against `env_steps`."""

    def __init__(self, logdir: str):
        from tensorboardX import SummaryWriter

        self._writer = SummaryWriter(logdir)

    def write(self, row: dict[str, Any]) -> None:
        step = int(row["env_steps"])
        for name, value in row.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and name != "env_steps":
                self._writer.add_scalar(name, value, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class ConsoleProgress:
    """A progress bar over the env-step budget, showing steps/s and the recent return."""

    def __init__(self, total_env_steps: int, initial: int = 0):
        from tqdm import tqdm

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
    def __init__(self, sinks: list[Any]):
        self.sinks = sinks

    def write(self, row: dict[str, Any]) -> None:
        for sink in self.sinks:
            sink.write(row)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def _finite(row: dict[str, Any]) -> dict[str, Any]:
    """JSON has no NaN/inf: write them as null."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
