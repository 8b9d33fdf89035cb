"""Sizes every runner derives alike from a config (computed, never written back)."""

from __future__ import annotations

from podracer.config import Config, check


def update_sizes(config: Config) -> tuple[int, int]:
    """`(steps_per_update, num_updates)`: env steps of one seed per update
    (`arch.num_envs * arch.rollout_length`, `num_envs` counting every device and process)
    and updates in the whole run. ConfigError naming `total_env_steps` if not even one."""
    steps_per_update = config.arch.num_envs * config.arch.rollout_length
    num_updates = config.total_env_steps // steps_per_update
    check(num_updates >= 1, "total_env_steps",
          f"must be at least arch.num_envs * arch.rollout_length = {steps_per_update}", config.total_env_steps)
    return steps_per_update, num_updates
