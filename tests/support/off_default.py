"""Off-default values derived from a config class's type annotations, and the short Anakin
run (`run`: the base config and, as population members of one compiled program, configs
with one traced field off) of `tests/integration/test_off_default.py`.

Nothing here names a field: values come from each field's annotation and current value
(a plain string field from the choices its check lists), validity from the config's own
`__post_init__` (a `ConfigError` rejects a candidate). The cheapest step that reads an
agent's fields, and which fields change it, are `tests/support/off_default_step.py`'s.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import types
import typing
from typing import Any, Iterator, Literal

import jax
import jax.numpy as jnp
import numpy as np

from anakin import AnakinConfig
from anakin import runner as anakin_runner
from anakin.program import make_train_call
from podracer.agents import Algorithm, make_agent
from podracer.config import Config, ConfigError, EnvConfig
from podracer.population import Population, member_config
from podracer.types import BoxSpec, DiscreteSpec

# One short run: 4 environments on one device, `UPDATES` updates of `ROLLOUT` steps each.
NUM_ENVS, ROLLOUT, UPDATES = 4, 8, 3
# The environments a run steps, by action space: several steps per episode, so that
# discounting and bootstrapping matter (a one-step probe would hide them).
ENVS = {DiscreteSpec: "Catch", BoxSpec: "Pendulum-v1"}
# Replay agents learn nothing in a short run at their probe sizes: where a config has these
# fields, the base of the comparison takes these values (each kept only if the config
# accepts it), so that replay, targets and gradient steps act within `UPDATES` updates.
SHORT_RUN = {
    "learning_starts": 8,
    "batch_size": 8,
    "buffer_size": 256,
    "target_update_period": 2,
    "epsilon_decay_steps": 64,
}


def annotation_kind(annotation: Any) -> tuple[str, tuple[Any, ...]]:
    """`(kind, args)` of a field's annotation: "bool", "int", "float", "str", "literal"
    (args: the choices), "optional" (args: the other type), "tuple" (args: the item type)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        options = tuple(a for a in args if a is not type(None))
        return ("optional", options) if len(options) < len(args) else ("other", args)
    if origin is Literal:
        return "literal", args
    if origin is tuple:
        return "tuple", args[:1]
    for kind in (bool, int, float, str):
        if annotation is kind:
            return kind.__name__, ()
    return "other", ()


def candidates(annotation: Any, value: Any) -> list[Any]:
    """Values other than `value` that a field of this annotation could take, most likely to
    show within a short run first (small counts and periods, halved and doubled scales).
    Validity is not judged here: the config's own checks are (`off_default_values`)."""
    kind, args = annotation_kind(annotation)
    if kind == "bool":
        out: list[Any] = [not value]
    elif kind == "literal":
        out = [choice for choice in args if choice != value]
    elif kind == "int":
        # last, a count far past the default: a threshold that smaller values all fall under
        out = [1, 2, value // 2, value + 1, value * 2, 16, 0, 3, value * 8 + 64]
    elif kind == "float":
        out = (
            [value * 0.5, value * 2.0, 0.5, 0.1, 1.0, value + 0.5, value - 0.5, 0.0, -1.0]
            if value
            else [0.5, 0.1, 1.0, -1.0]
        )
    elif kind == "optional":
        inner = args[0]
        if value is None:
            out = {float: [0.5, 1.0, 2.0, 0.1, -1.0], int: [1, 2, 8]}.get(inner, [])
        else:
            out = [None, *candidates(inner, value)]
    elif kind == "tuple":
        item = args[0] if args else int
        if item is int and value:
            out = [tuple(max(1, v // 2) for v in value), value[:1], value + value[-1:], (0, 2), (1,)]
        elif item is int:
            out = [(0,), (1,), (0, 2), (4,)]
        else:
            out = []
    else:
        out = []
    unique = []
    for candidate in out:
        if candidate != value and candidate not in unique and (kind != "int" or candidate >= 0):
            unique.append(candidate)
    return unique


def valid_replacement(config: Any, **changes: Any) -> Any | None:
    """`config` with `changes`, or None where its checks refuse them."""
    try:
        return dataclasses.replace(config, **changes)
    except (ConfigError, TypeError, ValueError):
        return None


def field_candidates(config: Any, field: str) -> list[Any]:
    """`candidates` of a field of `config`; for a plain `str` field, the choices its check
    lists when it refuses a value (`must be one of (...)`)."""
    annotation = typing.get_type_hints(type(config))[field]
    if annotation is not str:
        return candidates(annotation, getattr(config, field))
    try:
        dataclasses.replace(config, **{field: "\x00"})
    except ConfigError as error:
        listed = re.search(r"one of \(([^)]*)\)", str(error))
        if listed:
            return [c for c in ast.literal_eval(f"({listed.group(1)},)") if c != getattr(config, field)]
        listed = re.search(r"one of ([\w, -]+), got", str(error))  # "one of a, b"
        if listed:
            return [c.strip() for c in listed.group(1).split(",") if c.strip() != getattr(config, field)]
    return []


def off_default_values(config: Any, field: str) -> list[Any]:
    """Every candidate value of `field` (`field_candidates`) that `config` accepts."""
    return [v for v in field_candidates(config, field) if valid_replacement(config, **{field: v})]


def short_run_base(config: Any) -> Any:
    """`config` with the `SHORT_RUN` sizes it has and accepts, one at a time."""
    for name, value in SHORT_RUN.items():
        if any(f.name == name for f in dataclasses.fields(config)):
            config = valid_replacement(config, **{name: value}) or config
    return config


def env_for(algorithm: Algorithm) -> str:
    """The environment of an algorithm's runs: discrete actions where it takes them."""
    return next(ENVS[space] for space in (DiscreteSpec, BoxSpec) if space in algorithm.action_spaces)


def run_config(agent_config: Any, env_id: str, **arch: Any) -> Config:
    arch = {"num_envs": NUM_ENVS, "rollout_length": ROLLOUT, "devices": (0,), "updates_per_call": UPDATES, **arch}
    steps = arch["num_envs"] * arch["rollout_length"] * arch["updates_per_call"]
    return Config(env=EnvConfig(env_id), agent=agent_config, arch=AnakinConfig(**arch), total_env_steps=steps)


def numeric_fields(config: Any) -> list[str]:
    """Fields annotated plain `int` or `float` (what a population can sweep)."""
    hints = typing.get_type_hints(type(config))
    return [f.name for f in dataclasses.fields(config) if hints[f.name] in (int, float)]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a short run left: its final runner state and metrics (host copies)."""

    state: Any
    metrics: Any

    def finite(self) -> bool:
        return all(
            np.isfinite(np.asarray(x)).all()
            for x in jax.tree.leaves((self.state.agent.params, self.metrics))
            if np.issubdtype(np.asarray(x).dtype, np.floating)
        )


def differs(a: Outcome, b: Outcome) -> bool:
    """Whether two runs left different states or metrics (any structure, shape or value)."""
    leaves_a, tree_a = jax.tree.flatten((_data(a.state._replace(hypers={})), a.metrics))
    leaves_b, tree_b = jax.tree.flatten((_data(b.state._replace(hypers={})), b.metrics))
    if tree_a != tree_b:
        return True
    return any(
        np.shape(x) != np.shape(y) or not np.array_equal(x, y, equal_nan=True) for x, y in zip(leaves_a, leaves_b)
    )


def _data(state: Any) -> Any:
    return jax.tree.map(
        lambda x: (
            np.asarray(jax.random.key_data(x)) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else np.asarray(x)
        ),
        state,
    )


def run(config: Config, members: list[dict[str, Any]] | None = None) -> list[Outcome]:
    """The short Anakin run of `config` (seed 0): one outcome, or with `members` (each a
    field -> number change of the agent's traced fields) one per member, all in one
    compiled program, member 0 the config itself."""
    s = anakin_runner.setup(config)
    if members:
        fields = tuple(sorted({name for member in members for name in member}))
        rows = [{}, *members]
        settings = tuple(tuple(row.get(n, getattr(config.agent, n)) for n in fields) for row in rows)
        hints = typing.get_type_hints(type(config.agent))
        population = Population(fields, settings, 1, tuple("int32" if hints[n] is int else "float32" for n in fields))

        specs = s.env.observation_spec(s.env_params), s.env.action_spec(s.env_params)

        def member_agent(hypers: dict[str, jax.Array], axis_name: Any = anakin_runner.AXIS) -> Any:
            return make_agent(
                member_config(config.agent, hypers), *specs, num_updates=s.sizes.num_updates, axis_name=axis_name
            )

        s = s._replace(population=population, member_agent=member_agent)
    state = anakin_runner.initial_state(config, s)
    call = make_train_call(
        s.env,
        s.env_params,
        s.agent,
        s.mesh,
        config.arch.rollout_length,
        check_typing=False,
        member_agent=s.member_agent,
    )
    state, metrics = jax.device_get(call(state, jnp.int32(config.arch.updates_per_call)))
    count = len(members) + 1 if members else 1
    return [Outcome(jax.tree.map(lambda x: x[m], state), jax.tree.map(lambda x: x[m], metrics)) for m in range(count)]


def static_changes(config: Any, fields: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """`(field, changes)` for each off-default value of each of `fields`: the value alone
    where `config` accepts it, else with the first other field's off-default value that
    makes it acceptable (e.g. a setting that needs another mode on)."""
    others = [f.name for f in dataclasses.fields(config)]
    for field in fields:
        for value in field_candidates(config, field):
            if valid_replacement(config, **{field: value}) is not None:
                yield field, {field: value}
                continue
            for other in others:
                if other == field:
                    continue
                companion = next(
                    (
                        v
                        for v in off_default_values(config, other)
                        if valid_replacement(config, **{field: value, other: v}) is not None
                    ),
                    None,
                )
                if companion is not None:
                    yield field, {other: companion, field: value}
                    break
