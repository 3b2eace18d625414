"""CLI runs in processes forked from one that has already imported torch and NeMo.

Why: importing NeMo costs 25-40 s of CPU, and a test that runs the CLI on a .nemo in a fresh
process paid it on every run. Here one server process imports torch, NeMo and the CLI once;
each run is a child forked from it, so it is still its own process (nothing a run sets is seen
by the next), with its own arguments and environment additions, stdin from /dev/null, and
stdout and stderr captured at the file-descriptor level, as `subprocess.run(...,
capture_output=True)` captures them. What it cannot show is what happens *before* torch is
imported: tests of that (a refused file never imports torch) keep a fresh process.

    python tests/warm_nemo.py    # the server: one JSON job per line in, one result per line out
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class WarmNemo:
    """The test side: starts the server, sends it jobs, returns CompletedProcess objects."""

    def __init__(self) -> None:
        self._log = tempfile.TemporaryFile()  # the server's own stderr, shown if it dies
        self._proc = subprocess.Popen(
            [sys.executable, __file__], cwd=REPO, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._log, text=True,
        )

    def cli(self, *args: str, env: dict[str, str] | None = None,
            timeout: int = 600) -> subprocess.CompletedProcess:
        """`streamasr ARGS` as `python -m streamasr.cli ARGS` would run it. The environment is
        the test process's when the server started, plus `env` (a later monkeypatch.setenv
        does not reach the server: pass what a run needs in `env`)."""
        return self._job({"argv": list(args), "env": env or {}, "timeout": timeout})

    def python(self, code: str, env: dict[str, str] | None = None,
               timeout: int = 600) -> subprocess.CompletedProcess:
        """`python -c CODE`, with torch and NeMo already imported."""
        return self._job({"code": code, "env": env or {}, "timeout": timeout})

    def _job(self, job: dict) -> subprocess.CompletedProcess:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(job) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            self._log.seek(0)
            raise RuntimeError("the warm NeMo server died: " + self._log.read().decode()[-3000:])
        done = json.loads(line)
        args = job.get("argv") or ["-c", job["code"]]
        return subprocess.CompletedProcess(args, done["returncode"], done["stdout"],
                                           done["stderr"])

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._log.close()


def _child(job: dict, out: int, err: int) -> None:
    """In the forked child: stdin, stdout and stderr swapped at the fd level, then the job."""
    code = 1
    try:
        signal.alarm(int(job["timeout"]))  # a stuck run dies of SIGALRM, as a timeout would
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.environ.update(job["env"])
        if "argv" in job:
            from streamasr import cli

            sys.argv = ["streamasr", *job["argv"]]
            code = cli.run(job["argv"])
        else:
            sys.argv = ["-c"]
            exec(compile(job["code"], "<string>", "exec"), {"__name__": "__main__"})
            code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int | None):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - a child reports everything, as python -c does
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001, S110 - a closed stdout is the run's own outcome
                pass
        os._exit(code)


def _run(job: dict) -> dict:
    """Fork one child for `job`; its exit status and everything it wrote."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(job, out.fileno(), err.fileno())
        _, status = os.waitpid(pid, 0)
        out.seek(0)
        err.seek(0)
        return {"returncode": os.waitstatus_to_exitcode(status),
                "stdout": out.read().decode("utf-8", "replace"),
                "stderr": err.read().decode("utf-8", "replace")}


def serve() -> None:
    """Import torch, NeMo and the CLI once, then fork one child per job read from stdin."""
    channel = os.fdopen(os.dup(1), "w")  # results go here; children get their own fd 1
    os.dup2(2, 1)  # whatever the imports print must not mix with the results
    sys.path.insert(0, str(REPO))
    from streamasr import cli  # noqa: F401 - imported once, for every child
    from streamasr.backends.nemo.loading import import_nemo_asr, import_torch

    import_torch()
    import_nemo_asr()
    for line in sys.stdin:
        channel.write(json.dumps(_run(json.loads(line))) + "\n")
        channel.flush()
    channel.close()
    os._exit(0)  # the interpreter's own teardown with NeMo loaded takes seconds


if __name__ == "__main__":
    serve()
