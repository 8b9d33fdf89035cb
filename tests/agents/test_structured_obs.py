"""Dict and NamedTuple observations: the torsos that take them, the `action_mask` field as a
`MaskedObs` mask, every algorithm on them (trained a few updates) or refused in one line."""

import jax
import numpy as np
import pytest

import podracer
from podracer.agents.networks import make_torso
from podracer.config import ConfigError, EnvConfig
from podracer.envs import make_configured_jax_env, register_jax_env
from podracer.types import MaskedObs, ObsSpec, zeros_like_spec
from tests.support.structured_envs import SIZE, StructuredWalk

register_jax_env("StructuredWalk-v0", StructuredWalk, overwrite=True)
register_jax_env("StructuredWalkNamed-v0", lambda: StructuredWalk(named=True), overwrite=True)
register_jax_env("StructuredWalkNoMask-v0", lambda: StructuredWalk(mask=False), overwrite=True)


@pytest.mark.parametrize("env_id", ["StructuredWalk-v0", "StructuredWalkNamed-v0"])
def test_an_action_mask_field_becomes_a_masked_obs(env_id):
    env = make_configured_jax_env(EnvConfig(env_id))
    spec = env.observation_spec(env.default_params)
    assert isinstance(spec, MaskedObs) and spec.action_mask == ObsSpec((3,), np.dtype(bool))
    assert set(spec.obs) == {"grid", "position"}
    state, obs = env.reset(jax.random.key(0))
    np.testing.assert_array_equal(obs.action_mask, [False, True, True])  # left is illegal at 0
    _, step = env.step(jax.random.key(1), state, np.int32(2))
    np.testing.assert_array_equal(step.obs.action_mask, [True, True, True])
    assert int(step.obs.obs["position"]) == 1


def test_without_a_mask_field_the_observation_stays_as_it_is():
    env = make_configured_jax_env(EnvConfig("StructuredWalkNoMask-v0"))
    assert set(env.observation_spec(env.default_params)) == {"grid", "position"}


@pytest.mark.parametrize("torso", ["mlp", "multi_encoder"])
def test_structured_torsos_map_every_field_to_one_feature_vector(torso):
    """Batched `[3, 2]` observations of three fields -> `[3, 2, 16]` features, each field
    reaching them; "multi_encoder" convolves the image field (a `[3, 3, 1, 16]` kernel)."""
    spec = {"grid": ObsSpec((SIZE, SIZE, 1), np.dtype(np.float32)), "position": ObsSpec((), np.dtype(np.int32)),
            "vector": ObsSpec((5,), np.dtype(np.float32))}
    net = make_torso(torso, (16,), "relu", spec)
    params = net.init(jax.random.key(0), zeros_like_spec(spec, (2,)))
    obs = zeros_like_spec(spec, (3, 2))
    base = np.asarray(net.apply(params, obs))
    assert base.shape == (3, 2, 16)
    for name in spec:
        changed = dict(obs, **{name: obs[name] + 1})
        assert not np.allclose(net.apply(params, changed), base), name
    kernels = [leaf.shape for leaf in jax.tree.leaves(params) if leaf.ndim == 4]
    assert kernels == ([(3, 3, 1, 16)] if torso == "multi_encoder" else [])


def test_a_cnn_torso_on_structured_observations_is_a_config_error():
    spec = {"grid": ObsSpec((SIZE, SIZE, 1), np.dtype(np.float32))}
    with pytest.raises(ConfigError, match="multi_encoder"):
        make_torso("nature_cnn", (16,), "relu", spec)


def _config(preset, env_id, tmp_path, devices=1, **agent):
    return podracer.presets.get(
        preset, env=dict(id=env_id), total_env_steps=256, run_dir=str(tmp_path / "run"),
        arch=dict(num_envs=8, rollout_length=8, devices=tuple(range(devices))), agent=agent,
        log=dict(console=False, tensorboard=False))


@pytest.mark.parametrize("preset,env_id,agent", [
    ("ppo-cartpole-anakin", "StructuredWalk-v0", {}),
    ("ppo-cartpole-anakin", "StructuredWalkNamed-v0", {"torso": "multi_encoder"}),
    ("impala-cartpole-anakin", "StructuredWalk-v0", {}),
    pytest.param("dqn-cartpole-anakin", "StructuredWalk-v0", {"learning_starts": 64}, marks=pytest.mark.slow),
    ("pqn-cartpole-anakin", "StructuredWalkNoMask-v0", {}),
])
@pytest.mark.costly
def test_algorithms_train_on_structured_observations(preset, env_id, agent, tmp_path):
    result = podracer.train(_config(preset, env_id, tmp_path, **agent), console=False)
    assert result.metrics[-1]["env_steps"] == 256


@pytest.mark.costly
def test_ppo_on_structured_observations_on_four_devices(tmp_path):
    config = _config("ppo-cartpole-anakin", "StructuredWalk-v0", tmp_path, devices=4)
    assert podracer.train(config, console=False).metrics[-1]["env_steps"] == 256


@pytest.mark.parametrize("preset,agent,fragment", [
    ("muzero-catch-anakin", {}, "muzero does not take structured"),
    ("ppo-cartpole-anakin", {"normalize_observations": True}, "agent.normalize_observations"),
])
def test_what_cannot_take_structured_observations_is_one_config_error(preset, agent, fragment, tmp_path):
    with pytest.raises(ConfigError) as info:
        podracer.train(_config(preset, "StructuredWalkNoMask-v0", tmp_path, **agent), console=False)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_an_integer_counter_field_is_squashed_so_it_cannot_saturate_the_network():
    """Jumanji Snake's `step_count` (int32, up to 4000) enters as symlog(4000) = 8.3, not
    4000; a float field is taken as it is."""
    from podracer.networks.structured import symlog

    counter = {"count": ObsSpec((), np.dtype(np.int32))}
    net = make_torso("mlp", (4,), "relu", counter)
    params = net.init(jax.random.key(0), zeros_like_spec(counter, (1,)))
    kernel = params["params"]["MLP_0"]["Dense_0"]["kernel"]  # [1, 4]
    features = net.apply(params, {"count": np.array([4000], np.int32)})
    np.testing.assert_allclose(features, np.maximum(symlog(np.float32(4000)) * np.asarray(kernel), 0.0), rtol=1e-5)
