"""Microphones: loading PortAudio (the sounddevice package), listing input devices, and
choosing one by index or by part of its name (`mic --device`, `devices`).

Why apart from capture: listing and choosing run before any stream opens, and their errors
(no PortAudio, no device, an ambiguous name) are the ones a user meets first.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import ModuleType

from streamasr.errors import DependencyError, DeviceError
from streamasr.extras import install_hint

log = logging.getLogger("streamasr")

INSTALL_PORTAUDIO = (
    "install the PortAudio library: Debian/Ubuntu `sudo apt-get install libportaudio2`, "
    "Fedora `sudo dnf install portaudio`, macOS `brew install portaudio`"
)


def load_sounddevice() -> ModuleType:
    """Import sounddevice, turning a missing package or PortAudio library into advice."""
    try:
        import sounddevice
    except ImportError as exc:
        raise DependencyError(
            f"the sounddevice package is not installed; {install_hint(packages=('sounddevice',))}"
        ) from exc
    except OSError as exc:  # sounddevice raises OSError when libportaudio cannot be loaded
        raise DependencyError(f"PortAudio was not found ({exc}); {INSTALL_PORTAUDIO}") from exc
    return sounddevice


@dataclass(frozen=True)
class DeviceInfo:
    """One input device as PortAudio describes it."""

    index: int
    name: str
    hostapi: str
    input_channels: int
    sample_rate: int  # the device's native (default) rate
    is_default: bool = False

    def describe(self) -> str:
        """`[3] USB Audio (ALSA)`: how devices are named in messages."""
        return f"[{self.index}] {self.name} ({self.hostapi})"


def list_input_devices(sd: ModuleType | None = None) -> list[DeviceInfo]:
    """Every device with at least one input channel, default marked."""
    sd = sd or load_sounddevice()
    try:
        devices = sd.query_devices()
        hostapis = sd.query_hostapis()
        default_in = _default_input_index(sd)
    except sd.PortAudioError as exc:
        raise DeviceError(f"PortAudio cannot list audio devices ({exc})") from exc
    found = []
    for device in devices:
        if int(device["max_input_channels"]) < 1:
            continue
        index = int(device["index"])
        found.append(
            DeviceInfo(
                index=index,
                name=str(device["name"]),
                hostapi=str(hostapis[int(device["hostapi"])]["name"]),
                input_channels=int(device["max_input_channels"]),
                sample_rate=round(float(device["default_samplerate"])),
                is_default=index == default_in,
            )
        )
    return found


def _default_input_index(sd: ModuleType) -> int:
    """PortAudio's default input device index, -1 when there is none."""
    default = sd.default.device
    try:
        index = default[0]  # an (input, output) pair
    except (TypeError, IndexError, KeyError):
        index = default
    try:
        return int(index)
    except (TypeError, ValueError):  # None, or a name set by the user
        return -1


NO_DEVICE_HELP = (
    "no audio input device was found. Plug in a microphone (or a USB headset); on Linux check "
    "that the sound server (PulseAudio or PipeWire) is running and `arecord -l` lists a "
    "capture device, and that the ALSA PulseAudio plugin is installed "
    "(Debian/Ubuntu: `sudo apt-get install libasound2-plugins`)"
)


def select_device(devices: list[DeviceInfo], spec: str | None) -> DeviceInfo:
    """The device a user asked for: index, or case-insensitive name substring, or the default.

    An exact name (case-insensitive) wins over substrings, so `pulse` is not ambiguous beside
    `pulse monitor`. Unknown or ambiguous names list the candidates.
    """
    if not devices:
        raise DeviceError(NO_DEVICE_HELP)
    if spec is None or not spec.strip():
        for device in devices:
            if device.is_default:
                return device
        log.warning("no default input device; using %s", devices[0].describe())
        return devices[0]
    spec = spec.strip()
    if spec.isdigit():
        index = int(spec)
        for device in devices:
            if device.index == index:
                return device
        raise DeviceError(
            f"no input device has index {index}; input devices are:\n{_listing(devices)}"
        )
    wanted = spec.casefold()
    exact = [d for d in devices if d.name.casefold() == wanted]
    if len(exact) == 1:
        return exact[0]
    matches = exact or [d for d in devices if wanted in d.name.casefold()]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise DeviceError(
            f"no input device name contains {spec!r}; input devices are:\n{_listing(devices)}"
        )
    raise DeviceError(
        f"{spec!r} matches {len(matches)} input devices; pass the index or a longer "
        f"part of the name:\n{_listing(matches)}"
    )


def _listing(devices: list[DeviceInfo]) -> str:
    return "\n".join(f"  {d.describe()}" for d in devices)
