"""Stage 6, host: is this host ready to run a preset (driver, CUDA, Docker, GPUs, shm), one verdict per check."""
