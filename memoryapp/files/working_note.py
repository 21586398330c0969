"""The working-memory note of reference 001, kept as a memory file.

A scratch note the model reads and updates with a `memory` tool of three actions: `read`,
`replace` (overwrite with `content`) and `append` (add `content` as one line at the end; a
no-op without content). It lives at /memories/working.md, so it has versions and a history
like any other file. Every call answers the note's text and {action, ok, length}.
"""

from __future__ import annotations

from dataclasses import dataclass

from memoryapp.files.access import FileAccess
from memoryapp.files.errors import MemoryFileError
from memoryapp.files.selectors import file_heads, version_content
from memoryapp.files.services import file_update

WORKING_NOTE_PATH = "/memories/working.md"
ACTIONS = ("read", "replace", "append")


@dataclass(frozen=True)
class WorkingNoteAnswer:
    text: str
    action: str
    ok: bool
    version_id: str | None = None

    @property
    def details(self) -> dict[str, object]:
        return {"action": self.action, "ok": self.ok, "length": len(self.text)}


def working_note_read(*, access: FileAccess) -> str:
    standing = file_heads(access=access, under=WORKING_NOTE_PATH).file(WORKING_NOTE_PATH)
    return (version_content(standing) or "") if standing is not None else ""


def _as_one_line(content: str) -> str:
    # "append adds content as a single line": line breaks inside it become spaces.
    return " ".join(part.strip() for part in content.splitlines() if part.strip())


def working_note_run(*, access: FileAccess, action: str, content: str | None = None) -> WorkingNoteAnswer:
    """Read, replace or append to the note; `content` is ignored for read."""
    if action not in ACTIONS:
        raise MemoryFileError(
            "unknown_action",
            f"Error: Unknown action `{action}`. It must be one of: read, replace, append.",
            field="action",
        )
    if content is not None and not isinstance(content, str):
        raise MemoryFileError("invalid_parameter", "Error: `content` must be a string.", field="content")
    if action == "read":
        return WorkingNoteAnswer(working_note_read(access=access), action, True)
    if action == "append" and not (content and _as_one_line(content)):
        return WorkingNoteAnswer(working_note_read(access=access), action, True)
    if action == "replace" and content is None:
        raise MemoryFileError("missing_parameter", "Error: `content` is required for action: replace", field="content")

    def edit(current: str | None) -> str:
        if action == "replace":
            return content or ""
        line = _as_one_line(content or "")
        note = current or ""
        return f"{note}{'' if note == '' or note.endswith(chr(10)) else chr(10)}{line}"

    version, text = file_update(access=access, path=WORKING_NOTE_PATH, edit=edit)
    return WorkingNoteAnswer(text or "", action, True, version.pk if version is not None else None)
