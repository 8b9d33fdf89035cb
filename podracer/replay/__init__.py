"""Replay, one module per role:

- `buffer`: item buffers (uniform, prioritized with an exact sum tree) and the `Transition`
  a Q-learning loss takes;
- `sequence`: a trajectory buffer sampled as sequences of one environment's consecutive steps;
- `mixing`: replay for V-trace agents (fresh and replayed sequences in each update);
- `schedule`: how many gradient steps an update of a replay agent takes, and its metrics;
- `learning`: the gradient-step loop every replay agent runs (`learn_steps`).

Every buffer's state lives on one device, in `AgentState.local`.
"""

from __future__ import annotations

from podracer.replay import buffer, learning, mixing, schedule, sequence
from podracer.replay.buffer import (
    Replay,
    ReplaySample,
    Transition,
    importance_weights,
    make_replay,
    same_observations,
    set_leaves,
    stratified_indices,
)
from podracer.replay.learning import learn_steps
from podracer.replay.mixing import with_replay
from podracer.replay.schedule import ReplaySchedule, replay_metrics, schedule_replay
from podracer.replay.sequence import SequenceReplay, SequenceSample, make_sequence_replay

__all__ = [
    "Replay",
    "ReplaySample",
    "ReplaySchedule",
    "SequenceReplay",
    "SequenceSample",
    "Transition",
    "buffer",
    "importance_weights",
    "learn_steps",
    "learning",
    "make_replay",
    "make_sequence_replay",
    "mixing",
    "replay_metrics",
    "same_observations",
    "schedule",
    "schedule_replay",
    "sequence",
    "set_leaves",
    "stratified_indices",
    "with_replay",
]
