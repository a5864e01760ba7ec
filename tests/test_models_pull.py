"""`models pull`: the real download path (huggingface_hub's snapshot_download, through the
command in a subprocess) against a local fake hub on loopback serving the few endpoints it
uses and a tiny model's files; verification against the hub's sizes and sha256; `--default`
respected by the next command; an unreachable hub as one clear line within seconds."""
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = "olifant-test/tiny-llama"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def tiny_model_files(folder: Path) -> dict:
    """{name: bytes} of a tiny llama with SmolLM2's tokenizer: a model mlx-lm really loads."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama

    from olifant_mlx.verifier import resolve_model

    smol = Path(resolve_model("smollm2-135m"))
    config = {"model_type": "llama", "hidden_size": 16, "num_hidden_layers": 1, "intermediate_size": 32,
              "num_attention_heads": 2, "num_key_value_heads": 1, "rms_norm_eps": 1e-5,
              "vocab_size": 49152, "tie_word_embeddings": True, "max_position_embeddings": 512}
    mx.random.seed(0)
    model = llama.Model(llama.ModelArgs(**config))
    folder.mkdir()
    mx.save_safetensors(str(folder / "model.safetensors"), dict(tree_flatten(model.parameters())))
    files = {"config.json": json.dumps(config).encode(),
             "model.safetensors": (folder / "model.safetensors").read_bytes()}
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        files[name] = (smol / name).read_bytes()
    return files


class FakeHub:
    """The hub endpoints snapshot_download uses: the model's file list with sizes and LFS
    sha256 (GET /api/models/REPO/revision/REV) and each file (HEAD and GET
    /REPO/resolve/REV/NAME). `lie` names a file whose listed sha256 is wrong."""

    def __init__(self, files: dict, lie: str | None = None):
        self.files, self.lie, self.requests = files, lie, []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_HEAD(self):
                self.answer(body=False)

            def do_GET(self):
                self.answer(body=True)

            def answer(self, body):
                hub.requests.append((self.command, self.path))
                path = self.path.split("?")[0]
                if path.startswith(f"/api/models/{REPO}/tree/"):
                    data = json.dumps(hub.tree()).encode()
                    return self.send(200, data, {"Content-Type": "application/json"}, body)
                if path.startswith(f"/api/models/{REPO}"):
                    data = json.dumps(hub.info()).encode()
                    return self.send(200, data, {"Content-Type": "application/json"}, body)
                prefix = f"/{REPO}/resolve/"
                if path.startswith(prefix):
                    name = path[len(prefix):].split("/", 1)[1]
                    if name in hub.files:
                        data = hub.files[name]
                        etag = hashlib.sha256(data).hexdigest()
                        return self.send(200, data, {"X-Repo-Commit": COMMIT, "ETag": f'"{etag}"',
                                                     "Content-Type": "application/octet-stream"}, body)
                self.send(404, b'{"error": "not found"}', {"X-Error-Code": "EntryNotFound"}, body)

            def send(self, status, data, headers, body):
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def digest(self, name) -> str:
        return hashlib.sha256(self.files[name] + (b"x" if name == self.lie else b"")).hexdigest()

    def info(self) -> dict:
        siblings = []
        for name, data in self.files.items():
            entry = {"rfilename": name, "size": len(data)}
            if name.endswith(".safetensors"):
                entry["lfs"] = {"sha256": self.digest(name), "size": len(data), "pointerSize": 134}
            siblings.append(entry)
        return {"id": REPO, "modelId": REPO, "sha": COMMIT, "private": False, "siblings": siblings}

    def tree(self) -> list:
        out = []
        for name, data in self.files.items():
            entry = {"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
            if name.endswith(".safetensors"):
                entry["lfs"] = {"oid": self.digest(name), "size": len(data), "pointerSize": 134}
            out.append(entry)
        return out

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def cli(args, env, timeout=300):
    return subprocess.run([sys.executable, "-m", "olifant_mlx", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tiny_model_files(tmp_path_factory.mktemp("tiny") / "model")


def isolated_env(tmp_path, endpoint):
    env = {k: v for k, v in os.environ.items() if k not in ("OLIFANT_MODEL", "HF_HUB_OFFLINE", "HF_TOKEN")}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "hf"), OLIFANT_CACHE=str(tmp_path / "cache"),
               HF_HUB_DISABLE_TELEMETRY="1")
    return env


@pytest.mark.slow
def test_pull_downloads_verifies_and_becomes_the_default(files, tmp_path):
    hub = FakeHub(files)
    try:
        env = isolated_env(tmp_path, hub.url)
        r = cli(["models", "pull", REPO, "--default"], env)
        assert r.returncode == 0, r.stderr
        assert f"pulled {REPO}" in r.stdout and "sha256 match" in r.stdout and "default verifier is now" in r.stdout
        assert any(p.startswith(f"/{REPO}/resolve/") for _, p in hub.requests)     # the real download path
    finally:
        hub.close()
    snapshot = tmp_path / "hf" / "hub" / "models--olifant-test--tiny-llama" / "snapshots" / COMMIT
    for name, data in files.items():
        assert (snapshot / name).read_bytes() == data, name
    config = tmp_path / "cache" / "config.json"
    assert json.loads(config.read_text()) == {"default_model": REPO}
    assert (config.stat().st_mode & 0o777) == 0o600
    # the next command, with no --model and the hub gone, generates with the pulled default
    env["HF_HUB_OFFLINE"] = "1"
    r = cli(["generate", "-p", "hello", "-m", "4", "--draft", "none", "--json", "--ignore-chat-template"], env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["stats"]["tokens"] == 4
    r = cli(["models", "--json"], env)
    listing = json.loads(r.stdout)
    assert REPO in [v["name"] for v in listing["verifiers"]] and listing["default_verifier"] == REPO


@pytest.mark.slow
def test_a_file_that_does_not_match_the_hubs_sha256_is_refused(files, tmp_path):
    hub = FakeHub(files, lie="model.safetensors")
    try:
        r = cli(["models", "pull", REPO, "--default"], isolated_env(tmp_path, hub.url))
    finally:
        hub.close()
    assert r.returncode == 1 and "sha256 is not the hub's" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "cache" / "config.json").exists()       # not made the default


@pytest.mark.slow   # over 5 s on two cores: out of the 3-minute default loop
@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:9", "http://hub.invalid", "silent"])
def test_an_unreachable_hub_is_one_clear_line_in_seconds(tmp_path, endpoint):
    """A closed port, an unknown host, and a host that takes the connection and never answers
    (the request's 10-second timeout ends it)."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)                 # connections complete in the backlog; nothing ever answers
    if endpoint == "silent":
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
    t0 = time.monotonic()
    try:
        r = cli(["models", "pull", "mistral"], isolated_env(tmp_path, endpoint), timeout=120)
    finally:
        silent.close()
    elapsed = time.monotonic() - t0
    assert r.returncode == 1 and "Traceback" not in r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach the Hugging Face hub"), r.stderr
    assert "mlx-community/Mistral-7B-Instruct-v0.2-4bit" in lines[0] and "offline alias" in lines[0]
    assert elapsed < 60, elapsed        # seconds, not a hang (generous: a loaded machine)


def test_pull_names_and_a_bad_config_are_clear_errors(tmp_path, monkeypatch, capsys):
    from olifant_mlx.cli import main
    from olifant_mlx.verifier import default_model

    monkeypatch.setenv("OLIFANT_CACHE", str(tmp_path))
    monkeypatch.delenv("OLIFANT_MODEL", raising=False)
    for argv, why in ((["models", "pull"], "needs what to pull"),
                      (["models", "pull", "not a repo!"], "is not a hub id"),
                      (["models", "pull", "smollm2-135m"], "offline alias"),
                      (["models", "list", "--default"], "go with `models pull NAME`")):
        assert main(argv) == 1 and why in capsys.readouterr().err, argv
    (tmp_path / "config.json").write_text("{broken")
    with pytest.raises(Exception, match="config.json is not readable JSON"):
        default_model()
    assert main(["generate", "-p", "x", "--draft", "none"]) == 1
    assert "config.json is not readable JSON" in capsys.readouterr().err
    (tmp_path / "config.json").write_text(json.dumps({"default_model": "gemma3-270m"}))
    assert default_model() == "gemma3-270m"
    monkeypatch.setenv("OLIFANT_MODEL", "smollm2-135m")
    assert default_model() == "smollm2-135m"            # the environment still wins
