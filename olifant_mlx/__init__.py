"""olifant_mlx: private on-device text generation with memory-based (IGTree) speculative
decoding on MLX.

Layers, bottom up: `draftmodel` (the IGTree C library, corpora, training), `verifier` (mlx-lm
models, tokenizers, GGUF import), `drafters` (the Drafter contract and registry), `engine`
(the decoding loop and the Session API), `energy` (meters), `measure` (calculator, metrics,
benchmark sweep); `cli` and `tui` consume them.
"""
__version__ = "0.2.0"

import os as _os

# transformers' import prints "PyTorch was not found. Models won't be available ..." as an
# advisory warning: olifant_mlx uses only its tokenizers (the models run on MLX), so the notice
# is noise on every command. Only advisories are silenced, before anything imports
# transformers; a value the user set is kept.
_os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
