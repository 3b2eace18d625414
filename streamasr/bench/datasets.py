"""Benchmark dataset readers: LibriSpeech-style folders (and `trans.txt` beside the clips, as
the bundled test_wavs/ are), Kaldi data dirs, JSONL manifests, TSV/CSV tables (tables.py).

A reader never stops at a bad row: it records the file and line number and a reason, skips
the row, and goes on. Rows whose audio file is missing are counted separately, because a
half-copied corpus is a different problem from a malformed transcript. Only a dataset that
cannot be read at all (no such path, no transcripts found) raises `DatasetError`.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamasr.bench import tables
from streamasr.bench.rows import AUDIO_SUFFIXES, BadRow, Utterance, is_file
from streamasr.bench.tables import TableColumns
from streamasr.errors import DatasetError
from streamasr.text.printable import shown

log = logging.getLogger("streamasr")

FORMATS = ("librispeech", "kaldi", "jsonl", "table")
# transcripts of a LibriSpeech-style folder: `<id> TEXT` lines, audio `<id>.<ext>` beside them
TRANSCRIPT_GLOBS = ("*.trans.txt", "trans.txt")
SPAN_SLACK_S = 0.05  # a span may end this far past the audio (rounding in alignments)


@dataclass(frozen=True)
class Dataset:
    """What a reader found: usable utterances, skipped rows, rows with missing audio."""

    path: Path
    format: str
    utterances: tuple[Utterance, ...]
    bad_rows: tuple[BadRow, ...] = ()
    missing_audio: tuple[Utterance, ...] = field(default_factory=tuple)

    def limited(self, limit: int | None) -> Dataset:
        """The first `limit` utterances (all when None)."""
        if limit is None:
            return self
        return Dataset(
            self.path, self.format, self.utterances[:limit], self.bad_rows, self.missing_audio
        )


def detect_format(path: Path) -> str:
    """Which reader fits: a .jsonl/.json file, a Kaldi dir (wav.scp + text), or *.trans.txt."""
    if path.is_file():
        if path.suffix in (".jsonl", ".json"):
            return "jsonl"
        if path.suffix.lower() in (".tsv", ".csv"):
            return "table"
        if path.name == "wav.scp" or path.name == "text":
            return "kaldi"
        raise DatasetError(
            f"{path}: not a dataset; pass a JSONL manifest (.jsonl), a TSV/CSV table, a Kaldi "
            "data directory (wav.scp + text) or a folder with *.trans.txt or trans.txt beside "
            "the audio"
        )
    if not path.is_dir():
        raise DatasetError(f"{path}: no such file or directory; check the dataset path")
    if (path / "wav.scp").is_file() or (path / "text").is_file():
        return "kaldi"
    if _transcripts(path):
        return "librispeech"
    raise DatasetError(
        f"{path}: found neither wav.scp/text (Kaldi) nor *.trans.txt / trans.txt "
        "(LibriSpeech-style) nor a manifest; pass a JSONL manifest, a TSV/CSV table, a Kaldi "
        "data dir or a LibriSpeech-style folder"
    )


def _transcripts(root: Path) -> list[Path]:
    return sorted({p for pattern in TRANSCRIPT_GLOBS for p in root.rglob(pattern)})


def load_dataset(
    path: str | Path, fmt: str | None = None, columns: TableColumns | None = None
) -> Dataset:
    """Read a dataset in any supported layout (detected unless `fmt` names it); `columns`
    names a table's audio and text columns (found by name when not given)."""
    root = Path(path).expanduser()
    chosen = fmt or detect_format(root)
    if chosen not in FORMATS:
        raise DatasetError(f"unknown dataset format {chosen!r}; use one of: {', '.join(FORMATS)}")
    if chosen == "kaldi" and root.is_file():
        root = root.parent
    if chosen == "table":
        utterances, bad = tables.read_table(root, columns or TableColumns())
    else:
        reader = {"librispeech": _read_librispeech, "kaldi": _read_kaldi, "jsonl": _read_jsonl}
        utterances, bad = reader[chosen](root)
    present, missing = _split_missing(utterances)
    present = _check_spans(present, bad)
    for row in bad:
        log.warning("skipped %s", row)
    if missing:
        log.warning("%d utterances have no audio file (first: %s)", len(missing), missing[0].audio)
    if not present and not missing and not bad:
        raise DatasetError(f"{root}: the dataset has no utterances")
    return Dataset(root, chosen, tuple(present), tuple(bad), tuple(missing))


def _split_missing(utterances: list[Utterance]) -> tuple[list[Utterance], list[Utterance]]:
    present = [u for u in utterances if is_file(u.audio)]
    missing = [u for u in utterances if not is_file(u.audio)]
    return present, missing


def _lines(path: Path, bad: list[BadRow]) -> list[tuple[int, str]]:
    """Numbered non-blank lines; undecodable lines become bad rows instead of an exception."""
    out: list[tuple[int, str]] = []
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                bad.append(BadRow(str(path), number, "not UTF-8 text"))
                continue
            if line:
                out.append((number, line))
    return out


def _id_and_text(line: str) -> tuple[str, str]:
    parts = line.split(maxsplit=1)
    return parts[0], parts[1] if len(parts) > 1 else ""


def _read_librispeech(root: Path) -> tuple[list[Utterance], list[BadRow]]:
    """`<id> TEXT` lines in `*.trans.txt`; audio `<id>.<ext>` in the same folder."""
    utterances: list[Utterance] = []
    bad: list[BadRow] = []
    seen: dict[str, str] = {}
    transcripts = _transcripts(root)
    if not transcripts:
        raise DatasetError(f"{root}: no *.trans.txt or trans.txt files found under it")
    for trans in transcripts:
        for number, line in _lines(trans, bad):
            utt_id, text = _id_and_text(line)
            origin = f"{trans}:{number}"
            if utt_id in seen:
                reason = f"duplicate id {utt_id} (first at {seen[utt_id]})"
                bad.append(BadRow(str(trans), number, reason))
                continue
            seen[utt_id] = origin
            audio = _find_audio(trans.parent, utt_id)
            utterances.append(Utterance(utt_id, audio, text, origin))
    return utterances, bad


def _find_audio(folder: Path, utt_id: str) -> Path:
    for suffix in AUDIO_SUFFIXES:
        candidate = folder / f"{utt_id}{suffix}"
        if is_file(candidate):
            return candidate
    return folder / f"{utt_id}.flac"  # reported as missing


def _read_kaldi(root: Path) -> tuple[list[Utterance], list[BadRow]]:
    """`wav.scp` (id path) joined with `text` (id TEXT); relative paths from the data dir."""
    scp, text_file = root / "wav.scp", root / "text"
    for needed in (scp, text_file):
        if not needed.is_file():
            raise DatasetError(
                f"{root}: a Kaldi data directory needs both wav.scp and text; "
                f"{needed.name} is missing"
            )
    if (root / "segments").is_file():
        raise DatasetError(
            f"{root}: Kaldi 'segments' files are not supported; cut the segments into files "
            "first (e.g. with sox trim) and list those in wav.scp"
        )
    bad: list[BadRow] = []
    wavs: dict[str, tuple[int, str]] = {}
    for number, line in _lines(scp, bad):
        utt_id, target = _id_and_text(line)
        if not target:
            bad.append(BadRow(str(scp), number, f"{utt_id} has no audio path"))
        elif target.endswith("|"):
            bad.append(
                BadRow(
                    str(scp),
                    number,
                    f"{utt_id}: piped commands are not supported; write the audio to a file",
                )
            )
        elif utt_id in wavs:
            bad.append(BadRow(str(scp), number, f"duplicate id {utt_id}"))
        else:
            wavs[utt_id] = (number, target)
    texts: dict[str, tuple[int, str]] = {}
    for number, line in _lines(text_file, bad):
        utt_id, text = _id_and_text(line)
        if utt_id in texts:
            bad.append(BadRow(str(text_file), number, f"duplicate id {utt_id}"))
        else:
            texts[utt_id] = (number, text)
    durations = _kaldi_durations(root / "utt2dur")
    utterances: list[Utterance] = []
    for utt_id, (number, target) in wavs.items():
        if utt_id not in texts:
            bad.append(BadRow(str(scp), number, f"{utt_id} has no transcript in {text_file.name}"))
            continue
        try:
            audio = _kaldi_path(root, target)
        except ValueError as exc:
            bad.append(BadRow(str(scp), number, f"{utt_id}: {exc}"))
            continue
        text_line, text = texts[utt_id]
        utterances.append(
            Utterance(utt_id, audio, text, f"{text_file}:{text_line}", durations.get(utt_id))
        )
    for utt_id, (number, _) in texts.items():
        if utt_id not in wavs:
            bad.append(BadRow(str(text_file), number, f"{utt_id} has no audio in wav.scp"))
    return utterances, bad


def _kaldi_path(root: Path, target: str) -> Path:
    """Relative paths: from the data dir first, else from the working directory (recipes)."""
    audio = _user_path(target)
    if audio.is_absolute() or is_file(root / audio) or not is_file(audio):
        return audio if audio.is_absolute() else root / audio
    return audio


def _user_path(text: str) -> Path:
    """`text` with `~` and `~user` expanded; ValueError (a bad row) for a user who has no
    home folder here (pathlib raises RuntimeError)."""
    try:
        return Path(text).expanduser()
    except RuntimeError:
        user = text.split("/", 1)[0][:40]
        raise ValueError(f"{user!r}: no such user's home folder on this machine") from None


def _kaldi_durations(path: Path) -> dict[str, float]:
    """utt2dur when present; a bad line there only loses the duration, not the utterance."""
    if not path.is_file():
        return {}
    out: dict[str, float] = {}
    for _, line in _lines(path, []):
        utt_id, value = _id_and_text(line)
        try:
            out[utt_id] = float(value)
        except ValueError:
            continue
    return out


def _read_jsonl(path: Path) -> tuple[list[Utterance], list[BadRow]]:
    """One JSON object per line; relative audio paths are relative to the manifest's folder."""
    bad: list[BadRow] = []
    utterances: list[Utterance] = []
    seen: set[str] = set()
    for number, line in _lines(path, bad):
        try:
            utt = _manifest_row(path, number, line)
        except ValueError as exc:
            bad.append(BadRow(str(path), number, str(exc)))
            continue
        if utt.id in seen:
            bad.append(BadRow(str(path), number, f"duplicate id {utt.id}"))
            continue
        seen.add(utt.id)
        utterances.append(utt)
    return utterances, bad


def _manifest_row(path: Path, number: int, line: str) -> Utterance:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply to read; a row is one flat object") from None
    if not isinstance(row, dict):
        raise ValueError("a manifest row must be a JSON object")
    audio_field = row.get("audio_filepath")
    if not isinstance(audio_field, str) or not audio_field:
        raise ValueError("missing or empty 'audio_filepath'")
    text = row.get("text")
    if not isinstance(text, str):
        raise ValueError("missing 'text' (a string; use \"\" for no speech)")
    duration = _optional_seconds(row, "duration")
    onset = _optional_seconds(row, "speech_onset_s")
    end = _optional_seconds(row, "speech_end_s")
    words = row.get("words")
    if words is not None and (onset is None or end is None):
        word_onset, word_end = _span_from_words(words)
        onset = word_onset if onset is None else onset
        end = word_end if end is None else end
    _check_inside("duration", duration, onset, end)
    if onset is not None and end is not None and end < onset:
        raise ValueError(f"speech_end_s {end} is before speech_onset_s {onset}")
    audio = _user_path(audio_field)
    if not audio.is_absolute():
        audio = path.parent / audio
    utt_id = row.get("id", row.get("utt_id"))
    if not isinstance(utt_id, str) or not utt_id:
        utt_id = audio.stem if audio.stem else f"line{number}"
    return Utterance(utt_id, audio, text, f"{path}:{number}", duration, onset, end)


def _check_inside(
    what: str, duration: float | None, onset: float | None, end: float | None
) -> None:
    """A speech span must lie inside the audio, or its latencies are nonsense."""
    if duration is None:
        return
    for key, value in (("speech_onset_s", onset), ("speech_end_s", end)):
        if value is not None and value > duration + SPAN_SLACK_S:
            raise ValueError(
                f"'{key}' {value:g} s lies after the end of the audio ({what} {duration:g} s)"
            )


def _check_spans(utterances: list[Utterance], bad: list[BadRow]) -> list[Utterance]:
    """Spans against the audio's real length (read from its header) where no duration was
    given; rows whose span lies outside the audio become bad rows."""
    import soundfile as sf

    kept = []
    for utt in utterances:
        if utt.duration_s is None and (utt.speech_onset_s, utt.speech_end_s) != (None, None):
            try:
                info = sf.info(str(utt.audio))
                length = info.frames / info.samplerate if info.samplerate > 0 else None
                _check_inside("audio length", length, utt.speech_onset_s, utt.speech_end_s)
            except ValueError as exc:
                file, _, line = utt.origin.rpartition(":")
                bad.append(BadRow(file, int(line) if line.isdigit() else 0, str(exc)))
                continue
            except (RuntimeError, OSError):
                pass  # unreadable audio: the run reports it as a failed utterance
        kept.append(utt)
    return kept


def _optional_seconds(row: dict[str, Any], key: str) -> float | None:
    value = row.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"'{key}' must be a number of seconds, got {shown(value)}")
    if not 0 <= value <= sys.float_info.max:  # NaN, infinities, 400-digit integers
        raise ValueError(f"'{key}' must be a finite number >= 0, got {shown(value)}")
    return float(value)


def _span_from_words(words: Any) -> tuple[float | None, float | None]:
    """Speech span from word alignments: [{"word", "start", "end"}, ...] (seconds)."""
    if not isinstance(words, list):
        raise ValueError("'words' must be a list of {word, start, end} objects")
    if not words:
        return None, None
    starts: list[float] = []
    ends: list[float] = []
    for index, item in enumerate(words):
        if not isinstance(item, dict):
            raise ValueError(f"'words'[{index}] must be an object with start and end")
        start = _optional_seconds(item, "start")
        end = _optional_seconds(item, "end")
        if start is None or end is None:
            raise ValueError(f"'words'[{index}] needs numeric 'start' and 'end'")
        starts.append(start)
        ends.append(end)
    return min(starts), max(ends)
