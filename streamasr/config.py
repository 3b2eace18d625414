"""User settings: the default model, device and output format, kept between runs.

Why: a real model is pulled once and then should be the default, not `--model en` on every
command. Settings come from a small TOML file in the platform's config folder
(`platformdirs`; `$STREAMASR_CONFIG` names another file) and from environment variables,
which win over the file; an option on the command line wins over both. The file is
hostile input like any other: size-capped, only known keys, each of the right type, and an
error names the file and the fix.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from streamasr.errors import UsageError
from streamasr.text.printable import shown
from streamasr.whole_file import read_whole

# key -> (type, environment variable or None, what it means)
KEYS: dict[str, tuple[type, str | None, str]] = {
    "model": (str, "STREAMASR_MODEL", "the model used when --model is not given"),
    "device": (str, "STREAMASR_DEVICE", "the engine's device when --device is not given"),
    "format": (str, "STREAMASR_FORMAT", "file/mic output when --format is not given"),
    "hints": (bool, None, "false hides the one-line hint about the bundled demo model"),
}
MAX_CONFIG_BYTES = 64 << 10


@dataclass(frozen=True)
class Settings:
    """What the config file and the environment say; None = not set."""

    model: str | None = None
    device: str | None = None
    format: str | None = None
    hints: bool = True
    path: Path | None = None


def config_path() -> Path:
    """$STREAMASR_CONFIG, else config.toml in the platform's user config folder."""
    env = os.environ.get("STREAMASR_CONFIG")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return platformdirs.user_config_path("streamasr") / "config.toml"


def _toml():
    """tomllib (Python >= 3.11) or its backport, tomli."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    return tomllib


def _read_file(path: Path) -> dict[str, object]:
    """The file's keys, checked; {} when there is no file."""
    tomllib = _toml()

    if not os.path.exists(path):
        return {}
    data_bytes = read_whole(path, "config", MAX_CONFIG_BYTES, "fix or remove it", UsageError)
    try:
        data = tomllib.loads(data_bytes.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"config {path}: not valid TOML ({exc}); fix or remove it") from None
    except RecursionError:  # the reader recurses per `[` or `{`
        raise UsageError(
            f"config {path}: not valid TOML (arrays or tables nested thousands deep); fix or "
            "remove it"
        ) from None
    for key, value in data.items():
        if key not in KEYS:
            raise UsageError(
                f"config {path}: unknown key {shown(key)}; the keys are {', '.join(KEYS)}"
            )
        kind = KEYS[key][0]
        blank = isinstance(value, str) and not value.strip()
        if not isinstance(value, kind) or blank:
            wanted = "a non-empty string" if kind is str else "true or false"
            raise UsageError(f"config {path}: {key} must be {wanted}, got {shown(value)}")
    return data


def load() -> Settings:
    """The file's settings with the environment's on top."""
    path = config_path()
    values = _read_file(path)
    for key, (_, env, _) in KEYS.items():
        if env and os.environ.get(env, "").strip():
            values[key] = os.environ[env].strip()
    return Settings(
        model=values.get("model"),  # type: ignore[arg-type]
        device=values.get("device"),  # type: ignore[arg-type]
        format=values.get("format"),  # type: ignore[arg-type]
        hints=bool(values.get("hints", True)),
        path=path,
    )


def set_value(key: str, value: str | bool) -> Path:
    """Write one key into the config file (created if missing, replaced atomically)."""
    if key not in KEYS:
        raise UsageError(f"unknown setting {key!r}; the keys are {', '.join(KEYS)}")
    path = config_path()
    values = _read_file(path)
    values[key] = value
    lines = ["# streamasr settings (streamasr models default NAME writes `model`)"]
    for name, item in values.items():
        text = str(item).lower() if isinstance(item, bool) else json.dumps(item)
        lines.append(f"{name} = {text}")
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=".config-", suffix=".toml")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return path
