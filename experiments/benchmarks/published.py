"""Published results that `podracer bench table` prints beside podracer's own.

Each entry: (algorithm, gymnax id) -> {env steps: mean evaluation return}, with its source.
"""

from __future__ import annotations

from typing import NamedTuple


class Published(NamedTuple):
    value: float
    env_steps: int
    source: str


GYMNAX_BLINES_PPO = (
    "gymnax-blines PPO (RobertTLange/gymnax-blines README: 64 envs x 128 steps, 4 epochs x 8 minibatches, "
    "gamma 0.999, lr 5e-4, entropy 0.01, 2x256 MLP; evaluation returns)"
)

PUBLISHED: dict[tuple[str, str], tuple[str, dict[int, float]]] = {
    ("ppo", "Breakout-MinAtar"): (GYMNAX_BLINES_PPO, {1_300_000: 15.7, 5_100_000: 22.0, 9_900_000: 22.9}),
    ("ppo", "SpaceInvaders-MinAtar"): (GYMNAX_BLINES_PPO, {1_300_000: 58.4, 5_100_000: 92.7, 9_900_000: 131.6}),
    ("ppo", "Freeway-MinAtar"): (GYMNAX_BLINES_PPO, {1_300_000: 30.3, 5_100_000: 51.2, 9_900_000: 58.8}),
    ("ppo", "Asterix-MinAtar"): (GYMNAX_BLINES_PPO, {1_300_000: 2.1, 5_100_000: 7.7, 9_900_000: 15.0}),
}


def published(algorithm: str, env_id: str, env_steps: int, tolerance: float = 0.1) -> Published | None:
    """The published result for `algorithm` on `env_id` nearest `env_steps`, if one lies within
    `tolerance` (relative) of it; None otherwise."""
    entry = PUBLISHED.get((algorithm, env_id))
    if entry is None or env_steps <= 0:
        return None
    source, points = entry
    steps = min(points, key=lambda s: abs(s - env_steps))
    if abs(steps - env_steps) > tolerance * steps:
        return None
    return Published(points[steps], steps, source)
