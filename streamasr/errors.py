"""One exception tree. Every message names the problem and what to do next."""

from __future__ import annotations


class StreamAsrError(Exception):
    """Base of every error streamasr raises on purpose; the CLI prints the message, exit 1."""

    exit_code = 1


class UsageError(StreamAsrError):
    """The command line asks for something impossible (wrong option combination); exit 2."""

    exit_code = 2


class InputError(StreamAsrError):
    """An audio input cannot be read: missing, not audio, corrupt, NaN samples."""


class ModelError(StreamAsrError):
    """A model directory is incomplete, unknown, damaged or cannot be loaded."""


class ModelMismatchError(UsageError, ModelError):
    """The request does not fit this model (a chunk it has no export for, hotwords on CTC).

    A usage error (exit 2): the model is fine, the user asked for a setting it does not have.
    Still a ModelError, so code that catches model problems keeps catching it.
    """


class BackendError(StreamAsrError):
    """A backend returned something the core cannot use (a NaN or decreasing token time, text
    that is not a string); the message names the backend, whose bug it is."""


class DependencyError(StreamAsrError):
    """An optional package or system library is missing; the message says how to install it."""


class DeviceError(StreamAsrError):
    """An audio device is missing, ambiguous, or went away mid-stream."""


class OutputError(StreamAsrError):
    """Standard output cannot take more data: the reader closed the pipe, or the disk is full."""


class ReaderGone(OutputError):
    """Whoever read standard output stopped reading (`| head`). Not worth a message: the run
    ends quietly with 128 + SIGPIPE, as `yes | head` and other Unix tools do."""

    exit_code = 141


class DatasetError(StreamAsrError):
    """A benchmark dataset cannot be read at all (bad rows alone are skipped, not raised)."""


class ClusterError(StreamAsrError):
    """A Ray cluster cannot be reached, or its nodes cannot run the model (`--ray`)."""
