"""Memory files: notes an agent keeps under /memories with the commands of Anthropic's memory tool.

Every change adds a MemoryFileVersion; nothing is overwritten. `paths` checks names, `access`
says who reads and writes where, `selectors` reads the files that stand, `services` runs the
commands and the whole-file writes, `working_note` serves the read / replace / append note of 001.
"""
