"""MuZero's learner piece by piece, on a tiny network: the optimizer's first step by hand, the
buffer's shapes, the bootstrap values of truncated steps and of restarted streams, the cast
of a rollout into buffer steps, and one gradient step against `jax.grad` of the module's
own loss (`losses.sequence_loss`) with the optimizer applied by hand."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

from podracer.agents.muzero import MuZeroConfig, learning
from podracer.agents.muzero.losses import sequence_loss
from podracer.agents.muzero.networks import MuZeroNetwork, init_params, make_network
from podracer.ops import categorical_to_scalar
from podracer.types import AgentState, BatchShape, ObsSpec, Trajectory

OBS_SPEC = ObsSpec((3,), jnp.float32)
CONFIG = MuZeroConfig(
    hidden_sizes=(4,),
    latent_size=4,
    dynamics_hidden_sizes=(4,),
    prediction_hidden_sizes=(4,),
    num_bins=5,
    value_max=3.0,
    unroll_steps=1,
    td_steps=2,
    buffer_size=40,
    batch_size=3,
    replay_ratio=None,
    learning_starts=0,
    learning_rate=0.1,
    adam_eps=0.5,
    weight_decay=0.2,
    max_grad_norm=1.0,
)
NETWORK = make_network(CONFIG, OBS_SPEC, 2)
EXAMPLE = learning.example_step((3,), jnp.float32, 2)


def random_params():
    """The network's parameters, all random (its value head starts at zero)."""
    leaves, tree = jax.tree.flatten(init_params(NETWORK, jax.random.key(0), OBS_SPEC))
    keys = jax.random.split(jax.random.key(1), len(leaves))
    return jax.tree.unflatten(tree, [jax.random.normal(k, x.shape) for k, x in zip(keys, leaves)])


def value_of(params, obs):
    latent = NETWORK.apply(params, obs, method=MuZeroNetwork.represent)
    return categorical_to_scalar(NETWORK.apply(params, latent, method=MuZeroNetwork.predict)[1], 3.0)


def test_optimizer_clips_then_takes_adamws_first_step():
    """Clipped to global norm 1 (`[3, 4, 0]` -> `[0.6, 0.8, 0]`), then AdamW's first step:
    `-lr (g / (|g| + eps) + weight_decay p)` (bias-corrected moments `g` and `g^2`)."""
    optimizer = learning.make_optimizer(CONFIG)
    params = {"w": jnp.array([1.0, -2.0, 0.5])}
    updates, _ = optimizer.update({"w": jnp.array([3.0, 4.0, 0.0])}, optimizer.init(params), params)
    g, p = np.array([0.6, 0.8, 0.0]), np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(updates["w"], -0.1 * (g / (np.abs(g) + 0.5) + 0.2 * p), rtol=1e-4)


def test_example_step_and_the_buffer_it_builds():
    example = learning.example_step((3, 2), jnp.uint8, 4)
    shapes = {name: (x.shape, x.dtype) for name, x in example._asdict().items()}
    assert shapes == {
        "obs": ((3, 2), jnp.uint8), "action": ((), jnp.int32), "reward": ((), jnp.float32),
        "terminated": ((), jnp.bool_), "truncated": ((), jnp.bool_), "search_policy": ((4,), jnp.float32),
        "root_value": ((), jnp.float32), "final_value": ((), jnp.float32),
    }  # fmt: skip
    assert all(np.all(np.asarray(x) == 0) for x in example)
    replay = learning.make_replay(CONFIG)
    state = jax.eval_shape(replay.init, EXAMPLE)
    assert state.experience.obs.shape == (1, 40, 3)  # buffer_size steps
    steps = jax.tree.map(lambda e: jnp.zeros((5, 2) + e.shape, e.dtype), EXAMPLE)

    def sample(key):  # the lookahead's stash exists only with lookahead
        return replay.sample(replay.stash(replay.add(replay.init(EXAMPLE), steps), jnp.zeros((2, 3))), key, 2)

    items = jax.eval_shape(sample, jax.random.key(0)).items
    assert items.obs.shape == (4, 3, 3)  # [sequence_length (1 + 2 + 1), batch_size, ...]


def test_values_where_and_final_values_evaluate_only_where_asked():
    T, B = 2, 2
    next_obs = jax.random.normal(jax.random.key(3), (T, B, 3))
    obs = next_obs.reshape(T * B, 3)
    where = jnp.array([True, False, True, False])
    # Truncated at (1, 0) (flat index 2): its `next_obs`'s value; the termination at (0, 0) bootstraps nothing.
    flags = jnp.zeros((T, B), bool)
    traj = Trajectory(next_obs, flags.astype(jnp.int32), flags.astype(jnp.float32), flags.at[0, 0].set(True),
                      flags.at[1, 0].set(True), next_obs, {})  # fmt: skip

    @jax.jit  # one program: compiling is the cost
    def run():
        params = random_params()
        return (value_of(params, obs), learning.values_where(NETWORK, params, obs, where, 3.0),
                learning.values_where(NETWORK, params, obs, jnp.zeros(4, bool), 3.0),
                learning.final_values(NETWORK, params, traj, 3.0))  # fmt: skip

    values, got, none, final = jax.device_get(run())
    assert np.abs(values[0]) > 1e-3 and np.abs(values[2]) > 1e-3
    np.testing.assert_allclose(got, [values[0], 0.0, values[2], 0.0], rtol=1e-5)
    np.testing.assert_array_equal(none, 0.0)
    want = np.zeros((T, B), np.float32)
    want[1, 0] = values[2]
    np.testing.assert_allclose(final, want, rtol=1e-5, atol=1e-7)


def rollout(T, B, seed=4):
    rng = np.random.default_rng(seed)
    return Trajectory(
        obs=rng.normal(size=(T, B, 3)).astype(np.float32),
        action=rng.integers(0, 2, size=(T, B)).astype(np.int32),
        reward=rng.normal(size=(T, B)).astype(np.float16),  # cast to the buffer's float32
        terminated=np.zeros((T, B), np.int32),  # cast to bool
        truncated=np.eye(T, B, dtype=bool),
        next_obs=rng.normal(size=(T, B, 3)).astype(np.float32),
        extras={"search_policy": rng.dirichlet(np.ones(2), size=(T, B)).astype(np.float32),
                "root_value": rng.normal(size=(T, B)).astype(np.float32)},
    )  # fmt: skip


def test_a_rollout_becomes_buffer_steps_with_its_truncations_bootstrap():
    traj = rollout(2, 2)

    @jax.jit  # one program: compiling is the cost
    def run():
        params = random_params()
        return learning.to_replay_steps(NETWORK, params, traj, EXAMPLE, 3.0), learning.final_values(
            NETWORK, params, traj, 3.0
        )

    steps, final = jax.device_get(run())
    assert [(x.shape, x.dtype) for x in steps] == [((2, 2) + e.shape, e.dtype) for e in EXAMPLE]
    for name in ("obs", "action", "reward", "terminated", "truncated"):
        np.testing.assert_array_equal(
            getattr(steps, name), np.asarray(getattr(traj, name)).astype(getattr(EXAMPLE, name).dtype), err_msg=name
        )
    np.testing.assert_array_equal(steps.search_policy, traj.extras["search_policy"])
    np.testing.assert_array_equal(steps.root_value, traj.extras["root_value"])
    np.testing.assert_array_equal(steps.final_value, final)
    assert np.count_nonzero(final) == 2  # the two truncated steps


def test_a_restarted_stream_ends_at_its_newest_step_with_the_stashed_observations_value():
    """Environment 0 goes on from its stashed observation; environment 1 restarted: its
    newest step is marked truncated and bootstraps from the value of what was stashed."""
    replay = learning.make_replay(CONFIG)
    traj = rollout(2, 2)._replace(truncated=np.zeros((2, 2), bool))
    stashed = jnp.asarray(traj.next_obs[-1])
    first = stashed.at[1].add(1.0)

    @jax.jit  # one program: compiling is the cost
    def run():
        params = random_params()
        local = replay.add(replay.init(EXAMPLE), learning.to_replay_steps(NETWORK, params, traj, EXAMPLE, 3.0))
        local = replay.stash(local, stashed)
        ended = replay.newest(learning.end_restarted_streams(NETWORK, params, replay, local, first, 3.0), 2)
        same = replay.newest(learning.end_restarted_streams(NETWORK, params, replay, local, stashed, 3.0), 2)
        empty = replay.stash(replay.init(EXAMPLE), stashed)
        untouched = learning.end_restarted_streams(NETWORK, params, replay, empty, first, 3.0)
        return value_of(params, stashed), ended, same, empty, untouched

    value, ended, same, empty, untouched = jax.device_get(run())
    np.testing.assert_array_equal(ended.truncated, [False, True])
    np.testing.assert_allclose(ended.final_value, [0.0, value[1]], rtol=1e-5)
    np.testing.assert_array_equal(same.truncated, [False, False])
    # An empty buffer has no newest steps to end.
    jax.tree.map(np.testing.assert_array_equal, untouched, empty)


def sampled_batch(params):
    replay = learning.make_replay(CONFIG)
    local = replay.add(replay.init(EXAMPLE), learning.to_replay_steps(NETWORK, params, rollout(5, 2), EXAMPLE, 3.0))
    return replay.sample(replay.stash(local, jnp.zeros((2, 3))), jax.random.key(5), 2)


def learn_by_hand(params, opt_state, sample, lr_scale):
    """One step as `make_learn_on_batch` documents it: AdamW on `jax.grad` of
    `sequence_loss`, its step times `lr_scale`, and the gradient's global norm."""
    optimizer = learning.make_optimizer(CONFIG)

    def loss(params, sample):
        return sequence_loss(params, NETWORK, sample.items, CONFIG)

    (_, metrics), grads = jax.value_and_grad(loss, has_aux=True)(params, sample)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    updates = jax.tree.map(lambda u: u * jnp.asarray(lr_scale, u.dtype), updates)
    metrics["grad_norm"] = optax.tree.norm(ravel_pytree(grads)[0])
    return optax.apply_updates(params, updates), opt_state, metrics


@pytest.mark.costly
def test_one_gradient_step_traces_to_adamw_on_the_sequence_losss_gradient():
    params = jax.eval_shape(lambda key: init_params(NETWORK, key, OBS_SPEC), jax.random.key(0))
    optimizer = learning.make_optimizer(CONFIG)
    opt_state = jax.eval_shape(optimizer.init, params)
    sample = jax.eval_shape(sampled_batch, params)
    learn = learning.make_learn_on_batch(CONFIG, NETWORK, optimizer, None)
    a = jax.make_jaxpr(learn)(params, opt_state, sample, jnp.float32(0.5))
    b = jax.make_jaxpr(learn_by_hand)(params, opt_state, sample, jnp.float32(0.5))
    assert str(a) == str(b)
    assert set(jax.eval_shape(learn, params, opt_state, sample)[2]) == set(learning.STEP_METRICS)


@pytest.mark.slow
def test_one_gradient_step_is_adamw_on_the_sequence_losss_gradient_scaled_by_lr_scale():
    """In numbers, compiled (about 4 s here): the step against NumPy's norm of `jax.grad`
    of the loss and the optimizer's update halved."""
    params = random_params()
    sample = sampled_batch(params)
    optimizer = learning.make_optimizer(CONFIG)
    opt_state = optimizer.init(params)
    learn = learning.make_learn_on_batch(CONFIG, NETWORK, optimizer, None)

    @jax.jit
    def both(params, opt_state, sample):
        grads, metrics = jax.grad(lambda p: sequence_loss(p, NETWORK, sample.items, CONFIG), has_aux=True)(params)
        return learn(params, opt_state, sample, 0.5), (grads, metrics, *optimizer.update(grads, opt_state, params))

    (new_params, new_opt_state, metrics), (grads, expected_metrics, updates, expected_opt_state) = both(
        params, opt_state, sample
    )
    expected = jax.tree.map(lambda p, u: p + 0.5 * u, params, updates)
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)  # noqa: E731
    jax.tree.map(close, new_params, expected)
    jax.tree.map(close, new_opt_state, expected_opt_state)
    norm = np.sqrt(sum(np.sum(np.square(g)) for g in jax.tree.leaves(grads)))
    np.testing.assert_allclose(metrics["grad_norm"], norm, rtol=1e-5)
    for name, value in expected_metrics.items():
        np.testing.assert_allclose(metrics[name], value, rtol=1e-4, atol=1e-6, err_msg=name)


def test_update_reports_its_metrics_and_keeps_the_states_shapes():
    optimizer, replay = learning.make_optimizer(CONFIG), learning.make_replay(CONFIG)
    update = learning.make_update(CONFIG, NETWORK, optimizer, replay, EXAMPLE, None, 5)
    CONFIG.check_batch(BatchShape(2, 2))

    def init(key):
        params = init_params(NETWORK, key, OBS_SPEC)
        return AgentState(
            params, learning.initial_learner_state(optimizer, params), jnp.zeros((), jnp.int32), replay.init(EXAMPLE)
        )

    state = jax.eval_shape(init, jax.random.key(0))
    new_state, metrics = jax.eval_shape(update, state, rollout(2, 2), jax.random.key(0))
    assert jax.tree.structure(new_state) == jax.tree.structure(state)
    assert set(metrics) >= {*learning.STEP_METRICS, "learning_rate", "root_value", "gradient_steps"}
    assert all(m.shape == () for m in metrics.values())


@pytest.mark.costly
def test_one_update_adds_the_rollout_learns_once_and_anneals_the_rate():
    """One compiled update (about 11 s here, loaded) of a rollout of 4 steps of 2
    environments, one gradient step per update, the rate annealed over 5 updates."""
    config = dataclasses.replace(CONFIG, anneal_lr=True)
    optimizer, replay = learning.make_optimizer(config), learning.make_replay(config)
    update = learning.make_update(config, NETWORK, optimizer, replay, EXAMPLE, None, 5)

    def init(key):
        params = init_params(NETWORK, key, OBS_SPEC)
        return AgentState(params, learning.initial_learner_state(optimizer, params), jnp.zeros((), jnp.int32),
                          replay.init(EXAMPLE))  # fmt: skip

    traj = rollout(4, 2)._replace(truncated=np.zeros((4, 2), bool))
    state = jax.jit(init)(jax.random.key(0))
    learn = learning.make_learn_on_batch(config, NETWORK, optimizer, None)

    @jax.jit
    def run(state, key):
        new, metrics = update(state, traj, key)
        # The step by hand: on the sequences the step's key (the first of 1) samples from the
        # buffer as the update left it, at the annealed rate (8 of 40 env steps received).
        sample = replay.sample(new.local, jax.random.split(key, 1)[0], 2)
        return new, metrics, learn(state.params, state.opt_state.optimizer, sample, 1.0 - 8 / 40)

    new, metrics, (expected, _, _) = jax.device_get(run(state, jax.random.key(1)))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), new.params, expected)
    assert int(new.update_count) == 1
    learner = new.opt_state
    assert (learner.env_steps.as_float(), learner.gradient_steps.as_float()) == (8.0, 1.0)
    np.testing.assert_allclose(metrics["learning_rate"], 0.1 * (1 - 8 / (5 * 8)), rtol=1e-6)
    np.testing.assert_allclose(metrics["root_value"], traj.extras["root_value"].mean(), rtol=1e-6)
    assert metrics["gradient_steps"] == 1 and metrics["grad_norm"] > 0 and np.isfinite(metrics["loss"])
    assert int(replay.size(new.local)) == 8
    np.testing.assert_array_equal(replay.stashed(new.local, 2), traj.next_obs[-1])
    np.testing.assert_array_equal(replay.newest(new.local, 2).obs, traj.obs[-1])
    changed = [np.abs(a - b).max() for a, b in zip(jax.tree.leaves(new.params), jax.tree.leaves(state.params))]
    assert max(changed) > 1e-4
