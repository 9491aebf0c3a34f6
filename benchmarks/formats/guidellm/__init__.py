"""guidellm reports, every layout from 0.3 to 0.8, as JSON (`benchmarks.json`) or CSV.

Layouts: `{benchmarks}` (<=0.3), `{args, benchmarks}` (0.4), `{metadata v1, args, benchmarks}`
(0.5-0.6), `{metadata v2, config, benchmarks[, conclusions]}` (0.7-0.8). Each benchmark is one
load point. Definition mapping (REFERENCE 1.8):
- `time_to_first_token_ms` = kvselect TTFT.
- `request_latency` is in **seconds** -> e2e_ms x1000.
- `time_per_output_token_ms` = (last token - start)/tokens INCLUDES TTFT: not kvselect TPOT; kept
  in `extra["guidellm_time_per_output_token_ms"]`.
- `inter_token_latency_ms` = per request (last - first)/(tokens - 1) = kvselect TPOT per request,
  but its distribution is token-weighted: the mean equals kvselect's per-token ITL mean exactly,
  percentiles are neither, so itl_ms gets the mean only and tpot_ms comes from per-request records
  when the file holds every request (`--metrics sample_size` trims them).

Records vs totals (0.7-0.8): `requests.*` hold more records than `request_totals` counts (warm-up,
cool-down, requests made after the window). A record is counted iff its `info.timings.request_start`
is before `scheduler_metrics.measure_end_time` and its `request_end` is null or after
`measure_start_time` (exact for every status in real 0.7.4 and 0.8.1 files); only counted records
enter the per-request table. `incomplete` records are requests guidellm cancelled when the run
ended: marked cancelled, not failures, not SLO misses. Achieved concurrency = every counted
record's [request_start_time, request_end_time] clipped to the window / the window (reproduces
guidellm's `request_concurrency.total.mean`).
The package: `definitions` (what guidellm's figures mean in kvselect's terms), `report_json` (the
JSON report), `report_csv` (the CSV export).
"""

from __future__ import annotations

from benchmarks.formats.base import Format
from benchmarks.formats.guidellm.report_csv import parse_csv, sniff_csv
from benchmarks.formats.guidellm.report_json import parse_json, sniff_json

FORMATS = [
    Format("guidellm", "guidellm", "guidellm benchmarks.json (report layouts 0.3-0.8)", sniff_json, parse_json),
    Format("guidellm-csv", "guidellm", "guidellm CSV export (three header rows)", sniff_csv, parse_csv),
]
