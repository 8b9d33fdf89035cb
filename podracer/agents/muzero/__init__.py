"""MuZero with mctx's search, split by role: `config`, `networks`, `search` (acting),
`losses`, `learning`; `agent` puts them together as an `Agent`."""

from podracer.agents.muzero.agent import ALGORITHM, make_muzero, make_prior_act, without_search
from podracer.agents.muzero.config import MuZeroConfig

__all__ = ["ALGORITHM", "MuZeroConfig", "make_muzero", "make_prior_act", "without_search"]
