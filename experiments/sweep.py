"""The command line's population options: `--sweep agent.FIELD=VALUES` (repeatable) and
`--sweep-samples N`, taken out of a command's overrides into `config.population`
(`podracer.config.PopulationConfig`; `podracer.population` reads it).

    podracer train ppo-cartpole-anakin --sweep agent.learning-rate=1e-4,3e-4,1e-3 \\
        --sweep agent.entropy-coef=0.0,0.01 --arch.num-seeds 4          # 3 x 2 x 4 = 24 members
    podracer train ppo-cartpole-anakin --sweep agent.learning-rate=loguniform:1e-5:1e-2 --sweep-samples 16
"""

from __future__ import annotations

import dataclasses
from typing import Any

from podracer.config import ConfigError

OPTIONS = ("--sweep", "--sweep-samples")


def split_population_args(args: list[str]) -> tuple[list[str], list[str], int | None]:
    """`(other args, sweep entries, samples or None)` from a command's overrides: each
    `--sweep ENTRY` (or `--sweep=ENTRY`) and `--sweep-samples N` is taken out, the rest left
    in order. Dashes in an entry's field stand for underscores, as in every override."""
    rest, sweeps, samples = [], [], None
    args = list(args)
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        if name not in OPTIONS:
            rest.append(arg)
            continue
        if not eq:
            if not args or args[0].startswith("--"):
                raise ConfigError(f"{name} takes one value" + (" (agent.field=VALUES)" if name == "--sweep" else ""))
            value = args.pop(0)
        if name == "--sweep":
            path, _, values = value.partition("=")
            sweeps.append(f"{path.replace('-', '_')}={values}")
        else:
            try:
                samples = int(value)
            except ValueError:
                raise ConfigError(f"--sweep-samples expects an int, got {value!r}") from None
    return rest, sweeps, samples


def with_population_args(config: Any, sweeps: list[str], samples: int | None) -> Any:
    """`config` with the command line's sweep entries added to `population.sweep` and
    `--sweep-samples` as `population.samples` (the section validates itself again)."""
    if not sweeps and samples is None:
        return config
    population = config.population
    population = dataclasses.replace(population, sweep=population.sweep + tuple(sweeps),
                                     samples=population.samples if samples is None else samples)
    return dataclasses.replace(config, population=population)
