"""Versioned parameters for the actors: one source per actor device."""

from __future__ import annotations

import threading
import time
from typing import Any

import jax

from podracer.types import Params
from sebulba.threads import POLL_S, Stopped


class ParamSource:
    """The learner `publish`es parameters (version = updates applied so far) and they are
    copied to this source's device; actor threads on that device take the `latest`."""

    def __init__(self, device: jax.Device) -> None:
        self.device = device
        self._cond = threading.Condition()
        self._params: Params | None = None
        self._version = -1

    def publish(self, params: Params, version: int) -> None:
        on_device = jax.device_put(params, self.device)
        with self._cond:
            self._params, self._version = on_device, version
            self._cond.notify_all()

    def latest(self, min_version: int, stop: threading.Event) -> tuple[Any, int, float]:
        """The newest parameters once their version is at least `min_version`:
        `(params, version, seconds waited)`. Raises Stopped if the run stops first."""
        start = time.perf_counter()
        min_version = max(min_version, 0)  # nothing before the first publication
        with self._cond:
            while self._version < min_version:
                if stop.is_set():
                    raise Stopped
                self._cond.wait(POLL_S)
            return self._params, self._version, time.perf_counter() - start
