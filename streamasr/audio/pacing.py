"""Real-time pacing: a file's blocks released no faster than a microphone would deliver them."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import numpy as np


def paced(
    blocks: Iterator[np.ndarray],
    sample_rate: int,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[np.ndarray]:
    """Release each block no earlier than it would have been recorded live.

    The first block is available after its own duration, like a microphone callback.
    """
    start = clock()
    fed_s = 0.0
    for block in blocks:
        fed_s += len(block) / sample_rate
        wait = start + fed_s - clock()
        if wait > 0:
            sleep(wait)
        yield block
