"""Anakin on the host: validate, build the program, call it, report metrics."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from anakin.config import AnakinConfig
from anakin.program import AXIS, CallMetrics, RunnerState, init_state, make_rollout_call, make_train_call
from podracer import parallel
from podracer.agents import make_agent
from podracer.config import Config, ConfigError, check
from podracer.envs import JaxEnv, UnknownEnvError, make_jax_env
from podracer.types import Agent

MetricsCallback = Callable[[dict[str, Any]], None]


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Sizes derived from a config and the devices (never written back into the config)."""

    num_devices: int
    envs_per_device: int
    steps_per_update: int  # env steps of one seed per update: num_envs * rollout_length
    num_updates: int  # per seed, for the whole run


class Setup(NamedTuple):
    env: JaxEnv
    env_params: Any
    agent: Agent
    mesh: jax.sharding.Mesh
    sizes: Sizes


class TrainResult(NamedTuple):
    metrics: list[dict[str, Any]]  # one row per host call, as written to metrics.jsonl
    state: RunnerState  # final state: `state.agent.params` has a leading seed axis
    agent: Agent
    run_dir: str | None = None  # set by `experiments.train`


def select_devices(indices: tuple[int, ...]) -> list[jax.Device]:
    """The mesh's devices: the chosen local ones, or all devices of all processes."""
    if jax.process_count() > 1:
        check(not indices, "arch.devices", "must be empty with several processes (all devices are used)", indices)
        return jax.devices()
    devices = jax.local_devices()
    for index in indices:
        check(index < len(devices), "arch.devices", f"names device {index} but only {len(devices)} exist", indices)
    return [devices[i] for i in indices] if indices else devices


def compute_sizes(config: Config, num_devices: int) -> Sizes:
    arch: AnakinConfig = config.arch
    check(arch.num_envs % num_devices == 0, "arch.num_envs",
          f"must be divisible by the number of devices ({num_devices})", arch.num_envs)
    steps_per_update = arch.num_envs * arch.rollout_length
    num_updates = config.total_env_steps // steps_per_update
    check(num_updates >= 1, "total_env_steps",
          f"must be at least arch.num_envs * arch.rollout_length = {steps_per_update}", config.total_env_steps)
    per_device_batch = arch.num_envs // num_devices * arch.rollout_length
    if hasattr(config.agent, "check_batch"):
        config.agent.check_batch(per_device_batch)
    return Sizes(num_devices, arch.num_envs // num_devices, steps_per_update, num_updates)


def setup(config: Config) -> Setup:
    """Everything but compilation: raises ConfigError on bad input, before any compile."""
    if not isinstance(config.arch, AnakinConfig):
        raise ConfigError(f"arch must be an AnakinConfig for the Anakin runner, got {type(config.arch).__name__}")
    try:
        env = make_jax_env(config.env.id)
    except UnknownEnvError as error:
        raise ConfigError(f"env.id: {error}") from None
    devices = select_devices(config.arch.devices)
    sizes = compute_sizes(config, len(devices))
    env_params = env.default_params
    agent = make_agent(
        config.agent, env.observation_spec(env_params), env.action_spec(env_params),
        num_updates=sizes.num_updates, axis_name=AXIS,
    )
    return Setup(env, env_params, agent, parallel.make_mesh(devices, AXIS), sizes)


def initial_state(config: Config, s: Setup) -> RunnerState:
    return init_state(s.env, s.env_params, s.agent, s.mesh, jax.random.key(config.seed),
                      config.arch.num_seeds, config.arch.num_envs)


def train(config: Config, on_metrics: MetricsCallback | None = None) -> TrainResult:
    """Train `config.agent` on `config.env` with Anakin; returns metrics and final state.

    `on_metrics` receives each metrics row as soon as it exists (the command-line tool
    writes them to disk and the console); a notebook can just read `result.metrics`.
    """
    s = setup(config)
    state = initial_state(config, s)
    train_call = make_train_call(s.env, s.env_params, s.agent, s.mesh, config.arch.rollout_length)
    rows: list[dict[str, Any]] = []
    start = last_time = time.perf_counter()
    done_updates = 0
    pending: tuple[int, CallMetrics] | None = None
    # Dispatch call k+1 before reading the metrics of call k, so the devices never idle
    # while the host formats and writes a row.
    while done_updates < s.sizes.num_updates or pending is not None:
        launched = None
        if done_updates < s.sizes.num_updates:
            n = min(config.arch.updates_per_call, s.sizes.num_updates - done_updates)
            state, metrics = train_call(state, jnp.int32(n))
            done_updates += n
            launched = (n, metrics)
        if pending is not None:
            n_prev, metrics_prev = pending
            metrics_prev = jax.device_get(metrics_prev)
            now = time.perf_counter()
            env_steps = (done_updates - (n if launched else 0)) * s.sizes.steps_per_update
            row = metrics_row(metrics_prev, n_prev, env_steps, config.arch.num_seeds,
                              n_prev * s.sizes.steps_per_update * config.arch.num_seeds / (now - last_time),
                              now - start)
            last_time = now
            rows.append(row)
            if on_metrics is not None:
                on_metrics(row)
        pending = launched
    return TrainResult(rows, state, s.agent)


def metrics_row(metrics: CallMetrics, num_updates: int, env_steps: int, num_seeds: int,
                sps: float, wall_s: float) -> dict[str, Any]:
    """One metrics.jsonl row. `env_steps` counts one seed's experience; `sps` all seeds'."""
    episodes = metrics.episodes
    count = np.asarray(episodes.count)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_seed = np.where(count > 0, np.asarray(episodes.return_sum) / np.maximum(count, 1), np.nan)
        lengths = np.where(count > 0, np.asarray(episodes.length_sum) / np.maximum(count, 1), np.nan)
    row: dict[str, Any] = {
        "env_steps": int(env_steps),
        "sps": float(sps),
        "wall_s": float(wall_s),
        "episode_return": _mean_or_none(per_seed),
        "episode_length": _mean_or_none(lengths),
        "episodes": int(count.sum()),
    }
    if num_seeds > 1:
        row["episode_return_per_seed"] = [None if np.isnan(r) else float(r) for r in per_seed]
    for name, value in metrics.agent.items():
        row[name] = float(np.mean(np.asarray(value)) / num_updates)
    return row


def _mean_or_none(values: np.ndarray) -> float | None:
    values = values[~np.isnan(values)]
    return float(values.mean()) if values.size else None
