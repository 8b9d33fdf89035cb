"""Flax networks, one module per role:

- `torsos`: observations to features (MLP, the MinAtar CNN, the Nature and IMPALA CNNs);
- `heads`: an algorithm's outputs on a torso (actor-critic, Gaussian actor-critic, Q-values);
- `structured`: torsos for dict/NamedTuple observations;
- `recurrent`: LSTM/GRU cores that restart at episode boundaries, and their unroll;
- `latent`: the compressed latent (an auto-encoder under the actor-critic heads);
- `registry`: torsos registered by name, with their options (`register_torso`);
- `layers`: the initializer and activations they all build with.
"""

from __future__ import annotations

from podracer.networks import heads, latent, layers, recurrent, registry, structured, torsos
from podracer.networks.heads import ActorCritic, GaussianActorCritic, QNetwork
from podracer.networks.layers import orthogonal
from podracer.networks.registry import Torso, register_torso, registered_torsos
from podracer.networks.torsos import MLP, ImpalaCNN, MinAtarCNN, NatureCNN

__all__ = [
    "MLP",
    "ActorCritic",
    "GaussianActorCritic",
    "ImpalaCNN",
    "MinAtarCNN",
    "NatureCNN",
    "QNetwork",
    "Torso",
    "heads",
    "latent",
    "layers",
    "orthogonal",
    "recurrent",
    "register_torso",
    "registered_torsos",
    "registry",
    "structured",
    "torsos",
]
