"""Stop signals always work, and bench's worker processes are part of the run.

Every case runs `streamasr` in a subprocess with real worker processes, a real engine step
that hangs in C (tests/hang_backend.py) or a real PulseAudio sink that is suspended, sends a
real signal, and measures the time from the signal to the exit. The child starts with SIGINT
at its default (a test runner started in the background would hand it down ignored) and in
its own session, so only the signals a test sends reach it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from conftest import make_dataset
from pulse_fixture import SINK, SINK_RATE, PulseServer, pulse_server

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
__all__ = ["pulse_server"]  # the fixture, imported for pytest

#: The time a stop signal may take to end a run here (the goal is one to two seconds; this
#: leaves room for a loaded two-core CI machine).
STOP_LIMIT_S = 5.0


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Run:
    """A `streamasr` subprocess whose output lines are collected, with their times, as they
    come."""

    def __init__(
        self, args: list[str], env: dict[str, str] | None = None, stdin: int | None = None
    ) -> None:
        full_env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(REPO)]))
        full_env.update(env or {})
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "streamasr.cli", *args],
            cwd=REPO,
            env=full_env,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=_default_sigint,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.process.stdout, self.out), daemon=True),
            threading.Thread(target=self._read, args=(self.process.stderr, self.err), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: object, lines: list[str]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            lines.append(line)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, signum: int, timeout: float = 60, group: bool = False) -> tuple[int, float]:
        """Send `signum` to this process alone (or to its whole process group, as a terminal's
        Ctrl-C does); its exit code and seconds until it ended."""
        sent = time.monotonic()
        if group:
            os.killpg(self.pid, signum)
        else:
            os.kill(self.pid, signum)
        code = self.wait(timeout)
        return code, time.monotonic() - sent

    def wait(self, timeout: float = 300) -> int:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.pid, signal.SIGKILL)
            self.process.wait()
            for reader in self._readers:
                reader.join(5)
            pytest.fail(f"streamasr did not exit within {timeout} s:\n{self.stderr}")
        for reader in self._readers:
            reader.join(10)
        return code

    @property
    def stdout(self) -> str:
        return "".join(self.out)

    @property
    def stderr(self) -> str:
        return "".join(self.err)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.pid, signal.SIGKILL)
            self.process.wait()


def wait_until(check: Callable[[], bool], timeout: float, what: str, run: Run) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if run.process.poll() is not None:
            pytest.fail(f"streamasr ended ({run.process.returncode}) before {what}:\n{run.stderr}")
        time.sleep(0.05)
    run.kill()
    pytest.fail(f"timed out waiting for {what}:\n{run.stderr}")


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (read from /proc: no psutil needed)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def workers_of(pid: int) -> list[int]:
    """The bench worker processes of `pid` (multiprocessing's spawned children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return found


def gone_within(pids: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def tone_clip(path: Path, starts_s: list[float], length_s: float, rate: int = 16000) -> Path:
    """Silence with a 150 ms 440 Hz burst at each start: the energy engines' 'speech'."""
    audio = np.zeros(int(length_s * rate), np.float32)
    t = np.arange(int(0.15 * rate)) / rate
    burst = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    for start in starts_s:
        audio[int(start * rate) : int(start * rate) + len(burst)] = burst
    sf.write(path, audio, rate, subtype="PCM_16")
    return path


@pytest.fixture(scope="module")
def speech_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six espeak-ng utterances of 3-4.5 s."""
    return make_dataset(tmp_path_factory.mktemp("speech-set"), n=6, seed=3) / "manifest.jsonl"


@pytest.fixture(scope="module")
def burst_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four short clips and one 7 s clip (the only one past 4 s), as a JSONL manifest."""
    folder = tmp_path_factory.mktemp("burst-set")
    rows = []
    for index, length in enumerate([2.0, 2.0, 7.0, 2.0, 2.0]):
        clip = tone_clip(folder / f"clip{index}.wav", [0.5, 1.0], length)
        rows.append({"audio_filepath": clip.name, "text": "b one b two", "duration": length,
                     "id": f"clip{index}"})
    manifest = folder / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return manifest


def bench_speech(manifest: Path, out: Path, *extra: str) -> Run:
    return Run(["bench", str(manifest), "--model", "tiny-random-transducer", "--threads", "1",
                "--workers", "2", "--out", str(out), *extra])


@pytest.mark.parametrize(
    ("signum", "code", "group"),
    [(signal.SIGINT, 130, False), (signal.SIGTERM, 143, False), (signal.SIGINT, 130, True)],
    ids=["SIGINT-parent", "SIGTERM-parent", "SIGINT-group"],
)
def test_a_signal_to_the_bench_parent_stops_every_worker_and_keeps_the_finished_rows(
    speech_set: Path, tmp_path: Path, signum: int, code: int, group: bool
) -> None:
    out = tmp_path / "out"
    # --realtime: each utterance takes as long as its audio, so the signal lands mid-run
    run = bench_speech(speech_set, out, "--realtime")
    wait_until(lambda: len(lines(out / "utterances.jsonl")) >= 1, 180, "a first row", run)
    workers = workers_of(run.pid)
    assert len(workers) == 2, workers
    exit_code, took = run.stop(signum, group=group)
    to = "the process group" if group else "the parent"
    print(f"{signal.Signals(signum).name} to {to} of bench --workers 2: exit after {took:.2f} s")
    assert exit_code == code, run.stderr
    assert took < STOP_LIMIT_S, run.stderr
    assert gone_within(workers, 2.0), f"workers left running: {workers}"
    assert "Traceback" not in run.stderr
    assert "marked incomplete" in run.stderr
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert doc["complete"] is False
    assert doc["stopped"]["signal"] == signal.Signals(signum).name
    rows = lines(out / "utterances.jsonl")
    (setting,) = doc["settings"]
    ids = [u["id"] for u in setting["utterances"]]
    assert len(set(ids)) == len(ids) == len(rows) == doc["stopped"]["utterances_done"]
    assert sorted(ids) == sorted(r["id"] for r in rows)
    assert 1 <= len(ids) < 6
    assert setting["summary"]["complete"] is False


def test_a_killed_worker_is_named_and_its_utterance_decoded_by_a_new_one(
    speech_set: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    run = bench_speech(speech_set, out, "--realtime")
    wait_until(lambda: len(lines(out / "utterances.jsonl")) >= 1, 180, "a first row", run)
    victim = workers_of(run.pid)[0]
    os.kill(victim, signal.SIGKILL)
    assert run.wait() == 0, run.stderr
    assert f"(pid {victim}) killed by SIGKILL" in run.stderr
    assert "Traceback" not in run.stderr
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert doc["complete"] is True
    (setting,) = doc["settings"]
    ids = [u["id"] for u in setting["utterances"]]
    assert len(ids) == len(set(ids)) == 6
    assert not [u["id"] for u in setting["utterances"] if u["error"]]
    assert sorted(r["id"] for r in lines(out / "utterances.jsonl")) == sorted(ids)


def test_an_utterance_that_kills_every_worker_is_tried_twice_then_marked_failed(
    burst_set: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    run = Run(
        ["bench", str(burst_set), "--backend", "hang_backend:BACKEND", "--model", "crash",
         "--tail-padding", "0", "--workers", "2", "--out", str(out)],
        env={"STREAMASR_TEST_CRASH_AT_S": "4"},
    )
    assert run.wait() == 0, run.stderr
    assert "Traceback" not in run.stderr
    deaths = [line for line in run.err if "killed by SIGKILL while decoding clip2" in line]
    assert len(deaths) == 2, run.stderr
    assert "giving it to a new worker" in deaths[0] and "marked failed" in deaths[1]
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert doc["complete"] is True
    (setting,) = doc["settings"]
    by_id = {u["id"]: u for u in setting["utterances"]}
    assert sorted(by_id) == [f"clip{i}" for i in range(5)]
    assert "2 worker processes died while decoding it" in by_id["clip2"]["error"]
    assert all(not u["error"] and u["hypothesis"] for i, u in by_id.items() if i != "clip2")
    assert setting["summary"]["failed"] == 1
    ids = [r["id"] for r in lines(out / "utterances.jsonl")]
    assert sorted(ids) == sorted(by_id)  # each utterance written once: decoded or failed


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_hung_engine_step_still_stops_on_a_signal_with_one_line(
    tmp_path: Path, signum: int, code: int
) -> None:
    clip = tone_clip(tmp_path / "bursts.wav", [0.5, 1.0, 5.5, 6.0], 9.0)
    marker = tmp_path / "hung"
    run = Run(["file", str(clip), "--backend", "hang_backend:BACKEND", "--model", "hang",
               "-f", "text"], env={"STREAMASR_TEST_HANG_MARKER": str(marker)})
    wait_until(marker.exists, 120, "the engine step to hang", run)
    time.sleep(0.2)  # inside the C call
    exit_code, took = run.stop(signum)
    print(f"{signal.Signals(signum).name} to file with a hung engine: exit after {took:.2f} s")
    assert exit_code == code, run.stderr
    assert took < 3.0, run.stderr
    assert run.stdout == "B1 B2\n"  # the final before the hang is flushed
    errors = [line for line in run.err if line.startswith("error:")]
    assert len(errors) == 1, run.stderr
    name = signal.Signals(signum).name
    assert f"the engine step did not return within 1 s of {name}" in errors[0]
    assert "Traceback" not in run.stderr
    assert "4.32 s audio" in run.stderr  # the summary of what was decoded


@pytest.mark.parametrize(
    ("model", "signum", "code", "says"),
    [
        ("sleep", signal.SIGTERM, 143, "interrupted; flushed what was recognised"),
        ("sleep", signal.SIGINT, 130, "interrupted; flushed what was recognised"),
        ("hang", signal.SIGTERM, 143, "error: the engine step did not return within 1 s"),
    ],
)
def test_a_hung_step_ends_the_run_with_the_open_utterance_flushed(
    tmp_path: Path, model: str, signum: int, code: int, says: str
) -> None:
    """A step that waits in Python (`sleep`) is stopped inside by the handler and not called
    again: the flush ends the open utterance with the engine's last hypothesis instead of
    stepping the engine once more (which would wait in the same place until the 10 s flush
    limit ended the run without it). A step stuck in C (`hang`) is abandoned after 1 s, with
    the same text written."""
    clip = tone_clip(tmp_path / "bursts.wav", [0.5, 1.0, 3.4, 5.5], 9.0)
    marker = tmp_path / "hung"
    run = Run(["file", str(clip), "--backend", "hang_backend:BACKEND", "--model", model,
               "-f", "text"], env={"STREAMASR_TEST_HANG_MARKER": str(marker)})
    wait_until(marker.exists, 120, "the engine step to hang", run)
    time.sleep(0.2)  # inside the step
    exit_code, took = run.stop(signum)
    print(f"{signal.Signals(signum).name} to file, step hung ({model}): {took:.2f} s")
    assert exit_code == code, run.stderr
    # the final before the hang, and the open utterance's text (its token numbering starts
    # again at B1) from the last hypothesis
    assert run.stdout == "B1 B2\nB1\n"
    assert took < STOP_LIMIT_S, run.stderr  # a hang guard: the flush limit is 10 s
    assert says in run.stderr and "4.32 s audio" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
    assert len([line for line in run.err if line.startswith("error:")]) == (model == "hang")


def test_an_engine_step_that_hangs_in_the_flush_after_a_signal_ends_within_a_second(
    tmp_path: Path,
) -> None:
    """The signal comes while the run waits for input; the flush that follows steps the
    engine (the tail of the open utterance), and that step hangs in C. The watcher sees the
    same step still running a second later and ends the run, as for a step already hung when
    the signal came, instead of waiting out the 10 s flush limit."""
    clip = tone_clip(tmp_path / "bursts.wav", [0.5, 1.0, 2.6], 3.0)
    pcm = (sf.read(clip, dtype="int16")[0]).tobytes()
    read_end, write_end = os.pipe()
    try:
        run = Run(["file", "-", "--raw", "s16le", "--rate", "16000", "--backend",
                   "hang_backend:BACKEND", "--model", "hang-at-end", "-f", "jsonl"],
                  stdin=read_end)  # fmt: skip
        os.write(write_end, pcm)  # 96 kB: fits the pipe; the writer stays open, sending nothing

        def open_utterance_shown() -> bool:
            return any('"partial"' in line and '"segment": 1' in line for line in run.out)

        wait_until(open_utterance_shown, 120, "the partial of the second utterance", run)
        exit_code, took = run.stop(signal.SIGTERM)
    finally:
        os.close(read_end)
        os.close(write_end)
    print(f"SIGTERM, then the flush's engine step hangs: exit after {took:.2f} s")
    assert exit_code == 143, run.stderr
    errors = [line for line in run.err if line.startswith("error:")]
    assert len(errors) == 1, run.stderr
    assert "the engine step did not return within 1 s of SIGTERM" in errors[0]
    records = [json.loads(line) for line in run.out]
    # the first final, and the open utterance's from the engine's last hypothesis
    assert [r["text"] for r in records if r["type"] == "final"] == ["B1 B2", "B1"]
    assert records[-1]["type"] == "summary"
    assert took < STOP_LIMIT_S, run.stderr  # a hang guard: the flush limit is 10 s


@pytest.mark.parametrize("fmt", [["--raw", "s16le", "--rate", "16000"], []])
def test_a_pipe_that_sends_nothing_still_stops_on_sigterm(fmt: list[str]) -> None:
    """stdin open but silent (raw PCM, or a WAV whose header never comes): SIGTERM ends it."""
    read_end, write_end = os.pipe()
    try:
        full_env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(REPO)]))
        process = subprocess.Popen(
            [sys.executable, "-m", "streamasr.cli", "file", "-", *fmt, "--backend",
             "energy_backend:BACKEND", "--model", "energy-bursts", "-f", "text"],
            cwd=REPO, env=full_env, stdin=read_end, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True,
            preexec_fn=_default_sigint,
        )
        time.sleep(4.0)  # started and waiting on the pipe
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        os.close(read_end)
        os.close(write_end)
    print(f"SIGTERM to file - on a silent pipe {fmt}: exit after {took:.2f} s")
    assert process.returncode == 143, err
    assert took < 3.0, err
    assert "Traceback" not in err


def test_bench_workers_hung_in_their_engine_are_ended_by_a_signal_to_the_parent(
    burst_set: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    marker = tmp_path / "hung"
    run = Run(
        ["bench", str(burst_set), "--backend", "hang_backend:BACKEND", "--model", "hang",
         "--tail-padding", "0", "--workers", "2", "--out", str(out)],
        env={"STREAMASR_TEST_HANG_AT_S": "4", "STREAMASR_TEST_HANG_MARKER": str(marker)},
    )
    # clip2 hangs its worker; the other worker decodes the four short clips
    wait_until(lambda: marker.exists() and len(lines(out / "utterances.jsonl")) == 4, 180,
               "four rows and a hung worker", run)
    workers = workers_of(run.pid)
    exit_code, took = run.stop(signal.SIGTERM)
    print(f"SIGTERM to bench with a hung worker: exit after {took:.2f} s")
    assert exit_code == 143, run.stderr
    assert took < STOP_LIMIT_S
    assert gone_within(workers, 2.0), f"workers left running: {workers}"
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert doc["complete"] is False
    assert sorted(u["id"] for u in doc["settings"][0]["utterances"]) == [
        "clip0", "clip1", "clip3", "clip4"
    ]


# ---- a microphone whose sound server stops delivering -----------------------------------


def _pactl(server: PulseServer, *args: str) -> None:
    subprocess.run(["pactl", *args], env=server.env, check=True, capture_output=True, timeout=10)


@pytest.fixture
def suspendable(pulse_server: PulseServer) -> PulseServer:
    """The private server, its sink resumed again after the test."""
    yield pulse_server  # type: ignore[misc]
    _pactl(pulse_server, "suspend-sink", SINK, "0")


@pytest.fixture(scope="module")
def speech_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sample = REPO / "models" / "tiny-en" / "test_wavs" / "3.wav"
    path = tmp_path_factory.mktemp("speech") / "speech.wav"
    subprocess.run(["sox", str(sample), "-r", str(SINK_RATE), "-b", "16", "-c", "1", str(path)],
                   check=True)
    return path


def _mic(server: PulseServer, tmp_path: Path) -> Run:
    return Run(
        ["mic", "--model", "tiny-en", "-f", "text", "--log", str(tmp_path / "log.jsonl"),
         "--save", str(tmp_path / "saved.wav")],
        env={k: v for k, v in server.env.items() if k.startswith(("PULSE", "XDG"))},
    )


def _listening(run: Run) -> bool:
    return any(line.startswith("listening:") for line in run.err)


def test_a_suspended_sink_is_a_stall_error_within_seconds_with_everything_written(
    suspendable: PulseServer, tmp_path: Path
) -> None:
    run = _mic(suspendable, tmp_path)
    wait_until(lambda: _listening(run), 120, "listening", run)
    time.sleep(1.0)
    suspended = time.monotonic()
    _pactl(suspendable, "suspend-sink", SINK, "1")
    code = run.wait(60)
    took = time.monotonic() - suspended
    print(f"mic, sink suspended: stall error and exit after {took:.2f} s")
    assert code == 1, run.stderr
    assert took < 8.0, run.stderr
    assert "delivered no audio for" in run.stderr
    assert "saved " in run.stderr and "capture: " in run.stderr
    assert lines(tmp_path / "log.jsonl")[-1]["type"] == "summary"


def test_a_signal_during_a_stall_exits_143_with_the_text_summary_and_files(
    suspendable: PulseServer, speech_clip: Path, tmp_path: Path
) -> None:
    run = _mic(suspendable, tmp_path)
    wait_until(lambda: _listening(run), 120, "listening", run)
    time.sleep(0.6)
    player = suspendable.play(speech_clip)
    player.wait(60)
    time.sleep(0.5)
    _pactl(suspendable, "suspend-sink", SINK, "1")
    time.sleep(1.0)  # stalled, before the stall limit
    code, took = run.stop(signal.SIGTERM)
    print(f"mic, SIGTERM during a stall: exit after {took:.2f} s")
    assert code == 143, run.stderr
    assert took < 3.0, run.stderr
    assert "Traceback" not in run.stderr
    assert "saved " in run.stderr and "capture: " in run.stderr
    log = lines(tmp_path / "log.jsonl")
    assert log[-1]["type"] == "summary"
    assert log[-1]["text"].strip()
    assert run.stdout.strip() == log[-1]["text"].strip()
    assert sf.info(str(tmp_path / "saved.wav")).frames > 0


def test_mic_with_a_hung_engine_stops_on_sigterm_with_the_summary_and_files(
    suspendable: PulseServer, tmp_path: Path
) -> None:
    marker = tmp_path / "hung"
    env = {k: v for k, v in suspendable.env.items() if k.startswith(("PULSE", "XDG"))}
    env.update(STREAMASR_TEST_HANG_MARKER=str(marker), STREAMASR_TEST_HANG_AT_S="2")
    run = Run(["mic", "--backend", "hang_backend:BACKEND", "--model", "hang", "-f", "text",
               "--log", str(tmp_path / "log.jsonl"), "--save", str(tmp_path / "saved.wav")],
              env=env)
    wait_until(marker.exists, 120, "the engine step to hang", run)
    time.sleep(0.2)
    code, took = run.stop(signal.SIGTERM)
    print(f"mic, SIGTERM with a hung engine: exit after {took:.2f} s")
    assert code == 143, run.stderr
    assert took < 3.0, run.stderr
    errors = [line for line in run.err if line.startswith("error:")]
    assert len(errors) == 1 and "the engine step did not return" in errors[0], run.stderr
    assert "saved " in run.stderr and "capture: " in run.stderr
    assert lines(tmp_path / "log.jsonl")[-1]["type"] == "summary"
    assert sf.info(str(tmp_path / "saved.wav")).frames > 0
