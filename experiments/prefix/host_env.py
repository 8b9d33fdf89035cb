"""The prefix-adder environment as a host environment (Sebulba), with synthesis rewards.

Same dynamics, observations, masks, horizon and reward formula as the JAX form
(`experiments.prefix.env.PrefixAdderEnv`: the batch is stepped by the same jitted
functions, on the CPU), but the area and delay behind the rewards can come from synthesis
(Yosys/ABC) through a `RewardPool` of reward workers instead of the analytic model.

`send` applies the actions at once and submits every new graph to the pool (and each new
episode's first graph, whose cost the next reward needs); `recv` collects those costs with a
bounded wait (`reward_timeout_s`, then `RewardTimeout`) and reports the TimeStep. Rewards are
normalised by the reference design's cost under the same model (Sklansky, synthesised once).

Ids: `PrefixAdder-<bits>[-w<weight>]` (analytic costs) and `PrefixAdderSynth-<bits>[-w<weight>]`
(synthesis costs), as `podracer.envs.host.make_host_env` builds them.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import jax
import numpy as np

from experiments.prefix import graph as np_graph
from experiments.prefix import jax_graph
from experiments.prefix.builders import BUILDERS, sklansky
from experiments.prefix.env import (
    PrefixAdderEnv,
    jax_form_options,
    parse_prefix_id,
    prefix_options,
)
from experiments.prefix.front import Design, front_designs
from experiments.prefix.reward_pool import RewardPool, check_cache_file
from experiments.prefix.synthesis import find_synthesis
from podracer.config import ConfigError
from podracer.envs.host import EpisodeCounters, HostStep
from podracer.types import DiscreteSpec, MaskedObs, TimeStep

CACHE_ENV_VAR = "PODRACER_PREFIX_CACHE"


def parse_host_id(env_id: str) -> dict[str, Any] | None:
    """`{"bits", "area_weight", "synthesis"}` of a host prefix-adder id, or None: the JAX
    ids' grammar (`parse_prefix_id`), `PrefixAdderSynth-` for synthesis rewards."""
    synthesis = env_id.startswith("PrefixAdderSynth-")
    kwargs = parse_prefix_id("PrefixAdder-" + env_id.removeprefix("PrefixAdderSynth-") if synthesis else env_id)
    if kwargs is None:
        return None
    return {"bits": kwargs["bits"], "area_weight": kwargs.get("area_weight"), "synthesis": synthesis}


def default_cache_path() -> str:
    """`$PODRACER_PREFIX_CACHE`, else `~/.cache/podracer/prefix-synthesis-<identity>.jsonl`,
    one file per toolchain, library and flow (`SynthesisSpec.identity` of `find_synthesis()`,
    so SynthesisUnavailable where synthesis is)."""
    return os.environ.get(CACHE_ENV_VAR) or os.path.join(os.path.expanduser("~"), ".cache", "podracer",
                                                         f"prefix-synthesis-{find_synthesis().identity}.jsonl")


def synthesis_record(env_id: str) -> dict[str, str] | None:
    """What a prefix-adder id's rewards depend on beyond its config: for synthesis rewards
    the toolchain, cell library and flow (`SynthesisSpec.record`), else None."""
    spec = parse_host_id(env_id)
    return find_synthesis().record() if spec is not None and spec["synthesis"] else None


_SHARED: dict[tuple, RewardPool] = {}
_SHARED_LOCK = threading.Lock()

# The Pareto front of every design the host environments of this process costed, by
# (bits, cost model): what a run found, written to its directory when it ends
# (`experiments.prefix.run_front`), which then forgets it.
_FOUND: dict[tuple[int, str], list[Design]] = {}
_FOUND_LOCK = threading.Lock()


def found_front(bits: int, model: str, forget: bool = False) -> list[Design]:
    """The front of the designs this process's host environments of width `bits` costed
    under `model` ("analytic-<fanout weight>" or "synthesis:<identity>", as designs files
    name cost models).

    Args:
        bits: the adders' width.
        model: the cost model.
        forget: clear the record after reading it (a run that ended takes its designs).

    Returns:
        The designs on the front, by area.
    """
    with _FOUND_LOCK:
        front = _FOUND.pop((bits, model), []) if forget else _FOUND.get((bits, model), [])
    return list(front)


def shared_reward_pool(cache_path: str | None = None) -> RewardPool:
    """One synthesis pool per process and cache file, shared by every host env of the
    process (its actor threads), so they share this host's CPUs and one cache."""
    spec = find_synthesis()
    key = (spec, cache_path or default_cache_path())
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = RewardPool(spec, cache_path=key[1])
        return _SHARED[key]


class PrefixHostEnv:
    """`num_envs` prefix-adder environments stepped on the host.

    pool: None for analytic costs (area = node count, delay = level or fanout-aware
    arrival, as the JAX form); a `RewardPool` for synthesised costs.
    front_restarts: the probability that an episode starts from a design on the Pareto front
    of the designs these environments have costed so far (drawn uniformly from it), instead
    of `reset`'s distribution: restarts from the best designs found, as in Go-Explore
    (Ecoffet et al. 2021) or Pareto local search, so the agent's edits refine the front it
    found rather than wander from ripple and Sklansky. The front starts empty (also on a
    resumed run) and is this object's own: environments in other actor threads keep theirs.
    Other arguments as `PrefixAdderEnv`.
    """

    def __init__(self, num_envs: int, seed: int, bits: int = 16, area_weight: float | None = None,
                 horizon: int | None = None, reset: str = "mixed", fanout_weight: float = 0.0,
                 reference: str = "sklansky", max_density: float = 0.3, pool: RewardPool | None = None,
                 reward_timeout_s: float = 600.0, front_restarts: float = 0.0) -> None:
        _check_front_restarts(front_restarts)
        self.spec_env = PrefixAdderEnv(bits, area_weight, horizon, reset, fanout_weight, reference, max_density)
        self.num_envs, self.bits, self.pool = num_envs, bits, pool
        self.reward_timeout_s, self.front_restarts = reward_timeout_s, float(front_restarts)
        self._front: list[Design] = []
        self.cost_model = f"analytic-{fanout_weight:g}" if pool is None else f"synthesis:{pool.identity}"
        self.observation_spec = self.spec_env.observation_spec(None)
        self.action_spec = DiscreteSpec(2 * bits * bits)
        self._rng = np.random.default_rng(seed)
        self._device = jax.devices("cpu")[0]
        env = self.spec_env
        self._analyse = jax.jit(jax.vmap(lambda nodes: self._observe(nodes)))
        self._step = jax.jit(jax.vmap(lambda nodes, mask, action: jax_graph.apply_action(nodes, action, mask)[0]))
        if pool is None:
            self.area_ref, self.delay_ref = env.area_ref, env.delay_ref
        else:
            self.area_ref, self.delay_ref = pool.costs([BUILDERS[reference](bits)], reward_timeout_s)[0]
        self._counters = EpisodeCounters(num_envs, env.horizon)
        self._pending: tuple | None = None

    def _observe(self, nodes: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        analysis = jax_graph.analyse(nodes, self.spec_env.fanout_weight)
        features = jax_graph.features(nodes, analysis)
        return features, analysis.action_mask, analysis.area, analysis.delay

    # --- episodes ---------------------------------------------------------------------
    def _initial_graphs(self, count: int) -> np.ndarray:
        """`bool [count, N, N]` first graphs, drawn as the JAX form draws them."""
        n, kind = self.bits, self.spec_env.reset_kind
        graphs = []
        for _ in range(count):
            if self.front_restarts and self._front and self._rng.random() < self.front_restarts:
                graphs.append(self._front[self._rng.integers(len(self._front))].nodes)
                continue
            choice = kind if kind != "mixed" else ("ripple", "sklansky", "random")[self._rng.integers(3)]
            if choice == "ripple":
                graphs.append(np_graph.empty_graph(n))
            elif choice == "sklansky":
                graphs.append(sklansky(n))
            else:
                graphs.append(np_graph.random_graph(self._rng, n, self._rng.random() * self.spec_env.max_density))
        return np.stack(graphs)

    def _weights(self, count: int) -> np.ndarray:
        fixed = self.spec_env.area_weight
        return np.full(count, fixed, np.float32) if fixed is not None else self._rng.random(count).astype(np.float32)

    def set_graphs(self, graphs: np.ndarray, weights: np.ndarray) -> MaskedObs:
        """Start every episode from the given legal graphs `[B, N, N]` and weights `[B]`
        (e.g. to step the JAX and host forms from the same states): the observations."""
        self._counters = EpisodeCounters(self.num_envs, self.spec_env.horizon)
        self._nodes = np.array(graphs, bool)
        self._weight = np.asarray(weights, np.float32)
        obs, self._mask, analytic = self._observation(self._nodes, self._weight)
        self._cost = analytic
        self._start_costs(np.arange(self.num_envs))
        self._pending = None
        return obs

    def reset(self) -> MaskedObs:
        return self.set_graphs(self._initial_graphs(self.num_envs), self._weights(self.num_envs))

    def _observation(self, nodes: np.ndarray, weights: np.ndarray) -> tuple[MaskedObs, np.ndarray, np.ndarray]:
        features, mask, area, delay = jax.device_get(self._analyse(jax.device_put(nodes, self._device)))
        if self.spec_env.area_weight is None:
            channel = np.broadcast_to(weights[:, None, None, None], features.shape[:-1] + (1,))
            features = np.concatenate([features, channel], axis=-1)
        return MaskedObs(np.asarray(features, np.float32), np.asarray(mask)), np.asarray(mask), \
            np.stack([area, delay], axis=-1).astype(np.float64)

    def _request(self, nodes: np.ndarray, analytic: np.ndarray) -> list | np.ndarray:
        """Costs `[k, 2]` now (analytic), or futures of them from the pool."""
        return analytic if self.pool is None else [self.pool.submit(g) for g in nodes]

    def _collect(self, request: list | np.ndarray) -> np.ndarray:
        if isinstance(request, np.ndarray):
            return request
        return self.pool.wait(request, self.reward_timeout_s)

    def _start_costs(self, envs: np.ndarray) -> None:
        """Submit the costs of the graphs `envs` start their episodes from (synthesis); they
        are collected when the next reward needs them (`self._cost` holds the analytic ones)."""
        self._starting = (envs, self._request(self._nodes[envs], self._cost[envs]))

    def _remember(self, nodes: np.ndarray, costs: np.ndarray) -> None:
        """Keep the front of the designs costed so far (for `front_restarts`), and add them to
        the process's record of what was found (`found_front`); of designs with equal costs,
        the first found stays."""
        new = [Design(np.array(g, bool), float(a), float(d)) for g, (a, d) in zip(nodes, costs)]
        if self.front_restarts:
            self._front = front_designs(self._front + new)
        with _FOUND_LOCK:
            key = (self.bits, self.cost_model)
            _FOUND[key] = front_designs(_FOUND.get(key, []) + new)

    @property
    def front(self) -> list[Design]:
        """The Pareto front of the designs costed so far, by area (kept when
        `front_restarts > 0`, else empty)."""
        return list(self._front)

    def _scalar_cost(self, cost: np.ndarray, weights: np.ndarray) -> np.ndarray:
        return weights * cost[:, 0] / self.area_ref + (1.0 - weights) * cost[:, 1] / self.delay_ref

    # --- stepping ---------------------------------------------------------------------
    def send(self, action: np.ndarray) -> None:
        """Apply the actions (an illegal one leaves its graph unchanged) and submit the new
        graphs' costs; returns without waiting for them."""
        action = np.asarray(action, np.int32)
        if action.shape != (self.num_envs,):
            raise ValueError(f"expected actions [{self.num_envs}], got {action.shape}")
        nodes, mask, action = (jax.device_put(x, self._device) for x in (self._nodes, self._mask, action))
        after = np.asarray(self._step(nodes, mask, action))
        final_obs, final_mask, analytic = self._observation(after, self._weight)
        self._pending = (after, final_obs, final_mask, self._request(after, analytic))

    def recv(self) -> HostStep:
        """The step started by `send`, rewards included (waits at most `reward_timeout_s`)."""
        if self._pending is None:
            raise RuntimeError("recv() without a send()")
        after, final_obs, final_mask, request = self._pending
        self._pending = None
        envs, start_request = self._starting
        if len(envs):
            self._cost[envs] = self._collect(start_request)
            self._starting = (envs[:0], [])
            self._remember(self._nodes[envs], self._cost[envs])
        after_cost = self._collect(request)
        self._remember(after, after_cost)
        reward = self._scalar_cost(self._cost, self._weight) - self._scalar_cost(after_cost, self._weight)
        reward = reward.astype(np.float32)
        terminated = np.zeros(self.num_envs, bool)
        truncated, episode_end, episode_return, episode_length = self._counters.step(reward, terminated, terminated)
        self._nodes, self._cost, self._mask, obs = after, after_cost, final_mask, final_obs
        if truncated.any():  # auto-reset: the new episodes' first observations, in this step
            ended = np.flatnonzero(truncated)
            self._nodes = after.copy()
            self._nodes[ended] = self._initial_graphs(len(ended))
            self._weight = self._weight.copy()
            self._weight[ended] = self._weights(len(ended))
            obs, self._mask, analytic = self._observation(self._nodes, self._weight)
            self._cost = after_cost.copy()
            self._cost[ended] = analytic[ended]
            self._start_costs(ended)
        timestep = TimeStep(obs, reward, terminated, truncated, final_obs, episode_return, episode_length)
        return HostStep(timestep, episode_end)

    @property
    def graphs(self) -> np.ndarray:
        """`bool [B, N, N]`: the current graphs."""
        return self._nodes.copy()

    def metrics(self) -> dict[str, float]:
        """The reward pool's metrics (syntheses/s, cache hit rate, reward wait), and with
        `front_restarts` the size of the front it restarts from."""
        metrics = {} if self.pool is None else self.pool.metrics()
        if self.front_restarts:
            metrics["front_size"] = float(len(self._front))
        return metrics

    def close(self) -> None:
        """Nothing of its own to release: a shared pool outlives its environments."""
        self._pending = None


def prefix_host_specs(env_id: str, max_episode_steps: int | None = None,
                      params: tuple[str, ...] = ()) -> tuple[MaskedObs, DiscreteSpec]:
    """Observation and action specs of a host prefix-adder id, checking its options
    (`params`, see `prefix_options`; ConfigError naming `env.params`), that synthesis is
    available where the id asks for it (SynthesisUnavailable otherwise) and that its cache
    file can be written and was written with this installation's toolchain, library and
    flow (ValueError naming `$PODRACER_PREFIX_CACHE`)."""
    kwargs, options = _parsed(env_id, params)
    if kwargs.pop("synthesis"):
        record = find_synthesis().record()
        try:
            check_cache_file(default_cache_path(), record)
        except ValueError as error:
            raise ValueError(f"${CACHE_ENV_VAR}: {error}") from None
    env = PrefixAdderEnv(horizon=max_episode_steps, **kwargs, **jax_form_options(options))
    return env.observation_spec(None), env.action_spec(None)


def _check_front_restarts(value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"front_restarts must be in [0, 1], got {value}")


def host_options(env_id: str, params: tuple[str, ...]) -> dict[str, Any]:
    """The host form's options set by `params` (`prefix_options`) for a prefix-adder id,
    their ranges checked: ConfigError naming `env.params`."""
    return _parsed(env_id, params)[1]


def _parsed(env_id: str, params: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`(parse_host_id(env_id), host_options(env_id, params))`; ValueError for an id that is
    not a prefix adder's."""
    spec = parse_host_id(env_id)
    if spec is None:
        raise ValueError(f"not a prefix-adder id: {env_id!r}")
    options = prefix_options(params, env_id, host=True)
    try:
        PrefixAdderEnv(spec["bits"], spec["area_weight"], **jax_form_options(options))
        _check_front_restarts(options.get("front_restarts", 0.0))
    except ValueError as error:
        raise ConfigError(f"env.params: environment {env_id!r}: {error}") from None
    return spec, options


def make_prefix_host_env(env_id: str, num_envs: int, seed: int, max_episode_steps: int | None = None,
                         params: tuple[str, ...] = ()) -> PrefixHostEnv:
    """The host environment an id names, with the options `params` sets (`prefix_options`);
    `PrefixAdderSynth-32` uses the process's shared synthesis pool and `default_cache_path()`."""
    kwargs, options = _parsed(env_id, params)
    pool = shared_reward_pool() if kwargs.pop("synthesis") else None
    return PrefixHostEnv(num_envs, seed, horizon=max_episode_steps, pool=pool, **kwargs, **options)
