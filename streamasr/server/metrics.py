"""Prometheus metrics of one server, in a registry of its own (served at /metrics)."""

from __future__ import annotations

from typing import Any


class Metrics:
    """Counters, gauges and histograms; `render()` is the /metrics body."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        r = self.registry
        self.active_sessions = Gauge(
            "streamasr_active_sessions", "Open WebSocket connections", registry=r,
            multiprocess_mode="livesum",  # with --workers: the sum over live workers
        )
        self.connections = Counter(
            "streamasr_connections", "WebSocket connections accepted", registry=r
        )
        self.utterances = Counter(
            "streamasr_utterances", "Utterances (config to summary) completed", registry=r
        )
        self.refused = Counter(
            "streamasr_refused_connections",
            "Connections refused before a session started",
            ["reason"],
            registry=r,
        )
        self.dropped = Counter(
            "streamasr_dropped_connections",
            "Connections the server closed because of the client (bad input, a limit)",
            ["reason"],
            registry=r,
        )
        self.audio_s = Counter(
            "streamasr_audio_seconds", "Seconds of audio received and decoded", registry=r
        )
        self.compute_s = Counter(
            "streamasr_compute_seconds", "Seconds spent in engine steps", registry=r
        )
        self.batch_size = Histogram(
            "streamasr_batch_streams",
            "Streams per batched engine step",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
            registry=r,
        )
        self.align_wait = Histogram(
            "streamasr_step_wait_seconds",
            "How long a stream's step waited to start once due (the tick under --schedule "
            "aligned, the queue under both)",
            buckets=(0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0),
            registry=r,
        )
        self.first_token = Histogram(
            "streamasr_first_token_latency_seconds",
            "First-token latency after speech onset: audio (algorithmic) or wall (only for "
            "sessions with realtime: true)",
            ["clock"],
            buckets=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.5, 2.0, 3.0, 5.0),
            registry=r,
        )

    def first_token_event(self, record: dict[str, Any]) -> None:
        """Observe a first_token event's latencies."""
        latency = record.get("latency_s")
        if isinstance(latency, (int, float)):
            self.first_token.labels("audio").observe(latency)
        wall = record.get("wall_latency_s")
        if isinstance(wall, (int, float)):
            self.first_token.labels("wall").observe(wall)

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type (summed over workers with --workers)."""
        import os

        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

        registry = self.registry
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
