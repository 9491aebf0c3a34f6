"""kvsim: a GPU-free engine whose KV-cache behaviour is modelled, for demos, tests and what-ifs.

Everything it produces is SIMULATED evidence (results, responses, /metrics).

- `config`: SimConfig (pool size from direct parameters or a capacity plan), GPU profiles,
  allocation strategies (`paged-prefix`, `paged-noprefix`, `radix`, `static`, `paged-offload`,
  `radix-offload`).
- `engine`: the clock-agnostic scheduler + block pool state machine (`Engine.step(now)`).
- `live` / `server`: the engine on the asyncio clock behind an OpenAI-compatible HTTP API.
- `offline`: trace-driven discrete-event simulation to a NormalizedResult.
- `tokens`: the deterministic tokenizer, chat template and output generator.
- `cli`: `python -m benchmarks.simulator` and `python manage.py simulate`.
"""
