"""streamasr: streaming speech transcription with honest latency figures."""

from streamasr.version import __version__

__all__ = ["__version__"]


def __getattr__(name: str) -> object:
    """`streamasr.open_model` (and `streamasr.connect`, a model behind `streamasr serve`)
    without importing the engine seam at `import streamasr`."""
    if name in ("open_model", "Model"):
        from streamasr import api

        return getattr(api, name)
    if name == "connect":
        from streamasr.server.client import connect

        return connect
    raise AttributeError(f"module 'streamasr' has no attribute {name!r}")
