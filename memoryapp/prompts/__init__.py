"""Versioned prompt templates, kept in the code base (<name>_v<N>.txt next to this module).

A changed prompt is a new file with the next version, never an edit of an old one: every item
and summary records the version that produced it (MemoryItem.prompt_version, a compaction's
event["prompt_version"]), so a reviewer can tell which prompt wrote what.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

_HERE = Path(__file__).resolve().parent

# The version each job uses now.
SUMMARY = "summary_v1"
EXTRACTION = "extraction_v2"
EXTRACTION_CONTINUE = "extraction_continue_v1"
HIERARCHICAL = "hierarchical_v1"

# 003 `templateName`: the named prompts a summarizer may be given, each a versioned template.
# "default" is SUMMARY; a name maps to the version in use now, which the summary records.
DEFAULT_SUMMARY_TEMPLATE = "default"
SUMMARY_TEMPLATES = {
    DEFAULT_SUMMARY_TEMPLATE: SUMMARY,
    # A few sentences (004's example summarizer): small summarizer models, chatty threads.
    "brief": "summary_brief_v1",
    # Files, commands, errors and next steps: coding agents with many tool calls.
    "coding": "summary_coding_v1",
}


def summary_template(name: str) -> Prompt:
    """The summary prompt named `name` ("" = default); LookupError for a name not in SUMMARY_TEMPLATES."""
    version = SUMMARY_TEMPLATES.get(name or DEFAULT_SUMMARY_TEMPLATE)
    if version is None:
        raise LookupError(f"No summary template is named {name!r}.")
    return prompt(version)


@dataclass(frozen=True)
class Prompt:
    version: str
    text: str

    def render(self, **values: str) -> str:
        """The template with {name} fields filled (other braces are left alone)."""
        text = self.text
        for name, value in values.items():
            text = text.replace("{" + name + "}", value)
        return text


@cache
def prompt(version: str) -> Prompt:
    path = _HERE / f"{version}.txt"
    if not path.is_file() or path.parent != _HERE:
        raise LookupError(f"No prompt template {version!r}.")
    return Prompt(version=version, text=path.read_text(encoding="utf-8").strip())
