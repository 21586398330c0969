"""Memory files: notes an agent keeps under /memories with the commands of Anthropic's memory tool.

Every change adds a MemoryFileVersion; nothing is overwritten. `paths` checks names, `access`
says who reads and writes where, `selectors` reads the files that stand, `protocol` runs the
memory tool's commands (its answers and errors), `services` makes their changes, the whole-file
writes and redactions, `working_note` serves the read / replace / append note of 001.
"""
