"""Named presets for MuZero (acting with mctx's Gumbel MuZero search) on both architectures;
merged into `PRESETS` by the launcher."""

from __future__ import annotations

from typing import Callable

from anakin.config import AnakinConfig
from podracer.agents import MuZeroConfig
from podracer.config import Config, EnvConfig
from sebulba.config import SebulbaConfig


def muzero_catch_anakin() -> Config:
    """Gumbel MuZero on Catch: 8 simulations, a 5-step unroll, 5-step value targets, 16 envs
    x 8 steps per update and 12 sequences learned per env step (24 gradient steps of 64)."""
    return Config(
        env=EnvConfig("Catch"),
        agent=MuZeroConfig(
            num_simulations=8, min_q_range=1.0, hidden_sizes=(64, 64), unroll_steps=5, td_steps=5, gamma=0.99,
            value_max=1.0, num_bins=21, value_coef=1.0, learning_rate=1e-3, buffer_size=20_000, batch_size=64,
            replay_ratio=12.0, learning_starts=512,
        ),
        arch=AnakinConfig(num_envs=16, rollout_length=8, updates_per_call=20),
        total_env_steps=81_920,
    )


def _cartpole_agent() -> MuZeroConfig:
    """Gumbel MuZero for CartPole: 8 simulations, discount 0.997 (values up to ~300 on a
    101-bin support), a 5-step unroll and 30-step value targets (bootstrapping mostly from
    search values that were computed when acting, and are stale: long returns lean on them
    less), 8 sequences learned per env step, the learning rate (3e-3) decayed linearly to 0.
    3e-3 is the better of 1e-3 and 3e-3 by IQM over the classic-control family at 50k env
    steps (docs/benchmarks/classic-control.md), all of it on CartPole: neither learns
    Acrobot or MountainCar at that budget.

    `min_q_range` 5: the search's Q-values are normalised over a range of at least 5 value
    units, so that two actions whose values differ by the categorical value head's noise (a
    bin is ~10 units wide near 300) are not ranked as if one were far better. With 0.1 (and
    lr 1e-3) the return reached 500 by ~70k env steps and then swung between ~150 and 500."""
    return MuZeroConfig(
        num_simulations=8, min_q_range=5.0, hidden_sizes=(64, 64), unroll_steps=5, td_steps=30, gamma=0.997,
        value_max=300.0, num_bins=101, value_coef=1.0, learning_rate=3e-3, anneal_lr=True, buffer_size=50_000,
        batch_size=128, replay_ratio=8.0, learning_starts=1_024,
    )


def muzero_cartpole_anakin() -> Config:
    """Gumbel MuZero on CartPole-v1 (`_cartpole_agent`): 16 envs x 16 steps per update.
    Two seeds first reach 475 at 28k and 38k env steps and both end at 500 (150k steps)."""
    return Config(
        env=EnvConfig("CartPole-v1"), agent=_cartpole_agent(),
        arch=AnakinConfig(num_envs=16, rollout_length=16, updates_per_call=10),
        total_env_steps=150_016,
    )


def muzero_cartpole_sebulba() -> Config:
    """Gumbel MuZero on EnvPool's CartPole-v1 (`_cartpole_agent`), the search on the actor
    device: `muzero-cartpole-anakin`'s batch, 16 envs x 16 steps per update (split over 1, 2
    or 4 learner devices), actors on the learner's latest parameters (`max_policy_lag` 0).
    With 12 envs and actors one version ahead, one seed stayed near 100-step episodes and
    another fell from 500 to 242; with these settings both ended >= 460 (2-core CPU, with
    learning rate 1e-3)."""
    return Config(
        env=EnvConfig("CartPole-v1"), agent=_cartpole_agent(),
        arch=SebulbaConfig(num_envs=16, rollout_length=16, max_policy_lag=0, updates_per_log=10),
        total_env_steps=150_016,
    )


MUZERO_PRESETS: dict[str, Callable[[], Config]] = {
    "muzero-catch-anakin": muzero_catch_anakin,
    "muzero-cartpole-anakin": muzero_cartpole_anakin,
    "muzero-cartpole-sebulba": muzero_cartpole_sebulba,
}
