"""The cheapest step that reads an agent's config, and which fields change it.

The step (`step`): an agent built on an environment's specs, `init`, then `UPDATES`
iterations of a `ROLLOUT`-step rollout of `NUM_ENVS` environments and one `update` (a
`lax.scan`, so its body is traced once). Every field an algorithm reads, in acting, in
targets, in replay or in the optimiser, is read there; the Anakin runner around it adds
devices, logging and checkpoints, none of which an agent field reaches.

Two measures of "the step differs" (`Measure`):
- `program`: the traced program (jaxpr text, its constants, its output shapes), with
  nothing compiled: a field that leaves it identical is ignored in that setting; one that
  changes it is read and changes what is computed.
- `values`: the step's results, compiled and run, compared bit for bit (the program first:
  an identical program needs no run, different output shapes differ without one). Numeric
  fields that are traced values run as members of one vmapped program.

`coverage` finds, for every field, an off-default value and a setting (the algorithm's
short-run probe config, or it with one other field off its value) where the field changes
the step.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import typing
from typing import Any, Iterator

import jax
import jax.numpy as jnp
import numpy as np
from jax._src.interpreters import partial_eval as pe

from anakin.rollout import reset_envs, rollout
from podracer.agents import Algorithm, algorithm_for
from podracer.agents.registry import check_pairing
from podracer.config import ConfigError
from podracer.envs import make_jax_env
from podracer.population import TRACE_ERRORS, member_config
from podracer.types import BatchShape, BoxSpec, DiscreteSpec
from tests.support.off_default import (
    ENVS,
    NUM_ENVS,
    ROLLOUT,
    numeric_fields,
    off_default_values,
    short_run_base,
    static_changes,
)

# Two iterations: a schedule, a target period or a replay ratio shows from the second.
UPDATES = 2
# Off-default values of a field tried in one setting, and settings tried beyond those that
# read the field.
TRIES = 3


def step(
    config: Any,
    env_id: str,
    key: jax.Array,
    hypers: dict[str, jax.Array] | None = None,
    algorithm: Algorithm | None = None,
) -> Any:
    """`(final agent state, (trajectories [UPDATES, T, B, ...], metrics [UPDATES]))` of the
    step of `config` on `env_id` (traceable; `hypers`: traced values of numeric fields;
    `algorithm`: `config`'s, where its class is not the registered one)."""
    env = make_jax_env(env_id)
    obs_spec, action_spec = env.observation_spec(None), env.action_spec(None)
    algorithm = algorithm or algorithm_for(config)
    check_pairing(algorithm, obs_spec, action_spec, env_id)
    algorithm.check_batch(config, BatchShape(ROLLOUT, NUM_ENVS))
    config = member_config(config, hypers or {})
    agent = algorithm.make(config, obs_spec, action_spec, num_updates=UPDATES, axis_name=None)
    init_key, env_key, loop_key = jax.random.split(key, 3)
    state = agent.init(init_key)

    def iteration(carry: Any, key: jax.Array) -> Any:
        state, envs = carry
        act_key, update_key = jax.random.split(key)
        envs, traj, _ = rollout(env, None, agent, state.params, envs, act_key, ROLLOUT)
        state, metrics = agent.update(state, traj, update_key)
        return (state, envs), (traj, metrics)

    envs = reset_envs(env, None, env_key, NUM_ENVS, agent)
    (state, _), out = jax.lax.scan(iteration, (state, envs), jax.random.split(loop_key, UPDATES))
    return state, out


@dataclasses.dataclass(frozen=True)
class Program:
    """A traced step: its jaxpr's text, its constants' bytes and its outputs' shapes."""

    text: str
    consts: tuple[bytes, ...]
    shapes: Any


def program(config: Any, env_id: str) -> Program:
    closed, shapes = jax.make_jaxpr(lambda key: step(config, env_id, key), return_shape=True)(jax.random.key(0))
    consts = tuple(np.asarray(c).tobytes() + str(np.shape(c)).encode() for c in closed.consts)
    leaves = tuple((s.shape, str(s.dtype)) for s in jax.tree.leaves(shapes))
    return Program(str(closed.jaxpr), consts, (str(jax.tree.structure(shapes)), leaves))


def _host(tree: Any) -> list[np.ndarray]:
    return [
        np.asarray(jax.random.key_data(x)) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else np.asarray(x)
        for x in jax.tree.leaves(tree)
    ]


def finite(leaves: list[np.ndarray]) -> bool:
    return all(np.isfinite(x).all() for x in leaves if np.issubdtype(x.dtype, np.floating))


class Measure:
    """Compares settings of one algorithm by `program` (`values=False`) or by results.
    Records the off-default settings whose results are not finite in `invalid`."""

    def __init__(self, values: bool) -> None:
        self.values = values
        self.invalid: list[str] = []
        self._programs: dict[Any, Program] = {}
        self._results: dict[Any, list[np.ndarray]] = {}

    def program(self, config: Any, env_id: str) -> Program:
        key = (config, env_id)
        if key not in self._programs:
            self._programs[key] = program(config, env_id)
        return self._programs[key]

    def results(self, config: Any, env_id: str, label: str) -> list[np.ndarray]:
        key = (config, env_id)
        if key not in self._results:
            self._results[key] = _host(jax.jit(lambda k: step(config, env_id, k))(jax.random.key(0)))
            if not finite(self._results[key]):
                self.invalid.append(label)
        return self._results[key]

    def differs(self, base: Any, variant: Any, env_id: str, label: str) -> bool:
        """Whether `variant`'s step differs from `base`'s (both configs accepted)."""
        a, b = self.program(base, env_id), self.program(variant, env_id)
        if a == b:
            return False
        if a.shapes != b.shapes or not self.values:
            return True
        x, y = self.results(base, env_id, "base"), self.results(variant, env_id, label)
        return any(not np.array_equal(p, q, equal_nan=True) for p, q in zip(x, y))

    def members(self, base: Any, env_id: str, changes: list[dict[str, Any]]) -> list[bool]:
        """For each one-field numeric change of a traced field, whether it differs from
        `base`: all as members of one vmapped program (member 0 the base)."""
        hints = typing.get_type_hints(type(base))
        names = sorted({n for c in changes for n in c})
        rows = [{}, *changes]
        hypers = {
            n: jnp.asarray(
                [row.get(n, getattr(base, n)) for row in rows], jnp.int32 if hints[n] is int else jnp.float32
            )
            for n in names
        }
        out = jax.jit(jax.vmap(lambda h: step(base, env_id, jax.random.key(0), h)))(hypers)
        leaves = _host(out)
        member = [[x[m] for x in leaves] for m in range(len(rows))]
        moved = []
        for change, result in zip(changes, member[1:]):
            if not finite(result):
                self.invalid.append(_label(change))
            moved.append(any(not np.array_equal(p, q, equal_nan=True) for p, q in zip(member[0], result)))
        return moved


def traceable_fields(config: Any, env_id: str, fields: list[str]) -> list[str]:
    """Those of `fields` that `config`'s agent reads as traced values (no shape, no Python
    branch): the step traced with them traced, the culprits found by halving the set."""
    hints = typing.get_type_hints(type(config))

    def traces(names: list[str]) -> bool:
        hypers = {n: jax.ShapeDtypeStruct((), jnp.int32 if hints[n] is int else jnp.float32) for n in names}
        try:
            jax.eval_shape(lambda h, k: step(config, env_id, k, h), hypers, jax.random.key(0))
        except TRACE_ERRORS:
            return False
        return True

    def split(names: list[str]) -> Iterator[str]:
        if not names or traces(names):
            yield from names
        elif len(names) > 1:
            yield from split(names[: len(names) // 2])
            yield from split(names[len(names) // 2 :])

    return list(split(fields))


def reaching(config: Any, env_id: str, fields: list[str]) -> set[str]:
    """Those of `fields` (traced values of `config`'s step) whose values reach its results
    (an input of the traced step that dead-code elimination keeps); none if they cannot all
    be traced in this setting."""
    hints = typing.get_type_hints(type(config))
    hypers = {n: jax.ShapeDtypeStruct((), jnp.int32 if hints[n] is int else jnp.float32) for n in fields}
    try:
        closed = jax.make_jaxpr(lambda h: step(config, env_id, jax.random.key(0), h))(hypers)
    except (*TRACE_ERRORS, ConfigError):
        return set()
    _, used = pe.dce_jaxpr(closed.jaxpr, [True] * len(closed.jaxpr.outvars))
    order = jax.tree.structure(hypers).node_data()[1]  # the dict's keys, in flattening order
    return {name for name, kept in zip(order, used) if kept}


def coverage(algorithm: Algorithm, measure: Measure, fields: list[str] | None = None) -> dict[str, str]:
    """Which of `fields` (default: all) of `algorithm`'s config change its step: field -> the
    value and setting that showed it.

    First in the base settings (the short-run probe config, on each action space's
    environment): the traced numeric fields as members of one program, every other field
    at its off-default values (with the companion another field's check asks for). Then
    what is left, which is meant to matter only in another setting, in the settings with
    one other field changed: the switches (a mode chosen, a feature turned on) first, and
    among them those whose results the field's value reaches."""
    probe = short_run_base(algorithm.default_probe_config())
    env_ids = [ENVS[space] for space in (DiscreteSpec, BoxSpec) if space in algorithm.action_spaces]
    wanted = fields if fields is not None else [f.name for f in dataclasses.fields(probe)]
    covered: dict[str, str] = {}
    settings: list[tuple[str, Any, str]] = [(env_id, probe, env_id) for env_id in env_ids]
    switch: dict[int, bool] = {}

    def tried(env_id: str, base: Any, where: str, field: str, changes: dict[str, Any], keep: bool) -> bool:
        """Whether the change ran (a setting the agent refuses, e.g. a torso for other
        observations, does not count as a try)."""
        label = _label(changes, field) + f" ({where})"
        try:
            variant = dataclasses.replace(base, **changes)
            moved = measure.differs(base, variant, env_id, label)
        except ConfigError:
            return False
        if moved and field not in covered:
            covered[field] = label
        if keep:
            settings.append((env_id, variant, label))
            # A switch: a mode (bool, choice) or a feature off by default (0, None, ()) turned on.
            switch[id(settings[-1])] = not getattr(base, field) or not isinstance(changes[field], (int, float))
        return True

    first = env_ids[0]
    traced: set[str] = set()
    for env_id in env_ids if measure.values else []:
        names = traceable_fields(probe, env_id, [f for f in numeric_fields(probe) if f in wanted])
        traced |= set(names) if env_id == first else set()
        changes = [{f: v} for f in names for v in off_default_values(probe, f)]
        for change, moved in zip(changes, measure.members(probe, env_id, changes) if changes else []):
            if moved:
                covered.setdefault(next(iter(change)), _label(change) + f" ({env_id})")
    tries: dict[str, int] = {}
    for field, changes in static_changes(probe, [f for f in wanted if f not in traced]):
        if isinstance(changes[field], str):  # a mode: every choice is a setting of its own
            tried(first, probe, first, field, changes, keep=True)
        elif field not in covered and tries.get(field, 0) < TRIES:
            tries[field] = tries.get(field, 0) + tried(
                first, probe, first, field, changes, keep=tries.get(field, 0) == 0
            )
    left = [f for f in wanted if f not in covered]
    numeric = traceable_fields(probe, first, [f for f in numeric_fields(probe) if f in left]) if left else []
    reads: dict[int, set[str]] = {}

    def reading(setting: tuple[str, Any, str]) -> set[str]:
        """The numeric fields left whose values reach `setting`'s results (traced when first asked)."""
        if id(setting) not in reads:
            reads[id(setting)] = reaching(setting[1], setting[0], numeric)
        return reads[id(setting)]

    for field in left:
        # The base settings; the switches (a mode chosen, a feature turned on) that its value
        # reaches the results of, then the other switches; the other settings it reaches;
        # then the three whose change is nearest to its name. Nearest to its name first
        # within each; a setting is traced for `reading` only when reached, and a setting met
        # twice is measured once (`Measure`).
        near = sorted(settings, key=lambda s: -_nearness(field, s[2]))
        bases = settings[: len(env_ids)]
        switches = [s for s in near if s not in bases and switch[id(s)]]
        others = [s for s in near if s not in bases and s not in switches]
        order = itertools.chain(
            bases,
            (s for s in switches if field in numeric and field in reading(s)),
            switches,
            (s for s in others if field in numeric and field in reading(s)),
            others[:TRIES],
        )
        for env_id, base, where in order:
            count = 0
            for _, changes in static_changes(base, [field]):
                if field in covered or count >= TRIES:
                    break
                count += tried(env_id, base, where, field, changes, keep=False)
            if field in covered:
                break
    return covered


def _nearness(field: str, label: str) -> float:
    return difflib.SequenceMatcher(None, field, label.split("=")[0]).ratio()


def _label(changes: dict[str, Any], field: str | None = None) -> str:
    field = field or next(iter(changes))
    return f"{field}={changes[field]!r}" + "".join(f", {k}={v!r}" for k, v in changes.items() if k != field)
