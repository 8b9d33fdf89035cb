"""What the SAC and TD3 update tests share: the gradient step `make_sac`/`make_td3` hand to
the replay loop (captured in place of `make_replay_update`, so no buffer is compiled), a
hand-made batch, Adam written out by hand and Polyak averages by hand."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from podracer.agents.continuous.replay_learning import ContinuousParams
from podracer.counters import Count
from podracer.replay import Transition
from podracer.types import ObsSpec, box_spec

OBS_SPEC = ObsSpec((3,), jnp.float32)
ACTION_SPEC = box_spec((2,), [-2.0, 0.0], [2.0, 3.0])  # not the unit box
LOW, HIGH = ACTION_SPEC.low, ACTION_SPEC.high
N = 4
_keys = jax.random.split(jax.random.key(7), 3)
ITEMS = Transition(
    jax.random.normal(_keys[0], (N, 3)),
    jnp.asarray(np.array([[1.0, 0.2], [-1.5, 2.9], [0.0, 0.5], [2.0, 0.1]], np.float32)),
    jnp.array([1.0, -0.5, 0.25, 2.0]),
    jnp.array([0.9, 0.0, 0.9, 0.81]),
    jax.random.normal(_keys[1], (N, 3)),
)
OBS = jax.random.normal(_keys[2], (5, 3))
TOLERANCE = dict(rtol=2e-4, atol=2e-6)


def gradient_step(module, make, config, monkeypatch):
    """The agent `make` builds, its `update` the gradient step it gives the replay loop, and
    the other arguments of that call."""
    captured = {}

    def capture(config, replay, learn_on_batch, axis_name, step_metrics, name):
        captured.update(config=config, replay=replay, axis_name=axis_name, step_metrics=step_metrics, name=name)
        return learn_on_batch

    monkeypatch.setattr(module, "make_replay_update", capture)
    return make(config, OBS_SPEC, ACTION_SPEC, num_updates=1, axis_name=None), captured


class HandAdam:
    """Adam (Kingma and Ba 2015) written out: `m`, `v`, bias corrections, eps 1e-8, b2 0.999."""

    def __init__(self, params, lr: float, b1: float):
        self.m = jax.tree.map(jnp.zeros_like, params)
        self.v = jax.tree.map(jnp.zeros_like, params)
        self.t, self.lr, self.b1 = 0, lr, b1

    def step(self, params, grads):
        self.t += 1
        b1, b2 = self.b1, 0.999
        self.m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, self.m, grads)
        self.v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, self.v, grads)
        return jax.tree.map(
            lambda p, m, v: p - self.lr * (m / (1 - b1**self.t)) / (jnp.sqrt(v / (1 - b2**self.t)) + 1e-8),
            params,
            self.m,
            self.v,
        )


def polyak(online, target, tau: float):
    return jax.tree.map(lambda o, t: tau * o + (1 - tau) * t, online, target)


def check_replay_call(captured, config, state, name: str, step_metrics: tuple[str, ...]):
    assert captured["config"] is config and captured["axis_name"] is None
    assert captured["name"] == name and captured["step_metrics"] == step_metrics
    local = captured["replay"].init(jax.tree.map(lambda x: x[0, 0], state.local.experience))
    assert jax.tree.map(jnp.shape, local) == jax.tree.map(jnp.shape, state.local)
    assert state.local.experience.obs.shape == (1, config.buffer_size, 3)


def to_box(unit):
    """`[-1, 1]` actions mapped linearly onto the box `[LOW, HIGH]`."""
    return LOW + (np.asarray(unit) + 1) / 2 * (HIGH - LOW)


def check_acting(agent, actor, policy, random, greedy):
    """`act` gives the `random` actions before `learning_starts` (5) env steps and the
    `policy` actions from then on, with no extras; `greedy_act` gives `greedy`."""
    for env_steps, expected in ((4, random), (5, policy), (6, policy)):
        action, extras = agent.act(ContinuousParams(actor, Count.of(env_steps)), OBS, jax.random.key(2))
        np.testing.assert_allclose(action, expected, rtol=1e-5, atol=1e-6)
        assert extras == {}
    np.testing.assert_allclose(
        agent.greedy_act(ContinuousParams(actor, Count.of(0)), OBS), greedy, rtol=1e-5, atol=1e-6
    )
