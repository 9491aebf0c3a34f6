"""`python manage.py sign-record RECORD --user NAME (--pkcs12 FILE | --pkcs11-module SO --token-label L --key-label K)`:
an operator signs a record for an owner through the owner-side flow, on this machine.

The same three steps as the record page and kvselect-sign: prepare the owner's signature revision,
sign its CMS signed attributes with the key here (a PKCS#11 token, or a local PKCS#12 that is read,
never stored), embed the CMS after kvselect checked it is the owner's enrolled certificate over that
revision. The role defaults to the one the user signs next. The passphrase or PIN comes from
--passphrase-file, KVSELECT_PKCS12_PASSPHRASE / KVSELECT_PIN, or a prompt.
"""

from __future__ import annotations

import getpass
import os
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management.base import BaseCommand, CommandError

from selection.certificates import signing
from selection.models import DecisionRecord
from selection.records.services import complete_signature, next_signer_role, owner_role, prepare_signature


def sign_owner_side(record: DecisionRecord, user, role: str, signer) -> DecisionRecord:
    """Prepare ``role``'s signature, sign its attributes with ``signer`` (a pyHanko signer on this machine)
    and embed the CMS: what kvselect-sign and the page do, in one process."""
    request = prepare_signature(record=record, user=user, role=role)
    cms = signing.sign_attributes(signer, bytes(request.signed_attributes))
    return complete_signature(record=record, user=user, role=role, cms=cms)


class Command(BaseCommand):
    help = "Sign a decision record for an owner with a key on this machine (token or PKCS#12), owner-side."

    def add_arguments(self, parser):
        parser.add_argument("record", type=int, help="the record's id")
        parser.add_argument("--user", required=True, help="the owner's username")
        parser.add_argument("--role", choices=["business", "platform", "security"], help="default: theirs, next")
        parser.add_argument("--pkcs12", help="a PKCS#12 file with the owner's key")
        parser.add_argument("--passphrase-file", help="a file holding the PKCS#12's passphrase")
        parser.add_argument("--pkcs11-module", help="the token's PKCS#11 module (.so)")
        parser.add_argument("--token-label", help="the token, by label")
        parser.add_argument("--slot", type=int, help="the token, by slot number")
        parser.add_argument("--key-label", help="the key's label on the token")
        parser.add_argument("--cert-label", help="the certificate's label on the token (default: the key's)")

    def secret(self, opts, env: str, prompt: str) -> str:
        if opts.get("passphrase_file"):
            try:
                return Path(opts["passphrase_file"]).read_text().strip()
            except OSError as exc:
                raise CommandError(f"--passphrase-file: cannot read it ({exc.strerror})") from exc
        value = os.environ.get(env)
        return value if value is not None else getpass.getpass(prompt)

    def handle(self, *args, **opts):
        if bool(opts["pkcs12"]) == bool(opts["pkcs11_module"]):
            raise CommandError("give --pkcs12 FILE or --pkcs11-module PATH (with --key-label)")
        record = DecisionRecord.objects.select_related("selection").filter(pk=opts["record"]).first()
        if record is None:
            raise CommandError(f"record: no record with id {opts['record']}")
        user = get_user_model().objects.filter(username=opts["user"]).first()
        if user is None:
            raise CommandError(f"--user: no user {opts['user']!r}")
        role = opts["role"] or next_signer_role(record)
        if role not in owner_role(user, record.selection):
            raise CommandError(f"--user: {opts['user']} is not the {role} owner of this record's selection")
        try:
            if opts["pkcs12"]:
                try:
                    data = Path(opts["pkcs12"]).read_bytes()
                except OSError as exc:
                    raise CommandError(f"--pkcs12: cannot read it ({exc.strerror})") from exc
                passphrase = self.secret(opts, "KVSELECT_PKCS12_PASSPHRASE", "PKCS#12 passphrase: ")
                record = sign_owner_side(record, user, role, signing.load_signer(data, passphrase))
            else:
                if not opts["key_label"]:
                    raise CommandError("--pkcs11-module needs --key-label (and --token-label or --slot)")
                key = signing.Pkcs11Key(
                    module=opts["pkcs11_module"],
                    key_label=opts["key_label"],
                    token_label=opts["token_label"],
                    slot=opts["slot"],
                    cert_label=opts["cert_label"],
                )
                pin = self.secret(opts, "KVSELECT_PIN", "token PIN: ")
                with signing.pkcs11_session(key, pin) as signer:
                    record = sign_owner_side(record, user, role, signer)
        except signing.SigningError as exc:
            raise CommandError(str(exc)) from exc
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from exc
        except PermissionDenied as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"signed record {record.pk} (v{record.version}) as {role} owner: {record.status}")
