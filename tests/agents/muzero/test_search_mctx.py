"""The agent's search is mctx called directly: `make_model_fns` is the network's own methods
(values and rewards decoded from their bins, every step discounted by `gamma`), `run_search`
is `mctx.gumbel_muzero_policy` / `mctx.muzero_policy` with the config's settings (no noise
when greedy), and `make_acting`'s three functions search, or sample the prior, as mctx and
`jax.random` do with the same key. Each comparison is of the traced programs (the same
jaxpr: the same computation, nothing compiled); a slow test compares the numbers."""

import functools

import jax
import jax.numpy as jnp
import mctx
import numpy as np
import pytest

from podracer import ops
from podracer.agents.muzero import MuZeroConfig
from podracer.agents.muzero.networks import MuZeroNetwork, init_params, make_network
from podracer.agents.muzero.search import SearchOutput, make_acting, make_model_fns, run_search
from podracer.types import ObsSpec

B, A = 4, 3
# Settings unlike the defaults, so a search that ignored one would differ.
SEARCH = dict(
    num_simulations=3,
    max_num_considered_actions=2,
    gumbel_scale=0.7,
    dirichlet_alpha=0.5,
    dirichlet_fraction=0.4,
    temperature=0.5,
    min_q_range=0.3,
)
NET = dict(
    hidden_sizes=(4,),
    latent_size=4,
    dynamics_hidden_sizes=(4,),
    prediction_hidden_sizes=(4,),
    num_bins=5,
    value_max=3.0,
    gamma=0.8,
)
OBS_SPEC = ObsSpec((2,), jnp.float32)


def mctx_search(search: str, root, recurrent_fn, params, key, greedy: bool):
    """mctx's policy as the config above asks for it, as a `SearchOutput`."""
    if search == "gumbel":
        out = mctx.gumbel_muzero_policy(
            params,
            key,
            root,
            recurrent_fn,
            num_simulations=3,
            max_num_considered_actions=2,
            gumbel_scale=0.0 if greedy else 0.7,
            qtransform=functools.partial(mctx.qtransform_completed_by_mix_value, epsilon=0.3),
        )
        action = out.action
    else:
        out = mctx.muzero_policy(
            params,
            key,
            root,
            recurrent_fn,
            num_simulations=3,
            dirichlet_alpha=0.5,
            dirichlet_fraction=0.0 if greedy else 0.4,
            temperature=0.5,
            qtransform=functools.partial(mctx.qtransform_by_parent_and_siblings, epsilon=0.3),
        )
        action = jnp.argmax(out.action_weights, axis=-1) if greedy else out.action
    return SearchOutput(action, out.action_weights, out.search_tree.summary().value)


def bandit(params, key, action, rewards):
    """A one-step model whose embedding is each row's rewards; its priors and values vary by row."""
    reward = jnp.take_along_axis(rewards, action[:, None], axis=1)[:, 0]
    return mctx.RecurrentFnOutput(
        reward=reward, discount=jnp.full(B, 0.5), prior_logits=rewards[:, ::-1], value=0.3 * reward
    ), rewards


def bandit_root():
    rewards = jax.random.uniform(jax.random.key(3), (B, A))
    return mctx.RootFnOutput(prior_logits=jnp.sin(7.0 * rewards), value=rewards.mean(-1), embedding=rewards)


def same_program(ours, theirs, *args):
    """`ours` and `theirs` trace to the same program (the same jaxpr and constants): the
    same computation, with nothing compiled; and their outputs are named alike."""
    (a, a_out), (b, b_out) = (jax.make_jaxpr(f, return_shape=True)(*args) for f in (ours, theirs))
    assert str(a) == str(b)
    assert jax.tree.structure(a_out) == jax.tree.structure(b_out)  # the outputs' names too
    assert len(a.consts) == len(b.consts)
    for x, y in zip(a.consts, b.consts):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("greedy", [False, True], ids=["explore", "greedy"])
@pytest.mark.parametrize("search", ["gumbel", "muzero"])
def test_run_search_is_mctx_with_the_configs_settings(search, greedy):
    config = MuZeroConfig(search=search, **SEARCH)
    same_program(
        lambda key: run_search(config, bandit_root(), bandit, None, key, greedy),
        lambda key: mctx_search(search, bandit_root(), bandit, None, key, greedy),
        jax.random.key(5),
    )


@pytest.mark.slow
@pytest.mark.parametrize("search", ["gumbel", "muzero"])
def test_run_search_computes_what_mctx_computes(search):
    """The same comparison in numbers, compiled (about 10 s here on a loaded machine)."""
    config = MuZeroConfig(search=search, **SEARCH)

    @jax.jit
    def both(key):
        ours = [run_search(config, bandit_root(), bandit, None, key, greedy) for greedy in (False, True)]
        theirs = [mctx_search(search, bandit_root(), bandit, None, key, greedy) for greedy in (False, True)]
        return ours, theirs

    ours, theirs = jax.device_get(both(jax.random.key(5)))
    for out, (action, weights, value) in zip(ours, theirs):
        assert out.action.dtype == np.int32
        np.testing.assert_array_equal(out.action, action)
        np.testing.assert_allclose(out.policy, weights, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(out.root_value, value, rtol=1e-6, atol=1e-7)
    assert not (np.array_equal(ours[0].action, ours[1].action) and np.allclose(ours[0].policy, ours[1].policy))


def network_and_params():
    """A small network and its parameters' shapes (tracing needs no values)."""
    network = make_network(MuZeroConfig(**NET), OBS_SPEC, A)
    return network, jax.eval_shape(lambda key: init_params(network, key, OBS_SPEC), jax.random.key(0))


OBS = jax.ShapeDtypeStruct((B, 2), jnp.float32)
KEY = jax.eval_shape(jax.random.key, 0)


def model_fns_by_hand(network, params):
    def root_fn(params, obs):
        latent = network.apply(params, obs, method=MuZeroNetwork.represent)
        logits, value_logits = network.apply(params, latent, method=MuZeroNetwork.predict)
        return mctx.RootFnOutput(
            prior_logits=logits, value=ops.categorical_to_scalar(value_logits, 3.0), embedding=latent
        )

    def recurrent_fn(params, key, action, latent):
        next_latent, reward_logits = network.apply(params, latent, action, method=MuZeroNetwork.dynamics)
        logits, value_logits = network.apply(params, next_latent, method=MuZeroNetwork.predict)
        return mctx.RecurrentFnOutput(
            reward=ops.categorical_to_scalar(reward_logits, 3.0),
            discount=jnp.full(action.shape, 0.8, jnp.float32),
            prior_logits=logits,
            value=ops.categorical_to_scalar(value_logits, 3.0),
        ), next_latent

    return root_fn, recurrent_fn


def test_model_fns_are_the_networks_methods_with_values_decoded_and_discount_gamma():
    network, params = network_and_params()
    ours, theirs = make_model_fns(network, 3.0, 0.8), model_fns_by_hand(network, params)
    same_program(ours[0], theirs[0], params, OBS)
    action, latent = jax.ShapeDtypeStruct((B,), jnp.int32), jax.ShapeDtypeStruct((B, 4), jnp.float32)
    same_program(ours[1], theirs[1], params, KEY, action, latent)


def expected_acting(search: str, network, params):
    """`(act, greedy_act, prior_act)` written with mctx and `jax.random` directly."""
    root_fn, recurrent_fn = model_fns_by_hand(network, params)

    def act(params, obs, key):
        action, policy, value = mctx_search(search, root_fn(params, obs), recurrent_fn, params, key, False)
        return action, {"search_policy": policy, "root_value": value}

    def greedy_act(params, obs):
        key = jax.random.key(0)  # a fixed key, made before the search as `greedy_act` makes it
        return mctx_search(search, root_fn(params, obs), recurrent_fn, params, key, True)[0]

    def prior_act(params, obs, key):
        return jax.random.categorical(key, root_fn(params, obs).prior_logits).astype(jnp.int32), {}

    return act, greedy_act, prior_act


@pytest.mark.parametrize("which", [0, 1, 2], ids=["act", "greedy_act", "prior_act"])
@pytest.mark.parametrize("search", ["gumbel", "muzero"])
def test_act_greedy_act_and_prior_act_search_as_mctx_does(search, which):
    network, params = network_and_params()
    ours = make_acting(MuZeroConfig(search=search, **SEARCH, **NET), network)[which]
    theirs = expected_acting(search, network, params)[which]
    args = (params, OBS) if which == 1 else (params, OBS, KEY)
    same_program(ours, theirs, *args)
    action = jax.eval_shape(ours, *args)
    assert (action if which == 1 else action[0]).dtype == jnp.int32
