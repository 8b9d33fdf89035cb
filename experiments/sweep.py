"""The command line's population options, taken out of a command's overrides:
`--sweep agent.FIELD=VALUES` (repeatable) and `--sweep-samples N` go into
`config.population` (`podracer.config.PopulationConfig`; `podracer.population` reads it):
traced values of one program. `--sweep-each section.FIELD=VALUES` runs one program per
value, one after another, into sub-directories of the run directory: the settings that
cannot share a program (layer sizes, epochs, number of environments).

    podracer train ppo-cartpole-anakin --sweep agent.learning-rate=1e-4,3e-4,1e-3 \\
        --sweep agent.entropy-coef=0.0,0.01 --arch.num-seeds 4          # 3 x 2 x 4 = 24 members
    podracer train ppo-cartpole-anakin --sweep agent.learning-rate=loguniform:1e-5:1e-2 --sweep-samples 16
    podracer train ppo-cartpole-anakin --sweep-each agent.num-epochs=2,4 --sweep agent.learning-rate=1e-4,1e-3
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import typing
from typing import Any, NamedTuple

from experiments import train as train_lib
from experiments.overrides import apply_overrides, closest_path, field_paths
from podracer.config import ConfigError

OPTIONS = ("--sweep", "--sweep-samples", "--sweep-each")


class PopulationArgs(NamedTuple):
    """A command's overrides with the population options taken out."""

    rest: list[str]  # the other overrides, in order
    sweeps: list[str]  # --sweep entries: traced values of one program
    samples: int | None  # --sweep-samples
    each: list[str]  # --sweep-each entries: one program per value, run one after another


def split_population_args(args: list[str]) -> PopulationArgs:
    """Take each `--sweep ENTRY`, `--sweep-each ENTRY` (or `--sweep=ENTRY`) and
    `--sweep-samples N` out of a command's overrides, the rest left in order. Dashes in an
    entry's field stand for underscores, as in every override."""
    out = PopulationArgs([], [], None, [])
    samples = None
    args = list(args)
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        if name not in OPTIONS:
            out.rest.append(arg)
            continue
        if not eq:
            if not args or args[0].startswith("--"):
                raise ConfigError(f"{name} takes one value" + ("" if name == "--sweep-samples" else
                                                               " (section.field=VALUES)"))
            value = args.pop(0)
        if name == "--sweep-samples":
            try:
                samples = int(value)
            except ValueError:
                raise ConfigError(f"--sweep-samples expects an int, got {value!r}") from None
        else:
            path, _, values = value.partition("=")
            (out.sweeps if name == "--sweep" else out.each).append(f"{path.replace('-', '_')}={values}")
    return out._replace(samples=samples)


def with_population_args(config: Any, sweeps: list[str], samples: int | None) -> Any:
    """`config` with the command line's sweep entries added to `population.sweep` and
    `--sweep-samples` as `population.samples` (the section validates itself again)."""
    if not sweeps and samples is None:
        return config
    population = config.population
    population = dataclasses.replace(population, sweep=population.sweep + tuple(sweeps),
                                     samples=population.samples if samples is None else samples)
    return dataclasses.replace(config, population=population)


def program_settings(config: Any, each: list[str]) -> list[tuple[str, Any]]:
    """`[(name, config)]`, one per combination of the `--sweep-each` entries' values (the
    first entry outermost): settings that cannot share a program (a shape, a Python
    branch, any section). `section.field=V1,V2`; a tuple field's values are separated by
    `;` (`agent.hidden-sizes=64,64;256,256`). Each config is validated as it is built
    (an unknown field or a refused value: ConfigError naming it); `name` (`num_epochs=2`,
    `hidden_sizes=64x64`) is its sub-directory of the run directory."""
    paths = field_paths(config)
    options = []
    for entry in each:
        path, _, spec = entry.partition("=")
        if path not in paths:
            close = closest_path(path, list(paths))
            raise ConfigError(f"--sweep-each: unknown field {path!r}" + (f"; did you mean {close}?" if close else ""))
        values = [v for v in (spec.split(";") if ";" in spec or typing.get_origin(paths[path]) is tuple
                              else spec.split(",")) if v.strip()]
        if not values:
            raise ConfigError(f"--sweep-each: {entry!r} gives no values")
        options.append([(path, value) for value in values])
    settings = []
    for combination in itertools.product(*options):
        args = [arg for path, value in combination for arg in (f"--{path}", value)]
        name = "-".join(f"{path.rpartition('.')[2]}={value.replace(',', 'x')}" for path, value in combination)
        settings.append((name, apply_overrides(config, args)))
    return settings


def train_each(config: Any, each: list[str], name: str, should_stop: Any = None) -> list[Any]:
    """Train every `program_settings` of `config` one after another, each into
    `RUN_DIR/<setting>` (`RUN_DIR`: `config.run_dir`, default `runs/<name>-<time>`), and
    return their `TrainResult`s; a stopped one ends the list (each sub-run resumes alone,
    `podracer train --resume RUN_DIR/<setting>`). Every setting is built and validated
    before the first trains."""
    settings = program_settings(config, each)
    parent = config.run_dir or train_lib.default_run_dir(name)
    results = []
    for setting, sub in settings:
        result = train_lib.train(dataclasses.replace(sub, run_dir=os.path.join(parent, setting)), name=name,
                                 should_stop=should_stop)
        results.append(result)
        if result.stopped:
            break
    return results
