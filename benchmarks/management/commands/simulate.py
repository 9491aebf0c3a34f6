"""`python manage.py simulate`: serve the KV-cache simulator, or run a trace offline.

A thin wrapper over `benchmarks.simulator.cli` (same options as `python -m benchmarks.simulator`).
`--model` is a label for now: the KV geometry comes from --kv-bytes-per-token / --weight-bytes
(defaults: Llama-3.1-8B BF16) until the capacity model is wired in.
"""

from django.core.management.base import BaseCommand, CommandError

from benchmarks.simulator import cli


class Command(BaseCommand):
    help = "Run the KV-cache simulator (OpenAI-compatible server, or --trace FILE offline). Output is SIMULATED."

    def add_arguments(self, parser):
        cli.add_arguments(parser)

    def handle(self, *args, **options):
        code = cli.run(options, stdout=self.stdout)
        if code:
            raise CommandError(f"simulate failed (exit {code})")
