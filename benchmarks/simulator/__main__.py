"""`python -m benchmarks.simulator --profile paged-prefix --port 8100` (or `--trace FILE --out FILE`)."""

import sys

from benchmarks.simulator.cli import main

sys.exit(main())
