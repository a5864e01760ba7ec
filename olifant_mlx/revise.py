"""Revising a document's clauses on instruction: the prompt each clause is revised with, and the
flags a revision gets when it looks wrong.

Every clause goes to the verifier alone, with the instruction, through its chat template (a base
model: a plain layout it continues), and the clause itself is the request's prediction, so the
drafter copies its unchanged runs (drafters.prediction).
"""
from __future__ import annotations

from olifant_mlx.engine.request import Chat

KEEP = ("Change only what the instruction asks: keep every other word, number and punctuation mark as "
        "it is, and reply with the revised clause alone.")
MOST_DELETED = 0.5      # a revision that keeps less than this share of the clause's words is flagged


def revision_prompt(session, instruction: str, clause: str):
    """What the verifier revises `clause` from: a Chat for an instruct model, the plain layout
    (instruction, clause, then "Revised clause:") for a base model."""
    instruction = " ".join(instruction.split())
    if session.verifier.has_chat_template:
        return Chat.of(f"Revise the clause below. Instruction: {instruction}\n{KEEP}\n\n{clause}")
    return f"Instruction: {instruction}\n{KEEP}\n\nClause:\n{clause}\n\nRevised clause:\n"


def max_tokens_for(clause_tokens: int) -> int:
    """Room for a revision of a clause of this many tokens: twice it and a proviso's worth."""
    return 2 * clause_tokens + 64
