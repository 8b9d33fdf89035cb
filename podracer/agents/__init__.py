"""Algorithms as `Agent`s: pure functions that know nothing of devices or threads.

Each algorithm declares itself once, as an `Algorithm` record (`podracer.agents.registry`):
config class, factory, batch check, supported action spaces, masks. `algorithms()` lists
them, `make_agent(agent_config, ...)` builds the agent a config describes, and
`register_algorithm` adds a user's.
"""

from __future__ import annotations

from podracer.agents import dqn, impala, muzero, ppo, pqn
from podracer.agents.continuous import SACConfig, TD3Config, make_sac, make_td3, sac, td3
from podracer.agents.dqn import DQNConfig, make_dqn
from podracer.agents.impala import ImpalaConfig, make_impala
from podracer.agents.muzero import MuZeroConfig, make_muzero
from podracer.agents.ppo import PPOConfig, make_ppo
from podracer.agents.pqn import PQNConfig, make_pqn
from podracer.agents.registry import (
                                      Algorithm,
                                      algorithm_for,
                                      algorithms,
                                      is_builtin,
                                      make_agent,
                                      make_checked_agent,
                                      register_algorithm,
                                      unregister_algorithm,
)

BUILTIN_ALGORITHMS: tuple[Algorithm, ...] = (ppo.ALGORITHM, impala.ALGORITHM, dqn.ALGORITHM, pqn.ALGORITHM,
                                               muzero.ALGORITHM, sac.ALGORITHM, td3.ALGORITHM)

__all__ = [
    "Algorithm", "BUILTIN_ALGORITHMS", "DQNConfig", "ImpalaConfig", "MuZeroConfig", "PPOConfig", "PQNConfig",
    "SACConfig", "TD3Config",
    "algorithm_for", "algorithms", "is_builtin", "make_agent", "make_checked_agent", "make_dqn", "make_impala",
    "make_muzero", "make_ppo", "make_pqn", "make_sac", "make_td3",
    "register_algorithm", "unregister_algorithm",
]
