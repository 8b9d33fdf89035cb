"""TD3's gradient steps, initial state and actions against references written here: the
gradient step `make_td3` hands to the replay loop runs on a hand-made batch and is compared
with Adam written out by hand (`update_oracles.HandAdam`) applied to `jax.grad` of the
module's public losses, Polyak averages by hand and its delays. Tiny networks (hidden size 4) keep
each test's compile short."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.agents.continuous import networks, td3
from podracer.agents.continuous.critics import make_critics, trainable
from podracer.types import BatchShape, BoxSpec
from tests.agents.continuous.update_oracles import (
    HIGH,
    ITEMS,
    LOW,
    OBS,
    TOLERANCE,
    HandAdam,
    N,
    check_acting,
    check_replay_call,
    gradient_step,
    polyak,
    to_box,
)
from tests.support.helpers import assert_trees_equal

TD3 = td3.TD3Config(
    hidden_sizes=(4,),
    buffer_size=16,
    batch_size=N,
    learning_starts=5,
    actor_learning_rate=1e-2,
    critic_learning_rate=2e-2,
    adam_b1=0.5,
    tau=0.3,
    policy_delay=2,
    target_noise=0.4,
    target_noise_clip=0.3,
    exploration_noise=0.7,
)


def td3_model(config):
    actor = networks.DeterministicActor(2, networks.make_torso(config))
    return actor, td3.TD3Model(actor.apply, make_critics(config, None), jnp.asarray(LOW), jnp.asarray(HIGH))


@pytest.mark.parametrize("critic", ["twin", "crossq"])
@pytest.mark.costly
def test_td3_gradient_steps_equal_adam_by_hand_on_its_losses(critic, monkeypatch):
    """Three gradient steps (policy delay 2: the actor and both targets move on the second
    only, counted from 1): the critics by Adam on `td3_critic_loss`'s gradient (the target
    actor's smoothed action; the online actor's for CrossQ, which keeps no targets and whose
    batch statistics the loss updates), the actor by Adam on `td3_actor_loss`'s against the
    updated critics, the targets Polyak-averaged towards the new actor and critics, and each
    metric."""
    config = dataclasses.replace(TD3, critic=critic)
    agent, captured = gradient_step(td3, td3.make_td3, config, monkeypatch)
    state = agent.init(jax.random.key(0))
    check_replay_call(captured, config, state, "td3", td3.STEP_METRICS)
    _, model = td3_model(config)
    actor, learner = state.params.actor, state.opt_state
    critic_vars, target, target_actor = learner.critic, learner.target_critic, learner.extra
    critic_adam = HandAdam(trainable(critic_vars), config.critic_learning_rate, config.adam_b1)
    actor_adam = HandAdam(actor, config.actor_learning_rate, config.adam_b1)
    step = jax.jit(agent.update)
    critic_grad = jax.jit(
        jax.value_and_grad(lambda p, c, t, a, k: td3.td3_critic_loss(p, c, t, a, model, ITEMS, k, config), has_aux=True)
    )
    actor_grad = jax.jit(jax.value_and_grad(lambda a, c: td3.td3_actor_loss(a, c, model, ITEMS.obs)))
    for i, key in enumerate(jax.random.split(jax.random.key(1), 3)):
        actor_out, learner, metrics = step(actor, learner, ITEMS, key)
        bootstrap_actor = target_actor if critic == "twin" else actor
        (loss, (q_mean, updated)), grads = critic_grad(
            trainable(critic_vars), critic_vars, target, bootstrap_actor, key
        )
        critic_vars = {**updated, **critic_adam.step(trainable(critic_vars), grads)}
        a_loss, grads = actor_grad(actor, critic_vars)
        due = i == 1
        if due:
            actor = actor_adam.step(actor, grads)
            if critic == "twin":
                target_actor = polyak(actor, target_actor, config.tau)
                target = polyak(critic_vars, target, config.tau)
        assert_trees_equal(actor_out, actor, **TOLERANCE)
        assert_trees_equal(learner.critic, critic_vars, **TOLERANCE)
        assert_trees_equal(learner.target_critic, target, **TOLERANCE)
        assert_trees_equal(learner.extra, target_actor, **TOLERANCE)
        assert int(learner.gradient_steps) == i + 1 and float(learner.replay_credit) == 0.0
        assert int(learner.actor_optimizer[0].count) == (i >= 1)
        expected = {"loss": loss, "actor_loss": a_loss, "q_mean": q_mean, "actor_updated": float(due)}
        assert set(metrics) == set(td3.STEP_METRICS) == set(expected)
        for name, value in expected.items():
            np.testing.assert_allclose(metrics[name], value, rtol=1e-4, atol=1e-6, err_msg=name)
            assert metrics[name].dtype == jnp.float32


@pytest.mark.parametrize("critic", ["twin", "crossq"])
def test_td3_initial_state(critic, monkeypatch):
    """The actor and critics the networks initialise from the split key, the target critics
    and target actor copies of them (none for CrossQ), Adam's states at zero, zero counts."""
    config = dataclasses.replace(TD3, critic=critic)
    agent, _ = gradient_step(td3, td3.make_td3, config, monkeypatch)
    state = agent.init(jax.random.key(3))
    actor_net, model = td3_model(config)
    actor_key, critic_key = jax.random.split(jax.random.key(3))
    obs, unit = jnp.zeros((1, 3)), jnp.zeros((1, 2))
    actor, critic_vars = actor_net.init(actor_key, obs), model.critics.init(critic_key, obs, unit)
    assert_trees_equal(state.params.actor, actor)
    assert_trees_equal(state.opt_state.critic, critic_vars)
    assert_trees_equal(state.opt_state.target_critic, critic_vars if critic == "twin" else ())
    assert_trees_equal(state.opt_state.extra, actor if critic == "twin" else ())
    for opt_state, params in (
        (state.opt_state.actor_optimizer, actor),
        (state.opt_state.critic_optimizer, trainable(critic_vars)),
    ):
        assert_trees_equal(opt_state[0].nu, jax.tree.map(jnp.zeros_like, params))
        assert int(opt_state[0].count) == 0
    assert int(state.opt_state.gradient_steps) == 0 == int(state.opt_state.learning_env_steps)
    assert float(state.opt_state.replay_credit) == 0.0 and int(state.params.env_steps) == 0


def test_td3_acts_with_clipped_exploration_noise_after_learning_starts(monkeypatch):
    """`act`: `to_box(clip(mu(s) + 0.7 eps, -1, 1))` with the first half of the split key once
    `learning_starts` (5) env steps have arrived (the clip binds on this draw), uniform in the
    box with the second half before; `greedy_act`: `to_box(mu(s))`."""
    agent, _ = gradient_step(td3, td3.make_td3, TD3, monkeypatch)
    actor = agent.init(jax.random.key(0)).params.actor
    actor_net, _ = td3_model(TD3)
    unit = actor_net.apply(actor, OBS)
    noise_key, random_key = jax.random.split(jax.random.key(2))
    raw = unit + 0.7 * jax.random.normal(noise_key, unit.shape)
    assert np.any(np.abs(raw) > 1.0)
    random = jax.random.uniform(random_key, (5, 2), jnp.float32, LOW, HIGH)
    check_acting(agent, actor, to_box(np.clip(raw, -1.0, 1.0)), random, to_box(unit))


def test_td3_probe_and_exact_configs():
    probe = td3._probe_config()
    assert probe == td3.TD3Config(
        actor_learning_rate=1e-3,
        critic_learning_rate=3e-3,
        buffer_size=4_096,
        batch_size=64,
        gradient_steps=8,
        policy_delay=1,
        learning_starts=512,
        hidden_sizes=(32, 32),
        gamma=0.9,
    )
    exact = td3._exact_config(dataclasses.replace(probe, policy_delay=3, target_noise=0.3), BatchShape(8, 2))
    assert exact == dataclasses.replace(
        probe,
        sampling="stratified",
        buffer_size=4_096,
        batch_size=16,
        gradient_steps=1,
        replay_ratio=None,
        learning_starts=0,
        n_step=1,
        target_noise=0.0,
        policy_delay=1,
    )
    assert td3._exact_config(probe, BatchShape(1024, 8)).buffer_size == 8192
    assert td3.ALGORITHM.name == "td3" and td3.ALGORITHM.action_spaces == (BoxSpec,)
    assert td3.STEP_METRICS == ("loss", "actor_loss", "q_mean", "actor_updated")
