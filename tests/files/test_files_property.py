"""Random command sequences against the services agree with a plain dict of path -> text.

The model is written independently of the services: files in a dict, directories being the
prefixes of file paths. After every command, `view` of every path answers what the model
holds, and each path's history has one version per change the model made there.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memoryapp.files.access import FileAccess
from memoryapp.files.errors import MemoryFileError
from memoryapp.files.protocol import memory_tool_run
from memoryapp.files.selectors import file_history
from memoryapp.files.services import file_put
from memoryapp.models import MemoryFileVersion
from tests.kit.api import Caller
from tests.kit.files import text_seen

pytestmark = pytest.mark.django_db

PATHS = ["/memories/a.md", "/memories/d", "/memories/d/c.md", "/memories/d/e.md", "/memories/x"]
texts = st.lists(st.sampled_from(["a", "b", "ab", "a a", ""]), max_size=4).map(lambda lines: "\n".join(lines))
paths = st.sampled_from(PATHS)
commands = st.one_of(
    st.builds(lambda p, t: {"command": "create", "path": p, "file_text": t}, paths, texts),
    st.builds(
        lambda p, o, n: {"command": "str_replace", "path": p, "old_str": o, "new_str": n},
        paths,
        st.sampled_from(["a", "b", "ab", "a\nb"]),
        st.sampled_from(["", "b", "ba", "z\nz"]),
    ),
    st.builds(
        lambda p, n, t: {"command": "insert", "path": p, "insert_line": n, "insert_text": t},
        paths,
        st.integers(-1, 4),
        texts,
    ),
    st.builds(lambda p: {"command": "delete", "path": p}, paths),
    st.builds(lambda o, n: {"command": "rename", "old_path": o, "new_path": n}, paths, paths),
    st.builds(lambda p, t: {"command": "put", "path": p, "text": t}, paths, texts),
)


class Model:
    """Files as a dict; every change counted per path, as versions should be."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}
        self.versions: dict[str, int] = {}

    def is_dir(self, path: str) -> bool:
        return path == "/memories" or any(p.startswith(path + "/") for p in self.files)

    def under(self, path: str) -> list[str]:
        return sorted(p for p in self.files if p == path or p.startswith(path + "/"))

    def file_above(self, path: str) -> bool:
        parts = path.split("/")
        return any("/".join(parts[:i]) in self.files for i in range(3, len(parts)))

    def write(self, path: str, text: str | None) -> None:
        if text is None:
            del self.files[path]
        else:
            self.files[path] = text
        self.versions[path] = self.versions.get(path, 0) + 1

    @staticmethod
    def lines(text: str) -> list[str]:
        return [] if text == "" else (text[:-1] if text.endswith("\n") else text).split("\n")

    def apply(self, command: dict[str, Any]) -> str | None:
        """Carry the command out; the error code it must fail with, or None."""
        name = command["command"]
        if name == "create":
            path = command["path"]
            if path in self.files:
                return "file_exists"
            if self.is_dir(path):
                return "is_directory"
            if self.file_above(path):
                return "parent_is_file"
            self.write(path, command["file_text"])
        elif name == "put":
            path = command["path"]
            if path not in self.files and (self.is_dir(path) or self.file_above(path)):
                return "is_directory" if self.is_dir(path) else "parent_is_file"
            if self.files.get(path) != command["text"]:
                self.write(path, command["text"])
        elif name == "str_replace":
            path, old = command["path"], command["old_str"]
            if path not in self.files:
                return "path_not_found"
            text = self.files[path]
            starts = [i for i in range(len(text)) if text.startswith(old, i)]
            if len(starts) != 1:
                return "old_str_not_found" if not starts else "old_str_not_unique"
            self.write(path, text[: starts[0]] + command["new_str"] + text[starts[0] + len(old) :])
        elif name == "insert":
            path, at = command["path"], command["insert_line"]
            if path not in self.files:
                return "path_not_found"
            lines = self.lines(self.files[path])
            if not 0 <= at <= len(lines):
                return "invalid_insert_line"
            added = self.lines(command["insert_text"]) or [""]
            self.write(path, "\n".join(lines[:at] + added + lines[at:]) + "\n")
        elif name == "delete":
            doomed = self.under(command["path"])
            if not doomed:
                return "path_not_found"
            for path in doomed:
                self.write(path, None)
        elif name == "rename":
            old, new = command["old_path"], command["new_path"]
            moving = self.under(old)
            if not moving:
                return "path_not_found"
            if new in self.files or self.is_dir(new):
                return "destination_exists"
            if new.startswith(old + "/"):
                return "invalid_path"
            if self.file_above(new):
                return "parent_is_file"
            for path in moving:
                text = self.files[path]
                self.write(path, None)
                self.write(new + path[len(old) :], text)
        return None


def run(access: FileAccess, command: dict[str, Any]) -> str | None:
    try:
        if command["command"] == "put":
            file_put(access=access, path=command["path"], text=command["text"])
        else:
            memory_tool_run(access=access, command=command)
    except MemoryFileError as error:
        return error.code
    return None


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(commands, max_size=15))
@example(
    steps=[
        {"command": "create", "path": "/memories/d/c.md", "file_text": "a\nab\n"},
        {"command": "str_replace", "path": "/memories/d/c.md", "old_str": "a", "new_str": "b"},
        {"command": "insert", "path": "/memories/d/c.md", "insert_line": 2, "insert_text": "a a"},
        {"command": "rename", "old_path": "/memories/d", "new_path": "/memories/x"},
        {"command": "create", "path": "/memories/x/c.md/e", "file_text": ""},
        {"command": "put", "path": "/memories/a.md", "text": "b"},
        {"command": "rename", "old_path": "/memories/a.md", "new_path": "/memories/d/e.md"},
        {"command": "delete", "path": "/memories/d"},
    ]
)
def test_random_commands_agree_with_a_dict_of_files(alice: Caller, steps: list[dict[str, Any]]) -> None:
    MemoryFileVersion.objects.filter(agent=alice.agent).delete()  # each example starts from no files
    access = FileAccess(agent=alice.agent, user_id="ana")
    model = Model()
    for step in steps:
        expected = model.apply(step)
        assert run(access, step) == expected, step
        for path in PATHS:
            want = model.files.get(path)
            # view shows lines: a final newline is not a line of its own.
            assert text_seen(access, path) == (None if want is None else "\n".join(Model.lines(want))), (step, path)
    for path in PATHS:
        history = file_history(access=access, path=path)
        assert [v.sequence for v in history] == list(range(1, model.versions.get(path, 0) + 1)), path
        last = history[-1].content if history else None
        assert last == model.files.get(path)
