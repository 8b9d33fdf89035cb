"""The networks an agent config asks for: each torso built with the config's options, the
actor-critic heads over them, the CNN torsos' checks on the observations (every message and
every size limit) and the initial parameters. Nothing here compiles a network's forward pass
except `init_params`' one small MLP."""

import jax
import jax.numpy as jnp
import pytest

from podracer import networks
from podracer.agents.networks import check_cnn_observations, init_params, make_actor_critic, make_torso
from podracer.config import ConfigError
from podracer.types import BoxSpec, DiscreteSpec, ObsSpec


@pytest.mark.parametrize("layer_norm", [False, True])
def test_each_torso_is_built_with_the_configs_options(layer_norm):
    mlp = make_torso("mlp", [8, 4], "relu", ObsSpec((4, 5), jnp.float32), layer_norm)
    assert isinstance(mlp, networks.MLP)
    assert (mlp.hidden_sizes, mlp.activation, mlp.obs_ndim, mlp.layer_norm) == ((8, 4), "relu", 2, layer_norm)
    minatar = make_torso("minatar_cnn", [32], "gelu", ObsSpec((10, 10, 4), jnp.float32), layer_norm)
    assert isinstance(minatar, networks.MinAtarCNN)
    assert (minatar.hidden_sizes, minatar.activation, minatar.layer_norm) == ((32,), "gelu", layer_norm)
    frames = ObsSpec((84, 84, 4), jnp.uint8)
    assert type(make_torso("nature_cnn", (8,), "relu", frames)) is networks.NatureCNN
    assert type(make_torso("impala_cnn", (8,), "relu", frames)) is networks.ImpalaCNN


@pytest.mark.parametrize("layer_norm", [False, True])
def test_structured_observations_and_the_multi_encoder_get_a_structured_torso(layer_norm):
    """Dict observations get the concatenating torso under "mlp"; "multi_encoder" is the
    per-field encoder for any observation, one array included; both with `layer_norm`."""
    fields = {"a": ObsSpec((2,), jnp.float32), "b": ObsSpec((3, 3, 1), jnp.float32)}
    concat = make_torso("mlp", [8], "relu", fields, layer_norm)
    assert isinstance(concat, networks.structured.ConcatTorso)
    assert (concat.hidden_sizes, concat.layer_norm) == ((8,), layer_norm)
    for spec, shapes in ((fields, ((2,), (3, 3, 1))), (ObsSpec((6, 6, 2), jnp.float32), ((6, 6, 2),))):
        encoder = make_torso("multi_encoder", [8], "relu", spec, layer_norm)
        assert isinstance(encoder, networks.structured.MultiEncoderTorso)
        assert (encoder.shapes, encoder.layer_norm) == (shapes, layer_norm)


def test_an_unknown_torso_is_named_with_the_choices():
    with pytest.raises(ValueError) as error:
        make_torso("resnet", (8,), "relu", ObsSpec((3,), jnp.float32))
    assert str(error.value) == f"unknown torso 'resnet'; choose one of {networks.registry.BUILTIN_TORSOS}"


@pytest.mark.parametrize("torso, minimum", [("nature_cnn", 36), ("minatar_cnn", 3), ("impala_cnn", 1)])
def test_cnn_torsos_take_images_of_their_smallest_size_and_no_smaller(torso, minimum):
    check_cnn_observations(torso, (minimum, minimum, 4))
    check_cnn_observations(torso, (minimum, minimum + 5, 1))
    if minimum > 1:
        for shape in ((minimum - 1, minimum + 5, 4), (minimum + 5, minimum - 1, 4)):
            with pytest.raises(ConfigError) as error:
                check_cnn_observations(torso, shape)
            assert str(error.value) == (
                f"agent.torso {torso!r} needs images of at least {minimum}x{minimum}, got shape {shape}"
            )
    for shape in ((64,), (64, 64), (64, 64, 4, 1)):
        with pytest.raises(ConfigError) as error:
            check_cnn_observations(torso, shape)
        assert str(error.value) == (
            f"agent.torso {torso!r} needs image observations [H, W, C], got shape {shape}; "
            "use agent.torso 'mlp' for vector observations"
        )


def test_vector_torsos_take_any_observation_shape():
    for shape in ((3,), (1,), (2, 2), (1, 1, 1)):
        check_cnn_observations("mlp", shape)
    assert isinstance(make_torso("mlp", (4,), "tanh", ObsSpec((1, 1, 1), jnp.float32)), networks.MLP)


@pytest.mark.parametrize("shared_torso", [True, False])
def test_actor_critic_heads_follow_the_action_spec_and_share_the_torso_only_when_asked(shared_torso):
    obs = ObsSpec((3,), jnp.float32)
    discrete = make_actor_critic("mlp", (8,), "tanh", shared_torso, obs, DiscreteSpec(5))
    assert isinstance(discrete, networks.ActorCritic) and discrete.num_actions == 5
    assert isinstance(discrete.torso, networks.MLP) and discrete.torso.hidden_sizes == (8,)
    box = make_actor_critic("mlp", (8,), "tanh", shared_torso, obs, BoxSpec([2, 3], -1.0, 1.0), -0.5)
    assert isinstance(box, networks.GaussianActorCritic)
    assert box.action_shape == (2, 3) and box.log_std_init == -0.5
    for network in (discrete, box):
        if shared_torso:
            assert network.critic_torso is None
        else:
            assert isinstance(network.critic_torso, networks.MLP) and network.critic_torso is not network.torso
            assert network.critic_torso.hidden_sizes == (8,)


def test_init_params_are_the_networks_on_a_batch_of_the_observations():
    """The parameter tree and shapes of `network.init` on a `[1, 3]` batch (by shape only:
    compiling the orthogonal initialisers takes seconds)."""
    network = make_actor_critic("mlp", (4,), "tanh", True, ObsSpec((3,), jnp.float32), DiscreteSpec(2))
    params = jax.eval_shape(lambda key: init_params(network, key, ObsSpec((3,), jnp.float32)), jax.random.key(9))
    expected = jax.eval_shape(lambda key: network.init(key, jnp.zeros((1, 3), jnp.float32)), jax.random.key(9))
    assert jax.tree.structure(params) == jax.tree.structure(expected)
    assert jax.tree.leaves(params) == jax.tree.leaves(expected)
    assert params["params"]["torso"]["Dense_0"]["kernel"].shape == (3, 4)
