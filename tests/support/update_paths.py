"""The learner paths a reference update (`tests.support.reference_updates`) is checked on,
and their data: one device, Sebulba's learner step on 4 devices, Anakin's program; trajectories
with both kinds of episode end; the permutations the library draws; optimizer states with
moments; and the comparison of two updates."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from anakin import AnakinConfig
from anakin import runner as anakin_runner
from anakin.program import iteration_keys, make_train_call
from anakin.rollout import rollout
from podracer import parallel
from podracer.agents.minibatches import random_permutation  # the library's draw: the references reuse its indices
from podracer.config import Config, EnvConfig
from podracer.types import DiscreteSpec, ObsSpec, Trajectory
from sebulba.learner import AXIS, device_keys, make_update_step, trajectory_sharding
from tests.support import reference_updates as reference
from tests.support.contract_helpers import place_learner_state, replicated

T, B, OBS = 8, 8, 3  # rollout length, environments, observation size
NUM_UPDATES = 5  # the run's updates an agent is built for (learning-rate annealing)
A = 3  # discrete actions
OBS_SPEC, ACTION_SPEC = ObsSpec((OBS,), jnp.float32), DiscreteSpec(A)


def assert_same_update(got, expected, before, rtol: float = 1e-4) -> None:
    """`got` and `expected` moved `before` by the same steps, leaf by leaf, within `rtol` of
    the largest step (the parameters' values would hide a wrong step under their own size)."""
    got, expected, before = jax.device_get((got, expected, before))
    steps = jax.tree.map(lambda e, b: np.asarray(e, np.float64) - b, expected, before)
    largest = max(float(np.abs(s).max()) for s in jax.tree.leaves(steps))
    assert largest > 1e-4, "the update did not move the parameters"
    jax.tree.map(
        lambda g, s, b: np.testing.assert_allclose(np.asarray(g, np.float64) - b, s, rtol=0, atol=rtol * largest),
        got,
        steps,
        before,
    )


def trajectory(act, params, key, T: int = T, B: int = B) -> Trajectory:
    """`[T, B]` steps whose `next_obs[t]` is `obs[t + 1]` where the episode went on and a final
    observation of its own where it ended (both kinds of end, at the last step too), actions
    and log-probabilities from `act` with `params` (behaviour parameters off the learner's,
    so that the ratios are not 1 and the surrogate clips)."""
    keys = jax.random.split(key, 6)
    observations = jax.random.normal(keys[0], (T + 1, B, OBS))
    final = jax.random.normal(keys[1], (T, B, OBS))
    terminated = jax.random.bernoulli(keys[2], 0.15, (T, B)).at[T - 1, 0].set(True)
    truncated = (jax.random.bernoulli(keys[3], 0.15, (T, B)) & ~terminated).at[T - 1, 1].set(True)
    ended = (terminated | truncated)[..., None]
    obs = observations[:T]
    action, extras = jax.vmap(act, in_axes=(None, 0, 0))(params, obs, jax.random.split(keys[4], T))
    reward = jax.random.normal(keys[5], (T, B))
    return Trajectory(obs, action, reward, terminated, truncated, jnp.where(ended, final, observations[1:]), extras)


def permutations(keys, num_epochs: int, size: int) -> np.ndarray:
    """`[D, E, size]`: the permutation device d's update draws in epoch e from its key."""
    return np.stack(
        [np.stack([np.asarray(random_permutation(k, size)) for k in jax.random.split(key, num_epochs)]) for key in keys]
    )


def sebulba_update(agent, state, traj, key, num_devices: int = 4):
    """Sebulba's learner step on `num_devices` devices: `(state, metrics, keys [D])`."""
    mesh = parallel.make_mesh(jax.devices()[:num_devices], AXIS)
    keys = device_keys(key, mesh)
    got, metrics = make_update_step(agent, mesh)(
        place_learner_state(state, mesh), (jax.device_put(traj, trajectory_sharding(mesh)),), keys
    )
    return replicated(got), metrics, list(jax.device_get(keys))


def anakin_update(agent_config, env_id: str, num_devices: int = 2, envs_per_device: int = 2):
    """Anakin's program, one update on `num_devices` devices: `(state before, the global
    trajectory it learned from, each device's update key, state after, metrics, num_updates)`,
    the trajectory rebuilt from the same keys and environments as the program's rollout."""
    config = Config(
        env=EnvConfig(env_id),
        agent=agent_config,
        total_env_steps=NUM_UPDATES * T * 4,
        arch=AnakinConfig(
            num_envs=num_devices * envs_per_device,
            rollout_length=T,
            devices=tuple(range(num_devices)),
            updates_per_call=1,
        ),
    )
    a = anakin_runner.setup(config)
    state = anakin_runner.initial_state(config, a)
    before = jax.device_get(jax.tree.map(lambda x: x[0], state.agent))
    one = jax.devices()[0]
    roll = jax.jit(lambda params, envs, key: rollout(a.env, a.env_params, a.agent, params, envs, key, T)[1])
    keys, parts = [], []
    for d in range(num_devices):
        split = iteration_keys(jax.device_put(state.key[0, d], one))
        envs = jax.device_put(
            jax.tree.map(lambda x: x[0, d * envs_per_device : (d + 1) * envs_per_device], state.envs), one
        )
        parts.append(jax.device_get(roll(before.params, envs, split.rollout)))
        keys.append(split.update)
    traj = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1), *parts)
    after, metrics = make_train_call(a.env, a.env_params, a.agent, a.mesh, T)(state, jnp.int32(1))
    return before, traj, keys, jax.tree.map(lambda x: x[0], after.agent), metrics, a.sizes.num_updates


def transitions(gamma: float, traj: Trajectory) -> tuple:
    """`(obs, action, reward, discount, next_obs)` `[T * B, ...]`: a trajectory's 1-step
    transitions, time-major; no bootstrap past a termination, a time limit's from its final
    observation."""
    discount = gamma * (1.0 - reference.flat(traj.terminated).astype(np.float32))
    return (
        reference.flat(traj.obs),
        reference.flat(traj.action),
        reference.flat(traj.reward),
        discount,
        reference.flat(traj.next_obs),
    )


def warm(optimizer, params, key):
    """`optimizer`'s state after one step on random gradients. From a fresh state, Adam's
    first step is about `lr sign(g)`, blind to a term that only rescales a gradient; with
    moments to mix with, the step depends on the gradient's size too."""
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(key, len(leaves))
    grads = treedef.unflatten([0.01 * jax.random.normal(k, x.shape) for k, x in zip(keys, leaves)])
    return optimizer.update(grads, optimizer.init(params), params)[1]
