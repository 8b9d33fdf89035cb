"""Run configuration: frozen dataclasses, validated when built.

The tree is `Config(seed, total_env_steps, run_dir, env, agent, arch, log, distributed)`;
`agent` is an algorithm's config (e.g. `PPOConfig`) and `arch` an architecture's
(`AnakinConfig`, `SebulbaConfig`). Sizes derived from it are computed by the runners,
never written back.
"""

from __future__ import annotations

import dataclasses
from typing import Any


class ConfigError(ValueError):
    """A configuration value that cannot work; the message names the field."""


def check(ok: bool, field: str, requirement: str, value: Any) -> None:
    if not ok:
        raise ConfigError(f"{field} {requirement}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    """Which environment, and how host environments are wrapped (Sebulba)."""

    id: str = "CartPole-v1"

    def __post_init__(self) -> None:
        check(bool(self.id), "env.id", "must be a non-empty environment id", self.id)


@dataclasses.dataclass(frozen=True)
class LogConfig:
    console: bool = True  # progress bar with env steps, steps/s and recent return
    tensorboard: bool = True


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    """Multi-process settings for `jax.distributed` (unused with one process)."""

    coordinator: str = ""  # host:port of process 0, or "auto" (SLURM, TPU pods)
    num_processes: int = 1
    process_id: int = 0
    heartbeat_timeout_s: int = 30  # a silent process fails the run after this long

    def __post_init__(self) -> None:
        check(self.num_processes >= 1, "distributed.num_processes", "must be >= 1", self.num_processes)
        check(0 <= self.process_id < self.num_processes, "distributed.process_id",
              f"must be in [0, {self.num_processes})", self.process_id)
        check(self.coordinator == "auto" or self.num_processes == 1 or ":" in self.coordinator,
              "distributed.coordinator", "must be host:port (or auto) with several processes", self.coordinator)
        check(self.heartbeat_timeout_s >= 1, "distributed.heartbeat_timeout_s", "must be >= 1",
              self.heartbeat_timeout_s)


@dataclasses.dataclass(frozen=True)
class Config:
    agent: Any
    arch: Any
    seed: int = 0
    total_env_steps: int = 500_000
    run_dir: str | None = None  # default: runs/<preset>-<time>
    env: EnvConfig = EnvConfig()
    log: LogConfig = LogConfig()
    distributed: DistributedConfig = DistributedConfig()

    def __post_init__(self) -> None:
        check(self.total_env_steps > 0, "total_env_steps", "must be > 0", self.total_env_steps)
        check(self.seed >= 0, "seed", "must be >= 0", self.seed)


def to_dict(config: Any) -> dict[str, Any]:
    """A JSON-ready dict of a config tree, each section tagged with its dataclass name."""
    out: dict[str, Any] = {"_type": type(config).__name__}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            out[field.name] = to_dict(value)
        elif isinstance(value, tuple):
            out[field.name] = list(value)
        else:
            out[field.name] = value
    return out
