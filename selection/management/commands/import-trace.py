"""`manage.py import-trace FILE --selection ID [--format F] [--json]`: import a production trace on a
selection and print the constraints one-pager it proposes (the architect accepts it on the page).

Formats: kvselect (CSV/JSONL), mooncake, azure, burstgpt (detected unless --format is given; .gz
is read as it streams). A progress bar on stderr follows the bytes read.
"""

from __future__ import annotations

import json

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management.base import BaseCommand, CommandError

from benchmarks.traces.catalog import FORMATS, file_size
from selection.models import Constraints, Selection
from selection.traces.services import import_trace


def progress_bar(done: int, total: int, rows: int, width: int = 30) -> str:
    fraction = min(done / total, 1.0) if total else 1.0
    filled = int(round(width * fraction))
    return f"\r[{'#' * filled}{' ' * (width - filled)}] {fraction:6.1%}  {rows:,} rows"


class Command(BaseCommand):
    help = "Import a production trace on a selection and print the constraints one-pager it proposes."

    def add_arguments(self, parser):
        parser.add_argument("file", metavar="FILE", help="the trace (CSV, JSONL; .gz accepted)")
        parser.add_argument("--selection", type=int, required=True, metavar="ID")
        parser.add_argument("--format", choices=sorted(FORMATS), help="the trace's format (default: detected)")
        parser.add_argument("--user", help="who imports (an architect of the team; default: the selection's creator)")
        parser.add_argument("--json", action="store_true", help="print the statistics and the proposal as JSON")

    def handle(self, *args, **opts):
        selection = Selection.objects.filter(pk=opts["selection"]).select_related("created_by").first()
        if selection is None:
            raise CommandError(f"--selection: no selection {opts['selection']}")
        user = selection.created_by
        if opts["user"]:
            user = get_user_model().objects.filter(username=opts["user"]).first()
            if user is None:
                raise CommandError(f"--user: no user {opts['user']!r}")
        try:
            total = file_size(opts["file"])
        except OSError as exc:
            raise CommandError(f"FILE: {opts['file']}: {exc.strerror or exc}") from exc
        show = opts["verbosity"] >= 1 and not opts["json"]

        def progress(rows: int, read: int) -> None:
            if show:
                self.stderr.write(progress_bar(read, total, rows), ending="")
                self.stderr.flush()

        try:
            trace, created = import_trace(
                selection=selection, user=user, path=opts["file"], format=opts["format"], progress=progress
            )
        except ValidationError as exc:
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())) from exc
        except PermissionDenied as exc:
            raise CommandError(f"--user: {user.get_username()} may not change this selection ({exc})") from exc
        if show:
            self.stderr.write(progress_bar(total, total, trace.rows))
        if opts["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "trace": trace.pk,
                        "created": created,
                        "sha256": trace.sha256,
                        "format": trace.format,
                        "statistics": trace.statistics,
                        "proposal": trace.proposal,
                    },
                    indent=2,
                )
            )
            return
        self.stdout.write(
            f"{'imported' if created else 'already imported'}: trace #{trace.pk} {trace.name} "
            f"({trace.format}, {trace.rows:,} rows, sha256 {trace.sha256})"
        )
        current = Constraints.objects.filter(selection=selection).first()
        self.stdout.write(f"{'field':<28} {'proposed':>12} {'current':>12}  basis")
        for item in trace.proposal:
            now = getattr(current, item["field"], None) if current else None
            basis = item["basis"]["message"] % item["basis"]["params"]
            self.stdout.write(f"{item['field']:<28} {_show(item['value']):>12} {_show(now):>12}  {basis}")
        self.stdout.write(
            "Accept it on the trace's page (the audit trail records the trace's SHA-256 on every field it changes)."
        )


def _show(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:g}" if isinstance(value, float) else str(value)
