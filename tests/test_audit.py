"""The audit log (olifant_mlx/audit.py; issue 45, item 1): one JSON line per generation, hash-
chained, written like every other file (0600, created whole, never through a link, appends
fsynced and taken in turns by threads and processes), and `audit verify` naming the first line
that was changed, removed, inserted or reordered. Real files, real threads and processes, the
real command; the Session's lines with the tiny verifier."""
import json
import os
import stat
import subprocess
import sys
import threading

import pytest

from olifant_mlx import audit
from olifant_mlx.audit import GENESIS, AuditError, AuditLog, open_log, verify
from olifant_mlx.cli import build_parser, main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def written(path, n=8) -> list[bytes]:
    """A log of n lines written through the writer; its lines (with their newlines)."""
    log = AuditLog(path)
    for i in range(n):
        log.append({"key": f"key-{i}", "outcome": "ok", "tokens": {"completion": i}})
    return open(path, "rb").read().splitlines(keepends=True)


def verdict_of(tmp_path, lines) -> audit.Verdict:
    path = tmp_path / "edited.jsonl"
    path.write_bytes(b"".join(lines))
    return verify(path)


def test_a_log_is_a_chain_of_lines(tmp_path):
    path = tmp_path / "audit.jsonl"
    lines = written(path)
    rows = [json.loads(line) for line in lines]
    assert [r["seq"] for r in rows] == list(range(1, 9))
    assert rows[0]["prev"] == GENESIS
    assert all(rows[i]["prev"] == audit.line_hash(lines[i - 1].rstrip(b"\n")) for i in range(1, 8))
    assert list(rows[0]) == ["seq", "time", "key", "outcome", "tokens", "prev"]
    v = verify(path)
    assert v.intact and v.lines == 8 and v.last == audit.line_hash(lines[-1].rstrip(b"\n"))
    assert v.message(path) == f"{path}: 8 lines, chain intact (last line's sha256 {v.last})"
    assert verify(tmp_path / "audit.jsonl").intact
    (tmp_path / "empty.jsonl").write_bytes(b"")
    assert verify(tmp_path / "empty.jsonl").lines == 0 and verify(tmp_path / "empty.jsonl").intact


def test_verify_names_the_line_changed_removed_inserted_or_reordered(tmp_path, capsys):
    lines = written(tmp_path / "audit.jsonl")

    def edit(i, old, new):
        out = list(lines)
        assert old in out[i]
        out[i] = out[i].replace(old, new)
        return out

    forged = audit.encode(5, audit.line_hash(lines[3].rstrip(b"\n")), {"key": "key-x", "outcome": "ok"})
    cases = {   # what was done -> (the line named, the word that says what happened)
        "line 3's key changed": (edit(2, b'"key-2"', b'"key-9"'), 3, "changed"),
        "line 1's count changed": (edit(0, b'"completion":0', b'"completion":7'), 1, "changed"),
        "line 5's prev changed": (edit(4, b'"prev":"', b'"prev":"0'), 5, "changed"),
        "line 6's seq changed": (edit(5, b'"seq":6', b'"seq":60'), 6, "changed"),
        "line 1 not JSON": ([b"{oops\n"] + lines[1:], 1, "changed"),
        "line 4 removed": (lines[:3] + lines[4:], 4, "removed"),
        "lines 4-5 removed": (lines[:3] + lines[5:], 4, "2 line(s) removed"),
        "line 1 removed": (lines[1:], 1, "removed"),
        "a line forged in at 5": (lines[:4] + [forged] + lines[4:], 5, "inserted"),
        "line 2 copied in at 3": (lines[:2] + [lines[1]] + lines[2:], 2, "inserted"),
        "lines 2 and 3 swapped": (lines[:1] + [lines[2], lines[1]] + lines[3:], 2, "reordered"),
        "the last line moved first": ([lines[-1]] + lines[:-1], 1, "reordered"),
        "line 3 moved to the end": (lines[:2] + lines[3:] + [lines[2]], 3, "reordered"),
        "the last line cut short": (lines[:-1] + [lines[-1][:40]], 8, "incomplete"),
    }
    for what, (edited, line, word) in cases.items():
        v = verdict_of(tmp_path, edited)
        assert not v.intact and v.broken == line and word in v.what, (what, v)
    # the command: exit 1 naming the line on stderr, 0 with the count
    path = tmp_path / "edited.jsonl"
    path.write_bytes(b"".join(cases["line 4 removed"][0]))
    assert main(["audit", "verify", str(path)]) == 1
    assert capsys.readouterr().err == f"error: {path}: line 4: 1 line(s) removed before it (it was line 5)\n"
    assert main(["audit", "verify", str(tmp_path / "audit.jsonl"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["intact"] and out["lines"] == 8 and out["broken"] is None
    assert main(["audit", "verify", str(tmp_path / "missing.jsonl")]) == 1
    assert "missing.jsonl cannot be read" in capsys.readouterr().err


def test_writers_in_threads_and_processes_take_turns(tmp_path):
    path = tmp_path / "audit.jsonl"
    log = open_log(path)
    assert open_log(str(path)) is log          # one writer (one lock) per file in a process

    def write(i):
        for j in range(25):
            log.append({"key": f"thread-{i}", "n": j})

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    child = ("import sys; from olifant_mlx.audit import AuditLog\nlog = AuditLog(sys.argv[1])\n"
             "for j in range(40):\n    log.append({'key': 'process', 'n': j})\n")
    procs = [subprocess.Popen([sys.executable, "-c", child, str(path)], cwd=ROOT) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(p.wait(120) == 0 for p in procs)
    v = verify(path)
    assert v.intact and v.lines == 8 * 25 + 3 * 40, v
    rows = [json.loads(line) for line in path.read_bytes().splitlines()]
    for i in range(8):        # each writer's lines whole and in its order
        assert [r["n"] for r in rows if r["key"] == f"thread-{i}"] == list(range(25))


def test_the_file_is_private_whole_and_never_reached_through_a_link(tmp_path):
    path = tmp_path / "audit.jsonl"
    AuditLog(path).append({"outcome": "ok"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not [p for p in tmp_path.iterdir() if p.name != "audit.jsonl"]     # no temporary left
    os.chmod(path, 0o644)                      # an existing log readable by others is tightened
    AuditLog(path).append({"outcome": "ok"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and verify(path).lines == 2
    link = tmp_path / "link.jsonl"
    link.symlink_to(tmp_path / "victim.jsonl")     # a link to nothing: refused, its target never made
    with pytest.raises(AuditError, match="symbolic link to nothing"):
        AuditLog(link).append({"outcome": "ok"})
    with pytest.raises(AuditError, match="symbolic link to nothing"):
        audit.check_path(link)
    assert not (tmp_path / "victim.jsonl").exists()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(AuditError, match="FIFO"):
        audit.check_path(fifo)
    with pytest.raises(AuditError, match="FIFO"):
        AuditLog(fifo).append({"outcome": "ok"})
    with pytest.raises(AuditError, match="folder does not exist"):
        audit.check_path(tmp_path / "nowhere" / "audit.jsonl")
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(path.read_bytes()[:-5])      # a crash during an append: not appended to
    for call in (lambda: audit.check_path(torn), lambda: AuditLog(torn).append({"outcome": "ok"})):
        with pytest.raises(AuditError, match="last line is incomplete"):
            call()
    assert torn.read_bytes() == path.read_bytes()[:-5]


def test_every_surface_takes_the_flag_and_checks_it_before_any_model_loads(tmp_path, monkeypatch, capsys):
    import mlx_lm

    import olifant_mlx.verifier.loader as loader
    from olifant_mlx.cli.common import options_from

    def refuse(*a, **kw):
        raise AssertionError("a model was loaded before the arguments were checked")

    parser = build_parser("olifant")
    for command in ("generate", "chat", "tui", "revise", "serve"):
        extra = ["doc.docx", "-i", "x", "-m", "9"] if command == "revise" else []
        args = parser.parse_args([command, *extra, "--audit-log", str(tmp_path / "a.jsonl")])
        assert options_from(args).audit_log == str(tmp_path / "a.jsonl"), command
    monkeypatch.setattr(mlx_lm, "load", refuse)
    monkeypatch.setattr(loader, "load_verifier", refuse)
    os.mkfifo(tmp_path / "fifo")
    for command in (["generate", "-p", "x"], ["chat"], ["serve", "--port", "0"]):
        assert main([*command, "--model", "smollm2-135m", "--audit-log", str(tmp_path / "fifo")]) == 1
        assert f"audit log {tmp_path / 'fifo'} is a FIFO" in capsys.readouterr().err, command


def test_a_session_writes_a_line_per_generation_and_how_it_ended(tmp_path):
    from tiny_models import tiny_chat_verifier

    from olifant_mlx.engine import GenerationOptions, Session

    path = tmp_path / "audit.jsonl"
    session = Session(tiny_chat_verifier(), "none")
    opts = GenerationOptions(max_tokens=12, audit_log=str(path))
    result = session.generate("PERSIMMON-OCELOT wrote", opts)
    stream = session.stream(session.plan("PERSIMMON-OCELOT again", opts))
    next(stream)
    stream.close()                                  # abandoned half way
    session.generate("PERSIMMON-OCELOT stop", opts, should_stop=lambda: True)
    session.generate("no log", opts.replace(audit_log=None))
    rows = [json.loads(line) for line in path.read_bytes().splitlines()]
    assert [(r["outcome"], r["reason"]) for r in rows] == [("ok", "max_tokens"), ("stopped", "abandoned"),
                                                           ("stopped", "stopped")]
    assert rows[0]["tokens"] == {"prompt": len(session.encode("PERSIMMON-OCELOT wrote")), "precedents": 0,
                                 "completion": 12}
    assert rows[0]["key"] is None and rows[0]["passages"] == [] and rows[0]["matter"] is None
    text = path.read_text()
    assert "PERSIMMON" not in text and "OCELOT" not in text and result.text not in text
    assert verify(path).intact
