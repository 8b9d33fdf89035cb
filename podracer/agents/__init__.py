"""Algorithms as `Agent`s: pure functions that know nothing of devices or threads.

`make_agent(agent_config, ...)` builds the agent a config describes; each algorithm
registers its config class and factory in `FACTORIES`.
"""

from __future__ import annotations

from typing import Any, Callable

from podracer.agents.dqn import DQNConfig, make_dqn
from podracer.agents.impala import ImpalaConfig, make_impala
from podracer.agents.muzero import MuZeroConfig, make_muzero
from podracer.agents.ppo import PPOConfig, make_ppo
from podracer.parallel import AxisName
from podracer.types import Agent, DiscreteSpec, ObsSpec

FACTORIES: dict[type, Callable[..., Agent]] = {
    PPOConfig: make_ppo, ImpalaConfig: make_impala, DQNConfig: make_dqn, MuZeroConfig: make_muzero,
}
ALGORITHMS: dict[str, type] = {"ppo": PPOConfig, "impala": ImpalaConfig, "dqn": DQNConfig, "muzero": MuZeroConfig}


def make_agent(
    config: Any, obs_spec: ObsSpec, action_spec: DiscreteSpec, *, num_updates: int, axis_name: AxisName
) -> Agent:
    """The `Agent` for an algorithm config (`PPOConfig`, `ImpalaConfig`, `DQNConfig`, ...)."""
    try:
        factory = FACTORIES[type(config)]
    except KeyError:
        raise TypeError(f"no agent is registered for {type(config).__name__}") from None
    return factory(config, obs_spec, action_spec, num_updates=num_updates, axis_name=axis_name)


__all__ = [
    "ALGORITHMS", "DQNConfig", "FACTORIES", "ImpalaConfig", "MuZeroConfig", "PPOConfig", "make_agent", "make_dqn",
    "make_impala", "make_muzero", "make_ppo",
]
