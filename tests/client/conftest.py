"""The client is tested from its folder (clients/python), not from an installed copy: the tests
run the repository's code, and `make test` needs no install step of its own for it."""

from __future__ import annotations

import sys

from tests.kit import PROJECT_ROOT

CLIENT_FOLDER = str(PROJECT_ROOT / "clients" / "python")
if CLIENT_FOLDER not in sys.path:
    sys.path.insert(0, CLIENT_FOLDER)
