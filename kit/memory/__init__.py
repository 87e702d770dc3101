"""Stage 2, plan: the memory arithmetic vLLM does at start-up (weights, activations, CUDA graphs, KV cache against
--gpu-memory-utilization), predicted from a preset before anything is pulled, and read back from vLLM's log."""
