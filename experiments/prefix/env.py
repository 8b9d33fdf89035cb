"""The prefix-adder design environment in JAX (Anakin), after PrefixRL (Roy et al., DAC 2021).

State: a legal prefix graph on the N x N grid (`experiments.prefix.graph`). Actions:
`2 * N * N` discrete, add (0) or delete (1) the node at cell (i, j), index
`kind * N * N + i * N + j`, legal only where `action_mask` says (an illegal action leaves
the graph unchanged and earns 0); each action is followed by legalisation.

Observation: `MaskedObs(obs float32 [N, N, C], action_mask bool [2 * N * N])` with channels
present, deletable, arrival time / N, fanout / N, and, when the area weight is sampled per
episode, a fifth channel holding it (so one agent covers the trade-off curve).

Cost: area = node count, delay = logic level of the latest output, or a fanout-aware arrival
time (`fanout_weight > 0`). Reward: the decrease of `w * area / area_ref + (1 - w) * delay /
delay_ref`, the reference being a classic design (Sklansky by default) in the same cost
model, so the return of an episode is the normalised cost it removed. Episodes last
`horizon` steps (a truncation) and start from ripple, Sklansky or a random legal graph.
"""

from __future__ import annotations

import math
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from experiments.prefix import graph as np_graph
from experiments.prefix import jax_graph
from experiments.prefix.builders import BUILDERS, sklansky
from podracer.config import ConfigError
from podracer.envs.base import JaxEnv
from podracer.envs.params import parse_params
from podracer.envs.render import grid_frame
from podracer.types import DiscreteSpec, MaskedObs, ObsSpec

RESETS = ("ripple", "sklansky", "random", "mixed")
PREFIX_BITS = (8, 16, 32, 64)  # the ids `PrefixAdder-<bits>` listed by `jax_env_ids`
MAX_BITS = 256  # a wider grid's [N, N] arrays and 2 N^2 actions outgrow any agent (PrefixRL: 64)
_ID = re.compile(r"^PrefixAdder-(\d+)(?:-w(\d+(?:\.\d*)?|\.\d+))?$")


@struct.dataclass
class PrefixState:
    nodes: jax.Array  # bool [N, N]
    area: jax.Array  # float32: node count
    delay: jax.Array  # float32: latest output's arrival time
    area_weight: jax.Array  # float32: w of this episode
    action_mask: jax.Array  # bool [2 N N]: legal actions in this graph


class PrefixAdderEnv(JaxEnv):
    """`PrefixAdderEnv(bits, area_weight=None, ...)`; `area_weight=None` samples w ~ U(0, 1)
    per episode and shows it to the agent as an extra channel.

    bits:           N, the adder's width (>= 3).
    area_weight:    w in [0, 1] for the whole run, or None (sampled per episode).
    horizon:        steps per episode (truncated after it); default 2 N.
    reset:          "ripple", "sklansky", "random" (a random legal graph) or "mixed" (each
                    of the three with probability 1/3).
    fanout_weight:  0 for delay = logic level; > 0 for the fanout-aware arrival time.
    reference:      the classic design (`builders.BUILDERS`) whose area and delay
                    normalise the rewards.
    max_density:    random resets fill each editable cell with probability ~ U(0, this)
                    before legalising.
    """

    render_fps = 4

    def __init__(self, bits: int = 16, area_weight: float | None = None, horizon: int | None = None,
                 reset: str = "mixed", fanout_weight: float = 0.0, reference: str = "sklansky",
                 max_density: float = 0.3):
        if not 3 <= bits <= MAX_BITS:
            raise ValueError(f"bits must be in [3, {MAX_BITS}] (no editable cell below 3), got {bits}")
        if area_weight is not None and not 0.0 <= area_weight <= 1.0:
            raise ValueError(f"area_weight must be in [0, 1] or None (sampled), got {area_weight}")
        if reset not in RESETS:
            raise ValueError(f"reset must be one of {RESETS}, got {reset!r}")
        if reference not in BUILDERS:
            raise ValueError(f"reference must be one of {tuple(BUILDERS)}, got {reference!r}")
        if fanout_weight < 0 or not 0 <= max_density <= 1:
            raise ValueError("fanout_weight must be >= 0 and max_density in [0, 1]")
        self.bits = bits
        self.area_weight = area_weight
        self.horizon = 2 * bits if horizon is None else int(horizon)
        if self.horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        self.reset_kind = reset
        self.fanout_weight = float(fanout_weight)
        self.max_density = float(max_density)
        ref = BUILDERS[reference](bits)
        self.area_ref = float(np_graph.area(ref))
        self.delay_ref = float(np_graph.delay(ref, self.fanout_weight))
        self.name = f"PrefixAdder-{bits}" + ("" if area_weight is None else f"-w{area_weight:g}")
        self._ripple = np_graph.empty_graph(bits)
        self._starts = {"ripple": self._fixed_start(self._ripple), "sklansky": self._fixed_start(sklansky(bits))}

    @property
    def channels(self) -> int:
        return 4 if self.area_weight is not None else 5

    # --- dynamics ---------------------------------------------------------------------
    def _fixed_start(self, nodes: np.ndarray) -> tuple[PrefixState, jax.Array]:
        """State (weight 0) and features of a fixed first graph, computed once in NumPy."""
        state = PrefixState(jnp.asarray(nodes), jnp.float32(np_graph.area(nodes)),
                            jnp.float32(np_graph.delay(nodes, self.fanout_weight)), jnp.float32(0.0),
                            jnp.asarray(np_graph.action_mask(nodes)))
        return state, jnp.asarray(np_graph.features(nodes, self.fanout_weight))

    def random_graph(self, uniforms: jax.Array) -> jax.Array:
        """`bool [N, N]`: a random legal graph from `N * N + 1` uniforms in [0, 1)."""
        n = self.bits
        cells = uniforms[1:].reshape(n, n) < uniforms[0] * self.max_density
        return jax_graph.legalize(jnp.asarray(self._ripple) | (jax_graph.editable(n) & cells))

    def make_state(self, nodes: jax.Array, area_weight: jax.Array) -> tuple[PrefixState, MaskedObs]:
        """The state and observation of graph `nodes` (legal) with weight `area_weight`."""
        state, features = self._analyse(nodes)
        return self._with_weight(state, features, area_weight)

    def _analyse(self, nodes: jax.Array) -> tuple[PrefixState, jax.Array]:
        analysis = jax_graph.analyse(nodes, self.fanout_weight)
        state = PrefixState(nodes, analysis.area, analysis.delay, jnp.float32(0.0), analysis.action_mask)
        return state, jax_graph.features(nodes, analysis)

    def _with_weight(self, state: PrefixState, features: jax.Array, area_weight) -> tuple[PrefixState, MaskedObs]:
        state = state.replace(area_weight=jnp.asarray(area_weight, jnp.float32))
        return state, self._obs(state, features)

    def reset_env(self, key, params):
        """One random draw (threefry is slow to compile on CPU): the weight, and for random
        starts the density and the cells; ripple and Sklansky starts are precomputed."""
        sampled = self.area_weight is None
        kind = self.reset_kind
        count = int(sampled) + (self.bits * self.bits + 1 if kind in ("random", "mixed") else 0) + (kind == "mixed")
        uniforms = jax.random.uniform(key, (max(count, 1),))
        weight = uniforms[0] if sampled else jnp.float32(self.area_weight)
        rest = uniforms[int(sampled):]
        if kind in ("ripple", "sklansky"):
            return self._with_weight(*self._starts[kind], weight)
        random = self._analyse(self.random_graph(rest[: self.bits * self.bits + 1]))
        if kind == "random":
            return self._with_weight(*random, weight)
        choice = jnp.floor(rest[-1] * 3).astype(jnp.int32)
        options = (self._starts["ripple"], self._starts["sklansky"], random)
        chosen = jax.tree.map(lambda a, b, c: jnp.select([choice == 0, choice == 1], [a, b], c), *options)
        return self._with_weight(*chosen, weight)

    def step_env(self, key, state, action, params):
        nodes, _ = jax_graph.apply_action(state.nodes, action, state.action_mask)
        next_state, obs = self.make_state(nodes, state.area_weight)
        reward = self.reward(state, next_state)
        return next_state, obs, reward, jnp.zeros((), jnp.bool_)

    def cost(self, state: PrefixState) -> jax.Array:
        """The scalarised, normalised cost `w area / area_ref + (1 - w) delay / delay_ref`."""
        w = state.area_weight
        return w * state.area / self.area_ref + (1.0 - w) * state.delay / self.delay_ref

    def reward(self, state: PrefixState, next_state: PrefixState) -> jax.Array:
        return self.cost(state) - self.cost(next_state)

    def _obs(self, state: PrefixState, features: jax.Array) -> MaskedObs:
        if self.area_weight is None:
            weight = jnp.full(features.shape[:-1] + (1,), state.area_weight, jnp.float32)
            features = jnp.concatenate([features, weight], axis=-1)
        return MaskedObs(features, state.action_mask)

    # --- specs ------------------------------------------------------------------------
    def max_episode_steps(self, params: Any) -> int:
        return self.horizon

    def observation_spec(self, params: Any) -> MaskedObs:
        """`MaskedObs(ObsSpec([N, N, C], float32), ObsSpec([2 N N], bool))`."""
        n = self.bits
        return MaskedObs(ObsSpec((n, n, self.channels), jnp.dtype(jnp.float32)),
                         ObsSpec((2 * n * n,), jnp.dtype(jnp.bool_)))

    def action_spec(self, params: Any) -> DiscreteSpec:
        return DiscreteSpec(2 * self.bits * self.bits)

    def render(self, state: PrefixState) -> jax.Array:
        """The grid as an RGB frame: nodes dark, inputs and outputs blue, empty cells light."""
        n = self.bits
        i, j = jnp.indices((n, n))
        fixed = (i == j) | (j == 0)
        cells = jnp.where(state.nodes, jnp.where(fixed, 2, 1), 0)
        return grid_frame(cells, [(245, 245, 245), (40, 40, 40), (40, 100, 200)])


def parse_prefix_id(env_id: str) -> dict[str, Any] | None:
    """`PrefixAdder-<bits>` (w sampled per episode) or `PrefixAdder-<bits>-w<w>` (fixed w):
    the constructor arguments, or None if `env_id` is not of that form."""
    match = _ID.match(env_id)
    if match is None:
        return None
    kwargs: dict[str, Any] = {"bits": int(match.group(1))}
    if match.group(2) is not None:
        kwargs["area_weight"] = float(match.group(2))
    return kwargs


# Options of both forms set by `EnvConfig.params` (`--env.params reset=sklansky`), and of the
# host form only (`experiments.prefix.host_env.PrefixHostEnv`).
OPTIONS: dict[str, type] = {"reset": str, "fanout_weight": float, "reference": str, "max_density": float}
HOST_OPTIONS: dict[str, type] = {"front_restarts": float}


def prefix_options(params: tuple[str, ...], env_id: str, host: bool) -> dict[str, Any]:
    """The constructor options `EnvConfig.params` (`name=value` entries) sets for a
    prefix-adder id: `OPTIONS`, and on the host `HOST_OPTIONS`. ConfigError naming
    `env.params` for another name or a value of the wrong type; the constructor checks the
    ranges."""
    known = {**OPTIONS, **(HOST_OPTIONS if host else {})}
    options: dict[str, Any] = {}
    for name, value in parse_params(params).items():
        if name not in known:
            where = " (the host form's, under Sebulba)" if name in HOST_OPTIONS else ""
            raise ConfigError(f"env.params: {env_id} has no option {name}{where}; it has {', '.join(sorted(known))}")
        try:
            options[name] = known[name](value)
            if known[name] is float and not math.isfinite(options[name]):
                raise ValueError(value)
        except ValueError:
            raise ConfigError(f"env.params: {name} must be a finite number, got {value!r}") from None
    return options


def jax_form_options(options: dict[str, Any]) -> dict[str, Any]:
    """Of a host form's options, those the JAX form (`PrefixAdderEnv`) takes too."""
    return {name: value for name, value in options.items() if name in OPTIONS}


def make_prefix_env(env_id: str, options: dict[str, Any] | None = None) -> PrefixAdderEnv | None:
    """The environment an id names (with constructor `options`, see `prefix_options`), or
    None if it is not a prefix-adder id; bad numbers in the id or options raise ValueError
    naming the id."""
    kwargs = parse_prefix_id(env_id)
    if kwargs is None:
        return None
    try:
        return PrefixAdderEnv(**kwargs, **(options or {}))
    except ValueError as error:
        raise ValueError(f"environment {env_id!r}: {error}") from None

