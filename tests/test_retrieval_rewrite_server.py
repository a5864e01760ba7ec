"""The retrieval files rewritten under a real server (issue 24 item 1): `serve --drafters` with a
`rest:` and an `ngram-cache:` file, both replaced in place 100 times while requests draft with
them. On fa4fc7f the first request after a rewrite killed the server with SIGBUS (exit 135);
now the files are private copies: no signal, and every temperature-0 answer equals plain."""
import subprocess
import sys
import threading
import time

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from serve_process import free_port, stop, wait_until_serving  # noqa: E402

pytestmark = pytest.mark.slow    # the real offline verifier in a subprocess

PROMPTS = ["Permission is hereby granted, free of charge, to any person obtaining a copy",
           "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND",
           "Redistribution and use in source and binary forms, with or without"]
REWRITES = 100


def run_cli(*args):
    """A command in this process (the files it builds are the fixture here; the server under
    test is the subprocess): no second interpreter importing MLX for each build."""
    from olifant_mlx.cli import main

    assert main(list(args)) == 0, args


def test_files_replaced_in_place_under_a_drafting_server(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    run_cli("build-rest", "--corpus", "builtin:licenses", "--tokenizer", "smollm2-135m", "--out", f"{a}.sfx",
            "--ngram-cache", f"{a}.ngc", "--quiet")
    run_cli("build-rest", "--corpus", "builtin:licenses", "--tokenizer", "smollm2-135m", "--max-tokens", "3000",
            "--out", f"{b}.sfx", "--ngram-cache", f"{b}.ngc", "--quiet")
    versions = {ext: [(tmp_path / f"a.{ext}").read_bytes(), (tmp_path / f"b.{ext}").read_bytes()]
                for ext in ("sfx", "ngc")}
    assert all(x != y for x, y in versions.values())
    served = {ext: tmp_path / f"served.{ext}" for ext in versions}
    for ext, path in served.items():
        path.write_bytes(versions[ext][0])
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "olifant_mlx", "serve", "--model", "smollm2-135m", "--port", str(port),
                          "--energy", "none", "--drafters", f"rest=rest:{served['sfx']}",
                          f"ngram=ngram-cache:{served['ngc']}", "-m", "12"],
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    url = f"http://127.0.0.1:{port}"

    def ask(prompt, drafter):
        r = httpx.post(url + "/v1/completions", timeout=600, json={
            "prompt": prompt, "max_tokens": 12, "temperature": 0, "draft": drafter})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["drafter"] == drafter
        return r.json()["choices"][0]["text"]

    done = threading.Event()
    rewrites = []

    def rewrite():       # in place: the same inode, other bytes, other lengths
        for i in range(REWRITES):
            for ext, path in served.items():
                with open(path, "r+b") as f:
                    data = versions[ext][(i + 1) % 2]
                    f.write(data)
                    f.truncate(len(data))
            rewrites.append(i)
            time.sleep(0.05)     # spread over several requests, each drafting from the files
        done.set()

    try:
        wait_until_serving(p, url)
        plain = {q: ask(q, "none") for q in PROMPTS}
        for q in PROMPTS:                    # both drafters loaded before the rewrites start
            assert ask(q, "rest") == plain[q] and ask(q, "ngram") == plain[q]
        writer = threading.Thread(target=rewrite)
        writer.start()
        answered = 0
        while not done.is_set() or answered < 2 * len(PROMPTS):
            q = PROMPTS[answered % len(PROMPTS)]
            assert ask(q, "rest" if answered % 2 else "ngram") == plain[q], (answered, len(rewrites))
            answered += 1
        writer.join()
        assert answered >= 2 * len(PROMPTS)
        for q in PROMPTS:                    # and after the last rewrite
            assert ask(q, "rest") == plain[q] and ask(q, "ngram") == plain[q]
        assert len(rewrites) == REWRITES and p.poll() is None
    finally:
        code, err = stop(p)
    assert code == 0, (code, err[-2000:])       # not -SIGBUS (was: exit 135)
    assert "Traceback" not in err
