"""Recurrent cores that restart at episode boundaries, for acting step by step and for the
learner's unroll over a `[T, B]` trajectory, with one reset rule for both.

The rule: `start[t]` is True where observation `t` is the first of an episode (the run's
first observation, and every one after a terminated or truncated step). The core state is
replaced by its initial value (zeros) *before* the core reads observation `t`. Acting
applies `ResetCore` once per environment step with the flags the runner carries; the runner
records them in the trajectory (`Trajectory.start`) with the state before the sequence
(`Trajectory.core`), and the learner's `unroll` applies the same flags from that state, so
both see the same states (`tests/networks/test_recurrent.py`, `tests/agents/test_recurrent.py`).
"""

from __future__ import annotations

from typing import Any, Literal

import flax.linen as nn
import jax
import jax.numpy as jnp

from podracer.types import CoreState  # LSTM: (c, h), each [B, size]; GRU: h [B, size]

Array = jax.Array

CORES = ("lstm", "gru")


class ResetCore(nn.Module):
    """One step of an LSTM or GRU cell, `(state, x [B, D], start [B]) -> (state, y [B, size])`,
    from the initial state wherever `start` is True."""

    kind: Literal["lstm", "gru"] = "lstm"
    size: int = 128

    def initial_state(self, batch_size: int) -> CoreState:
        """The state every episode starts from: zeros, `[batch_size, size]` per array."""
        zeros = jnp.zeros((batch_size, self.size), jnp.float32)
        return (zeros, zeros) if self.kind == "lstm" else zeros

    @nn.compact
    def __call__(self, state: CoreState, x: Array, start: Array) -> tuple[CoreState, Array]:
        initial = self.initial_state(x.shape[0])
        state = jax.tree.map(lambda s, i: jnp.where(start[:, None], i, s), state, initial)
        cell = nn.OptimizedLSTMCell(self.size) if self.kind == "lstm" else nn.GRUCell(self.size)
        return cell(state, x)


def unroll(core: ResetCore, params: Any, state: CoreState, x: Array, start: Array) -> tuple[CoreState, Array]:
    """Apply `core` over time: `x [T, B, D]`, `start [T, B]` from `state` (the sequence's first
    state, before any reset at `t = 0`); returns `(states [T, B, ...] after each step,
    y [T, B, size])`."""

    def step(carry, inputs):
        carry, y = core.apply(params, carry, *inputs)
        return carry, (carry, y)

    return jax.lax.scan(step, state, (x, start))[1]
