"""Production request traces: read them, measure them, replay them. Pure (no Django).

- `formats`: the four trace formats kvselect reads (its own CSV/JSONL, Mooncake, Azure LLM
  inference, BurstGPT), streamed in chunks with pyarrow so a file of millions of rows never sits
  in memory; every chunk is normalised to one set of columns.
- `ordering`: the rows in arrival order whatever the file's order: checked in one pass, else an
  external merge sort through disk (bounded memory).
- `stats`: the trace's own statistics in one streaming pass (bounded memory): lengths, arrival
  rate (mean, busiest minute and second), concurrency replayed from the timestamps, sessions and
  idle gaps, prefix sharing, tenants, traffic groups, and the data of the length and arrival charts.
- `cache`: the prefix sharing a KV pool of a given size reuses (LRU over 512-token blocks).
- `proposal`: the constraints one-pager those statistics propose (field names of the one-pager),
  each figure with its assumption.
- `replay`: a replay plan: sessions of turns with their recorded gaps, prefixes and traffic group,
  scaled (`speedup`) and windowed (`sample`), which the load client and the simulator both run.
"""
