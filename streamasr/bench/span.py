"""Speech onset and end of an utterance when the dataset gives no alignments.

Onset: `streamasr.vad.onset.OnsetDetector`, the same detector the live display uses (first loud
10 ms frame, 10 dB above the measured noise floor or above `--onset-dbfs`, followed by at
least 30 ms of such frames within 50 ms).
End: the end of the last loud 10 ms frame by the same rule. Both see exactly the samples fed
to the engine, so they need no second pass over the file.
"""

from __future__ import annotations

import numpy as np

from streamasr.vad.onset import OnsetDetector, OnsetOptions


class SpanDetector:
    """Tracks the first and last speech frame of a whole utterance as audio streams in."""

    def __init__(self, sample_rate: int, options: OnsetOptions | None = None) -> None:
        self._onset = OnsetDetector(sample_rate, options or OnsetOptions())

    @property
    def onset_s(self) -> float | None:
        """Detected speech onset in audio seconds (None: no speech found)."""
        return self._onset.onset_s

    @property
    def end_s(self) -> float | None:
        """End of the last loud frame in audio seconds (None: no loud frame)."""
        return self._onset.last_loud_end_s

    def feed(self, samples: np.ndarray) -> None:
        """Consume the next block of mono float32 samples."""
        self._onset.feed(samples)
