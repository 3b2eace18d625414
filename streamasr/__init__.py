"""streamasr: streaming speech transcription with honest latency figures."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """`streamasr.open_model` without importing the engine seam at `import streamasr`."""
    if name in ("open_model", "Model"):
        from streamasr import api

        return getattr(api, name)
    raise AttributeError(f"module 'streamasr' has no attribute {name!r}")
