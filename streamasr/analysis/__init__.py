"""Latency arithmetic and attention masks: figures computed, not streamed."""
