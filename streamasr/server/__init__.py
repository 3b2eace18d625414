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
  `openai_realtime` + `realtime_events` (OpenAI's Realtime transcription WebSocket).
- `metrics`: Prometheus counters, gauges and histograms.

The web stack and `prometheus-client` are the `serve` extra: imported only by the server's
modules, so `import streamasr` works without them.
"""
