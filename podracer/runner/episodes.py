"""`EpisodeStats`: sums over the episodes that ended, the same type in a compiled Anakin
program (JAX scalars, or `[S]` per seed) and in Sebulba's host threads (NumPy float64)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from podracer.types import Array


class EpisodeStats(NamedTuple):
    """Sums over episodes that finished: divide by `count` for means (see `metrics_row`).
    Each field is a scalar, or `[S]` with a seed axis."""

    return_sum: Array
    length_sum: Array
    count: Array

    @classmethod
    def zeros(cls) -> "EpisodeStats":
        """JAX zeros (inside a compiled program): float32 sums, an int32 count."""
        return cls(jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32))

    @classmethod
    def host_zeros(cls) -> "EpisodeStats":
        """NumPy zeros (on the host): float64 throughout, as `to_array` sends them."""
        return cls(np.float64(0.0), np.float64(0.0), np.float64(0.0))

    @classmethod
    def ended(cls, done: Array, episode_return: Array, episode_length: Array) -> "EpisodeStats":
        """JAX: the episodes of a `[B]` batch step for which `done` is set."""
        return cls(
            jnp.sum(jnp.where(done, episode_return, 0.0)),
            jnp.sum(jnp.where(done, episode_length, 0)).astype(jnp.float32),
            jnp.sum(done, dtype=jnp.int32),
        )

    @classmethod
    def host_ended(cls, done: np.ndarray, episode_return: np.ndarray, episode_length: np.ndarray) -> "EpisodeStats":
        """NumPy: the episodes of a `[B]` batch step for which `done` is set (float64 sums)."""
        if not done.any():
            return cls.host_zeros()
        return cls.from_array(np.array([episode_return[done].sum(), episode_length[done].sum(), done.sum()],
                                       np.float64))

    def __add__(self, other: Any) -> "EpisodeStats":  # type: ignore[override]
        return EpisodeStats(*(a + b for a, b in zip(self, other)))

    def to_array(self) -> np.ndarray:
        """Host stats as one float64 `[3]` array (e.g. to sum them over processes)."""
        return np.array([self.return_sum, self.length_sum, self.count], np.float64)

    @classmethod
    def from_array(cls, values: np.ndarray) -> "EpisodeStats":
        """Undo `to_array`."""
        return cls(*(np.float64(v) for v in values[:3]))
