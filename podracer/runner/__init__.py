"""What both runners (`anakin/`, `sebulba/`) share: how a run reports, stops, checkpoints,
guards against non-finite values, counts episodes and places per-device state.

- `result`:       `TrainResult`, what `train` returns under either architecture.
- `hooks`:        `Hooks`, the caller's side of a run (metrics, checkpoints, stop, resume, waits).
- `guard`:        the NaN guard: `NonFiniteError`, `all_finite`, `check_finite`.
- `episodes`:     `EpisodeStats`, sums over the episodes that ended (in JAX or on the host).
- `metrics`:      `metrics_row`, the one builder of a metrics.jsonl row, its shared keys, and
                  `agent_means`, how a row averages the agent's metrics.
- `device_state`: partition specs of an agent state, and the device axis of `AgentState.local`.
- `sizes`:        `update_sizes`, env steps per update and updates per run.

Nothing here knows an algorithm or an architecture's threads or programs.
"""

from podracer.runner.episodes import EpisodeStats
from podracer.runner.guard import NonFiniteError, all_finite, check_finite
from podracer.runner.hooks import Hooks
from podracer.runner.metrics import SHARED_KEYS, Clock, agent_means, check_row, metrics_row
from podracer.runner.result import TrainResult

__all__ = [
    "SHARED_KEYS", "Clock", "EpisodeStats", "Hooks", "NonFiniteError", "TrainResult", "agent_means", "all_finite",
    "check_finite", "check_row", "metrics_row",
]
