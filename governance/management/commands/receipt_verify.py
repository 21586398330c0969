from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser

from governance.receipts import public_key_parse, receipt_check
from memory_project.commands import ProjectCommand


class Command(ProjectCommand):
    # A person or a regulator checks a receipt with the public key alone: no database to reach.
    uses_database = False

    help = (
        "Check a signed receipt (a JSON file): exit 0 when its signature holds, 1 naming why not. The key is "
        "this service's own, or --public-key FILE (PEM, the JSON of /.well-known/memory-receipt-key, or 64 hex digits)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the receipt, as JSON")
        parser.add_argument("--public-key", dest="public_key", default="", help="the signer's public key file")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        try:
            text = path.read_bytes().decode("utf-8")
        except OSError as exc:
            raise CommandError(f"{path}: cannot be read: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise CommandError(f"{path}: not a receipt: not UTF-8 text (was it changed?)") from None
        try:
            receipt = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CommandError(f"{path}: not a receipt: not valid JSON ({exc}); was it changed?") from None
        public = None
        if options["public_key"]:
            key_path = Path(options["public_key"])
            try:
                public = public_key_parse(key_path.read_text())
            except OSError as exc:
                raise CommandError(f"{key_path}: cannot be read: {exc.strerror}") from None
            except (ValueError, UnicodeDecodeError) as exc:
                raise CommandError(f"{key_path}: {exc}") from None
        check = receipt_check(receipt, public=public)
        if not check.ok:
            raise CommandError(f"{path}: NOT VALID: {check.reason}")
        self.stdout.write(f"{path}: valid receipt signed by {check.key_id} at {receipt.get('signed_at', '?')}")
