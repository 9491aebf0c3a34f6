"""KV-cache capacity planning from a model's real config.json, engine-exact where engines are exact.

Why this package exists: memory, not compute, is usually the first limit of an inference service,
and published planners get it wrong in known ways (skipping vLLM's memory fraction, charging
sliding-window layers for the whole context, dividing MLA caches by tensor parallelism, using query
heads instead of KV heads). Everything here is plain Python so that the CLI, the API and the tests
share one model. Quantities that are not fixed by the config or the engine's documented rules
(activation peak, non-torch memory, CUDA-graph memory, SGLang's auto memory fraction) are returned
as labelled *estimates* with their source and can be overridden with measured values.

One module per concern, each stating its rules and their sources, imported from where the name
lives (this file re-exports nothing):

* `base`: units, engines, KV dtypes, the GPUs' memory, `CapacityError`, how figures are written.
* `model_config`: config.json -> `ModelSpec` (layer kinds, state sizes, parameters, quantisation).
* `memory`: KV bytes per token and weight bytes per GPU under TP/PP.
* `inputs`: `CapacityInputs`, a GPU's memory by name, an engine's launch flags as inputs.
* `paging`: how one sequence occupies the cache (blocks, windows, constant state).
* `llamacpp`: llama-server's KV buffer, laid out from its flags.
* `engines`: each engine's memory rule for its KV pool (`ENGINE_RULES`).
* `plan`: `plan_capacity` / `plan_for_model`: pool, blocks, concurrency by context, headroom.
* `verdict`: a plan against a selection's constraints, with the alternatives that would fit.
* `measured`: the capacity an engine logged at start-up, against the prediction.
"""
