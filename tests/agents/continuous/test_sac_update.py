"""SAC's gradient steps, initial state and actions against references written here: the
gradient step `make_sac` hands to the replay loop runs on a hand-made batch and is compared
with Adam written out by hand (`update_oracles.HandAdam`) applied to `jax.grad` of the
module's public losses, Polyak averages by hand and the temperature's step by hand. Tiny networks (hidden size 4) keep
each test's compile short."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.agents.continuous import networks, sac
from podracer.agents.continuous.critics import make_critics, trainable
from podracer.ops import continuous_q
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

SAC = sac.SACConfig(
    hidden_sizes=(4,),
    buffer_size=16,
    batch_size=N,
    learning_starts=5,
    actor_learning_rate=1e-2,
    critic_learning_rate=2e-2,
    temperature_learning_rate=5e-2,
    adam_b1=0.5,
    tau=0.3,
    target_entropy=-0.7,
    initial_temperature=0.4,
    policy_delay=2,
    log_std_min=-3.0,
    log_std_max=1.0,
)


def sac_model(config):
    actor = networks.SquashedGaussianActor(2, networks.make_torso(config), config.log_std_min, config.log_std_max)
    return actor, sac.SACModel(
        actor.apply,
        make_critics(config, None),
        jnp.asarray(LOW),
        jnp.asarray(HIGH),
        continuous_q.box_log_scale(LOW, HIGH),
    )


@pytest.mark.parametrize("autotune", [True, False], ids=["autotune", "fixed"])
@pytest.mark.costly
def test_sac_gradient_steps_equal_adam_by_hand_on_its_losses(autotune, monkeypatch):
    """Three gradient steps (policy delay 2: the actor and temperature move on the first and
    third): the critics by Adam on `sac_critic_loss`'s gradient, the actor by Adam on
    `sac_actor_loss`'s against the updated critics, `log alpha` by Adam on eq. 18's gradient
    `-mean(alpha (log pi + target))` (fixed without autotune), the targets Polyak-averaged
    every step, and each metric."""
    config = dataclasses.replace(SAC, autotune=autotune)
    agent, captured = gradient_step(sac, sac.make_sac, config, monkeypatch)
    state = agent.init(jax.random.key(0))
    check_replay_call(captured, config, state, "sac", sac.STEP_METRICS)
    _, model = sac_model(config)
    actor, learner = state.params.actor, state.opt_state
    critic, target, log_alpha = learner.critic, learner.target_critic, learner.extra.log_temperature
    critic_adam = HandAdam(trainable(critic), config.critic_learning_rate, config.adam_b1)
    actor_adam = HandAdam(actor, config.actor_learning_rate, config.adam_b1)
    alpha_adam = HandAdam(log_alpha, config.temperature_learning_rate, 0.9)
    step = jax.jit(agent.update)
    critic_grad = jax.jit(
        jax.value_and_grad(
            lambda p, c, t, a, alpha, k: sac.sac_critic_loss(p, c, t, a, model, ITEMS, alpha, k), has_aux=True
        )
    )
    actor_grad = jax.jit(
        jax.value_and_grad(lambda a, c, alpha, k: sac.sac_actor_loss(a, c, model, ITEMS.obs, alpha, k), has_aux=True)
    )
    for i, key in enumerate(jax.random.split(jax.random.key(1), 3)):
        actor_out, learner, metrics = step(actor, learner, ITEMS, key)
        critic_key, actor_key = jax.random.split(key)
        alpha = jnp.exp(log_alpha)
        (loss, (q_mean, _)), grads = critic_grad(trainable(critic), critic, target, actor, alpha, critic_key)
        critic = critic_adam.step(trainable(critic), grads)
        target = polyak(critic, target, config.tau)
        (a_loss, log_prob), grads = actor_grad(actor, critic, alpha, actor_key)
        t_loss = -jnp.mean(alpha * (log_prob + config.target_entropy))
        if i != 1:
            actor = actor_adam.step(actor, grads)
            if autotune:
                log_alpha = alpha_adam.step(log_alpha, t_loss)  # d/d(log alpha) of alpha x is alpha x
        assert_trees_equal(actor_out, actor, **TOLERANCE)
        assert_trees_equal(learner.critic, critic, **TOLERANCE)
        assert_trees_equal(learner.target_critic, target, **TOLERANCE)
        np.testing.assert_allclose(learner.extra.log_temperature, log_alpha, rtol=1e-5)
        assert int(learner.gradient_steps) == i + 1 and float(learner.replay_credit) == 0.0
        expected = {
            "loss": loss,
            "actor_loss": a_loss,
            "q_mean": q_mean,
            "temperature": alpha,
            "temperature_loss": t_loss,
            "entropy": -jnp.mean(log_prob),
        }
        assert set(metrics) == set(sac.STEP_METRICS) == set(expected)
        for name, value in expected.items():
            np.testing.assert_allclose(metrics[name], value, rtol=1e-4, atol=1e-6, err_msg=name)
    assert not np.allclose(log_alpha, np.log(0.4)) if autotune else np.allclose(log_alpha, np.log(0.4))


@pytest.mark.parametrize("critic", ["twin", "crossq"])
def test_sac_initial_state(critic, monkeypatch):
    """The actor and critics the networks initialise from the split key, the targets a copy
    (none for CrossQ), Adam's states at zero, `log alpha = log(initial_temperature)` with its
    own Adam, zero counts and credit."""
    config = dataclasses.replace(SAC, critic=critic)
    agent, _ = gradient_step(sac, sac.make_sac, config, monkeypatch)
    state = agent.init(jax.random.key(3))
    actor_net, model = sac_model(config)
    actor_key, critic_key = jax.random.split(jax.random.key(3))
    obs, unit = jnp.zeros((1, 3)), jnp.zeros((1, 2))
    critic_vars = model.critics.init(critic_key, obs, unit)
    assert_trees_equal(state.params.actor, actor_net.init(actor_key, obs))
    assert_trees_equal(state.opt_state.critic, critic_vars)
    assert_trees_equal(state.opt_state.target_critic, critic_vars if critic == "twin" else ())
    for opt_state, params in (
        (state.opt_state.actor_optimizer, state.params.actor),
        (state.opt_state.critic_optimizer, trainable(critic_vars)),
    ):
        assert_trees_equal(opt_state[0].mu, jax.tree.map(jnp.zeros_like, params))
        assert int(opt_state[0].count) == 0
    log_t = state.opt_state.extra.log_temperature
    assert log_t.dtype == jnp.float32 and np.isclose(float(log_t), np.log(0.4))
    assert float(state.opt_state.extra.optimizer[0].mu) == 0.0
    assert int(state.opt_state.gradient_steps) == 0 == int(state.opt_state.learning_env_steps)
    assert float(state.opt_state.replay_credit) == 0.0 and int(state.params.env_steps) == 0
    assert int(state.update_count) == 0


def test_sac_acts_in_the_box_by_its_policy_after_learning_starts(monkeypatch):
    """`act`: `to_box(tanh(mean + std eps))` with the first half of the split key once
    `learning_starts` (5) env steps have arrived, uniform in the box with the second half
    before; `greedy_act`: `to_box(tanh(mean))`."""
    agent, _ = gradient_step(sac, sac.make_sac, SAC, monkeypatch)
    actor = agent.init(jax.random.key(0)).params.actor
    actor_net, _ = sac_model(SAC)
    mean, log_std = actor_net.apply(actor, OBS)
    policy_key, random_key = jax.random.split(jax.random.key(2))
    u = mean + jnp.exp(log_std) * jax.random.normal(policy_key, mean.shape)
    random = jax.random.uniform(random_key, (5, 2), jnp.float32, LOW, HIGH)
    check_acting(agent, actor, to_box(np.tanh(u)), random, to_box(np.tanh(mean)))


def test_sac_default_target_entropy_is_minus_the_action_dimension(monkeypatch):
    """`target_entropy=None`: eq. 18 with `-|A|` (-2 here), seen in the temperature's loss."""
    config = dataclasses.replace(SAC, target_entropy=None, policy_delay=1)
    agent, _ = gradient_step(sac, sac.make_sac, config, monkeypatch)
    state = agent.init(jax.random.key(0))
    _, _, metrics = jax.jit(agent.update)(state.params.actor, state.opt_state, ITEMS, jax.random.key(1))
    alpha = 0.4
    np.testing.assert_allclose(metrics["temperature_loss"], -alpha * (-metrics["entropy"] - 2.0), rtol=1e-5)


def test_sac_probe_and_exact_configs():
    probe = sac._probe_config()
    assert probe == sac.SACConfig(
        actor_learning_rate=3e-3,
        critic_learning_rate=3e-3,
        temperature_learning_rate=1e-2,
        initial_temperature=0.1,
        buffer_size=4_096,
        batch_size=64,
        gradient_steps=4,
        learning_starts=512,
        hidden_sizes=(32, 32),
        gamma=0.9,
    )
    exact = sac._exact_config(probe, BatchShape(8, 2))
    assert exact == dataclasses.replace(
        probe,
        sampling="stratified",
        buffer_size=4_096,
        batch_size=16,
        gradient_steps=1,
        replay_ratio=None,
        learning_starts=0,
        n_step=1,
        autotune=False,
        initial_temperature=0.0,
        log_std_min=-41.0,
        log_std_max=-40.0,
    )
    assert sac._exact_config(probe, BatchShape(1024, 8)).buffer_size == 8192
    assert sac.ALGORITHM.name == "sac" and sac.ALGORITHM.action_spaces == (BoxSpec,)
    assert sac.STEP_METRICS == ("loss", "actor_loss", "q_mean", "temperature", "temperature_loss", "entropy")
