"""Test sets kept as a table: a TSV or CSV with an audio-path column and a text column.

Why: that is how many corpora arrive (Common Voice's `test.tsv` with `path` and `sentence`,
clips under `clips/`; spreadsheets exported as CSV). Column names are found among common
ones unless the user names them; audio paths are relative to the table's folder (or its
`clips/` folder, as Common Voice lays it out).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from streamasr.bench.rows import AUDIO_SUFFIXES, BadRow, Utterance, is_file
from streamasr.errors import DatasetError
from streamasr.text.printable import printable

TABLE_SUFFIXES = (".tsv", ".csv")
AUDIO_COLUMNS = ("path", "audio", "audio_filepath", "audio_path", "file", "filename", "wav")
TEXT_COLUMNS = ("sentence", "text", "transcript", "transcription", "reference")
ID_COLUMNS = ("id", "utt_id", "utterance_id")
MAX_FIELD_CHARS = 1 << 20  # a field longer than this is a broken file, not a transcript


@dataclass(frozen=True)
class TableColumns:
    """Which columns hold the audio path and the reference text; None = find it by name."""

    audio: str | None = None
    text: str | None = None


def _pick(header: list[str], wanted: str | None, candidates: tuple[str, ...], role: str,
          option: str, path: Path) -> str:
    if wanted is not None:
        if wanted not in header:
            raise DatasetError(
                f"{path}: no column {wanted!r} for the {role}; its columns are "
                f"{_columns(header)} ({option} NAME chooses one)"
            )
        return wanted
    lowered = {name.lower(): name for name in header}
    for name in candidates:
        if name in lowered:
            return lowered[name]
    raise DatasetError(
        f"{path}: none of the columns ({_columns(header)}) looks like the {role}; "
        f"name it with {option} NAME"
    )


def _columns(header: list[str], most: int = 12) -> str:
    """The header's column names as a message lists them: printable, each and all bounded."""
    names = ", ".join(printable(name)[:40] for name in header[:most])
    return names if len(header) <= most else f"{names} and {len(header) - most} more"


def _check_is_header(header: list[str], path: Path, delimiter: str) -> None:
    """A first line naming an audio file is a row: the table has no header line, and reading
    it as one would report the wrong fault (columns named `1.wav` and a sentence)."""
    if not any(Path(cell.strip()).suffix.lower() in AUDIO_SUFFIXES for cell in header):
        return
    separator = "<TAB>" if delimiter == "\t" else ","
    first = delimiter.join(header)
    first = first if len(first) <= 60 else first[:57] + "..."
    raise DatasetError(
        f"{path}: no header line (the first line is a row: {first!r}); add one naming the "
        f"columns, e.g. path{separator}sentence (audio path, reference text)"
    )


def _audio_path(folder: Path, value: str) -> Path:
    """Relative to the table's folder, or to its clips/ folder (Common Voice)."""
    candidate = (folder / value).expanduser()
    if is_file(candidate):
        return candidate
    clips = folder / "clips" / value
    return clips if is_file(clips) else candidate


def read_table(path: Path, columns: TableColumns = TableColumns()) -> tuple[
    list[Utterance], list[BadRow]
]:
    """Utterances from a TSV/CSV; rows without audio or text become bad rows."""
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    csv.field_size_limit(MAX_FIELD_CHARS)
    utterances: list[Utterance] = []
    bad: list[BadRow] = []
    seen: dict[str, int] = {}
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle, delimiter=delimiter)
            header = next(reader, None)
            if not header:
                raise DatasetError(f"{path}: empty table; the first line must name the columns")
            _check_is_header(header, path, delimiter)
            audio_col = _pick(header, columns.audio, AUDIO_COLUMNS, "audio path",
                              "--audio-column", path)
            text_col = _pick(header, columns.text, TEXT_COLUMNS, "reference text",
                             "--text-column", path)
            id_col = next((h for h in header if h.lower() in ID_COLUMNS), None)
            index = {name: i for i, name in enumerate(header)}
            for row in reader:
                number = reader.line_num
                if not any(cell.strip() for cell in row):
                    continue
                if len(row) != len(header):
                    bad.append(BadRow(str(path), number,
                                      f"{len(row)} fields where the header has {len(header)}"))
                    continue
                audio_value = row[index[audio_col]].strip()
                text = row[index[text_col]].strip()
                if not audio_value:
                    bad.append(BadRow(str(path), number, f"empty {audio_col!r}"))
                    continue
                audio = _audio_path(path.parent, audio_value)
                utt_id = row[index[id_col]].strip() if id_col else Path(audio_value).stem
                if utt_id in seen:
                    bad.append(BadRow(str(path), number,
                                      f"duplicate id {utt_id} (first at line {seen[utt_id]})"))
                    continue
                seen[utt_id] = number
                utterances.append(Utterance(utt_id, audio, text, f"{path}:{number}"))
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text ({exc.reason}); convert it to UTF-8") from None
    except csv.Error as exc:
        kind = "tab" if delimiter == "\t" else "comma"
        raise DatasetError(f"{path}: not a readable {kind}-separated table ({exc})") from None
    return utterances, bad
