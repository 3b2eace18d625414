"""A private PulseAudio server for tests: a null sink whose monitor is a real capture device.

Audio played into the sink with `paplay` comes back through PortAudio's ALSA device
("pulse"/"default", via the ALSA PulseAudio plugin) exactly as a microphone would. The
server lives in a temporary directory, listens on its own socket, and is killed at teardown,
so nothing outlives the tests and a desktop's own sound server is never touched.

Needs (Debian): pulseaudio, pulseaudio-utils, libportaudio2, libasound2-plugins.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SINK = "streamasr_test"
# PortAudio reports 44100 Hz as the native rate of ALSA's "pulse" device; a sink at the same
# rate, fed 16-bit 44.1 kHz clips, means no resampler anywhere: the capture is bit-exact.
SINK_RATE = 44100


PLAYER_BUFFER_MS = 30_000  # longer than any clip a test plays


@dataclass
class PulseServer:
    """A running private server and the environment its clients need."""

    directory: Path
    process: subprocess.Popen[bytes]
    env: dict[str, str]
    sink: str = SINK

    def play(self, wav: Path) -> subprocess.Popen[bytes]:
        """Start playing a file into the null sink (what the 'microphone' will hear).

        The player's buffer holds a whole clip, so its stream starts playing only once the
        file is in the server (paplay's drain at the end of the file starts it): with the
        default 2 s buffer a player starved on a loaded machine could run dry mid-clip and
        the sink play silence into the capture."""
        return subprocess.Popen(
            ["paplay", f"--device={self.sink}", f"--latency-msec={PLAYER_BUFFER_MS}", str(wav)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def log(self) -> str:
        """The server's own log, for failure messages."""
        path = self.directory / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""


def client_env(directory: Path) -> dict[str, str]:
    """Environment that points libpulse (and so ALSA's pulse plugin) at the private server."""
    env = dict(os.environ)
    env.update(
        PULSE_SERVER=f"unix:{directory / 'native'}",
        PULSE_COOKIE=str(directory / "cookie"),
        PULSE_RUNTIME_PATH=str(directory / "runtime"),
        XDG_RUNTIME_DIR=str(directory),
    )
    env.pop("PULSE_SINK", None)
    env.pop("PULSE_SOURCE", None)
    return env


def start_pulse(directory: Path, timeout_s: float = 15.0) -> PulseServer:
    """Start the server and wait until it answers. CI installs PulseAudio: missing is a failure."""
    for tool in ("pulseaudio", "paplay", "pactl"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed (Debian: pulseaudio pulseaudio-utils)")
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    env = client_env(directory)
    server_env = dict(env, HOME=str(directory))
    log = open(directory / "server.log", "wb")  # noqa: SIM115 - handed to the child
    process = subprocess.Popen(
        [
            "pulseaudio",
            "--daemonize=no",
            "--system=false",
            "--exit-idle-time=-1",
            "--use-pid-file=false",
            "--disallow-module-loading=false",
            "-n",
            "--log-target=stderr",
            f"--load=module-native-protocol-unix auth-anonymous=1 socket={directory / 'native'}",
            # norewinds: a sink input starting (or back from an underrun) makes the sink rewind
            # and render again what it had rendered ahead; the monitor had already handed that
            # to the capture, so on a loaded machine the capture held a mangled clip
            f"--load=module-null-sink sink_name={SINK} rate={SINK_RATE} channels=2 norewinds=1",
        ],
        env=server_env,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    log.close()
    server = PulseServer(directory, process, env)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"pulseaudio exited with {process.returncode}:\n{server.log()}")
        probe = subprocess.run(["pactl", "info"], env=env, capture_output=True, timeout=10)
        if probe.returncode == 0:
            subprocess.run(
                ["pactl", "set-default-source", f"{SINK}.monitor"],
                env=env,
                check=True,
                capture_output=True,
                timeout=10,
            )
            return server
        time.sleep(0.2)
    stop_pulse(server)
    pytest.fail(f"pulseaudio did not answer within {timeout_s} s:\n{server.log()}")


def stop_pulse(server: PulseServer, sig: signal.Signals = signal.SIGTERM) -> None:
    """Stop the server and everything in its process group (SIGKILL: like a yanked device)."""
    if server.process.poll() is None:
        os.killpg(server.process.pid, sig)
        try:
            server.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait(timeout=5)


@pytest.fixture(scope="module")
def pulse_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulseServer]:
    """One private server per test module."""
    server = start_pulse(tmp_path_factory.mktemp("pulse"))
    try:
        yield server
    finally:
        stop_pulse(server)
