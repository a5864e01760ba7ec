"""What one verifier pass did (`Step`) and the paper's metrics over a generation (`Stats`)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(kw_only=True)
class Step:
    index: int
    drafted: list               # tokens the drafter proposed
    accepted: int               # of those, accepted (and emitted)
    emitted: list               # tokens appended to the output this step
    verifier_token: int | None  # the verifier's own token emitted this step (correction/bonus)
    fast_path: bool             # KV regime: first draft rejected without a k-token pass
    forward_tokens: int         # tokens fed to the verifier this step
    draft_s: float              # the drafter's: drafting, then its accept/observe of the pass
    verify_s: float
    step_s: float
    finished: bool = False
    stop_reason: str = ""       # "eos" | "max_tokens" when finished
    led: bool = False           # KV regime: the pass was led by the previous step's correction
    next_led: bool = False      # ... and the next one will be (its drafts follow this correction)
    reproposed: bool = False    # the first draft is the token the verifier just rejected there
    queued: bool = False        # KV: its 1-token pass was queued (mx.async_eval), not awaited here
    waited_s: float = 0.0       # ... of verify_s, the wait for the previous step's queued pass


@dataclass
class Stats:
    """The paper's metrics for one generation."""
    tokens: int = 0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    prompt_tokens: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    fast_path_steps: int = 0
    forward_tokens: int = 0         # tokens fed to the verifier after the prefill
    partial_steps: int = 0          # passes that verified drafts and rejected one
    led_steps: int = 0              # KV passes led by the previous pass's correction
    reproposals: int = 0            # first drafts that re-proposed a token just rejected there
    stop_reason: str = ""
    pass_sizes: dict = field(default_factory=dict)  # tokens fed in a step -> steps (the cost model's)
    extra: dict = field(default_factory=dict)

    def add(self, s: Step):
        self.tokens += len(s.emitted)
        self.steps += 1
        self.drafted += len(s.drafted)
        self.accepted += s.accepted
        self.decode_s += s.step_s
        self.draft_s += s.draft_s
        self.verify_s += s.verify_s
        self.fast_path_steps += s.fast_path
        self.forward_tokens += s.forward_tokens
        self.pass_sizes[s.forward_tokens] = self.pass_sizes.get(s.forward_tokens, 0) + 1
        self.partial_steps += bool(s.drafted) and not s.fast_path and s.accepted < len(s.drafted)
        self.led_steps += s.led
        self.reproposals += s.reproposed
        if s.finished:
            self.stop_reason = s.stop_reason

    @property
    def seconds(self):
        return self.prefill_s + self.decode_s

    @property
    def tokens_per_s(self):
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def prompt_tps(self):
        """Prompt tokens per second of the prefill (KV regime; 0 when there was none)."""
        return self.prompt_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def generation_tps(self):
        """Generated tokens per second after the prefill."""
        return self.tokens / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def acceptance(self):
        """Fraction of drafted tokens the verifier accepted."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self):
        """Draft tokens accepted per verification step."""
        return self.accepted / self.steps if self.steps else 0.0

    @property
    def overhead_ms_per_step(self):
        """Everything but the verifier's forward passes, per step."""
        return 1e3 * (self.decode_s - self.verify_s) / self.steps if self.steps else 0.0

    def as_dict(self):
        d = asdict(self)
        d.pop("extra")
        d.pop("pass_sizes")             # for measurement code; outputs keep their fields
        d.update(self.extra, seconds=round(self.seconds, 4), tokens_per_s=round(self.tokens_per_s, 3),
                 prompt_tps=round(self.prompt_tps, 3), generation_tps=round(self.generation_tps, 3),
                 acceptance=round(self.acceptance, 4),
                 mean_accepted_length=round(self.mean_accepted_length, 4),
                 overhead_ms_per_step=round(self.overhead_ms_per_step, 4))
        return d
