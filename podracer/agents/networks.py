"""The networks an agent config asks for: the torso by name (`TORSOS`, with its checks on
the observations) and the feed-forward actor-critic over it, and their initial parameters."""

from __future__ import annotations

import flax.linen as nn

from podracer import networks
from podracer.config import ConfigError
from podracer.networks import structured as networks_structured
from podracer.networks.registry import BUILTIN_TORSOS
from podracer.types import (
    ActionSpec,
    BoxSpec,
    ObservationSpec,
    Params,
    PRNGKey,
    network_obs_spec,
    zeros_like_spec,
)

TORSOS = BUILTIN_TORSOS
ACTIVATIONS = ("tanh", "relu", "gelu")


def make_actor_critic(
    torso: str,
    hidden_sizes: tuple[int, ...],
    activation: str,
    shared_torso: bool,
    obs_spec: ObservationSpec,
    action_spec: ActionSpec,
    log_std_init: float = 0.0,
) -> nn.Module:
    """The actor-critic network an agent config asks for (it sees the `obs` of a `MaskedObs`):
    logits for a `DiscreteSpec`, a Gaussian (`networks.GaussianActorCritic`, `log_std_init`)
    for a `BoxSpec`."""

    def body():
        return make_torso(torso, hidden_sizes, activation, obs_spec)

    critic = None if shared_torso else body()
    if isinstance(action_spec, BoxSpec):
        return networks.GaussianActorCritic(tuple(action_spec.shape), body(), critic, log_std_init)
    return networks.ActorCritic(action_spec.num_actions, body(), critic)


def make_torso(
    torso: str, hidden_sizes: tuple[int, ...], activation: str, obs_spec: ObservationSpec, layer_norm: bool = False
) -> nn.Module:
    """A fresh torso module of the kind a config names (`TORSOS`); `layer_norm` applies to
    the MLP and MinAtar torsos. Dict/NamedTuple observations, and "multi_encoder", get a
    structured torso (`podracer.networks.structured.structured_torso`)."""
    obs_spec = network_obs_spec(obs_spec)
    if torso == "multi_encoder" or networks_structured.is_structured(obs_spec):
        return networks_structured.structured_torso(torso, hidden_sizes, activation, obs_spec, layer_norm)
    check_cnn_observations(torso, tuple(obs_spec.shape))
    if torso == "mlp":
        return networks.MLP(tuple(hidden_sizes), activation, obs_ndim=len(obs_spec.shape), layer_norm=layer_norm)
    if torso == "minatar_cnn":
        return networks.MinAtarCNN(hidden_sizes=tuple(hidden_sizes), activation=activation, layer_norm=layer_norm)
    if torso in ("nature_cnn", "impala_cnn"):
        return getattr(networks, "NatureCNN" if torso == "nature_cnn" else "ImpalaCNN")()
    raise ValueError(f"unknown torso {torso!r}; choose one of {TORSOS}")


# the smallest height and width each CNN torso maps to a non-empty feature map
_CNN_MIN_SIZE = {"nature_cnn": 36, "minatar_cnn": 3, "impala_cnn": 1}


def check_cnn_observations(torso: str, shape: tuple[int, ...]) -> None:
    """A ConfigError (before anything compiles) unless a CNN torso's observations are
    images `[H, W, C]` large enough for its convolutions."""
    minimum = _CNN_MIN_SIZE.get(torso)
    if minimum is None:
        return
    if len(shape) != 3:
        raise ConfigError(
            f"agent.torso {torso!r} needs image observations [H, W, C], got shape {shape}; "
            f"use agent.torso 'mlp' for vector observations"
        )
    if min(shape[:2]) < minimum:
        raise ConfigError(f"agent.torso {torso!r} needs images of at least {minimum}x{minimum}, got shape {shape}")


def init_params(network: nn.Module, key: PRNGKey, obs_spec: ObservationSpec) -> Params:
    """The network's parameters, from a zero batch of the observations it sees."""
    return network.init(key, zeros_like_spec(network_obs_spec(obs_spec), (1,)))
