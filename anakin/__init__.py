"""Anakin: JAX environments and the agent compiled together on every device."""

from anakin.config import AnakinConfig
from anakin.runner import TrainResult, train

__all__ = ["AnakinConfig", "TrainResult", "train"]
