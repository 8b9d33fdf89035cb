"""Population-based training (Jaderberg et al. 2017, "Population Based Training of Neural
Networks"): exploit and explore between host calls, as pure NumPy on the host.

Every `population.pbt_every` updates, members are ranked by their mean episode return over
the host call just finished; each member of the bottom `pbt_fraction` copies the agent
state (parameters, optimizer state, counters) of a member drawn from the top
`pbt_fraction` (exploit), then each of its swept hyperparameters is, with probability
`pbt_resample`, redrawn from the sweep's space, else the copied value times 0.8 or 1.2,
kept inside the space's range (explore). Environments and keys stay the member's own.

Every draw comes from a generator seeded by the run's seed and the update count of the
step, so a run repeats its choices, and a resumed run makes the same ones.
"""

from __future__ import annotations

import math
import os
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from podracer.config import PopulationConfig
from podracer.logging import JsonlSink, read_jsonl
from podracer.population import Population

PERTURB = (0.8, 1.2)


class Exploit(NamedTuple):
    """One PBT step: `sources[m]` is the member whose agent state member `m` continues
    from (itself if it kept its own), `hypers` everyone's hyperparameters after it, and
    `event` its record for `lineage.jsonl`."""

    sources: np.ndarray
    hypers: dict[str, np.ndarray]
    event: dict[str, Any]


def is_step(updates_before: int, updates_after: int, every: int) -> bool:
    """Whether a host call from `updates_before` to `updates_after` crosses a multiple of `every`."""
    return every > 0 and updates_before // every < updates_after // every


def exploit_and_explore(population: Population, section: PopulationConfig, scores: Sequence[float | None],
                        hypers: Mapping[str, np.ndarray], updates: int, seed: int) -> Exploit:
    """The PBT step after update `updates` (see the module docstring). `scores`: each
    member's mean return over the last host call, None where no episode ended (ranked last)."""
    rng = np.random.default_rng([seed, updates, 0x9B7])
    size = population.size
    values = np.array([-math.inf if s is None or math.isnan(s) else s for s in scores], float)
    order = np.argsort(values, kind="stable")  # worst first; ties: the lower index is worse
    count = max(1, int(size * section.pbt_fraction))
    bottom, top = order[:count], order[size - count:]
    sources = np.arange(size)
    new = {name: np.array(v, copy=True) for name, v in hypers.items()}
    copies = []
    for member in sorted(int(m) for m in bottom):
        source = int(rng.choice(top))
        sources[member] = source
        for name, dtype, (kind, space) in zip(population.fields, population.dtypes, population.spaces):
            value = float(hypers[name][source])
            if rng.uniform() < section.pbt_resample:
                value = _draw(rng, kind, space)
            else:
                value = value * float(rng.choice(PERTURB))
            value = min(max(value, min(space)), max(space))
            new[name][member] = round(value) if dtype == "int32" else value
        copies.append({"member": member, "from": source, "hypers": {n: new[n][member].item() for n in new}})
    event = {"updates": updates, "scores": [None if math.isinf(v) else v for v in values], "copies": copies,
             "hypers": {name: v.tolist() for name, v in new.items()}}
    return Exploit(sources, new, event)


def _draw(rng: np.random.Generator, kind: str, space: tuple[float, ...]) -> float:
    if kind == "grid":
        return float(rng.choice(space))
    low, high = space
    if kind == "loguniform":
        return math.exp(rng.uniform(math.log(low), math.log(high)))
    return float(rng.uniform(low, high))


class LineageSink:
    """A metrics sink that writes each row's PBT step (`row["pbt"]`) as one line of
    `RUN_DIR/lineage.jsonl`: who copied whom, and every member's hyperparameters after it.
    A resumed run (`updates`: the checkpoint's update count) first drops the steps after
    its checkpoint, which it takes again."""

    def __init__(self, path: str, updates: int | None = None):
        keep = None
        if updates is not None:
            keep = sum(1 for event in (read_jsonl(path) if os.path.exists(path) else [])
                       if event["updates"] <= updates)
        self._sink = JsonlSink(path, keep_rows=0 if updates is None else keep)

    def write(self, row: Mapping[str, Any]) -> None:
        if "pbt" in row:
            self._sink.write(row["pbt"])

    def close(self) -> None:
        self._sink.close()
