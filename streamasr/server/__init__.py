"""`streamasr serve`: many WebSocket clients, one engine.

- `protocol`: the messages (a JSON config, binary audio frames, `{"type": "end"}`; events
  back as the JSON objects `streamasr file --format jsonl` prints).
- `limits`: the server's limits and safety settings, checked once.
- `scheduler`: one task that batches the streams with audio ready through the engine's
  batched step, in a worker thread, so the event loop stays free.
- `metrics`: Prometheus counters, gauges and histograms.
- `app`: the connection handler, HTTP routes (`/`, `/healthz`, `/readyz`, `/metrics`) and
  the serve loop with its graceful stop.

`websockets` and `prometheus-client` are the `serve` extra: they are imported inside the
functions that need them, so `import streamasr` works without them.
"""
