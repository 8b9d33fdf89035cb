"""Populations: several settings of an agent's hyperparameters, and seeds, as one axis.

A population has `num_settings * num_seeds` members, numbered setting-major: member
`m` trains setting `m // num_seeds` with seed `m % num_seeds` (the seed's keys are the
same in every setting, so settings are compared on common random numbers, and member
`(i, s)` is the run of setting `i` alone with seed index `s`).

Each swept field is a *traced* value inside the compiled program: the agent factory is
called inside the per-member function with a config whose swept fields hold the member's
hyperparameters as tracers (`member_config`). A field that the factory or the agent uses
in a shape or in Python control flow cannot be traced; the runner checks that before
compiling and names the field (`TRACE_ERRORS`).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import itertools
import math
import typing
from typing import Any, Mapping

import jax
import numpy as np

from podracer.config import Config, ConfigError, PopulationConfig, check_finite_floats

SECTION = "agent"
RANDOM = ("loguniform", "uniform")
# What JAX raises when a tracer reaches a Python bool or int, NumPy, or a shape (a
# TypeError: a shape or a trip count given a tracer where it needs an int).
TRACE_ERRORS: tuple[type[BaseException], ...] = (
    jax.errors.ConcretizationTypeError, jax.errors.TracerBoolConversionError,
    jax.errors.TracerIntegerConversionError, jax.errors.TracerArrayConversionError, TypeError,
)


@dataclasses.dataclass(frozen=True)
class Population:
    """The members of a run: `fields` (agent field names, in sweep order) and each
    setting's values `settings[i][j]` of `fields[j]`."""

    fields: tuple[str, ...]
    settings: tuple[tuple[float, ...], ...]
    num_seeds: int
    dtypes: tuple[str, ...]  # "float32" or "int32", by each field's annotation
    # each field's space: ("grid", values) or ("loguniform" | "uniform", (low, high)); PBT's
    # exploration stays inside it
    spaces: tuple[tuple[str, tuple[float, ...]], ...] = ()

    @property
    def size(self) -> int:
        return len(self.settings) * self.num_seeds

    def setting_of(self, member: int) -> int:
        return member // self.num_seeds

    def seed_of(self, member: int) -> int:
        return member % self.num_seeds

    def hypers(self, member: int) -> dict[str, float]:
        """Member `member`'s initial hyperparameters: field -> value."""
        return dict(zip(self.fields, self.settings[self.setting_of(member)]))

    def initial_arrays(self) -> dict[str, np.ndarray]:
        """Every member's hyperparameters as arrays `[M]`, field -> values (the runner state's)."""
        return {field: np.asarray([self.hypers(m)[field] for m in range(self.size)], dtype)
                for field, dtype in zip(self.fields, self.dtypes)}


def population_size(config: Config) -> int:
    """Members of `config`'s run: settings times `arch.num_seeds` (1 without an `arch.num_seeds`)."""
    population = make_population(config)
    return population.size if population is not None else getattr(config.arch, "num_seeds", 1)


def make_population(config: Config) -> Population | None:
    """The population `config.population` describes, None without a sweep. Raises
    ConfigError (naming the sweep entry) for an unknown or non-numeric field, a malformed
    value, a field swept twice, or a value the agent's config refuses."""
    section: PopulationConfig = config.population
    if not section.sweep:
        return None
    hints = typing.get_type_hints(type(config.agent))
    fields, grids, randoms, dtypes, spaces = [], [], [], [], []
    for entry in section.sweep:
        path, _, spec = entry.partition("=")
        path = path.strip().replace("-", "_")
        field = _field_of(path, hints, entry)
        if field in fields:
            raise ConfigError(f"population.sweep: {path} is swept twice")
        dtypes.append("int32" if hints[field] is int else "float32")
        kind, *bounds = spec.split(":")
        if kind in RANDOM:
            randoms.append((len(fields), kind, _bounds(entry, kind, bounds, hints[field])))
            grids.append(None)
            spaces.append((kind, randoms[-1][2]))
        else:
            grids.append(tuple(_number(entry, part, hints[field]) for part in spec.split(",") if part.strip()))
            if not grids[-1]:
                raise ConfigError(f"population.sweep: {entry!r} gives no values")
            spaces.append(("grid", grids[-1]))
        fields.append(field)
    if randoms and section.samples < 1:
        entry = section.sweep[randoms[0][0]]
        raise ConfigError(f"population.samples must be >= 1 with a random sweep entry ({entry}); "
                          "give --sweep-samples N")
    draws = _draws(randoms, section.samples, config.seed)
    settings = []
    for grid in itertools.product(*[g for g in grids if g is not None]):
        for draw in draws:
            values = iter(grid)
            settings.append(tuple(draw[j] if grids[j] is None else next(values) for j in range(len(fields))))
    population = Population(tuple(fields), tuple(settings), getattr(config.arch, "num_seeds", 1), tuple(dtypes),
                            tuple(spaces))
    for setting in population.settings:
        concrete_config(config.agent, dict(zip(fields, setting)))
    return population


def _field_of(path: str, hints: Mapping[str, Any], entry: str) -> str:
    section, _, field = path.partition(".")
    if section != SECTION or field not in hints:
        close = difflib.get_close_matches(field or section, list(hints), n=1)
        hint = f"; did you mean agent.{close[0]}?" if close else ""
        raise ConfigError(f"population.sweep: {path!r} is not a field of the agent's config (a sweep takes "
                          f"agent.<field>=VALUES; --sweep-each takes any field, one program per value){hint}")
    if hints[field] not in (float, int):
        raise ConfigError(f"population.sweep: agent.{field} is a {getattr(hints[field], '__name__', hints[field])} "
                          "field; a sweep takes numbers (a field that changes shapes or control flow: run "
                          "settings separately, --sweep-each runs one program per value)")
    return field


def _number(entry: str, text: str, annotation: type) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"population.sweep: {entry!r}: {text.strip()!r} is not a number") from None
    if annotation is int:
        if not value.is_integer():
            raise ConfigError(f"population.sweep: {entry!r}: {text.strip()!r} is not an integer")
        return int(value)
    return value


def _bounds(entry: str, kind: str, bounds: list[str], annotation: type) -> tuple[float, float]:
    if annotation is int or len(bounds) != 2:
        raise ConfigError(f"population.sweep: {entry!r}: a random entry is {kind}:LOW:HIGH over a float field")
    low, high = (_number(entry, b, float) for b in bounds)
    if not low < high or (kind == "loguniform" and low <= 0):
        raise ConfigError(f"population.sweep: {entry!r}: needs LOW < HIGH" + (" and LOW > 0" if kind == "loguniform"
                                                                          else ""))
    return low, high


def _draws(randoms: list[tuple[int, str, tuple[float, float]]], samples: int, seed: int) -> list[dict[int, float]]:
    """`samples` joint draws of the random entries (one empty draw without any), from the
    run's seed (NumPy's PCG64, the same on every platform)."""
    if not randoms:
        return [{}]
    rng = np.random.default_rng([seed, 0x5EED])
    draws = []
    for _ in range(samples):
        draw = {}
        for index, kind, (low, high) in randoms:
            u = rng.uniform()
            value = math.exp(math.log(low) + u * (math.log(high) - math.log(low))) if kind == "loguniform" \
                else low + u * (high - low)
            draw[index] = float(np.float32(value))
        draws.append(draw)
    return draws


def concrete_config(agent_config: Any, hypers: Mapping[str, Any]) -> Any:
    """The agent config with `hypers` (field -> number) replaced and validated: ConfigError
    naming the field for a value it refuses."""
    values = {name: type(getattr(agent_config, name))(value) for name, value in hypers.items()}
    try:
        replaced = dataclasses.replace(agent_config, **values)
        check_finite_floats(replaced, SECTION + ".")
    except ConfigError as error:
        raise ConfigError(f"population.sweep: {error}") from None
    return replaced


def member_config(agent_config: Any, hypers: Mapping[str, jax.Array]) -> Any:
    """The agent config with `hypers` (field -> a traced scalar) in place of the swept
    fields, for an agent factory called inside the traced per-member function. Not
    validated (validation compares values in Python): every concrete value was validated
    by `make_population`, and PBT keeps perturbed values inside the sweep's range."""
    if not hypers:
        return agent_config
    config = copy.copy(agent_config)
    for name, value in hypers.items():
        object.__setattr__(config, name, value)
    return config


def trace_check(build: Any, hypers: Mapping[str, np.ndarray], *args: Any) -> None:
    """ConfigError naming the swept field that the agent uses in a shape or in Python control
    flow, found by tracing `build(hypers_of_one_member, *args)` (nothing runs) with all swept
    fields traced, then, on failure, each alone."""

    def trace(names: list[str]) -> BaseException | None:
        def run(traced: dict[str, jax.Array], *args: Any) -> Any:
            concrete = {n: v[0].item() for n, v in hypers.items() if n not in traced}
            return build({**concrete, **traced}, *args)

        traced = {n: jax.ShapeDtypeStruct((), hypers[n].dtype) for n in names}
        try:
            jax.eval_shape(run, traced, *args)
        except TRACE_ERRORS as error:
            return error
        return None

    if trace(list(hypers)) is None:
        return
    culprits = [name for name in hypers if trace([name]) is not None] or list(hypers)
    raise ConfigError(f"population.sweep: agent.{', agent.'.join(culprits)} changes shapes or control flow: "
                      "run settings separately (--sweep-each runs one program per value)")
