"""Gaussian sampling (`podracer.ops.gaussian`): its moments and dtype."""

import jax
import jax.numpy as jnp
import numpy as np

from podracer.ops.gaussian import gaussian_sample


def test_gaussian_sample_has_the_mean_and_std_and_the_dtype_of_mean():
    """20000 samples of N(1, 2^2) per entry (a shared log-std broadcast against mean `[N, 2]`):
    their mean and std within 5 standard errors; a bfloat16 mean and log-std sample bfloat16."""
    mean = jnp.ones((20000, 2))
    x = np.asarray(gaussian_sample(jax.random.key(0), mean, jnp.log(jnp.array([2.0, 0.5]))))
    assert x.shape == (20000, 2)
    np.testing.assert_allclose(x.mean(0), 1.0, atol=5 * 2.0 / np.sqrt(20000))
    np.testing.assert_allclose(x.std(0), [2.0, 0.5], rtol=0.05)
    assert (
        gaussian_sample(jax.random.key(0), mean.astype(jnp.bfloat16), jnp.zeros(2, jnp.bfloat16)).dtype == jnp.bfloat16
    )
