"""olifant_mlx: on-device text generation with memory-based (IGTree) speculative decoding."""
__version__ = "0.1.0"
