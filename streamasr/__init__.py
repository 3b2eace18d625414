"""streamasr: streaming speech transcription with honest latency figures."""

__version__ = "0.1.0"
