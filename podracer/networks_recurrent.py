"""Recurrent cores that restart at episode boundaries, for acting step by step and for the
learner's unroll over a `[T, B]` trajectory, with one reset rule for both.

The rule: `start[t]` is True where observation `t` is the first of an episode (an episode
that ended at step `t - 1`, terminated or truncated, or the run's first observation). The
core state is replaced by its initial value (zeros) *before* the core reads observation `t`.
Acting applies `step` once per environment step with the start flags it knows (the previous
step's end); the learner applies `unroll` from the state the actor had at the start of the
sequence, with `start[t] = end[t - 1]` for `t >= 1` (`starts_from_ends`). Both therefore see
the same states, which `tests/test_networks_recurrent.py` checks against running the network
separately on each episode from the initial state.
"""

from __future__ import annotations

from typing import Any, Literal

import flax.linen as nn
import jax
import jax.numpy as jnp

Array = jax.Array
CoreState = Any  # LSTM: (c, h), each [B, size]; GRU: h [B, size]

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


def starts_from_ends(first: Array, end: Array) -> Array:
    """Episode starts `[T, B]` of a sequence: `first [B]` at `t = 0` (did the episode begin at
    the sequence's first observation), then `end[t - 1]` (terminated or truncated)."""
    return jnp.concatenate([first[None], end[:-1]], axis=0)


def unroll(core: ResetCore, params: Any, state: CoreState, x: Array, start: Array) -> tuple[CoreState, Array]:
    """Apply `core` over time: `x [T, B, D]`, `start [T, B]` from `state` (the sequence's first
    state, before any reset at `t = 0`); returns `(last state, y [T, B, size])`."""

    def step(carry, inputs):
        return core.apply(params, carry, *inputs)

    return jax.lax.scan(step, state, (x, start))
