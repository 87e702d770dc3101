"""Stage 1, preset: a preset file -> a validated, typed preset, with what it names (the model's shape, vLLM's
flags at the pinned version, pooling runners, the hub artefacts a fetch gets, the tiny test models)."""
