"""Acting with an actor-critic: the policy output and value of a hand-written network whose
outputs are read off its input, so every result has a NumPy oracle (legal-action masks,
sampled and greedy actions, the time-major forward pass)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from podracer.agents.acting import apply_time_major, make_greedy_act, make_sampling_act, policy_and_value
from podracer.agents.policies import Gaussian
from podracer.types import MaskedObs

A = 4


class ReadOff(nn.Module):
    """`obs [N, A + 1] -> (logits obs[:, :A], value obs[:, A])`, with no parameters."""

    @nn.compact
    def __call__(self, x):
        return x[:, :A], x[:, A]


class GaussianReadOff(nn.Module):
    """`obs [N, 3] -> ((mean obs[:, :1], log_std obs[:, 1:2]), value obs[:, 2])`."""

    @nn.compact
    def __call__(self, x):
        return (x[:, :1], x[:, 1:2]), x[:, 2]


def observations(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, A + 1)).astype(np.float32) * 2


def legal_actions(n: int) -> np.ndarray:
    legal = np.random.default_rng(1).uniform(size=(n, A)) < 0.5
    legal[:, 0] &= False  # action 0 is illegal everywhere, the last legal everywhere
    legal[:, -1] = True
    return legal


def test_policy_and_value_masks_the_illegal_actions_only():
    obs = observations(6)
    out, value = policy_and_value(ReadOff(), {}, jnp.asarray(obs))
    np.testing.assert_array_equal(out, obs[:, :A])
    np.testing.assert_array_equal(value, obs[:, A])
    legal = legal_actions(6)
    out, value = policy_and_value(ReadOff(), {}, MaskedObs(jnp.asarray(obs), jnp.asarray(legal)))
    np.testing.assert_array_equal(np.asarray(out)[legal], obs[:, :A][legal])
    assert np.all(np.isneginf(np.asarray(out)[~legal]))
    np.testing.assert_array_equal(value, obs[:, A])


def test_sampling_act_draws_from_the_legal_logits_with_the_given_key():
    """The action is `jax.random.categorical(key, masked logits)`, its `log_prob` the legal
    softmax's, and `value` the critic's; without values the extras hold only `log_prob`."""
    obs, legal = observations(64), legal_actions(64)
    masked = np.where(legal, obs[:, :A], -np.inf)
    key = jax.random.key(3)
    act = jax.jit(make_sampling_act(ReadOff()))
    action, extras = act({}, MaskedObs(jnp.asarray(obs), jnp.asarray(legal)), key)
    assert action.dtype == jnp.int32
    np.testing.assert_array_equal(action, jax.random.categorical(key, jnp.asarray(masked)))
    assert np.all(legal[np.arange(64), action])
    log_softmax = masked - np.log(np.exp(masked - masked.max(-1, keepdims=True)).sum(-1, keepdims=True))
    log_softmax -= masked.max(-1, keepdims=True)
    np.testing.assert_allclose(extras["log_prob"], log_softmax[np.arange(64), action], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(extras["value"], obs[:, A])
    _, extras = jax.jit(make_sampling_act(ReadOff(), value=False))({}, jnp.asarray(obs), key)
    assert sorted(extras) == ["log_prob"]


def test_greedy_act_takes_the_best_legal_action():
    obs, legal = observations(32), legal_actions(32)
    greedy = jax.jit(make_greedy_act(ReadOff()))
    action = greedy({}, MaskedObs(jnp.asarray(obs), jnp.asarray(legal)))
    assert action.dtype == jnp.int32
    np.testing.assert_array_equal(action, np.argmax(np.where(legal, obs[:, :A], -np.inf), -1))
    np.testing.assert_array_equal(greedy({}, jnp.asarray(obs)), np.argmax(obs[:, :A], -1))
    box = Gaussian((1,), np.float32(-0.5), np.float32(0.5))
    gaussian_obs = jnp.asarray(observations(32)[:, :3])
    mean = jax.jit(make_greedy_act(GaussianReadOff(), box))({}, gaussian_obs)
    np.testing.assert_array_equal(mean, np.clip(np.asarray(gaussian_obs)[:, :1], -0.5, 0.5))


def test_time_major_forward_pass_keeps_each_step_and_environment_in_place():
    """`[T, B, ...]` in, `[T, B, ...]` out, with `T != B`: element `(t, b)` of every output
    is the network's output on `obs[t, b]`, for logits and for a Gaussian's pair."""
    T, B = 3, 5
    obs = observations(T * B).reshape(T, B, A + 1)
    out, value = apply_time_major(ReadOff(), {}, jnp.asarray(obs))
    np.testing.assert_array_equal(out, obs[..., :A])
    np.testing.assert_array_equal(value, obs[..., A])
    (mean, log_std), value = apply_time_major(GaussianReadOff(), {}, jnp.asarray(obs[..., :3]))
    np.testing.assert_array_equal(mean, obs[..., :1])
    np.testing.assert_array_equal(log_std, obs[..., 1:2])
    np.testing.assert_array_equal(value, obs[..., 2])
    legal = legal_actions(T * B).reshape(T, B, A)
    out, _ = apply_time_major(ReadOff(), {}, MaskedObs(jnp.asarray(obs), jnp.asarray(legal)))
    np.testing.assert_array_equal(np.isneginf(out), ~legal)
