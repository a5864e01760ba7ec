"""The decoding engine: the loop (`loop`), the KV cache (`cache`), sampling (`sampling`),
metrics (`stats`), a generation's choices as one value (`request`: `Session.plan` makes a `Request`),
and the text-level `Session` every surface uses (`session`)."""
from olifant_mlx.engine.cache import PrefixCache, PromptCache
from olifant_mlx.engine.loop import MAX_K, generate, generate_steps
from olifant_mlx.engine.sampling import Sampling
from olifant_mlx.engine.session import (Chat, ContextError, GenerationOptions, OptionsError, Request, Response,
                                        Result, Session, step_kinds)
from olifant_mlx.engine.stats import Stats, Step

__all__ = ["MAX_K", "Chat", "ContextError", "GenerationOptions", "OptionsError", "PrefixCache", "PromptCache",
           "Request", "Response", "Result",
           "Sampling", "Session", "Stats", "Step", "generate", "generate_steps", "step_kinds"]
