"""`python manage.py simulate`: serve the KV-cache simulator, or run a trace offline.

A thin wrapper over `benchmarks.simulator.cli` (same options as `python -m benchmarks.simulator`).
`--model NAME` sizes the engine from the shipped model config with the capacity model (`--tp`,
`--kv-dtype`, vLLM's rules on the chosen GPU) and prints the KV size, the block pool and the model
name a client must send; --kv-bytes-per-token / --weight-bytes simulate a model that is not shipped.
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
