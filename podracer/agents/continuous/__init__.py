"""Off-policy actor-critics for continuous actions: SAC and TD3, sharing their config
fields, networks and replay learning (`replay_learning`)."""

from podracer.agents.continuous.config import ReplayActorCriticConfig, SACConfig, TD3Config
from podracer.agents.continuous.sac import make_sac
from podracer.agents.continuous.td3 import make_td3

__all__ = ["ReplayActorCriticConfig", "SACConfig", "TD3Config", "make_sac", "make_td3"]
