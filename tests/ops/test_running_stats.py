"""Running statistics (`podracer.ops.running_stats`): clipping, reward scaling and the merge
over a named axis against hand-computed and NumPy values."""

import jax
import jax.numpy as jnp
import numpy as np

from podracer.ops import running_stats as rs


def _stats(mean: float, var: float) -> rs.RunningStats:
    return rs.RunningStats(jnp.asarray(mean, jnp.float32), jnp.asarray(var, jnp.float32), jnp.asarray(10.0))


def test_normalize_clips_both_sides_and_keeps_the_values_inside():
    """mean 1, var 4: x = [-9, 2, 11] normalises to [-5, 0.5, 5], clipped to [-2, 0.5, 2]."""
    x = jnp.array([-9.0, 2.0, 11.0])
    np.testing.assert_allclose(rs.normalize(_stats(1.0, 4.0), x, eps=0.0), [-5.0, 0.5, 5.0])
    np.testing.assert_allclose(rs.normalize(_stats(1.0, 4.0), x, clip=2.0, eps=0.0), [-2.0, 0.5, 2.0])


def test_scale_divides_by_the_std_without_centring():
    """var 4 (the mean 1 is not subtracted): integer rewards [-10, 1, 10] scale to float32
    [-5, 0.5, 5], clipped to [-2, 0.5, 2] with clip 2."""
    x = jnp.array([-10, 1, 10], jnp.int32)
    out = rs.scale(_stats(1.0, 4.0), x, eps=0.0)
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(out, [-5.0, 0.5, 5.0])
    np.testing.assert_allclose(rs.scale(_stats(1.0, 4.0), x, clip=2.0, eps=0.0), [-2.0, 0.5, 2.0])
    np.testing.assert_allclose(rs.scale(_stats(0.0, 3.0), jnp.array([2.0]), eps=1.0), [1.0])


def test_update_over_a_named_axis_equals_numpy_over_every_device_batch():
    """Two "devices" (a vmapped named axis) with different batches `[N, 2]`: each ends with
    the moments of the union and the union's count."""
    rng = np.random.default_rng(0)
    batches = np.stack([rng.normal(0.0, 1.0, (40, 2)), rng.normal(5.0, 3.0, (40, 2))]).astype(np.float32)
    stats = jax.vmap(lambda b: rs.update(rs.init_stats((2,)), b, "devices"), axis_name="devices")(batches)
    union = batches.reshape(-1, 2)
    for device in range(2):
        np.testing.assert_allclose(stats.mean[device], union.mean(0), rtol=1e-4)
        np.testing.assert_allclose(stats.var[device], union.var(0), rtol=1e-4)
        np.testing.assert_allclose(stats.count[device], len(union) + rs.INITIAL_COUNT, rtol=1e-6)
