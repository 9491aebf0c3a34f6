"""`manage.py export-monitoring RECORD_ID --out DIR [--job NAME]`: write a signed decision record's
Prometheus alerting rules (alerts.yml) and Grafana dashboard (dashboard.json) into DIR.

RECORD_ID is the record's database id (shown in its page's address) or its number DR-<selection>-v<version>.
"""

from __future__ import annotations

import re
from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from selection.models import DecisionRecord
from selection.records.operations import export_monitoring

RECORD_NUMBER = re.compile(r"^DR-(\d+)-v(\d+)$")


class Command(BaseCommand):
    help = "Write a signed decision record's Prometheus alerting rules and Grafana dashboard into a directory."

    def add_arguments(self, parser):
        parser.add_argument("record", metavar="RECORD_ID", help="the record's id, or its number DR-<selection>-v<n>")
        parser.add_argument(
            "--out", required=True, metavar="DIR", help="directory to write alerts.yml and dashboard.json"
        )
        parser.add_argument("--job", help="the engine's Prometheus scrape job (default: the engine's slug)")

    def handle(self, *args, **opts):
        record = _find(opts["record"])
        try:
            files = export_monitoring(record, job=opts["job"])
        except ValidationError as exc:
            raise CommandError(f"RECORD_ID: {' '.join(exc.messages)}") from exc
        out = Path(opts["out"])
        try:
            out.mkdir(parents=True, exist_ok=True)
            for name, content in files.items():
                (out / name).write_text(content, encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"--out: {out}: {exc.strerror or exc}") from exc
        for name in files:
            self.stdout.write(str(out / name))


def _find(value: str) -> DecisionRecord:
    match = RECORD_NUMBER.match(value)
    if match:
        record = DecisionRecord.objects.filter(selection_id=match[1], version=match[2]).first()
    elif value.isdigit():
        record = DecisionRecord.objects.filter(pk=int(value)).first()
    else:
        raise CommandError(f"RECORD_ID: expected a record id or DR-<selection>-v<version>, got {value!r}")
    if record is None:
        raise CommandError(f"RECORD_ID: no decision record {value}")
    return record
