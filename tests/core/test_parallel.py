"""Gradients and updates on N devices equal those of the same global batch on one."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from podracer import parallel
from podracer.agents import PPOConfig, make_ppo
from podracer.agents.ppo import normalize_per_minibatch
from podracer.types import DiscreteSpec, ObsSpec
from tests.support.helpers import leading_axis, random_trajectory, tree_allclose

AXIS = "device"


@pytest.mark.parametrize("check_vma", [True, False])
def test_mean_gradient_equals_global_gradient(check_vma):
    mesh = parallel.make_mesh(jax.devices()[:4], AXIS)
    w = jnp.array([1.0, -2.0, 0.5])
    x = jax.random.normal(jax.random.key(0), (16, 3))

    def loss(w, x):
        return jnp.mean(jnp.tanh(x @ w) ** 2)

    expected = jax.grad(loss)(w, x)
    per_device = jax.shard_map(
        lambda w, x: parallel.value_and_mean_grad(loss, AXIS)(w, x)[1],
        mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P(), check_vma=check_vma,
    )
    np.testing.assert_allclose(jax.jit(per_device)(w, x), expected, rtol=1e-5)


def _ppo_pair(config):
    obs_spec, action_spec = ObsSpec((4,), jnp.float32), DiscreteSpec(2)
    single = make_ppo(config, obs_spec, action_spec, num_updates=10, axis_name=None)
    multi = make_ppo(config, obs_spec, action_spec, num_updates=10, axis_name=AXIS)
    return single, multi


@pytest.mark.slow
@pytest.mark.parametrize("normalize", [True, False])
def test_ppo_update_on_4_devices_equals_1_device(normalize):
    """Full-batch epochs (1 minibatch) make the update independent of shuffling, so the
    4-device update of a global batch must equal the 1-device one; advantage
    normalisation uses global statistics, so it must too."""
    config = dataclasses.replace(PPOConfig(), num_minibatches=1, num_epochs=3, normalize_advantages=normalize)
    single, multi = _ppo_pair(config)
    state = jax.jit(single.init)(jax.random.key(0))
    traj = random_trajectory(single, state.params, jax.random.key(1), T=8, B=8, obs_dim=4, num_actions=2)
    key = jax.random.key(2)

    expected_state, expected_metrics = jax.jit(single.update)(state, traj, key)

    mesh = parallel.make_mesh(jax.devices()[:4], AXIS)
    traj_specs = jax.tree.map(lambda _: P(None, AXIS), traj)

    def per_device(state, traj):
        new_state, metrics = multi.update(state, traj, key)
        # Return every device's copy to check the replicas agree.
        return jax.tree.map(leading_axis, new_state.params), metrics

    sharded = jax.shard_map(per_device, mesh=mesh, in_specs=(P(), traj_specs), out_specs=(P(AXIS), P()))
    replicas, metrics = jax.jit(sharded)(state, traj)

    # Compared in NumPy: eager JAX ops on leaves of many shapes would each compile.
    replicas, expected, before = jax.device_get((replicas, expected_state.params, state.params))
    for d in range(4):
        tree_allclose(jax.tree.map(lambda x: x[d], replicas), expected, rtol=1e-4, atol=1e-6)
    tree_allclose(metrics["loss"], expected_metrics["loss"], rtol=1e-4)
    # The update moved the parameters (the equality is not vacuous).
    moved = jax.tree.map(lambda a, b: float(np.abs(a - b).max()), expected, before)
    assert max(jax.tree.leaves(moved)) > 1e-4


def test_minibatch_advantages_are_standardised_with_global_statistics():
    """PPO's per-minibatch advantage normalisation on 4 devices, each holding a quarter of
    every minibatch (`[M, n / 4]`), uses the statistics of the whole global minibatch: it
    equals the 1-device normalisation of the gathered `[M, n]`, one collective for all M."""
    x = np.random.default_rng(0).normal(size=(3, 16)).astype(np.float32) * np.array([[1.0], [10.0], [100.0]],
                                                                                      np.float32)
    expected = jax.jit(lambda v: normalize_per_minibatch(v, None))(x)
    mesh = parallel.make_mesh(jax.devices()[:4], AXIS)
    sharded = jax.shard_map(lambda v: normalize_per_minibatch(v, AXIS), mesh=mesh, in_specs=P(None, AXIS),
                            out_specs=P(None, AXIS))
    np.testing.assert_allclose(jax.jit(sharded)(x), expected, rtol=1e-5, atol=1e-6)
    text = jax.jit(sharded).lower(x).as_text()
    assert text.count("all_reduce") == 1, text
