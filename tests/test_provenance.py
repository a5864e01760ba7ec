"""Provenance on a legal library built from the shared corpus (EUR-Lex acts, SmolLM2's
tokenizer, the real C suffix index): every reported span occurs verbatim at every reported
place, and no verbatim span of >= N ids is missed, both checked by a brute-force search here."""
from __future__ import annotations

import lzma
import random

import numpy as np
import pytest
from document_fixtures import cache_with_models

from olifant_mlx import library
from olifant_mlx.provenance import SourceTracker, find_sources, index_of
from olifant_mlx.verifier import load_tokenizer

N = 12
DOCS = 48           # library documents, from the validation split
FRESH = 12          # more documents, not in the library: the "fresh" text
WORDS = 900         # words kept of each


def legal_documents(shared, count):
    """The first `count` documents of the legal validation split, each cut to WORDS words."""
    docs, lines = [], []
    with lzma.open(shared / "corpora" / "legal" / "eurlexsum.valid.txt.xz", "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                lines.append(line.rstrip("\n"))
                continue
            if lines:
                docs.append(" ".join(" ".join(lines).split()[:WORDS]))
                lines = []
            if len(docs) == count:
                break
    return docs


@pytest.fixture(scope="module")
def legal(shared, tmp_path_factory):
    """The library `legal`: documents in matter folders `alpha` and `beta` (one by a .matter
    file: `gamma`), a few at the top; plus fresh documents' ids and the brute-force corpus."""
    tok = load_tokenizer("smollm2-135m")
    root = tmp_path_factory.mktemp("provenance")
    texts = legal_documents(shared, DOCS + FRESH)
    folder = root / "acts"
    for k, text in enumerate(texts[:DOCS]):
        sub = folder / ("alpha" if k % 3 == 0 else "beta" if k % 3 == 1 else "beta/sealed") \
            if k >= 3 else folder
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"act{k:03d}.txt").write_text(text + "\n")
    (folder / "beta" / "sealed" / ".matter").write_text("gamma\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OLIFANT_CACHE", str(cache_with_models(root / "cache")))
        library.build("legal", folder, tok)
        lib = library.load("legal")
        li = index_of(lib)
        yield {"tok": tok, "lib": lib, "li": li, "fresh": [tok.encode(t) for t in texts[DOCS:]]}


class Brute:
    """Every occurrence found by scanning: the library's documents as one array with a -1
    between documents, and each id's positions."""

    def __init__(self, li):
        stream = li.stream
        parts, self.where = [], []
        for row in li.indexed:
            parts += [stream[row["start"]:row["start"] + row["tokens"]].astype(np.int64), [-1]]
            self.where += [(row["id"], j) for j in range(row["tokens"])] + [None]
        self.text = np.concatenate(parts)
        order = np.argsort(self.text, kind="stable")
        ids, first = np.unique(self.text[order], return_index=True)
        self.at = {int(t): order[a:b] for t, a, b in zip(ids, first, list(first[1:]) + [len(order)])}

    def match(self, out, i):
        """(length of the longest prefix of out[i:] found, its occurrences)."""
        cand, length = self.at.get(int(out[i]), np.zeros(0, int)), 0
        while cand.size:
            length += 1
            if i + length == len(out):
                break
            nxt = cand[self.text[np.minimum(cand + length, len(self.text) - 1)] == out[i + length]]
            if not nxt.size:
                break
            cand = nxt
        return length, cand


def spliced(legal, rng, lengths):
    """Fresh text with library passages of the given lengths spliced in."""
    li, fresh = legal["li"], rng.choice(legal["fresh"])
    out, at = [], rng.randrange(len(fresh) - 400)
    for n in lengths:
        take = rng.randrange(5, 40)
        out += fresh[at:at + take]
        at += take
        row = rng.choice(li.indexed)
        s = row["start"] + rng.randrange(row["tokens"] - n)
        out += [int(t) for t in li.stream[s:s + n]]
    return out + fresh[at:at + 10]


def check_exact(legal, brute, out, sources, n=N):
    li = legal["li"]
    ms = [brute.match(out, i) for i in range(len(out))]
    want = [(i, i + m) for i, (m, _) in enumerate(ms) if m >= n and (i == 0 or m >= ms[i - 1][0])]
    assert [(s.start, s.end) for s in sources] == want
    for s in sources:
        assert s.tokens == s.end - s.start and s.count == len(ms[s.start][1]) and s.places
        for p in s.places:   # verbatim at the place given
            row = li.rows[p.document]
            got = li.stream[row["start"] + p.offset:row["start"] + p.offset + s.tokens]
            assert got.tolist() == out[s.start:s.end] and p.path == row["path"]
            assert row["paragraphs"][p.paragraph - 1] <= p.offset
    for i, (m, _) in enumerate(ms):   # no verbatim span >= n missed
        if m >= n:
            assert any(s.start <= i and i + m <= s.end for s in sources), (i, m)
    return ms


def test_a_hundred_spliced_texts_exact(legal):
    brute, rng = Brute(legal["li"]), random.Random(7)
    reported = 0
    for t in range(100):
        lengths = [rng.choice([N - 2, N - 1, N, N + 1, rng.randrange(3, 80)]) for _ in range(rng.randrange(1, 6))]
        out = spliced(legal, rng, lengths)
        sources = find_sources(legal["lib"], out, min_tokens=N)
        check_exact(legal, brute, out, sources)
        reported += len(sources)
        # the tracker, fed in random chunks, closes the same sources
        tracker, closed, at = SourceTracker(legal["lib"], min_tokens=N), [], 0
        while at < len(out):
            k = rng.randrange(1, 9)
            closed += tracker.feed(out[at:at + k])
            at += k
        closed += tracker.close()
        assert closed == sources, t
    assert reported >= 100       # the texts do hold copies


def test_sources_name_document_place_and_text(legal):
    tok, li = legal["tok"], legal["li"]
    row = li.indexed[5]
    para = row["paragraphs"][-1] if len(row["paragraphs"]) > 1 else 0
    s = row["start"] + para + 3
    copy = [int(t) for t in li.stream[s:s + 30]]
    out = legal["fresh"][0][:20] + copy + legal["fresh"][1][:20]
    (src,) = [x for x in find_sources(li, out, tokenizer=tok) if x.tokens >= 30]
    assert src.text == tok.decode(out[src.start:src.end])
    offset = s - row["start"] - (20 - src.start)        # where out[src.start] is in the document
    place = next(p for p in src.places if (p.document, p.offset) == (row["id"], offset))
    assert place.title == row["title"] and place.matter == row["matter"]
    assert place.char is not None and li.passage(place, src.tokens, tok) == src.text
    d = src.as_dict()
    assert d["places"][0]["path"].endswith(".txt") and d["tokens"] == src.tokens


def test_ids_that_are_no_token_ids_are_refused_not_wrapped(legal):
    """Issue 37, item 17: numpy's cast wrapped np.int64(-5) to 4294967291 and truncated 1.5."""
    li = legal["li"]
    good = [int(t) for t in li.stream[:20]]
    for bad, said in ((np.array(good[:5] + [-5]), "got -5"), (np.array(good[:5] + [1.5]), "got 1.5"),
                      ([*good[:5], -1], "got -1"), ([*good[:5], 2 ** 32], "got 4294967296"),
                      (np.array([1.0, np.nan]), "got nan")):
        with pytest.raises(ValueError, match=f"output token ids must be .*{said}"):
            find_sources(li, bad)
        with pytest.raises(ValueError, match=f"output token ids must be .*{said}"):
            SourceTracker(li).feed(bad)
    whole = np.array(good, dtype=np.float64)                 # whole floats are the same ids
    assert [s.as_dict() for s in find_sources(li, whole)] == [s.as_dict() for s in find_sources(li, good)]


def test_matters_recorded(legal):
    rows = legal["li"].rows
    by_path = {r["path"]: r["matter"] for r in rows}
    assert by_path["act000.txt"] is None
    assert by_path["alpha/act003.txt"] == "alpha" and by_path["beta/act004.txt"] == "beta"
    assert by_path["beta/sealed/act005.txt"] == "gamma"
    assert not any(r["path"].endswith(".matter") for r in rows)


def _copy_of(li, document, n, brute):
    """n ids of a document that occur nowhere else."""
    row = li.indexed[document]
    for off in range(0, row["tokens"] - n, 17):
        ids = [int(t) for t in li.stream[row["start"] + off:row["start"] + off + n]]
        if len(brute.match(ids, 0)[1]) == 1 and brute.match(ids, 0)[0] == n:
            return ids
    raise AssertionError("no unique passage")


def test_guard_fires_on_a_copy_and_respects_matters(legal):
    li, brute = legal["li"], Brute(legal["li"])
    alpha = next(k for k, r in enumerate(li.indexed) if r["matter"] == "alpha")
    copy = _copy_of(li, alpha, 60, brute)
    out = legal["fresh"][2][:30] + copy + legal["fresh"][3][:30]

    def run(matter):
        tracker = SourceTracker(li, max_verbatim=40, other_matters_of=matter)
        for i, t in enumerate(out):
            tracker.feed([t])
            tripped = tracker.guard_tripped()
            if tripped is not None:
                return i, tripped
        return None, None

    at, src = run(None)
    assert at is not None and src.tokens == 41 and out[src.start:src.end] == copy[:41]
    assert src.places[0].document == li.indexed[alpha]["id"]
    assert run("alpha") == (None, None)          # its own matter's document: no trip
    at_b, src_b = run("beta")
    assert at_b == at and src_b.places[0].matter == "alpha"


def test_guard_quiet_without_long_copies(legal):
    brute, rng = Brute(legal["li"]), random.Random(3)
    for _ in range(10):
        out = spliced(legal, rng, [rng.randrange(5, 25) for _ in range(4)])
        longest = max(brute.match(out, i)[0] for i in range(len(out)))
        tracker = SourceTracker(legal["lib"], max_verbatim=max(longest, 1))
        for t in out:
            tracker.feed([t])
            assert tracker.guard_tripped() is None
        assert tracker.longest_open <= longest


def test_old_libraries_read_matter_none(legal, tmp_path):
    import json
    lib = legal["lib"]
    rows = json.loads((lib.path / "documents.json").read_text())
    for r in rows["documents"]:
        r.pop("matter")
    (tmp_path / "documents.json").write_text(json.dumps(rows))
    old = library.Library("old", tmp_path, lib.meta)
    assert all(r["matter"] is None for r in old.table())


# ---- the engine hook: a Session over the legal library ---------------------------------------

def reference_session(legal, continuation, **opts):
    from olifant_mlx.engine import GenerationOptions, Session
    from olifant_mlx.engine.reference import ReferenceVerifier

    prompt = legal["fresh"][5][:16]
    verifier = ReferenceVerifier(legal["tok"], prompt, continuation)
    return Session(verifier, "none", GenerationOptions(max_tokens=len(continuation), **opts)), prompt


def test_session_reports_sources_and_the_guard_stops(legal):
    li, brute = legal["li"], Brute(legal["li"])
    alpha = next(k for k, r in enumerate(li.indexed) if r["matter"] == "alpha")
    copy = _copy_of(li, alpha, 50, brute)
    cont = legal["fresh"][6][:40] + copy + legal["fresh"][7][:40]
    session, prompt = reference_session(legal, cont, sources="legal")
    result = session.generate(prompt)
    assert result.finish_reason == "max_tokens" and result.tokens == cont
    assert [(s.start, s.end) for s in result.sources] == [(s.start, s.end) for s in find_sources(li, cont)]
    assert any(s.tokens >= 50 and s.places[0].document == li.indexed[alpha]["id"] for s in result.sources)
    # warn: the run is reported once, the text goes on
    session, prompt = reference_session(legal, cont, sources="legal", max_verbatim=30)
    trips = [r.verbatim for r in session.stream(session.plan(prompt)) if r.verbatim is not None]
    assert len(trips) == 1 and trips[0].tokens > 30
    # stop: the generation ends in the pass that went past the limit
    session, prompt = reference_session(legal, cont, sources="legal", max_verbatim=30, verbatim_action="stop")
    result = session.generate(prompt)
    assert result.finish_reason == "verbatim" and 40 + 30 < len(result.tokens) <= 40 + 32
    # another matter's copy stops it, its own matter's does not
    session, prompt = reference_session(legal, cont, sources="legal", max_verbatim=30,
                                        verbatim_action="stop", matter="alpha")
    assert session.generate(prompt).finish_reason == "max_tokens"


def test_the_span_that_trips_the_guard_is_listed_under_min_source_tokens(legal):
    li, brute = legal["li"], Brute(legal["li"])
    alpha = next(k for k, r in enumerate(li.indexed) if r["matter"] == "alpha")
    copy = _copy_of(li, alpha, 20, brute)
    cont = legal["fresh"][6][:40] + copy + legal["fresh"][7][:40]
    for action in ("stop", "warn"):
        session, prompt = reference_session(legal, cont, sources="legal", max_verbatim=10,
                                            min_source_tokens=60, verbatim_action=action)
        trips = []
        result_sources = []
        for r in session.stream(session.plan(prompt)):
            trips += [r.verbatim] if r.verbatim is not None else []
            result_sources += r.sources
        assert trips and (len(trips) == 1 or action == "warn"), action
        # each run the guard reported is listed (from where the run starts), nothing else is
        assert [s.start for s in result_sources] == [t.start for t in trips], action
        assert all(10 < s.tokens < 60 for s in result_sources), action


def test_session_without_a_library(legal):
    from olifant_mlx.engine.options import OptionsError

    session, prompt = reference_session(legal, legal["fresh"][8][:20])
    assert session.plan(prompt).index is None and session.generate(prompt).sources == []
    session, prompt = reference_session(legal, legal["fresh"][8][:20], max_verbatim=5)
    with pytest.raises(OptionsError, match="max verbatim needs a library"):
        session.generate(prompt)
    session, prompt = reference_session(legal, legal["fresh"][8][:20], sources="nothere")
    with pytest.raises(OptionsError, match="no library 'nothere'"):
        session.generate(prompt)


# ---- the real verifier (slow): SmolLM2's generations, and the command line --------------------

@pytest.mark.slow
def test_smollm2_generations_with_the_library_drafter_exact(legal, smol):
    from olifant_mlx.engine import GenerationOptions, Session

    li, brute = legal["li"], Brute(legal["li"])
    # spans of 4 or more: SmolLM2 rarely copies 12 tokens of an act, but often a legal phrase
    session = Session(smol, "library:legal", GenerationOptions(max_tokens=48, min_source_tokens=4))
    assert session.sources_library() == "legal"
    copied = 0
    for k in (3, 17, 31):                   # a document's opening: the drafter copies from it
        row = li.indexed[k]
        prompt = [int(t) for t in li.stream[row["start"]:row["start"] + 40]]
        result = session.generate(prompt)
        out = [int(t) for t in result.tokens]
        check_exact(legal, brute, out, result.sources, n=4)
        copied += sum(s.tokens for s in result.sources)
    assert copied > 0


@pytest.mark.slow
def test_generate_json_stream_shows_sources_and_warns(legal, smol, tmp_path):
    import json
    import os
    import subprocess
    import sys

    from olifant_mlx.engine import GenerationOptions, Session

    prompt = "Article 1\nThis Regulation lays down rules concerning"
    own = Session(smol, "none", GenerationOptions(max_tokens=40)).generate(prompt)
    folder = tmp_path / "echo"
    folder.mkdir()
    (folder / "echo.txt").write_text(prompt + own.text + "\n")       # the text it is about to write
    library.build("echo", folder, legal["tok"])
    r = subprocess.run([sys.executable, "-m", "olifant_mlx", "generate", "--model", "smollm2-135m",
                        "--draft", "none", "--ignore-chat-template", "-p", prompt, "-m", "40",
                        "--sources", "echo", "--max-verbatim", "20", "--json-stream"],
                       capture_output=True, text=True, env=dict(os.environ), timeout=600)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    events = [x for x in lines if x.get("type") == "source"]
    final = lines[-1]
    assert final["tokens"] == own.tokens and events and final["sources"] == [
        {k: v for k, v in e.items() if k != "type"} for e in events]
    assert all(p["path"] == "echo.txt" for e in events for p in e["places"])
    assert max(e["tokens"] for e in events) > 20
    assert "copies" in r.stderr and "from echo.txt" in r.stderr
    assert own.text.strip()[:30] not in r.stderr            # the guard names the place, not the text


def test_the_guard_line_starts_a_line_of_its_own(legal, tmp_path, monkeypatch):
    import argparse
    import io

    from olifant_mlx.cli.generate import stream_answer

    li, brute = legal["li"], Brute(legal["li"])
    alpha = next(k for k, r in enumerate(li.indexed) if r["matter"] == "alpha")
    cont = legal["fresh"][6][:40] + _copy_of(li, alpha, 50, brute) + legal["fresh"][7][:40]
    args = argparse.Namespace()
    for action in ("warn", "stop"):
        # stdout and stderr to one stream (a terminal): the line begins after a line break
        both = io.StringIO()
        monkeypatch.setattr("sys.stderr", both)
        session, prompt = reference_session(legal, cont, sources="legal", max_verbatim=30, verbatim_action=action)
        text, _, _ = stream_answer(session, session.plan(prompt, continuation=False), args, out=both)
        written = both.getvalue()
        at = written.index("the output copies")
        line = written[written.rindex("\n", 0, at) + 1:at]
        assert line in ("warning: ", "generation stopped: "), (action, line)
        before, after = written[:at - len(line) - 1], written[written.index("\n", at) + 1:]
        assert before + after == text and not before.endswith("\n"), action    # a break added mid-line
        # to two files: stderr holds the line alone, stdout the text alone
        with open(tmp_path / "out", "w+") as out, open(tmp_path / "err", "w+") as err:
            monkeypatch.setattr("sys.stderr", err)
            text, _, _ = stream_answer(session, session.plan(prompt, continuation=False), args, out=out)
            out.seek(0), err.seek(0)
            assert out.read() == text and err.read().startswith(line), action
