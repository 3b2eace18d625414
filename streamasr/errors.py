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
    """A model directory is incomplete, unknown, or does not match the requested chunk."""


class DependencyError(StreamAsrError):
    """An optional package or system library is missing; the message says how to install it."""


class DeviceError(StreamAsrError):
    """An audio device is missing, ambiguous, or went away mid-stream."""


class DatasetError(StreamAsrError):
    """A benchmark dataset cannot be read at all (bad rows alone are skipped, not raised)."""
