"""`python manage.py verify-record FILE`: check every signature of a decision-record PDF.

Prints signer, time, intact / valid / trusted and coverage per signature and the document's
SHA-256; exits non-zero unless every signature verifies. Trust roots: --trust PEM/DER files,
default the development CA under <KVSELECT_VAR_DIR>/dev-certs if present.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Iterable

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from selection.models import DecisionRecord
from selection.records.signing import SigningError, verify_pdf


class Command(BaseCommand):
    help = "Verify the PAdES signatures of a decision-record PDF (and whether kvselect issued it)."

    def add_arguments(self, parser):
        parser.add_argument("file", help="PDF to verify")
        parser.add_argument(
            "--trust", action="append", default=[], help="trusted root certificate (PEM or DER); repeatable"
        )
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def known_hashes(self) -> Iterable[str] | None:
        """SHA-256 of every signed PDF kvselect issued."""

        return set(DecisionRecord.objects.exclude(signed_sha256="").values_list("signed_sha256", flat=True))

    def trust_roots(self, given: list[str]) -> list[bytes]:
        paths = [Path(p) for p in given]
        if not paths:
            dev_ca = Path(settings.VAR_DIR) / "dev-certs" / "dev-ca.pem"
            paths = [dev_ca] if dev_ca.exists() else []
        try:
            return [p.read_bytes() for p in paths]
        except OSError as exc:
            raise CommandError(f"--trust: cannot read {exc.filename}: {exc.strerror}") from exc

    def handle(self, *args, **opts):
        if opts["verbosity"] < 2:
            # pyHanko logs each failed check with a traceback; the report already says it.
            logging.getLogger("pyhanko").setLevel(logging.CRITICAL)
            logging.getLogger("pyhanko_certvalidator").setLevel(logging.CRITICAL)
        path = Path(opts["file"])
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise CommandError(f"file: cannot read {path}: {exc.strerror}") from exc
        try:
            report = verify_pdf(data, self.trust_roots(opts["trust"]), self.known_hashes())
        except SigningError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            json.dumps(report.as_dict(), indent=2, ensure_ascii=False) if opts["json"] else report.as_text()
        )
        if not report.all_ok:
            raise CommandError("not verified: at least one signature is missing, altered or untrusted")
