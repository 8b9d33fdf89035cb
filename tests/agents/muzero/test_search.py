"""MuZero's search on known models: mctx's Gumbel MuZero and MuZero policies, as the agent
runs them (`search.run_search`), pick the best action of a bandit and of a chain, and
their improved policies put more mass on better actions."""

import functools

import jax
import jax.numpy as jnp
import mctx
import numpy as np
import pytest

from podracer.agents.muzero import MuZeroConfig
from podracer.agents.muzero.search import run_search

# Row b of the bandit: reward of each of 4 actions (a permutation, so each row has its own best).
BANDIT = jnp.array([[0.1, 0.9, 0.5, 0.2], [0.7, 0.0, 0.3, 1.0], [0.4, 0.6, 0.8, -0.5]])


def bandit_search(config: MuZeroConfig, key, greedy: bool):
    """A perfect one-step model: the embedding is the row of rewards; every action ends the episode."""
    B, A = BANDIT.shape

    def recurrent_fn(params, key, action, rewards):
        reward = jnp.take_along_axis(rewards, action[:, None], axis=1)[:, 0]
        return mctx.RecurrentFnOutput(reward=reward, discount=jnp.zeros(B), prior_logits=jnp.zeros((B, A)),
                                      value=jnp.zeros(B)), rewards

    root = mctx.RootFnOutput(prior_logits=jnp.zeros((B, A)), value=jnp.zeros(B), embedding=BANDIT)
    return run_search(config, root, recurrent_fn, None, key, greedy)


GOAL, GAMMA = 3, 0.9


def chain_search(config: MuZeroConfig, key, greedy: bool):
    """A perfect model of a chain 0 .. 3: action 1 moves right, action 0 left (floored at 0);
    reaching 3 pays 1 and ends the episode. Values are all 0, so only a search 3 steps deep
    finds the reward. Every row starts at position 0."""
    B = 2

    def recurrent_fn(params, key, action, position):
        moved = jnp.where(action == 1, position + 1, jnp.maximum(position - 1, 0))
        arrived = moved == GOAL
        output = mctx.RecurrentFnOutput(
            reward=arrived.astype(jnp.float32), discount=jnp.where(arrived, 0.0, GAMMA),
            prior_logits=jnp.zeros((B, 2)), value=jnp.zeros(B))
        return output, jnp.where(arrived, 0, moved)  # an absorbing restart: never pays twice from one node

    root = mctx.RootFnOutput(prior_logits=jnp.zeros((B, 2)), value=jnp.zeros(B), embedding=jnp.zeros(B, jnp.int32))
    return run_search(config, root, recurrent_fn, None, key, greedy)


@functools.lru_cache(maxsize=None)
def compiled(problem: str, search: str):
    """One program per problem and search: `keys [N] -> (greedy search, N explored searches)`."""
    # pUCT (MuZero) with min-max normalised Q keeps revisiting the first rewarding action
    # until its exploration bonus grows: it needs more simulations than Gumbel MuZero.
    config = MuZeroConfig(search=search, num_simulations=32 if search == "gumbel" else 128, dirichlet_fraction=0.25)
    run = bandit_search if problem == "bandit" else chain_search
    return jax.jit(lambda keys: (run(config, keys[0], True), jax.vmap(lambda key: run(config, key, False))(keys)))


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("search", ["gumbel", "muzero"])
def test_bandit_best_action_and_policy_ordered_by_reward(search):
    greedy, explored = jax.device_get(compiled("bandit", search)(jax.random.split(jax.random.key(0), 12)))
    np.testing.assert_array_equal(greedy.action, jnp.argmax(BANDIT, axis=1))
    for row, policy in zip(np.asarray(BANDIT), greedy.policy):
        best = np.argmax(row)
        assert policy[best] > 0.5 and np.all(policy[best] > np.delete(policy, best)), (row, policy)
        if search == "gumbel":  # softmax(prior + sigma(Q)): strictly ordered by reward
            np.testing.assert_array_equal(np.argsort(policy), np.argsort(row))
    # The root value is a backed-up estimate, above the uniform policy's mean reward.
    assert np.all(greedy.root_value > np.asarray(BANDIT).mean(axis=1))
    # With exploration noise the sampled actions still favour the best one.
    best_fraction = np.mean(explored.action == np.argmax(np.asarray(BANDIT), axis=1), axis=0)
    assert np.all(best_fraction >= 0.5), best_fraction


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("search", ["gumbel", "muzero"])
def test_chain_search_looks_three_steps_ahead(search):
    out, explored = jax.device_get(compiled("chain", search)(jax.random.split(jax.random.key(1), 8)))
    np.testing.assert_array_equal(out.action, [1, 1])
    assert np.all(out.policy[:, 1] > out.policy[:, 0]), out.policy
    # The root's value is positive: the search found the reward three steps away.
    assert np.all(out.root_value > 0), out.root_value
    assert np.mean(explored.action == 1) > 0.5
