"""Sebulba: host environments on actor threads, a sharded learner, parameters sent back."""

from sebulba.benchmark import bench
from sebulba.config import SebulbaConfig
from sebulba.runner import TrainResult, setup, train

__all__ = ["SebulbaConfig", "TrainResult", "bench", "setup", "train"]
