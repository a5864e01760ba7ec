"""olifant_mlx: private on-device text generation with memory-based (IGTree) speculative
decoding on MLX.

Layers, bottom up: `draftmodel` (the IGTree C library, corpora, training), `verifier` (mlx-lm
models, tokenizers, GGUF import), `drafters` (the Drafter contract and registry), `engine`
(the decoding loop and the Session API), `energy` (meters), `measure` (calculator, metrics,
benchmark sweep); `cli` and `tui` consume them.
"""
__version__ = "0.2.0"
