"""Run configuration: frozen dataclasses, validated when built.

The tree is `Config(seed, total_env_steps, run_dir, env, agent, arch, log, checkpoint,
distributed, population)`;
`agent` is an algorithm's config (e.g. `PPOConfig`) and `arch` an architecture's
(`AnakinConfig`, `SebulbaConfig`). Sizes derived from it are computed by the runners,
never written back.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import typing
from typing import Any, Callable, Mapping


class ConfigError(ValueError):
    """A configuration value that cannot work; the message names the field."""


def check(ok: bool, field: str, requirement: str, value: Any) -> None:
    if not ok:
        raise ConfigError(f"{field} {requirement}, got {value!r}")


# The smallest normal float32 magnitude: a nonzero value below it is a float32 denormal or
# rounds to 0, and accelerators (XLA on CPU and GPU included) flush denormals to 0.
FLOAT32_TINY = 1.1754943508222875e-38


def check_finite_floats(section: Any, prefix: str = "") -> None:
    """ConfigError naming the field unless every real number in the config tree `section`
    (a float field, or an item of a tuple field) is finite, and 0 or a normal float32.

    One check for every section, built-in or a user algorithm's: a section's own checks
    catch NaN (every comparison with it fails) but not infinity (`inf > 0`), and an infinite
    learning rate or coefficient gives NaN parameters only once training has compiled. Nor
    do they catch a value that passes `> 0` in Python but is 0 in the float32 a program
    computes in (`adam_eps=1e-50` divides by zero on the first update)."""
    for field in dataclasses.fields(section):
        value = getattr(section, field.name)
        path = f"{prefix}{field.name}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_finite_floats(value, path + ".")
            continue
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, numbers.Real) and not isinstance(item, numbers.Integral):
                check(math.isfinite(item), path, "must be finite", value)
                check(item == 0 or abs(item) >= FLOAT32_TINY, path,
                      f"must be 0 or at least {FLOAT32_TINY:.4g} in magnitude (float32 rounds it to 0 or a denormal)",
                      value)


HOST_BACKENDS = ("auto", "envpool", "gymnasium", "jax")


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    """Which environment, and how host environments are wrapped (Sebulba).

    Every field but `id`, `max_episode_steps`, `observe` and `params` concerns host
    environments only (`podracer.envs.make_host_env`; an Anakin run refuses a host
    `backend`); the Atari fields apply to EnvPool's Atari games and are ignored elsewhere.
    `max_episode_steps` and `observe` apply to every environment
    (`podracer.envs.base.TimeLimitJaxEnv`, `podracer.envs.observe`), `params` to JAX
    environments, also on the host (`podracer.envs.params`), and to both forms of a
    registered id family, whose factories read them as options (`podracer.envs.families`).
    """

    id: str = "CartPole-v1"  # environment id: a JAX env (Anakin) or an EnvPool/Gymnasium/JAX id (Sebulba)
    backend: str = "auto"  # host envs: "auto" (EnvPool, else Gymnasium, else a JAX env), "envpool", "gymnasium", "jax"
    max_episode_steps: int | None = None  # time limit in agent steps; None: the env's own (Atari: 27000)
    episodic_life: bool = False  # Atari: a lost life ends the learner's episode; returns are logged per game
    reward_clip: bool = False  # Atari: the learner sees sign(reward); returns are logged unclipped
    repeat_action_probability: float = 0.0  # Atari: sticky actions (0.25 in Machado et al. 2018)
    noop_max: int = 30  # Atari: up to this many no-op actions after a reset
    frame_skip: int = 4  # Atari: each action is repeated this many frames (max-pooled)
    frame_stack: int = 4  # Atari: observations stack this many 84x84 grayscale frames
    observe: tuple[int, ...] = ()  # keep only these entries of a vector observation, e.g. 0,2 (empty: all)
    params: tuple[str, ...] = ()  # JAX envs' parameters by name, e.g. memory_length=10; an id family's options

    def __post_init__(self) -> None:
        check(bool(self.id), "env.id", "must be a non-empty environment id", self.id)
        check(self.backend in HOST_BACKENDS, "env.backend", f"must be one of {HOST_BACKENDS}", self.backend)
        check(self.max_episode_steps is None or 1 <= self.max_episode_steps < 2**31, "env.max_episode_steps",
              "must be in [1, 2**31) (episode step counters are int32), or None for the environment's own limit",
              self.max_episode_steps)
        check(0.0 <= self.repeat_action_probability <= 1.0, "env.repeat_action_probability",
              "must be in [0, 1]", self.repeat_action_probability)
        check(self.noop_max >= 0, "env.noop_max", "must be >= 0", self.noop_max)
        check(self.frame_skip >= 1, "env.frame_skip", "must be >= 1", self.frame_skip)
        check(self.frame_stack >= 1, "env.frame_stack", "must be >= 1", self.frame_stack)
        check(all(isinstance(i, int) and i >= 0 for i in self.observe) and len(set(self.observe)) == len(self.observe),
              "env.observe", "must be distinct indices >= 0", self.observe)


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """Where metrics go: metrics.jsonl always; TensorBoard, console and W&B on request."""

    console: bool = True  # progress bar with env steps, steps/s and recent return
    tensorboard: bool = True  # TensorBoard events in RUN_DIR/tensorboard
    wandb: bool = False  # Weights & Biases (needs `pip install wandb`)
    wandb_project: str = "podracer"  # W&B project name (with --log.wandb)

    def __post_init__(self) -> None:
        check(bool(self.wandb_project), "log.wandb_project", "must be a non-empty project name", self.wandb_project)


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    """Orbax checkpoints of the whole training state in `RUN_DIR/checkpoints`.

    One is written at the end of the host call that reaches each multiple of
    `every_updates` (0: none on the way), on SIGTERM/SIGINT, and at the end of the run.
    """

    every_updates: int = 100  # a checkpoint after the host call that reaches each multiple of this; 0: none
    keep: int = 3  # the newest `keep` checkpoints are kept
    # a run directory: a new run's agent parameters start from its latest checkpoint
    # (podracer.runner.warm_start; optimizer, replay and counters start fresh); None: fresh
    init_from: str | None = None
    init_member: int | None = None  # with init_from: every member starts from this member of it (None: k from k)

    def __post_init__(self) -> None:
        check(self.init_member is None or self.init_member >= 0, "checkpoint.init_member", "must be >= 0 (or None)",
              self.init_member)
        check(self.init_member is None or self.init_from is not None, "checkpoint.init_member",
              "needs checkpoint.init_from (the run whose member to start from)", self.init_member)
        check(self.every_updates >= 0, "checkpoint.every_updates", "must be >= 0", self.every_updates)
        check(self.keep >= 1, "checkpoint.keep", "must be >= 1", self.keep)
        check(self.init_from is None or bool(self.init_from), "checkpoint.init_from",
              "must be a run directory (or None)", self.init_from)


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    """Multi-process settings for `jax.distributed` (unused with one process).

    No process waits on the others without a deadline: `timeout_s` bounds every wait at
    one point of the run (joining, the start-up checks, a host call and its collectives,
    a checkpoint, the stop agreement), after which the process exits naming the wait and
    the processes it is missing; `stop_timeout_s` bounds the time from SIGTERM/Ctrl-C to
    the exit, checkpoint or not.
    """

    coordinator: str = ""  # host:port of process 0, or "auto" (SLURM, TPU pods)
    num_processes: int = 1  # processes in the run (one per host or per GPU)
    process_id: int = 0  # this process, 0 .. num_processes - 1; process 0 writes the run directory
    heartbeat_timeout_s: int = 30  # a silent process fails the run after this long
    timeout_s: int = 300  # the longest one wait on the other processes may last
    stop_timeout_s: int = 60  # from a stop signal to the exit, with a checkpoint if the processes agree in time

    def __post_init__(self) -> None:
        check(self.num_processes >= 1, "distributed.num_processes", "must be >= 1", self.num_processes)
        check(0 <= self.process_id < self.num_processes, "distributed.process_id",
              f"must be in [0, {self.num_processes})", self.process_id)
        check(self.coordinator == "auto" or self.num_processes == 1 or ":" in self.coordinator,
              "distributed.coordinator", "must be host:port (or auto) with several processes", self.coordinator)
        check(self.heartbeat_timeout_s >= 1, "distributed.heartbeat_timeout_s", "must be >= 1",
              self.heartbeat_timeout_s)
        check(self.timeout_s >= 1, "distributed.timeout_s", "must be >= 1", self.timeout_s)
        check(self.stop_timeout_s >= 1, "distributed.stop_timeout_s", "must be >= 1", self.stop_timeout_s)


@dataclasses.dataclass(frozen=True)
class PopulationConfig:
    """A population of agents in one Anakin program (`podracer.population`): each
    `sweep` entry gives one agent hyperparameter several values, and every combination of
    values trains `arch.num_seeds` members. With `pbt_every`, population-based training
    (Jaderberg et al. 2017) replaces the worst members by perturbed copies of the best.

    A sweep entry is `agent.field=V1,V2,...` (a grid), `agent.field=loguniform:LOW:HIGH` or
    `agent.field=uniform:LOW:HIGH` (`samples` draws from the run's seed, shared by every
    random entry and crossed with the grids).
    """

    sweep: tuple[str, ...] = ()  # e.g. agent.learning_rate=1e-4,3e-4 (the command line's --sweep)
    samples: int = 0  # draws of the random entries (loguniform:/uniform:); the command line's --sweep-samples
    pbt_every: int = 0  # PBT: exploit and explore after every this many updates (0: no PBT)
    pbt_fraction: float = 0.25  # PBT: the bottom fraction of members copies the top fraction
    pbt_resample: float = 0.25  # PBT: chance that an explored hyperparameter is redrawn instead of perturbed

    def __post_init__(self) -> None:
        check(all(isinstance(e, str) and "=" in e for e in self.sweep), "population.sweep",
              "must be entries agent.field=VALUES", self.sweep)
        check(self.samples >= 0, "population.samples", "must be >= 0", self.samples)
        check(self.pbt_every >= 0, "population.pbt_every", "must be >= 0", self.pbt_every)
        check(0 < self.pbt_fraction <= 0.5, "population.pbt_fraction", "must be in (0, 0.5]", self.pbt_fraction)
        check(0 <= self.pbt_resample <= 1, "population.pbt_resample", "must be in [0, 1]", self.pbt_resample)
        check(self.pbt_every == 0 or bool(self.sweep), "population.pbt_every",
              "needs swept hyperparameters (population.sweep) to explore", self.pbt_every)


@dataclasses.dataclass(frozen=True)
class Config:
    agent: Any
    arch: Any
    seed: int = 0  # the run's random seed (parameters, environments, sampling)
    total_env_steps: int = 500_000  # the budget, in env steps of one seed
    run_dir: str | None = None  # where config, metrics and checkpoints go; None: runs/<preset>-<time>
    env: EnvConfig = EnvConfig()
    log: LogConfig = LogConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    distributed: DistributedConfig = DistributedConfig()
    population: PopulationConfig = PopulationConfig()

    def __post_init__(self) -> None:
        for name, section in (("env", EnvConfig), ("log", LogConfig), ("checkpoint", CheckpointConfig),
                              ("distributed", DistributedConfig), ("population", PopulationConfig)):
            value = getattr(self, name)
            check(isinstance(value, section), name, f"must be an instance of {section.__name__} (podracer.config)",
                  value)
        for name in ("agent", "arch"):
            value = getattr(self, name)
            check(not isinstance(value, type), name, "must be a config instance (e.g. PPOConfig(), AnakinConfig()), "
                  "not a class", value)
        check_finite_floats(self)  # every section's floats, named `agent.learning_rate`, ...
        check(self.total_env_steps > 0, "total_env_steps", "must be > 0", self.total_env_steps)
        check(self.seed >= 0, "seed", "must be >= 0", self.seed)
        # jax.random.key keeps a seed's low 32 bits (without jax_enable_x64): a larger seed
        # would silently repeat the run of a smaller one
        check(self.seed < 2**32, "seed", "must be < 2**32 (JAX keys take 32-bit seeds)", self.seed)


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


CORE_TYPES: tuple[type, ...] = (Config, EnvConfig, LogConfig, CheckpointConfig, DistributedConfig,
                                PopulationConfig)

# Upgrades of saved config sections by `_type` tag: what reads a config written by another
# version (a run's config.json, a checkpoint's config) applies them first.
_UPGRADES: dict[str, list[Callable[[dict[str, Any]], dict[str, Any]]]] = {}


def register_config_upgrade(tag: str, upgrade: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Make saved config sections of type `tag` readable after their fields changed: an
    application that moved its fields registers how an old section becomes a new one.

    Args:
        tag: the section's class name, as `to_dict` writes it in `_type` (e.g. "DQNConfig").
        upgrade: a section's dict (its fields, `_type` included) -> the dict to build from;
            it returns sections it does not concern unchanged.
    """
    _UPGRADES.setdefault(tag, []).append(upgrade)


def upgrade_dict(data: Mapping[str, Any]) -> dict[str, Any]:
    """A saved config tree with the registered upgrades applied to every section.

    Args:
        data: a tree as `to_dict` writes it.

    Returns:
        A new tree; `data` is left as it is.
    """
    tree = {name: upgrade_dict(value) if isinstance(value, Mapping) and "_type" in value else value
            for name, value in data.items()}
    for upgrade in _UPGRADES.get(tree.get("_type"), []):
        tree = upgrade(dict(tree))
    return tree


def from_dict(data: Mapping[str, Any], types: Mapping[str, type] | tuple[type, ...] = ()) -> Any:
    """Rebuild a config tree written by `to_dict`, choosing each section's class by its
    `_type` tag among `CORE_TYPES` and `types` (agent and architecture configs).

    Lists become tuples where the field is a tuple; a field missing from `data` takes its
    default (configs written before the field existed still load); the registered upgrades
    (`register_config_upgrade`) apply first; an unknown tag or field raises ConfigError.
    Every section is validated again as it is built.
    """
    extra = types.values() if isinstance(types, Mapping) else types
    registry = {cls.__name__: cls for cls in (*CORE_TYPES, *extra)}
    return _build(upgrade_dict(data), registry, "config")


def _build(data: Mapping[str, Any], registry: dict[str, type], where: str) -> Any:
    tag = data.get("_type")
    if tag not in registry:
        raise ConfigError(f"{where}: unknown config type {tag!r} (a user algorithm's config is known once "
                          "podracer.agents.register_algorithm has run in this process: for the podracer "
                          "command, name the module that registers it in $PODRACER_IMPORT); "
                          f"known: {', '.join(sorted(registry))}")
    cls = registry[tag]
    hints = typing.get_type_hints(cls)
    names = {field.name for field in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        if name == "_type":
            continue
        if name not in names:
            raise ConfigError(f"{where}.{name}: no such field in {tag}")
        path = name if where == "config" else f"{where}.{name}"
        if isinstance(value, Mapping) and "_type" in value:
            kwargs[name] = _build(value, registry, path)
        elif isinstance(value, list) and typing.get_origin(hints[name]) is tuple:
            kwargs[name] = tuple(value)
        else:
            kwargs[name] = value
    return cls(**kwargs)
