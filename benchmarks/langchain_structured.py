"""langchain-openai's `with_structured_output` against `serve`: both methods, one model.

Starts the server in this process (server.app.start, a free loopback port, the drafter
`--draft`), then asks langchain-openai's ChatOpenAI for a pydantic object twice, with
method="json_schema" (response_format) and method="function_calling" (a forced tool call), on
a contract of tests/data/contracts.json, and prints what came back (the object, or the error),
with the seconds each took. langchain-openai is not in the test extra (it brings ten packages):
`pip install langchain-openai` first.

    python benchmarks/langchain_structured.py [--model smollm2-135m] [--draft lookup] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from pydantic import BaseModel, Field

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "data" / "contracts.json"


class Party(BaseModel):
    name: str = Field(max_length=80)
    role: str = Field(max_length=40)


class Contract(BaseModel):
    """The parties and terms of a contract."""
    parties: list[Party] = Field(min_length=2, max_length=4)
    governing_law: str = Field(max_length=60)
    notice_period_days: int = Field(ge=0, le=3650)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--draft", default="lookup")
    ap.add_argument("--contract", type=int, default=0)
    ap.add_argument("--out")
    args = ap.parse_args(argv)

    from langchain_openai import ChatOpenAI

    from olifant_mlx.drafters.registry import parse_spec
    from olifant_mlx.engine import GenerationOptions
    from olifant_mlx.server.app import start
    from olifant_mlx.server.config import DrafterChoice, Limits
    from olifant_mlx.verifier import load_verifier

    data = json.loads(FIXTURE.read_text())
    contract = data["contracts"][args.contract]
    t = time.perf_counter()
    verifier = load_verifier(args.model)
    loaded = time.perf_counter() - t
    run = start(verifier, DrafterChoice({"default": parse_spec(args.draft)}, "default"),
                GenerationOptions(max_tokens=200), Limits(default_max_tokens=200, timeout_s=1800), access_log=False)
    result = {"model": args.model, "drafter": args.draft, "contract": contract["id"], "load_s": round(loaded, 1),
              "load_average": os.getloadavg(), "facts": contract["facts"], "methods": {}}
    try:
        llm = ChatOpenAI(base_url=run.url + "/v1", api_key="unused", model=verifier.name, temperature=0,
                         max_retries=0, timeout=1800)
        question = ("Extract the parties, the governing law and the termination notice period in days from "
                    "this contract.\n\n" + contract["text"])
        for method in ("json_schema", "function_calling"):
            t = time.perf_counter()
            try:
                got = llm.with_structured_output(Contract, method=method).invoke(question)
                out = {"object": got.model_dump(), "type": type(got).__name__}
            except Exception as e:          # the point is to see what fails, and how
                out = {"error": f"{type(e).__name__}: {e}"[:500]}
            out["seconds"] = round(time.perf_counter() - t, 1)
            result["methods"][method] = out
            print(method, json.dumps(out), flush=True)
    finally:
        run.stop()
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
