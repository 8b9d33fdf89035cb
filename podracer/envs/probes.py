"""Probe environments (after rejax / Andy Jones's debugging probes): tiny tasks whose
solution is known in closed form, so an agent's learning machinery can be checked in
seconds. Observations are `[1]` float32; every episode lasts one or two steps (the
masked probe's, one step when the agent respects its masks), but for `TimeLimitProbe`,
whose episodes only end by a time limit.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from podracer.envs.base import JaxEnv
from podracer.types import BoxSpec, DiscreteSpec, MaskedObs, ObsSpec, box_spec, masked_obs_spec


@struct.dataclass
class ProbeState:
    obs: jax.Array
    t: jax.Array


class _Probe(JaxEnv):
    num_actions = 2
    length = 1

    def observation_spec(self, params: Any) -> ObsSpec:
        return ObsSpec((1,), jnp.dtype(jnp.float32))

    def action_spec(self, params: Any) -> DiscreteSpec:
        return DiscreteSpec(self.num_actions)

    def max_episode_steps(self, params: Any) -> int:
        return 100  # never reached

    def reset_env(self, key, params):
        obs = self._first_obs(key)
        return ProbeState(obs, jnp.zeros((), jnp.int32)), obs

    def _first_obs(self, key) -> jax.Array:
        return jnp.zeros((1,), jnp.float32)


class ConstantRewardProbe(_Probe):
    """One step, reward +1: the value of the first observation must learn 1."""

    name = "ProbeConstantReward"

    def step_env(self, key, state, action, params):
        return state, state.obs, jnp.float32(1.0), jnp.bool_(True)


class ObsRewardProbe(_Probe):
    """One step, observation +-1, reward equal to it: the value must learn V(obs) = obs."""

    name = "ProbeObsReward"

    def _first_obs(self, key):
        return jnp.where(jax.random.bernoulli(key), 1.0, -1.0)[None].astype(jnp.float32)

    def step_env(self, key, state, action, params):
        return state, state.obs, state.obs[0], jnp.bool_(True)


class ActionRewardProbe(ObsRewardProbe):
    """One step, observation +-1; reward +1 for action 1 when obs is +1 and action 0 when
    it is -1, else -1: the policy must learn to read the observation."""

    name = "ProbeActionReward"

    def step_env(self, key, state, action, params):
        correct = (action == 1) == (state.obs[0] > 0)
        return state, state.obs, jnp.where(correct, 1.0, -1.0), jnp.bool_(True)


class DiscountingProbe(_Probe):
    """Two steps, reward +1 at the end: V(first) = gamma, V(second) = 1."""

    name = "ProbeDiscounting"

    def step_env(self, key, state, action, params):
        state = ProbeState(jnp.ones((1,), jnp.float32), state.t + 1)
        done = state.t >= 2
        return state, state.obs, jnp.where(done, 1.0, 0.0), done


class TimeLimitProbe(_Probe):
    """Reward +1 every step, never terminates, truncated after `length` steps; the
    observation is the elapsed part of the episode, `t / length` (the final one is 1).

    The time limit is not part of the task: bootstrapping from the final observation, every
    state is worth `1 / (1 - gamma)`. A learner that takes truncation for termination gets
    `(1 - gamma ** (length - t)) / (1 - gamma)` instead, less near the limit."""

    name = "ProbeTimeLimit"
    length = 4

    def max_episode_steps(self, params: Any) -> int:
        return self.length

    def step_env(self, key, state, action, params):
        t = state.t + 1
        obs = (t / self.length).astype(jnp.float32)[None]
        return ProbeState(obs, t), obs, jnp.float32(1.0), jnp.bool_(False)


class MaskedActionProbe(ObsRewardProbe):
    """Legal-action masks: observation `MaskedObs([+-1], mask [4])`. Action 0 is never
    legal, 1 only when obs is -1, 3 only when it is +1, 2 always. An illegal action pays +2
    (the best reward: an agent blind to the mask learns to take it) and the episode goes
    on; a legal one ends it with +1 for the matching action (1 at -1, 3 at +1) and -1 for
    action 2. An agent that respects the mask has episodes of length exactly 1 and learns
    a return of 1."""

    name = "ProbeMaskedAction"
    num_actions = 4

    def observation_spec(self, params: Any) -> MaskedObs:
        return masked_obs_spec(ObsSpec((1,), jnp.dtype(jnp.float32)), self.num_actions)

    def max_episode_steps(self, params: Any) -> int:
        return 4

    def reset_env(self, key, params):
        state, obs = super().reset_env(key, params)
        return state, self._masked(obs)

    def step_env(self, key, state, action, params):
        legal = self.legal(state.obs)[action]
        best = jnp.where(state.obs[0] > 0, 3, 1)
        reward = jnp.where(legal, jnp.where(action == best, 1.0, -1.0), 2.0)
        return state, self._masked(state.obs), reward, legal

    @staticmethod
    def legal(obs: jax.Array) -> jax.Array:
        positive = obs[0] > 0
        return jnp.stack([jnp.bool_(False), ~positive, jnp.bool_(True), positive])

    def _masked(self, obs: jax.Array) -> MaskedObs:
        return MaskedObs(obs, self.legal(obs))


class ContinuousActionProbe(_Probe):
    """One step, observation `2 + s` with `s = +-1` (an offset that observation
    normalisation removes), a continuous action in `[-1, 1]`; reward `-(action - s / 2)^2`:
    the policy's mean must learn `s / 2`, inside the box, and its spread must shrink. The
    action arrives clipped to the box (`JaxEnv.step`)."""

    name = "ProbeContinuousAction"

    def action_spec(self, params: Any) -> BoxSpec:
        return box_spec((1,), -1.0, 1.0)

    def _first_obs(self, key):
        return (2.0 + jnp.where(jax.random.bernoulli(key), 1.0, -1.0))[None].astype(jnp.float32)

    def step_env(self, key, state, action, params):
        reward = -jnp.square(action[0] - 0.5 * (state.obs[0] - 2.0))
        return state, state.obs, reward, jnp.bool_(True)


PROBES = {p.name: p for p in (ConstantRewardProbe, ObsRewardProbe, ActionRewardProbe, DiscountingProbe,
                              TimeLimitProbe, MaskedActionProbe, ContinuousActionProbe)}
