"""`python manage.py verify-record FILE`: check every signature of a decision-record PDF, offline.

Prints per signature: signer, time, intact / valid / trusted, the trust root that validated it
(a development CA flagged "DEVELOPMENT CERTIFICATE - NOT FOR PROCUREMENT"), whether the owner
the record names for the field signed it, the PAdES level (B-B, B-T, B-LT) and coverage; then what
each revision after the rendered PDF is (an owner's signature, validation data, or not allowed) and
every problem found, which record kvselect issued it from, SIMULATED when the record is, and whether
it is ready for procurement. Exits non-zero unless every signature verifies and nothing but the
owners' signatures and validation data follows the PDF kvselect rendered; a PDF kvselect did not
issue is "not a kvselect record" and never verifies. Trust roots: --trust PEM/DER files,
default the configured roots (KVSELECT_TRUST_ROOTS and the development CA, if issued). Nothing is
fetched: revocation data comes from the document itself (PAdES B-LT).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from selection.certificates.signing import SigningError
from selection.records.verification import expected_signers, finding_message, verification_json, verify_document


class Command(BaseCommand):
    help = "Verify the PAdES signatures of a decision-record PDF: signers, owners, trust roots, level."
    # an offline check of one file: the system checks import the URL conf and every page (`manage.py check`
    # runs them), which would triple the command's start-up
    requires_system_checks: list = []

    def add_arguments(self, parser):
        parser.add_argument("file", help="PDF to verify")
        parser.add_argument(
            "--trust", action="append", default=[], help="trusted root certificate (PEM or DER); repeatable"
        )
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def trust_roots(self, given: list[str]) -> list[bytes] | None:
        try:
            return [Path(p).read_bytes() for p in given] or None
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
            verification = verify_document(data, self.trust_roots(opts["trust"]))
        except SigningError as exc:
            raise CommandError(str(exc)) from exc
        report, record = verification.report, verification.record
        if opts["json"]:
            self.stdout.write(json.dumps(verification_json(verification), indent=2, ensure_ascii=False))
        else:
            self.stdout.write(report.as_text(describe=finding_message))
            self.write_record_lines(verification)
        if record is None:
            raise CommandError("not verified: not a kvselect record")
        if not report.all_ok:
            raise CommandError(
                "not verified: a signature is missing, altered, untrusted or not its owner's, "
                "or the record was changed after it was signed"
            )

    def write_record_lines(self, verification) -> None:
        record = verification.record
        if record is None:
            self.stdout.write(self.style.ERROR("record: NOT A KVSELECT RECORD (kvselect did not issue it)"))
        else:
            how = "built on the PDF kvselect rendered for"
            if verification.exact:
                how = "exactly the signed record"
            elif verification.lta_extended:
                how = "the signed record kvselect stored, plus its own validation data, for"
            self.stdout.write(f"record: {how} DR-{record.selection_id}-v{record.version} ({record.selection.name})")
            if verification.superseded:
                self.stdout.write(self.style.ERROR("SUPERSEDED: a newer signed version replaces this record"))
            if expected_signers(record) is None:
                self.stdout.write(
                    "owners not checked: the record names no signing certificates (signed before enrolment)"
                )
            if record.simulated:
                self.stdout.write(
                    self.style.ERROR("SIMULATED: the evidence comes from the simulator - not for procurement")
                )
        if verification.report.development_certificates:
            self.stdout.write(
                self.style.ERROR(
                    "DEVELOPMENT CERTIFICATE - NOT FOR PROCUREMENT: signed under kvselect's development CA"
                )
            )
        if verification.open_items:
            self.stdout.write(
                self.style.ERROR(
                    f"OPEN ITEMS: {verification.open_items} owner's 'not ready' item(s) neither resolved nor waived"
                )
            )
        ready = "yes" if verification.procurement_ready else "no"
        self.stdout.write(f"ready for procurement: {ready}")
