"""`DQNConfig`: every refusal's whole message at each edge of its range, the replay ratio's
gradient steps per update, and the options of a registered torso. Nothing is compiled."""

import re

import pytest

import podracer.networks.registry
from podracer.agents import DQNConfig
from podracer.agents.networks import TORSOS
from podracer.config import ConfigError
from podracer.networks.registry import register_torso, registered_torsos
from tests.support.helpers import WideOptions

POSITIVE = (
    "learning_rate",
    "adam_eps",
    "max_grad_norm",
    "huber_delta",
    "buffer_size",
    "batch_size",
    "gradient_steps",
    "n_step",
    "target_update_period",
    "epsilon_decay_steps",
    "priority_eps",
)
UNIT = ("epsilon_start", "epsilon_end", "priority_exponent", "importance_exponent")

# (field, refused value, the whole message); each field's accepted edge is in ACCEPTED.
REFUSED = [
    *[(name, 0, f"agent.{name} must be > 0, got 0") for name in POSITIVE],
    ("replay_ratio", 0.0, "agent.replay_ratio must be > 0 (or None to take agent.gradient_steps per update), got 0.0"),
    ("gamma", -0.1, "agent.gamma must be in [0, 1], got -0.1"),
    ("gamma", 1.01, "agent.gamma must be in [0, 1], got 1.01"),
    ("loss", "l1", "agent.loss must be 'huber' or 'mse', got 'l1'"),
    ("learning_starts", -1, "agent.learning_starts must be >= 0, got -1"),
    ("target_update_tau", 0.0, "agent.target_update_tau must be in (0, 1], got 0.0"),
    ("target_update_tau", 1.5, "agent.target_update_tau must be in (0, 1], got 1.5"),
    *[(name, value, f"agent.{name} must be in [0, 1], got {value}") for name in UNIT for value in (-0.5, 1.5)],
    ("torso", "wide", f"agent.torso must be one of {TORSOS + tuple(registered_torsos())}, got 'wide'"),
    (
        "torso_options",
        ("width=3",),
        "agent.torso_options sets options of a registered torso; 'mlp' is built-in, got ('width=3',)",
    ),
    ("hidden_sizes", (), "agent.hidden_sizes must be positive sizes, got ()"),
    ("hidden_sizes", (8, 0), "agent.hidden_sizes must be positive sizes, got (8, 0)"),
    ("activation", "elu", "agent.activation must be one of ('tanh', 'relu', 'gelu'), got 'elu'"),
]

ACCEPTED = [
    ("gamma", 0.0),
    ("gamma", 1.0),
    ("learning_starts", 0),
    ("target_update_tau", 1.0),
    ("target_update_tau", 1e-3),
    ("replay_ratio", 1e-3),
    ("loss", "huber"),
    ("hidden_sizes", (1,)),
    ("activation", "gelu"),
    *[(name, value) for name in UNIT for value in (0.0, 1.0)],
]


@pytest.mark.parametrize("field,value,message", REFUSED, ids=[f"{f}={v!r}" for f, v, _ in REFUSED])
def test_each_refusal_names_the_field_and_the_value(field, value, message):
    with pytest.raises(ConfigError) as error:
        DQNConfig(**{field: value})
    assert str(error.value) == message


@pytest.mark.parametrize("field,value", ACCEPTED, ids=[f"{f}={v!r}" for f, v in ACCEPTED])
def test_each_range_keeps_its_edges(field, value):
    assert getattr(DQNConfig(**{field: value}), field) == value


def test_the_batch_may_equal_the_buffer_but_not_exceed_it():
    assert DQNConfig(buffer_size=64, batch_size=64).batch_size == 64
    with pytest.raises(ConfigError) as error:
        DQNConfig(buffer_size=64, batch_size=65)
    assert str(error.value) == "agent.batch_size must be <= agent.buffer_size (64), got 65"


@pytest.mark.parametrize(
    "replay_ratio,batch_size,per_device,steps,most",
    [(None, 32, 128, 3.0, 3), (2.0, 32, 128, 8.0, 8), (0.5, 64, 96, 0.75, 1), (3.0, 100, 50, 1.5, 2)],
)
def test_gradient_steps_per_update(replay_ratio, batch_size, per_device, steps, most):
    """Without a replay ratio, `gradient_steps`; with one, ratio x transitions / batch (the
    credit an update earns), at most its ceiling (at least 1) in one update."""
    config = DQNConfig(gradient_steps=3, replay_ratio=replay_ratio, batch_size=batch_size, buffer_size=1000)
    assert config.steps_per_update(per_device) == pytest.approx(steps)
    assert config.max_steps_per_update(per_device) == most


def test_a_registered_torsos_options_are_parsed_by_its_own_options_class(monkeypatch):
    monkeypatch.setattr(podracer.networks.registry, "_TORSOS", dict(podracer.networks.registry._TORSOS))
    register_torso("wide", WideOptions, lambda options, obs_spec, action_spec: None)
    assert DQNConfig(torso="wide", torso_options=("width=24",)).torso_options == ("width=24",)
    assert DQNConfig(torso="wide").torso_options == ()
    with pytest.raises(ConfigError, match=re.escape("agent.torso_options: width must be >= 1, got 0")):
        DQNConfig(torso="wide", torso_options=("width=0",))
