"""What an update optimizes, checked rather than just exercised: PPO's clipped value loss,
and the learning rate annealed linearly to 0 over the run (PPO and IMPALA)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from podracer.agents import ImpalaConfig, PPOConfig, make_agent
from podracer.agents.sgd import global_norm
from podracer.ops import clipped_value_loss
from podracer.types import DiscreteSpec, ObsSpec, Trajectory

pytestmark = pytest.mark.timeout(120)

OBS_SPEC, ACTION_SPEC = ObsSpec((3,), jnp.float32), DiscreteSpec(2)


def one_step_trajectory(seed: int, B: int = 16, old_value=None) -> Trajectory:
    """`[1, B]` transitions, no episode end. With one step, any GAE or V-trace target is
    `r + gamma V(next_obs)`, whatever values the behaviour policy recorded."""
    rng = np.random.default_rng(seed)
    old_value = np.zeros(B, np.float32) if old_value is None else old_value
    return Trajectory(
        obs=rng.normal(size=(1, B, 3)).astype(np.float32), action=rng.integers(0, 2, (1, B)).astype(np.int32),
        reward=rng.normal(size=(1, B)).astype(np.float32), terminated=np.zeros((1, B), bool),
        truncated=np.zeros((1, B), bool), next_obs=rng.normal(size=(1, B, 3)).astype(np.float32),
        extras={"log_prob": np.full((1, B), np.log(0.5), np.float32), "value": old_value[None]},
    )


def zero_value_head(params):
    """The network with a value head of zeros: `V(obs) = 0` for every observation."""
    value = jax.tree.map(jnp.zeros_like, params["params"]["value"])
    return {**params, "params": {**params["params"], "value": value}}


def test_clipped_value_loss_follows_the_formula_and_stops_the_gradient_past_eps():
    """`0.5 mean(max((V - R)^2, (V_clip - R)^2))`, `V_clip = V_old + clip(V - V_old, -eps, eps)`;
    a sample whose value moved more than eps towards its target contributes no gradient,
    one that moved away from it keeps the unclipped gradient."""
    eps = 0.2
    old = np.array([0.0, 0.0, 0.0, 0.0], np.float32)
    value = np.array([0.1, 0.5, -0.5, 0.5], np.float32)
    target = np.array([1.0, 1.0, 1.0, -1.0], np.float32)
    clipped = old + np.clip(value - old, -eps, eps)
    expected = 0.5 * np.mean(np.maximum(np.square(value - target), np.square(clipped - target)))
    np.testing.assert_allclose(clipped_value_loss(value, old, target, eps), expected, rtol=1e-6)
    np.testing.assert_allclose(clipped_value_loss(value, old, target, None), 0.5 * np.mean(np.square(value - target)),
                               rtol=1e-6)
    grad = jax.grad(clipped_value_loss)(jnp.asarray(value), old, target, eps)
    # within eps: unclipped gradient; 0.5 towards 1.0 (past eps): none; -0.5 away from 1.0, 0.5 away from -1.0: unclipped
    np.testing.assert_allclose(grad, (value - target) / 4 * np.array([1, 0, 1, 1]), rtol=1e-6)


@pytest.mark.slow
def test_ppo_clips_its_value_around_the_learners_values_at_the_start_of_the_update():
    """The clip is centred on `V_k`, the learner's values when the update starts (GAE's),
    not on the values a lagging actor recorded. With `V_k = 0` and recorded values far from 0,
    the first SGD step's loss is the unclipped `0.5 mean(r^2)`, clipped or not; from the second
    step, where V has moved, clipping can only raise the loss."""
    B, eps = 16, 0.05
    old = np.linspace(-1.0, 1.0, B).astype(np.float32)  # what a lagging actor recorded
    traj = one_step_trajectory(0, B, old)
    r = traj.reward[0]
    losses = {}
    for clip_value in (True, False):
        for epochs in (1, 3):
            config = PPOConfig(num_epochs=epochs, num_minibatches=1, clip_eps=eps, clip_value=clip_value,
                               learning_rate=3e-2, anneal_lr=False, hidden_sizes=(8,))
            agent = make_agent(config, OBS_SPEC, ACTION_SPEC, num_updates=4, axis_name=None)
            state = jax.jit(agent.init)(jax.random.key(0))
            state = state.replace(params=zero_value_head(state.params))
            _, metrics = jax.jit(agent.update)(state, traj, jax.random.key(1))
            losses[clip_value, epochs] = float(metrics["value_loss"])
    for clip_value in (True, False):
        np.testing.assert_allclose(losses[clip_value, 1], 0.5 * np.mean(np.square(r)), rtol=1e-5)
    assert losses[True, 3] > losses[False, 3] + 1e-4, losses


def with_schedule_count(opt_state, count: int):
    """`opt_state` with the learning-rate schedule's step counter set to `count`."""
    return jax.tree.map(
        lambda s: s._replace(count=jnp.asarray(count, s.count.dtype)) if isinstance(s, optax.ScaleByScheduleState)
        else s, opt_state, is_leaf=lambda s: isinstance(s, optax.ScaleByScheduleState))


def param_step(before, after) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(b) - np.asarray(a))
                           for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after), strict=True)])


@pytest.mark.slow
@pytest.mark.parametrize("config", [
    PPOConfig(learning_rate=1e-2, num_epochs=1, num_minibatches=1, hidden_sizes=(8,)),
    ImpalaConfig(learning_rate=1e-2, optimizer="rmsprop", hidden_sizes=(8,)),
    ImpalaConfig(learning_rate=1e-2, optimizer="adam", hidden_sizes=(8,)),
], ids=["ppo", "impala-rmsprop", "impala-adam"])
def test_learning_rate_decays_linearly_to_zero_over_the_run(config):
    """With `anneal_lr`, from the same state, the step an update takes after k of the run's
    N = 5 updates is `(1 - k / N)` times the first one, and 0 at the end of the run."""
    N = 5
    agent = make_agent(config, OBS_SPEC, ACTION_SPEC, num_updates=N, axis_name=None)
    update = jax.jit(agent.update)
    state = jax.jit(agent.init)(jax.random.key(0))
    traj = one_step_trajectory(2)
    first = param_step(state.params, update(state, traj, jax.random.key(1))[0].params)
    assert np.abs(first).max() > 1e-4
    for k in range(1, N + 1):
        later = state.replace(opt_state=with_schedule_count(state.opt_state, k))
        step = param_step(state.params, update(later, traj, jax.random.key(1))[0].params)
        # Steps are differences of float32 parameters: rounding of about 1e-7 each.
        np.testing.assert_allclose(step, (1 - k / N) * first, rtol=1e-3, atol=3e-7, err_msg=f"after {k} updates")


@pytest.mark.slow
def test_learning_rate_reaches_zero_after_every_sgd_step_of_the_run():
    """2 epochs x 2 minibatches per update, 3 updates: the schedule spans all 12 SGD
    steps, so the third update still moves the parameters and a fourth (past the run)
    does not."""
    config = PPOConfig(learning_rate=1e-2, num_epochs=2, num_minibatches=2, hidden_sizes=(8,))
    agent = make_agent(config, OBS_SPEC, ACTION_SPEC, num_updates=3, axis_name=None)
    update = jax.jit(agent.update)
    state = jax.jit(agent.init)(jax.random.key(0))
    traj = one_step_trajectory(3)
    steps = []
    for u in range(4):
        new, _ = update(state, traj, jax.random.key(u))
        steps.append(np.abs(param_step(state.params, new.params)).max())
        state = new
    assert min(steps[:3]) > 1e-5, steps
    assert steps[3] == 0.0, steps


def test_global_norm_is_the_norm_of_every_gradient():
    """`global_norm` (the `grad_norm` metric, over one flat vector) equals optax's
    norm of the whole tree: the square root of the sum of every leaf's squares."""
    rng = np.random.default_rng(0)
    grads = {"a": rng.normal(size=(4, 3)), "b": {"c": rng.normal(size=5), "d": rng.normal(size=(2, 2, 2))}}
    grads = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), grads)
    expected = np.sqrt(sum(float(np.sum(np.square(x))) for x in jax.tree.leaves(grads)))
    np.testing.assert_allclose(float(global_norm(grads)), expected, rtol=1e-6)
    np.testing.assert_allclose(float(global_norm(grads)), float(optax.tree.norm(grads)), rtol=1e-6)
