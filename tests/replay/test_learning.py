"""The gradient-step loop on several devices: per-step metrics, device-varying and invariant
alike, averaged over the steps taken and then over the devices (hand-computed)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from podracer import parallel
from podracer.replay import learn_steps

AXIS = "d"


@pytest.mark.parametrize("unroll", [False, True])
def test_metrics_are_averaged_over_the_steps_taken_and_the_devices(unroll):
    """Two devices, 3 of at most 4 steps: device d's step i logs `10 d + i` (varying) and `i`
    (invariant); the means are `(1 + 11) / 2 = 6` and 1 on every device."""
    mesh = parallel.make_mesh(jax.devices()[:2], AXIS)

    def step(count, key):
        device = jax.lax.axis_index(AXIS).astype(jnp.float32)
        return count + 1, {"varying": 10.0 * device + count, "invariant": count}

    def per_device(key):
        return learn_steps(step, jnp.float32(0.0), key, jnp.int32(3), 4, AXIS, unroll=unroll)

    sharded = jax.shard_map(per_device, mesh=mesh, in_specs=P(), out_specs=P())
    count, metrics = jax.jit(sharded)(jax.random.key(0))
    assert float(count) == 3.0
    np.testing.assert_allclose(metrics["varying"], 6.0, rtol=1e-6)
    np.testing.assert_allclose(metrics["invariant"], 1.0, rtol=1e-6)


@pytest.mark.parametrize("unroll", [False, True])
def test_a_metric_keeps_its_dtype(unroll):
    """A bfloat16 metric is summed and averaged in bfloat16: 2 steps of 0.5 and 1.5 -> 1."""

    def step(count, key):
        return count + 1, {"loss": (0.5 + count).astype(jnp.bfloat16)}

    run = jax.jit(lambda key: learn_steps(step, jnp.float32(0.0), key, jnp.int32(2), 3, None, unroll=unroll))
    _, metrics = run(jax.random.key(0))
    assert metrics["loss"].dtype == jnp.bfloat16
    assert float(metrics["loss"]) == 1.0
