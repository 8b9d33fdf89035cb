"""What the per-algorithm preset modules share: environment configs written once, the
derivation of a Sebulba preset from its Anakin twin, and named presets made from a function.

Each `experiments/presets_<algorithm>.py` holds one algorithm's presets for both
architectures in a `<ALGORITHM>_PRESETS` dict, which `experiments.presets` merges.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from podracer.config import Config, EnvConfig
from sebulba.config import SebulbaConfig

# preset game name -> gymnax id of the four MinAtar games
MINATAR_GAMES = {
    "breakout": "Breakout-MinAtar",
    "space-invaders": "SpaceInvaders-MinAtar",
    "freeway": "Freeway-MinAtar",
    "asterix": "Asterix-MinAtar",
}


def atari_env(env_id: str) -> EnvConfig:
    """EnvPool Atari v5 as CleanRL's and Cleanba's Atari scripts set it: a lost life ends the
    learner's episode, rewards clipped to their sign, no sticky actions, up to 30 no-ops
    after a reset, each action repeated 4 frames, 4 frames stacked."""
    return EnvConfig(env_id, episodic_life=True, reward_clip=True, repeat_action_probability=0.0,
                     noop_max=30, frame_skip=4, frame_stack=4)


def sebulba_twin(anakin: Config, arch: SebulbaConfig, **changes: Any) -> Config:
    """The Anakin preset `anakin` under Sebulba: the same environment id, agent, seed and
    budget with the architecture `arch`; `changes` replace further top-level fields (an agent
    that differs, say)."""
    return dataclasses.replace(anakin, arch=arch, **changes)


def with_agent(base: Config, **changes: Any) -> Config:
    """`base` with the agent fields `changes` replaced (a variant of a preset)."""
    return dataclasses.replace(base, agent=dataclasses.replace(base.agent, **changes))


# Replay for V-trace agents on Atari: half of each update replayed from a buffer of 20k steps
# per learner device (Atari steps are large: observation and next observation, 56 KB each).
ATARI_REPLAY = {"replay_fraction": 0.5, "replay_capacity": 20_000}


def named(make: Callable[[str], Config], env_id: str, doc: str) -> Callable[[], Config]:
    """A preset (a no-argument function with `doc` as its description) that builds
    `make(env_id)`: one recipe applied to several environments."""

    def preset() -> Config:
        return make(env_id)

    preset.__doc__ = doc
    return preset
