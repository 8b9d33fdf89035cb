"""The optimizers' learning-rate schedule, value by value against `lr * max(N - k, 0) / N`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.agents.schedules import learning_rate


def test_without_annealing_the_learning_rate_is_the_constant():
    assert learning_rate(3e-4, False, 100) == 3e-4


@pytest.mark.parametrize("num_steps", [1, 4])
def test_annealing_decays_linearly_and_is_exactly_zero_from_the_last_step(num_steps):
    """Steps `0 .. N - 1` take `lr (N - k) / N`, and every step from `N` on takes exactly 0
    (a run's optimizer may step past its planned count: it must not move the parameters)."""
    lr = 0.5
    schedule = jax.jit(learning_rate(lr, True, num_steps))
    for k in range(num_steps + 3):
        value = schedule(jnp.asarray(k, jnp.int32))  # optax counts steps in int32
        assert value.dtype == jnp.float32
        assert float(value) == np.float32(lr * max(num_steps - k, 0) / num_steps), k


def test_annealing_over_no_steps_decays_over_one():
    """`num_steps = 0` (a run too short for a step) is taken as 1: no division by zero."""
    schedule = learning_rate(0.5, True, 0)
    assert float(schedule(jnp.asarray(0))) == 0.5
    assert float(schedule(jnp.asarray(1))) == 0.0
