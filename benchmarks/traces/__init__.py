"""Production request traces: read them, measure them, replay them. Pure (no Django).

- `formats`: the four trace formats kvselect reads (its own CSV/JSONL, Mooncake, Azure LLM
  inference, BurstGPT), streamed in chunks with pyarrow so a file of millions of rows never sits
  in memory; every chunk is normalised to one set of columns.
- `stats`: the trace's own statistics in one streaming pass (bounded memory): lengths, arrival
  rate, concurrency replayed from the timestamps, sessions and idle gaps, prefix sharing, tenants,
  traffic groups, and the data of the length and arrival charts.
- `proposal`: the constraints one-pager those statistics propose (field names of the one-pager).
- `replay`: a replay plan: sessions of turns with their recorded gaps, prefixes and traffic group,
  scaled (`speedup`) and windowed (`sample`), which the load client and the simulator both run.
"""
