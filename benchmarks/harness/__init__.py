"""kvselect's validation harness: load generator, engine telemetry and the eight validation tests.

Pure asyncio/aiohttp code with no Django imports, so the Celery task, the CLI and the tests can
all drive it. Entry points: `workloads.plan(test, constraints)` and `workloads.run_test_sync(test,
target, params, cancel=..., progress=...)`, which return a `benchmarks.result.NormalizedResult`.
"""

HARNESS_VERSION = "0.1.0"
