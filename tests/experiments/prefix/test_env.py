"""The prefix-adder JAX environment (Anakin): registry, specs, dynamics against the NumPy
reference, rewards, horizon and resets."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.prefix import graph as G
from experiments.prefix.builders import sklansky
from experiments.prefix.env import PrefixAdderEnv
from podracer.envs import UnknownEnvError, jax_env_ids, make_jax_env, register_jax_env
from podracer.types import DiscreteSpec, MaskedObs, ObsSpec


def rollout(env, steps, num_envs, seed=0):
    """Random legal actions (or, in env 0, always action 0: illegal) through `env.step`;
    everything stacked `[T, B, ...]`, plus the first states and observations."""

    def one_step(carry, key):
        state, obs = carry
        act_key, step_key = jax.random.split(key)
        action = jax.random.categorical(act_key, jnp.where(obs.action_mask, 0.0, -jnp.inf))
        action = action.at[0].set(0)
        next_state, timestep = jax.vmap(env.step)(jax.random.split(step_key, num_envs), state, action)
        return (next_state, timestep.obs), (state, action, timestep)

    @jax.jit
    def run(key):
        first = jax.vmap(env.reset)(jax.random.split(key, num_envs))
        _, out = jax.lax.scan(one_step, first, jax.random.split(key, steps))
        return first, out

    return run(jax.random.key(seed))


def test_registry_ids_and_specs():
    assert "PrefixAdder-16" in jax_env_ids() and "PrefixAdder-32" in jax_env_ids()
    env = make_jax_env("PrefixAdder-16")
    assert env.area_weight is None and env.bits == 16
    assert env.observation_spec(None) == MaskedObs(ObsSpec((16, 16, 5), jnp.dtype(jnp.float32)),
                                                   ObsSpec((512,), jnp.dtype(jnp.bool_)))
    assert env.action_spec(None) == DiscreteSpec(512)
    fixed = make_jax_env("PrefixAdder-24-w0.25")
    assert fixed.bits == 24 and fixed.area_weight == 0.25 and fixed.channels == 4
    with pytest.raises(UnknownEnvError, match=r"bits must be in \[3, 256\].*got 2"):
        make_jax_env("PrefixAdder-2")
    with pytest.raises(UnknownEnvError, match=r"bits must be in \[3, 256\].*got 99999"):
        make_jax_env("PrefixAdder-99999")  # refused before allocating a 99999 x 99999 grid
    with pytest.raises(UnknownEnvError, match="area_weight"):
        make_jax_env("PrefixAdder-8-w1.5")
    with pytest.raises(UnknownEnvError, match="unknown JAX environment"):
        make_jax_env("PrefixAdder-x")
    with pytest.raises(ValueError, match="built-in"):
        register_jax_env("PrefixAdder-9", PrefixAdderEnv)


@pytest.mark.parametrize("env_id", ["PrefixAdder-16-w.", "PrefixAdder-16-w1.2.3", "PrefixAdderSynth-8-w0..5"])
def test_a_malformed_area_weight_is_not_a_prefix_adder_id(env_id):
    """`-w` takes a decimal number; anything else is an unknown id (with close matches), not
    "could not convert string to float"."""
    from experiments.prefix.host_env import parse_host_id

    assert parse_host_id(env_id) is None
    if not env_id.startswith("PrefixAdderSynth"):
        with pytest.raises(UnknownEnvError, match="unknown JAX environment.*did you mean"):
            make_jax_env(env_id)
    assert make_jax_env("PrefixAdder-8-w.5").area_weight == 0.5
    assert make_jax_env("PrefixAdder-8-w1.").area_weight == 1.0


@pytest.mark.slow
def test_dynamics_masks_observations_and_rewards_match_the_reference():
    n, steps, num_envs = 8, 12, 6
    env = PrefixAdderEnv(n, area_weight=None, horizon=5, reset="mixed", fanout_weight=0.25)
    first, (states, actions, timesteps) = rollout(env, steps, num_envs)
    nodes = np.asarray(states.inner.nodes)  # [T, B, N, N]: the graph each action was taken in
    weights = np.asarray(states.inner.area_weight)
    first_nodes = np.asarray(first[0].inner.nodes)
    skl = sklansky(n)
    assert any((g == G.empty_graph(n)).all() for g in first_nodes) or any((g == skl).all() for g in first_nodes)

    def cost(g, w):
        return w * G.area(g) / G.area(skl) + (1 - w) * G.delay(g, 0.25) / G.delay(skl, 0.25)

    for t in range(steps):
        for b in range(num_envs):
            g, a = nodes[t, b], int(actions[t, b])
            assert G.is_legal(g)
            legal = G.action_mask(g)[a]
            assert legal == (b != 0)  # env 0 always plays the illegal action 0
            after = G.apply_action(g, a) if legal else g
            final = np.asarray(timesteps.final_obs.obs[t, b])
            np.testing.assert_allclose(final[..., :4], G.features(after, 0.25), rtol=1e-6)
            np.testing.assert_array_equal(timesteps.final_obs.action_mask[t, b], G.action_mask(after))
            assert np.all(final[..., 4] == weights[t, b])
            expected_reward = cost(g, weights[t, b]) - cost(after, weights[t, b])
            np.testing.assert_allclose(timesteps.reward[t, b], expected_reward, rtol=1e-5, atol=1e-6)
            if not timesteps.truncated[t, b]:
                np.testing.assert_array_equal(nodes[t + 1, b] if t + 1 < steps else after, after)
    # A fixed horizon: truncated (never terminated) after every 5 steps, then reset.
    np.testing.assert_array_equal(timesteps.truncated[:, 0], (np.arange(steps) + 1) % 5 == 0)
    assert not np.asarray(timesteps.terminated).any()
    # w is sampled per episode: constant within one, different across episodes.
    assert np.all(weights[:5] == weights[0]) and len(np.unique(weights)) > num_envs
    assert np.all(np.asarray(timesteps.reward[:, 0]) == 0.0)  # illegal: the graph and cost stay


def test_episode_return_is_the_normalised_cost_removed():
    env = PrefixAdderEnv(8, area_weight=0.3, horizon=6, reset="ripple")
    _, (_, actions, timesteps) = rollout(env, 6, 3, seed=1)
    start = G.empty_graph(8)
    skl = sklansky(8)
    for b in (1, 2):
        g = start
        for a in np.asarray(actions[:, b]):
            g = G.apply_action(g, int(a))
        removed = 0.3 * (G.area(start) - G.area(g)) / G.area(skl) + 0.7 * (G.delay(start) - G.delay(g)) / G.delay(skl)
        np.testing.assert_allclose(timesteps.episode_return[-1, b], removed, rtol=1e-5, atol=1e-6)
    assert env.channels == 4 and timesteps.obs.obs.shape[-1] == 4


def test_random_resets_are_legal_and_varied():
    env = PrefixAdderEnv(16, reset="random")
    states, obs = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.key(3), 16))
    graphs = np.asarray(states.inner.nodes)
    for g in graphs:
        G.check_graph(g)
        assert G.is_legal(g)
    assert len({g.tobytes() for g in graphs}) > 8
    np.testing.assert_array_equal(obs.action_mask, np.stack([G.action_mask(g) for g in graphs]))
    with pytest.raises(ValueError, match="reset"):
        PrefixAdderEnv(8, reset="kogge")
