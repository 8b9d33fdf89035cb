"""One record per algorithm: what runners, the command line and the contract suite know of it.

An `Algorithm` names a config class, the factory that builds its `Agent`, its (mandatory)
batch check and the action spaces it supports; `register_algorithm` adds one, and
`tests/integration/test_contract.py` then runs the whole agent contract over it with no new test code.
Runners go through `make_checked_agent`, which refuses, before anything compiles, an
algorithm paired with an action space it does not declare, masked observations it would
ignore, or a batch it cannot split; `checked_update` enforces the metrics rule of
`podracer.types.UpdateFn`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Protocol

import jax

from podracer.config import ConfigError
from podracer.parallel import AxisName
from podracer.types import (
    ActionSpec,
    Agent,
    AgentState,
    BatchShape,
    BoxSpec,
    DiscreteSpec,
    MaskedObs,
    Metrics,
    ObservationSpec,
    PRNGKey,
    Trajectory,
    UpdateFn,
    describe_action_spec,
    is_obs_spec,
    network_obs_spec,
    zeros_like_spec,
)

ACTION_SPACES: tuple[type, ...] = (DiscreteSpec, BoxSpec)


class AgentFactory(Protocol):
    def __call__(self, config: Any, obs_spec: ObservationSpec, action_spec: ActionSpec, *, num_updates: int,
                 axis_name: AxisName) -> Agent:
        """The `Agent` for `config` on these specs. `num_updates`: how many times `update`
        will be called in the run (schedules); `axis_name`: the mesh axis (or axes) that
        `update` averages gradients and metrics over, None on one device."""


class BatchCheck(Protocol):
    def __call__(self, config: Any, batch: BatchShape) -> None:
        """Raise `ConfigError` naming the field (`agent.num_minibatches ...`) unless one
        device's `update` can take a `[batch.rollout_length, batch.envs_per_device]`
        trajectory. Runners call it before anything is compiled or written."""


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """Everything podracer knows of an algorithm, declared once.

    name:          what `podracer list` shows.
    config:        its config class: a frozen dataclass validated in `__post_init__`, every
                   error a `ConfigError` naming `agent.<field>` (floats reject NaN).
    make:          the `AgentFactory`.
    check_batch:   the `BatchCheck` (mandatory: every algorithm has batch arithmetic).
    action_spaces: the action-spec types its agents handle (`DiscreteSpec`, `BoxSpec`).
    masks:         whether its agents respect `MaskedObs` legal-action masks (in acting, in
                   greedy acting and in every target that picks an action).
    structured_obs: whether its agents take dict/NamedTuple observations (their torsos built
                   by `podracer.networks.structured`); one that does not is refused them at setup.
    probe_config:  a small config that learns the probe environments of each supported
                   action space within `probe_steps` env steps: the contract suite's.
    exact_config:  `(config, global batch) -> config`, a variant whose update of that global
                   batch does not depend on how it is split over devices (a full batch, no
                   shuffling or sampling noise): the contract suite checks 4 devices
                   against 1 with it, which guards gradient averaging.
    recurrent:     `config -> config` with a recurrent core, for an algorithm whose agents
                   can be recurrent (`Agent.initial_core`); the contract suite then runs
                   every check over that variant of its probe config too. None: feed-forward only.
    step_metrics:  the metrics that are means over an update's gradient steps (a replay
                   agent's loss, TD error, ...) where an update may take none (before
                   `learning_starts`, at a fractional replay ratio) and then reports 0; its
                   updates report how many they took as the metric `gradient_steps`. A
                   metrics row averages these over its gradient steps, not its updates
                   (`podracer.runner.agent_means`), so updates that learned nothing do not
                   dilute them. The contract suite checks that the agent reports them.
    """

    name: str
    config: type
    make: AgentFactory
    check_batch: BatchCheck
    action_spaces: tuple[type, ...] = (DiscreteSpec,)
    masks: bool = False
    structured_obs: bool = False
    probe_config: Callable[[], Any] | None = None
    probe_steps: int = 20_000
    exact_config: Callable[[Any, BatchShape], Any] = lambda config, batch: config
    recurrent: Callable[[Any], Any] | None = None
    step_metrics: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"an algorithm needs a name, got {self.name!r}")
        if not (isinstance(self.config, type) and dataclasses.is_dataclass(self.config)):
            raise TypeError(f"algorithm {self.name!r}: config must be a dataclass type, got {self.config!r}")
        for field in ("make", "check_batch", "exact_config"):
            if not callable(getattr(self, field)):
                raise TypeError(f"algorithm {self.name!r}: {field} must be callable (it is mandatory)")
        if not (isinstance(self.step_metrics, tuple) and all(isinstance(n, str) for n in self.step_metrics)):
            raise TypeError(f"algorithm {self.name!r}: step_metrics must be a tuple of metric names, "
                            f"got {self.step_metrics!r}")
        if not self.action_spaces or not set(self.action_spaces) <= set(ACTION_SPACES):
            raise ValueError(f"algorithm {self.name!r}: action_spaces must be a non-empty subset of "
                             f"{[t.__name__ for t in ACTION_SPACES]}, got {self.action_spaces!r}")

    def default_probe_config(self) -> Any:
        return self.probe_config() if self.probe_config is not None else self.config()

    def supports(self, action_spec: ActionSpec) -> bool:
        return isinstance(action_spec, self.action_spaces)


_BUILTIN: dict[str, Algorithm] = {}  # filled on first use from podracer.agents (no import side effects)
_USER: dict[str, Algorithm] = {}


def _builtins() -> dict[str, Algorithm]:
    if not _BUILTIN:
        from podracer.agents import BUILTIN_ALGORITHMS

        _BUILTIN.update((algorithm.name, algorithm) for algorithm in BUILTIN_ALGORITHMS)
    return _BUILTIN


def register_algorithm(algorithm: Algorithm, overwrite: bool = False) -> None:
    """Make `algorithm` known to the runners, the command line and the contract suite.

    For user algorithms in this process (a notebook, a script, a test); a built-in name or
    config class cannot be replaced, a user one only with `overwrite=True`."""
    builtins = _builtins()
    if algorithm.name in builtins or any(a.config is algorithm.config for a in builtins.values()):
        raise ValueError(f"{algorithm.name!r} ({algorithm.config.__name__}) is a built-in algorithm")
    taken = [a for a in _USER.values() if a.name == algorithm.name or a.config is algorithm.config]
    if taken and not overwrite:
        raise ValueError(f"{algorithm.name!r} is already registered; pass overwrite=True to replace it")
    for old in taken:
        del _USER[old.name]
    _USER[algorithm.name] = algorithm


def unregister_algorithm(name: str) -> None:
    """Forget a user algorithm (tests register and forget throwaway ones)."""
    _USER.pop(name, None)


def algorithms() -> dict[str, Algorithm]:
    """Every registered algorithm by name: the built-ins, then the user's."""
    return {**_builtins(), **_USER}


def is_builtin(algorithm: Algorithm) -> bool:
    """Whether `algorithm` is one of podracer's own (checked by the contract suite), not a
    user's (whose agents the runners check at setup)."""
    return _builtins().get(algorithm.name) is algorithm


def algorithm_for(config: Any) -> Algorithm:
    """The registered algorithm whose config class `config` is; ConfigError if none."""
    for algorithm in algorithms().values():
        if type(config) is algorithm.config:
            return algorithm
    raise ConfigError(f"agent: no algorithm is registered for {type(config).__name__}; known: "
                      f"{', '.join(a.config.__name__ for a in algorithms().values())}")


def config_classes() -> list[type]:
    """Every registered algorithm's config class (what a saved config.json may name)."""
    return [algorithm.config for algorithm in algorithms().values()]


def check_pairing(algorithm: Algorithm, obs_spec: ObservationSpec, action_spec: ActionSpec, env_id: str) -> None:
    """ConfigError naming the algorithm and the environment's action space unless the
    algorithm declares it, and unless it respects masks when the observations carry them."""
    if not algorithm.supports(action_spec):
        supported = ", ".join(t.__name__ for t in algorithm.action_spaces)
        raise ConfigError(f"agent: {algorithm.name} does not support the {describe_action_spec(action_spec)} "
                          f"of env.id {env_id!r}; {algorithm.name} supports {supported}")
    if isinstance(obs_spec, MaskedObs) and not algorithm.masks:
        raise ConfigError(f"agent: {algorithm.name} does not respect legal-action masks, and env.id {env_id!r} "
                          "has masked observations (MaskedObs)")
    if not is_obs_spec(network_obs_spec(obs_spec)) and not algorithm.structured_obs:
        raise ConfigError(f"agent: {algorithm.name} does not take structured (dict/NamedTuple) observations, and "
                          f"env.id {env_id!r} has them; use an algorithm that does (ppo, impala, dqn, pqn)")
    if isinstance(obs_spec, MaskedObs) and not isinstance(action_spec, DiscreteSpec):
        raise ConfigError(f"env.id {env_id!r}: legal-action masks need discrete actions, got "
                          f"{describe_action_spec(action_spec)}")


def make_agent(config: Any, obs_spec: ObservationSpec, action_spec: ActionSpec, *, num_updates: int,
               axis_name: AxisName, env_id: str = "?") -> Agent:
    """The `Agent` a registered config describes, after `check_pairing`."""
    algorithm = algorithm_for(config)
    check_pairing(algorithm, obs_spec, action_spec, env_id)
    return algorithm.make(config, obs_spec, action_spec, num_updates=num_updates, axis_name=axis_name)


def make_checked_agent(config: Any, obs_spec: ObservationSpec, action_spec: ActionSpec, batch: BatchShape, *,
                       env_id: str, num_updates: int, axis_name: AxisName) -> Agent:
    """What a runner's setup calls, before compiling anything: the algorithm is registered,
    supports the environment's spaces (`check_pairing`) and takes one device's batch
    (`Algorithm.check_batch`); then its `Agent`."""
    algorithm = algorithm_for(config)
    check_pairing(algorithm, obs_spec, action_spec, env_id)
    algorithm.check_batch(config, batch)
    agent = algorithm.make(config, obs_spec, action_spec, num_updates=num_updates, axis_name=axis_name)
    if not is_builtin(algorithm):  # built-ins are checked by the contract suite; a user's here
        check_act_outputs(agent, obs_spec, action_spec, batch.envs_per_device, algorithm.name)
    return agent


class ActContractError(TypeError):
    """An agent's `act` or `greedy_act` returns actions unlike its action spec (`ActFn`)."""


def check_act_outputs(agent: Agent, obs_spec: ObservationSpec, action_spec: ActionSpec, batch_size: int,
                      name: str) -> None:
    """ActContractError unless `act` and `greedy_act` return the actions the runners carry:
    `int32 [B]` for a `DiscreteSpec`, `float32 [B, *shape]` for a `BoxSpec`. Traced with
    `jax.eval_shape` (nothing runs): a float action for a discrete space otherwise fails
    deep inside a runner (a `lax.scan` carry whose dtypes differ, a gather's indices)."""
    if isinstance(action_spec, DiscreteSpec):
        expected = jax.ShapeDtypeStruct((batch_size,), jax.numpy.int32)
    else:
        expected = jax.ShapeDtypeStruct((batch_size, *action_spec.shape), jax.numpy.float32)

    def actions() -> tuple[Any, Any]:
        params = agent.init(jax.random.key(0)).params
        obs = zeros_like_spec(obs_spec, (batch_size,))
        core, start = agent.initial_acting_state(batch_size)
        action = agent.step(params, obs, jax.random.key(1), core, start)[0]
        greedy = agent.greedy_step(params, obs, core, start)[0] if agent.greedy_act is not None else None
        return action, greedy

    for what, action in zip(("act", "greedy_act"), jax.eval_shape(actions)):
        if action is not None and (getattr(action, "shape", None), getattr(action, "dtype", None)) != \
                (expected.shape, expected.dtype):
            shown = f"{action.dtype}{list(action.shape)}" if hasattr(action, "shape") else repr(action)
            raise ActContractError(f"agent {name!r}: {what} returns actions {shown} for a batch of {batch_size} "
                                   f"observations; with {describe_action_spec(action_spec)} they must be "
                                   f"{expected.dtype}{list(expected.shape)} (podracer.types.ActFn)")


class MetricsRuleError(TypeError):
    """An agent's `update` returned metrics that break the metrics rule (`UpdateFn`)."""


def checked_update(update: UpdateFn, axis_name: AxisName) -> UpdateFn:
    """`update`, checked (at trace time) against the metrics rule: every metric a scalar,
    already averaged over `axis_name` (device-invariant under `shard_map`). Both runners
    call the agent's `update` through it and never average its metrics over devices."""

    def run(state: AgentState, trajectory: Trajectory, key: PRNGKey) -> tuple[AgentState, Metrics]:
        state, metrics = update(state, trajectory, key)
        check_metrics(metrics, axis_name)
        return state, metrics

    return run


def check_metrics(metrics: Metrics, axis_name: AxisName) -> None:
    """MetricsRuleError naming the metrics that are not scalars or vary across `axis_name`."""
    names = () if axis_name is None else ((axis_name,) if isinstance(axis_name, str) else tuple(axis_name))
    not_scalar = sorted(k for k, v in metrics.items() if jax.typeof(v).shape != ())
    varying = sorted(k for k, v in metrics.items() if set(names) & _varying_axes(v))
    if not_scalar:
        raise MetricsRuleError(f"agent.update returned non-scalar metrics {', '.join(not_scalar)}; metrics are "
                               "scalars (podracer.types.UpdateFn)")
    if varying:
        raise MetricsRuleError(f"agent.update returned metrics that differ across devices ({', '.join(varying)}); "
                               f"an agent averages its metrics over its axis_name {axis_name!r} "
                               "(podracer.parallel.pmean) and runners never do (podracer.types.UpdateFn)")


def _varying_axes(x: Any) -> set[str]:
    manual = getattr(jax.typeof(x), "manual_axis_type", None)
    return set(manual.varying) if manual is not None else set()
