"""A CI-sized soak of `streamasr serve`: scripts/serve_soak.py as shipped, 640 sessions.

A real server process on 127.0.0.1 takes 640 short sessions, 16 at a time: 384 complete
utterances of one second, and 256 that break off (closed without the end message, the TCP
connection aborted, bad input, bytes on a bare TCP connection). Afterwards no session may be
left open, every counter of /metrics must equal what was done, the server's descriptors
must be back where they started, and its memory must not grow with the sessions.
(docs/serve.md has the 10,000-session run of the same script.)
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SESSIONS = 640

# What one session is worth, in bytes, for the memory bounds below:
# its audio as sent, 1 s of 16 kHz s16le (the server also keeps a float32 copy: twice that) ...
SESSION_AUDIO_BYTES = 16000 * 2
# ... and one tiny-en engine stream after that second, kept alive: measured at ~260 kB
# (200 streams made and kept in one process; made and dropped, ~2 kB each).
LEAKED_STREAM_BYTES = 260 * 1024


def test_a_soak_leaves_no_session_descriptor_or_memory_behind() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/serve_soak.py", "--sessions", str(SESSIONS),
         # warm-up: the engine's arena grows once to the largest batch met (up to 16
         # streams), which with one step per round may come after 40 sessions (measured:
         # +40 MB between sessions 40 and 60); 256 sessions, then 24 intervals of 16 (with
         # intervals of 8 the allocator's page-sized steps alone reached 9-21 kB/session as
         # the median on a loaded machine; with 16, 6-7.6 kB)
         "--concurrency", "16", "--points", "40", "--warmup-share", "0.4"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["error_count"] == 0, result["errors"]

    # the rotation of scripts/serve_soak.py: 6 in 10 complete, 1 in 10 of each other kind;
    # the garbage ones take turns (sessions 6, 16, 26, ...: 22, 21 and 21 of them)
    assert result["kinds"] == {
        "complete": 384, "close": 64, "drop": 64, "garbage": 64, "raw_tcp": 64,
        "garbage_bad_json": 22, "garbage_audio_first": 21, "garbage_odd_pcm": 21,
    }
    # no session left open; every WebSocket connection (not the bare TCP ones) and every
    # completed utterance counted once; each bad input under its own close reason
    assert result["metrics"] == {
        "streamasr_active_sessions": 0.0,
        "streamasr_connections_total": 576.0,
        "streamasr_utterances_total": 384.0,
        'streamasr_dropped_connections_total{reason="invalid_input"}': 43.0,
        'streamasr_dropped_connections_total{reason="unexpected_message"}': 21.0,
    }
    assert result["leaks"] == []
    assert result["server_exit"] == 0
    # a socket left behind per broken-off session would add 256 descriptors
    assert result["fds"]["end"] <= result["fds"]["start"] + 4, result["points"]

    growth = result["rss_growth_per_session"]
    assert growth["intervals"] >= 20
    # A leak grows every interval between readings alike, so the median interval sees it;
    # the engine's one-off steps (buffers grown for a larger batch than before) move single
    # intervals and not the median (measured: 0 kB/session). Half a session's audio as
    # sent: keeping only the audio of each session (32 kB, or 64 kB as float32) fails it.
    assert growth["median_interval_kb"] * 1024 < SESSION_AUDIO_BYTES / 2, result["points"]
    # Over the whole run after warm-up, the largest step between two readings left out: the
    # engine's arena grows once, to the largest batch met (one burst of 16 sessions at once
    # takes the server to its plateau, ~200 MB, and nothing grows after), and when that
    # batch first comes varies from run to run (measured: a +40 MB step anywhere from
    # session 16 to 112 of 160, then flat; over 640 sessions 2-13 kB/session after
    # warm-up). A leaked engine stream (~260 kB) per session grows every interval alike and
    # still fails it.
    later = [point for point in result["points"] if point["sessions"] >= growth["from_sessions"]]
    steps = [(b["rss_kb"] - a["rss_kb"], b["sessions"] - a["sessions"])
             for a, b in itertools.pairwise(later)]
    largest = max(steps)
    rest_kb = (sum(kb for kb, _ in steps) - largest[0]) / (
        sum(sessions for _, sessions in steps) - largest[1])
    assert rest_kb * 1024 < LEAKED_STREAM_BYTES, result["points"]
