"""`python manage.py issue-dev-certs`: a DEVELOPMENT CA and one PKCS#12 per owner, for demo/tests.

The file name has dashes on purpose: Django names a command after its module and loads it with
import_module, which accepts any file name, so `issue-dev-certs` is the command's real name.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from selection.certificates.signing import SigningError, issue_dev_certificates

DEFAULT_NAMES = {
    "business": "Business Owner (dev)",
    "platform": "Platform Owner (dev)",
    "security": "Security Owner (dev)",
    "seal": "kvselect organisational seal (DEVELOPMENT)",
}
PASSPHRASE_ENV = "KVSELECT_DEV_CERT_PASSPHRASE"


class Command(BaseCommand):
    help = (
        "Issue a kvselect DEVELOPMENT CA (not for production) and a PKCS#12 per owner "
        "(business, platform, security) plus an organisational seal."
    )

    def add_arguments(self, parser):
        parser.add_argument("--out", default=None, help="directory (default: KVSELECT_DEV_CA_DIR, <var>/dev-certs)")
        for role, name in DEFAULT_NAMES.items():
            parser.add_argument(f"--{role}", default=name, help=f"{role} person name (default {name!r})")
        parser.add_argument(
            "--passphrase",
            default=None,
            help=f"PKCS#12 passphrase (default: ${PASSPHRASE_ENV}, else a random one written to <out>/passphrase.txt)",
        )
        parser.add_argument("--force", action="store_true", help="replace an existing development CA")

    def handle(self, *args, **opts):
        out = Path(opts["out"] or settings.KVSELECT_DEV_CA_DIR)
        if (out / "dev-ca.pem").exists() and not opts["force"]:
            raise CommandError(f"{out / 'dev-ca.pem'} exists; use --force to replace it")
        passphrase = opts["passphrase"] or os.environ.get(PASSPHRASE_ENV)
        written_passphrase = None
        if not passphrase:
            passphrase = secrets.token_urlsafe(18)
            out.mkdir(parents=True, exist_ok=True)
            written_passphrase = out / "passphrase.txt"
            written_passphrase.write_text(passphrase + "\n")
            written_passphrase.chmod(0o600)
        names = {role: opts[role] for role in DEFAULT_NAMES}
        try:
            paths = issue_dev_certificates(out, names, passphrase)
        except SigningError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(self.style.WARNING("DEVELOPMENT certificates - not for production or procurement."))
        self.stdout.write(f"CA certificate (trust root): {paths.ca_certificate}")
        self.stdout.write(f"CA key (keep private; issues owners' certificates): {paths.ca_key}")
        self.stdout.write(f"CRL (embedded in signatures for offline verification): {paths.crl}")
        self.stdout.write(f"time-stamping authority (KVSELECT_TSA_URL=dev): {paths.tsa_certificate}")
        for role, path in paths.pkcs12.items():
            self.stdout.write(f"{role:9s} {names[role]}: {path}")
        if written_passphrase:
            self.stdout.write(f"passphrase: {written_passphrase}")
