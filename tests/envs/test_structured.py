"""A structured observation's legal-action mask field moved into a `MaskedObs`: which field is
a mask, the split of observations and specs, and the wrapper passing keys, states, actions
and parameters through (checked against a hand-written environment that records them)."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from podracer.envs import JaxEnv
from podracer.envs.structured import MaskFieldJaxEnv, mask_field, masked_from_field, split_mask_field
from podracer.types import DiscreteSpec, MaskedObs, ObsSpec

F32, U32 = np.dtype(np.float32), np.dtype(np.uint32)


class _Recorder(JaxEnv):
    """Its parameters are a size `n`; its observations `values [n]` (the step's action added
    to `0 .. n - 1`), the key it was given and an int32 mask (Pgx's field name)."""

    name = "Recorder"
    default_params = 2

    def reset_env(self, key, params):
        return jnp.int32(0), self._obs(params, key, 0, [1, 0, 1])

    def step_env(self, key, state, action, params):
        return state + 1, self._obs(params, key, action, [0, 1, 1]), jnp.float32(state), state >= 1

    def _obs(self, n, key, action, mask):
        values = jnp.arange(n, dtype=jnp.float32) + action
        return {"values": values, "key": jax.random.key_data(key), "legal_action_mask": jnp.asarray(mask, jnp.int32)}

    def observation_spec(self, params):
        return {
            "values": ObsSpec((params,), F32),
            "key": ObsSpec((2,), U32),
            "legal_action_mask": ObsSpec((3,), np.dtype(np.int32)),
        }

    def action_spec(self, params):
        return DiscreteSpec(3)

    def max_episode_steps(self, params):
        return 5


def test_the_wrapper_moves_the_mask_and_passes_keys_states_actions_and_params_through():
    env = masked_from_field(_Recorder())
    assert isinstance(env, MaskFieldJaxEnv) and env.name == "Recorder"
    rest = {"values": ObsSpec((4,), F32), "key": ObsSpec((2,), U32)}
    assert env.observation_spec(4) == MaskedObs(rest, ObsSpec((3,), np.dtype(bool)))
    state, obs = env.reset_env(jax.random.key(5), 4)
    np.testing.assert_array_equal(obs.obs["values"], [0, 1, 2, 3])
    np.testing.assert_array_equal(obs.obs["key"], jax.random.key_data(jax.random.key(5)))
    assert obs.action_mask.dtype == jnp.bool_ and obs.action_mask.tolist() == [True, False, True]
    for t, action in enumerate([2, 1]):
        state, obs, reward, terminated = env.step_env(jax.random.key(6 + t), state, jnp.int32(action), 3)
        assert int(state) == t + 1 and float(reward) == t and bool(terminated) == (t == 1)
        np.testing.assert_array_equal(obs.obs["values"], np.arange(3) + action)
        np.testing.assert_array_equal(obs.obs["key"], jax.random.key_data(jax.random.key(6 + t)))
        assert obs.action_mask.tolist() == [False, True, True]


class _Named(NamedTuple):
    grid: object
    action_mask: object


def test_one_other_field_is_the_observation_itself_and_more_are_a_dict():
    grid = jnp.ones((2, 2))
    masked = split_mask_field(_Named(grid, jnp.asarray([1, 0])), "action_mask")
    assert masked.obs is grid and masked.action_mask.dtype == jnp.bool_
    assert masked.action_mask.tolist() == [True, False]
    spec = split_mask_field(_Named(ObsSpec((2, 2), F32), ObsSpec((2,), np.dtype(np.int8))), "action_mask")
    assert spec == MaskedObs(ObsSpec((2, 2), F32), ObsSpec((2,), np.dtype(bool)))
    both = split_mask_field({"a": 1, "b": 2, "legal_action_mask": jnp.asarray([True])}, "legal_action_mask")
    assert both.obs == {"a": 1, "b": 2}


def test_a_mask_field_is_a_vector_named_as_jumanjis_or_pgxs():
    vector, matrix = ObsSpec((3,), np.dtype(bool)), ObsSpec((3, 3), np.dtype(bool))
    assert mask_field(_Named(ObsSpec((2,), F32), vector)) == "action_mask"
    assert mask_field({"x": vector, "legal_action_mask": vector}) == "legal_action_mask"
    assert mask_field({"x": vector, "action_mask": matrix}) is None  # not a mask over actions
    assert mask_field({"x": vector, "mask": vector}) is None
    assert mask_field(MaskedObs(vector, vector)) is None and mask_field(vector) is None
    plain = _Recorder()
    plain.observation_spec = lambda params: {"values": ObsSpec((params,), F32)}
    assert masked_from_field(plain) is plain
