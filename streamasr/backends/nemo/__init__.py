"""The NVIDIA NeMo engine: cache-aware streaming FastConformer, CUDA or CPU."""
