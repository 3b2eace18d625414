"""Text made safe to show: no control character from an engine or a file name reaches a
terminal.

Why: recognised text comes from the engine (a third-party backend, a downloaded model's
vocabulary) and source names from the user's files; an ESC, CSI or OSC sequence in either,
written raw, would let them move the cursor, clear the screen, retitle the window or forge
lines of output. Every renderer a person reads (text, the live display, txt files, captions,
summaries, messages) passes its text through `printable`. JSONL is for programs and keeps the
text as it is, escaped as JSON escapes it (`json_escaped` adds the controls `json.dumps`
leaves raw with `ensure_ascii=False`).
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls, and the Unicode line and paragraph separators
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# control characters that are white space become one space (a final stays on its line, words
# stay apart); every other one is dropped
_TABLE = {
    code: (" " if chr(code).isspace() else None)
    for code in (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029)
}


def printable(text: str) -> str:
    """`text` without control characters: tab, newline and the other white-space controls
    become a space, the rest (ESC, BEL, backspace, NUL, C1 such as CSI) are removed, so what
    is left of an escape sequence is shown as plain characters. Text with none is returned
    as it is (the usual case costs one scan)."""
    if _CONTROL.search(text) is None:
        return text
    return text.translate(_TABLE)


def json_escaped(line: str) -> str:
    """A line from `json.dumps(..., ensure_ascii=False)` with the controls it leaves raw
    (DEL, C1, U+2028/9: they can stand only inside its strings) written as \\u escapes: the
    same JSON value, and nothing a terminal acts on."""
    if _CONTROL.search(line) is None:
        return line
    return _CONTROL.sub(lambda match: f"\\u{ord(match.group()):04x}", line)


def shown(value: object, limit: int = 40) -> str:
    """A value from outside as a message names it: its repr (controls escaped, one line),
    at most `limit` characters. Why: a message that echoes what a client or a file sent
    whole is as long as that (a 60 kB field, a 4000-digit number) and no longer a line."""
    try:
        text = repr(value)
    except ValueError:  # holds an integer of more digits than Python converts to text
        return f"a {type(value).__name__} too large to show"
    return text if len(text) <= limit else text[: limit - 3] + "..."
