"""`podracer bench sebulba`'s measurement window starts after compilation."""

import threading
import time

import numpy as np
import pytest

from sebulba.benchmark import _measure
from sebulba.threads import ThreadGroup


def _counting_after(delay_s: float, counts: np.ndarray, stop: threading.Event) -> None:
    """A stand-in actor whose first step comes after `delay_s` (a slow compile)."""
    time.sleep(delay_s)
    while not stop.is_set():
        counts[0] += 1
        time.sleep(0.001)


@pytest.mark.timeout(60)
def test_measurement_waits_for_the_first_steps():
    """With a compile longer than the fixed warm-up, the window used to see no steps at
    all (a 0 limit_sps and a division by zero in `bench`)."""
    counts = np.zeros(1, np.int64)
    group = ThreadGroup()
    group.start("slow-compile", _counting_after, 2.5, counts, group.stop)
    sps, _ = _measure(group, counts, seconds=0.5)
    assert sps > 100
