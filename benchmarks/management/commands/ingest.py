"""`manage.py ingest FILE --candidate ID --test TEST`: the upload API's ingest, for local files."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from benchmarks.suite import TEST_IDS
from benchmarks.uploads.ingest import IngestError, ingest_upload
from selection.models import Candidate


class Command(BaseCommand):
    help = "Parse and store a benchmark result file for a candidate (any supported tool's format)."

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--candidate", type=int, required=True)
        parser.add_argument("--test", required=True, choices=TEST_IDS)
        parser.add_argument("--format", help="skip detection (see the API docs for names)")
        parser.add_argument("--label", default="")

    def handle(self, *args, **opts):
        path = Path(opts["file"])
        if not path.is_file():
            raise CommandError(f"FILE: {path} does not exist")
        candidate = Candidate.objects.filter(pk=opts["candidate"]).select_related("selection").first()
        if candidate is None:
            raise CommandError(f"--candidate: no candidate with id {opts['candidate']}")
        try:
            with path.open("rb") as handle:  # read in chunks: the file may be larger than memory
                run, created = ingest_upload(
                    candidate=candidate,
                    data=handle,
                    filename=path.name,
                    test=opts["test"],
                    fmt=opts["format"],
                    label=opts["label"],
                    uploader="cli",
                    synchronous=True,
                )
        except IngestError as exc:
            raise CommandError(f"--{exc.field if exc.field != 'file' else 'file'}: {exc}") from exc
        except ValueError as exc:
            raise CommandError(f"FILE: {exc}") from exc
        point = run.points.first()
        self.stdout.write(
            f"run #{run.pk}: {run.tool} {run.tool_version} ({run.format}), {run.evidence}, "
            f"{run.points.count()} load point(s)"
        )
        if point is not None:
            self.stdout.write(
                f"  TTFT p50/p99 {point.ttft_ms.get('p50')}/{point.ttft_ms.get('p99')} ms, "
                f"TPOT p50 {point.tpot_ms.get('p50')} ms, {point.request_throughput} req/s"
            )
