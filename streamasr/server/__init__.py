"""`streamasr serve`: many clients, one engine, every protocol on one web stack.

- `protocol`: the project's WebSocket messages (a JSON config, binary audio frames,
  `{"type": "end"}`; events back as the JSON objects `streamasr file --format jsonl`
  prints); `wire`: those event records.
- `limits`: the server's limits and safety settings, checked once.
- `scheduler`: one task that batches the streams with audio ready through the engine's
  batched step, in a worker thread, so the event loop stays free. Every protocol's sessions
  are its utterances.
- `app`: admission, the serve loop with its graceful stop; `web`: the FastAPI application
  on uvicorn (health, readiness, metrics, the page) that includes each protocol's router:
  `ws_adapter` + `connection` (the WebSocket protocol), `room_feeds` (rooms' viewers),
  `openai_realtime` + `realtime_events` (OpenAI's Realtime transcription WebSocket),
  `openai_rest` + `openai_gate`, `openai_upload`, `openai_schemas` (OpenAI's REST API).
  Wyoming (`wyoming_listener`, `wyoming_adapter`, `wyoming_frames`) is a second listener of
  the same process. Every adapter stands on `client_session`, the wire-free session.
- `rooms` + `room_broker` (in-process, or `room_redis*` in Redis), `room_transcripts`.
- `client` + `client_records`, `client_connect`: `file|mic --server` and `streamasr.connect`.
- `metrics`: Prometheus counters, gauges and histograms.

The web stack and `prometheus-client` are the `serve` extra: imported only by the server's
modules, so `import streamasr` works without them.
"""
