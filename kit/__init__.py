"""vllm-kit: presets to pinned, correct vLLM deployments."""

__version__ = "0.1.0"
