"""mlx-lm's flags with mlx-lm's meanings (--verbose, --adapter-path, --prefill-response; serve's
--draft-model and a request's "model" naming any served verifier), each command's own usage on
an unknown flag. The real offline verifier against mlx-lm's own generate, a LoRA adapter made
with mlx-lm's LoRA utilities, the real server on loopback."""
import json
import subprocess
import sys

import pytest

from olifant_mlx.cli import build_parser, main
from olifant_mlx.cli.common import str2bool

PROMPT = "Name a colour."
PREFILL = "The colour is"
N = 10


def run_main(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as e:            # argparse usage errors
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def commands():
    parser = build_parser("olifant")
    return sorted(parser.get_default("commands"))


@pytest.mark.parametrize("command", commands())
def test_an_unknown_flag_prints_the_commands_own_usage(command, capsys):
    code, _, err = run_main([command, "--no-such-flag"], capsys)
    assert code == 2
    assert err.startswith((f"usage: olifant {command} ", f"usage: python -m olifant_mlx {command} ")), err
    # a command with required arguments says those are missing first (argparse checks them first)
    assert (f"{command}: error: unrecognized arguments: --no-such-flag" in err
            or f"{command}: error: the following arguments are required" in err), err


def test_an_unknown_flag_in_a_subprocess_names_the_command():
    r = subprocess.run([sys.executable, "-m", "olifant_mlx", "generate", "--bogus"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("usage: python -m olifant_mlx generate")
    assert "--prefill-response" in r.stderr and "Traceback" not in r.stderr


def test_verbose_is_mlx_lms_str2bool():
    p = build_parser("olifant")
    assert p.parse_args(["generate"]).verbose is True
    for text, value in (("False", False), ("f", False), ("FALSE", False), ("True", True), ("T", True),
                        ("yes", True)):
        assert str2bool(text) is value
        assert p.parse_args(["chat", "--verbose", text]).verbose is value
    from mlx_lm.generate import str2bool as theirs

    for text in ("False", "f", "T", "0", "no"):
        assert str2bool(text) == theirs(text), text


def test_bad_adapter_and_prefill_flags_fail_before_any_model_loads(monkeypatch, capsys, tmp_path):
    import mlx_lm

    import olifant_mlx.verifier.loader as loader

    def refuse(*a, **kw):
        raise AssertionError("a model was loaded before the arguments were checked")

    monkeypatch.setattr(mlx_lm, "load", refuse)
    monkeypatch.setattr(loader, "load_verifier", refuse)
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "adapter_config.json").write_text("{}")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "adapter_config.json").write_text("{nope")
    (tmp_path / "broken" / "adapters.safetensors").write_bytes(b"")
    base = ["generate", "--model", "smollm2-135m", "-p", "x"]
    cases = [
        (["--adapter-path", str(tmp_path / "missing")], "not a folder"),
        (["--adapter-path", str(tmp_path / "half")], "adapters.safetensors is missing"),
        (["--adapter-path", str(tmp_path / "broken")], "adapter_config.json is not readable JSON"),
        (["--prefill-response", "x", "--ignore-chat-template"], "cannot go with --ignore-chat-template"),
    ]
    for extra, why in cases:
        code, _, err = run_main(base + extra, capsys)
        assert code == 1 and why in err and "Traceback" not in err, (extra, err)
    code, _, err = run_main(["serve", "--model", "smollm2-135m", "--port", "0", "--adapter-path",
                             str(tmp_path / "half")], capsys)
    assert code == 1 and "adapters.safetensors is missing" in err
    code, _, err = run_main(["serve", "--port", "0", "--model", "a", "--models", "b", "c", "d", "e"], capsys)
    assert code == 1 and "at most 4 verifiers" in err
    code, _, err = run_main(["serve", "--port", "0", "--model", "a", "--models", "a"], capsys)
    assert code == 1 and "twice" in err
    code, _, err = run_main(["serve", "--port", "0", "--draft", "lookup", "--draft-model", "x"], capsys)
    assert code == 2 and "not allowed with argument" in err


def test_serve_draft_model_is_a_neural_drafter():
    from olifant_mlx.cli.serve import prepare

    args = build_parser("olifant").parse_args(["serve", "--draft-model", "smollm2-135m", "--port", "0",
                                               "--energy", "none"])
    choice, *_, sock = prepare(args)
    sock.close()
    spec = choice.specs["default"]
    assert spec.kind == "neural" and spec.arg == "smollm2-135m" and choice.default == "default"


# ---- the real offline verifier ------------------------------------------------------------

@pytest.fixture(scope="module")
def smol_path():
    from olifant_mlx.verifier import resolve_model

    return resolve_model("smollm2-135m")


def mlx_lm_text(path, prompt_ids, adapter_path=None):
    """mlx-lm's own greedy generation of N tokens (the reference), as text that is appended to
    the prompt's: decode(prompt + output) past decode(prompt), the space before its first word
    kept (issue 38; mlx-lm's streaming detokenizer drops it at the start of a generation)."""
    import mlx_lm

    model, tok = mlx_lm.load(path, adapter_path=adapter_path)
    # the last response of a generation that met an end token carries that token: not text
    out = [r.token for r in mlx_lm.stream_generate(model, tok, prompt_ids, max_tokens=N) if r.finish_reason != "stop"]
    before = tok.decode(prompt_ids)
    whole = tok.decode(list(prompt_ids) + out)
    assert whole.startswith(before)
    return whole[len(before):]


@pytest.mark.slow
def test_prefill_response_and_verbose_as_mlx_lm_generates(smol_path, capsys):
    import mlx_lm

    _, tok = mlx_lm.load(smol_path)
    messages = [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": PREFILL}]
    text = tok.apply_chat_template(messages, tokenize=False, continue_final_message=True,
                                   add_generation_prompt=False)
    ids = tok.encode(text, add_special_tokens=False)
    expected = mlx_lm_text(smol_path, ids)
    for draft in ("none", "lookup"):
        code, out, err = run_main(["generate", "--model", "smollm2-135m", "-p", PROMPT, "-m", str(N),
                                   "--draft", draft, "--prefill-response", PREFILL, "--verbose", "False"],
                                  capsys)
        assert code == 0 and out == expected + ("" if expected.endswith("\n") else "\n"), (draft, out, expected)
        assert err == "", err                                  # --verbose False: the response only
    code, out, err = run_main(["generate", "--model", "smollm2-135m", "-p", PROMPT, "-m", str(N),
                               "--draft", "none", "--prefill-response", PREFILL], capsys)
    assert out.rstrip("\n") == expected.rstrip("\n") and "Generation:" in err    # verbose by default
    code, out, _ = run_main(["generate", "--model", "smollm2-135m", "-p", PROMPT, "-m", str(N),
                             "--draft", "none", "--verbose", "F"], capsys)
    assert out.rstrip("\n") != expected.rstrip("\n")           # the prefill changes the answer


@pytest.mark.slow
def test_chat_prefills_every_answer(capsys):
    r = subprocess.run([sys.executable, "-m", "olifant_mlx", "chat", "--model", "smollm2-135m", "-m", str(N),
                        "--draft", "none", "--prefill-response", PREFILL, "--verbose", "False"],
                       input=f"{PROMPT}\nq\n", capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    code, out, _ = run_main(["generate", "--model", "smollm2-135m", "-p", PROMPT, "-m", str(N), "--draft",
                             "none", "--prefill-response", PREFILL, "--verbose", "False"], capsys)
    assert r.stdout.strip() == out.strip() and "tok/s" not in r.stderr


def make_adapter(path, folder):
    """A LoRA adapter made with mlx-lm's own LoRA utilities, saved as mlx_lm.lora saves one,
    its B matrices set to random values (a fresh adapter's are zero and would change nothing)."""
    import mlx.core as mx
    import mlx_lm
    from mlx.utils import tree_flatten
    from mlx_lm.tuner.utils import linear_to_lora_layers

    config = {"fine_tune_type": "lora", "num_layers": 4,
              "lora_parameters": {"rank": 4, "scale": 20.0, "dropout": 0.0}}
    model, _ = mlx_lm.load(path)
    model.freeze()
    mx.random.seed(7)           # before the LoRA layers too: their A matrices are drawn at random
    linear_to_lora_layers(model, config["num_layers"], config["lora_parameters"])
    weights = {}
    for name, w in tree_flatten(model.trainable_parameters()):
        weights[name] = mx.random.normal(w.shape) * 0.05 if name.endswith("lora_b") else w
    folder.mkdir()
    mx.save_safetensors(str(folder / "adapters.safetensors"), weights)
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.slow
def test_adapter_path_loads_lora_adapters_as_mlx_lm_does(smol_path, tmp_path, capsys):
    import mlx_lm

    adapter = make_adapter(smol_path, tmp_path / "adapter")
    _, tok = mlx_lm.load(smol_path)
    prompt = "The capital of France is"
    ids = tok.encode(prompt)
    with_adapter, without = mlx_lm_text(smol_path, ids, str(adapter)), mlx_lm_text(smol_path, ids)
    assert with_adapter != without                      # the adapter is not a no-op
    for draft in ("none", "lookup"):
        code, out, err = run_main(["generate", "--model", "smollm2-135m", "-p", prompt, "-m", str(N),
                                   "--ignore-chat-template", "--draft", draft, "--adapter-path",
                                   str(adapter), "--json"], capsys)
        assert code == 0, err
        assert json.loads(out.splitlines()[-1])["text"] == with_adapter, draft


@pytest.mark.slow
def test_a_request_may_name_any_served_verifier(smol, gemma):
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    from olifant_mlx.engine import GenerationOptions, Session
    from olifant_mlx.server.app import start
    from olifant_mlx.server.config import parse_drafters

    defaults = GenerationOptions(k=4, max_tokens=N)
    run = start(smol, parse_drafters("lookup", None), defaults, others=[gemma])
    try:
        with httpx.Client(base_url=run.url, timeout=300) as c:
            assert [m["id"] for m in c.get("/v1/models").json()["data"]] == ["smollm2-135m", "gemma3-270m"]
            assert c.get("/v1/models/gemma3-270m").json()["id"] == "gemma3-270m"
            prompt = "Monday, Tuesday, Wednesday,"
            for name, v in (("gemma3-270m", gemma), ("smollm2-135m", smol), (None, smol)):
                body = {"prompt": prompt, "max_tokens": N, **({"model": name} if name else {})}
                r = c.post("/v1/completions", json=body)
                assert r.status_code == 200, r.text
                expected = Session(v, "none", defaults).generate(prompt, defaults).text
                assert r.json()["choices"][0]["text"] == expected and r.json()["model"] == (name or smol.name)
            r = c.post("/v1/completions", json={"prompt": prompt, "model": "gpt-4"})
            err = r.json()["error"]
            assert r.status_code == 404 and err["code"] == "model_not_found" and err["param"] == "model"
            assert "'smollm2-135m', 'gemma3-270m'" in err["message"]
            r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                    "model": "gemma3-270m"})
            assert r.status_code == 400 and r.json()["error"]["code"] == "no_chat_template"
    finally:
        run.stop()


@pytest.mark.slow
def test_the_serve_command_with_draft_model_and_models(smol):
    """`serve --draft-model` (a neural drafter, mlx-lm's flag) and `--models`, the command itself:
    the drafted answer is the plain one, the second verifier answers under its name."""
    import os

    httpx = pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    from olifant_mlx.engine import GenerationOptions, Session

    from serve_process import free_port, stop, wait_until_serving

    port = free_port()
    smol_dir = smol.path          # the same weights as a folder: a second verifier
    p = subprocess.Popen([sys.executable, "-m", "olifant_mlx", "serve", "--model", "smollm2-135m", "--models",
                          smol_dir, "--draft-model", "smollm2-135m", "--port", str(port), "--energy", "none",
                          "-m", str(N)], stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    url = f"http://127.0.0.1:{port}"
    prompt = "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND,"
    try:
        wait_until_serving(p, url)
        models = [m["id"] for m in httpx.get(url + "/v1/models").json()["data"]]
        assert models == ["smollm2-135m", smol_dir]
        plain = Session(smol).generate(prompt, GenerationOptions(k=0, max_tokens=N)).text
        for name in ("smollm2-135m", smol_dir):
            r = httpx.post(url + "/v1/completions", json={"model": name, "prompt": prompt}, timeout=600).json()
            assert r["choices"][0]["text"] == plain and r["model"] == name
            assert r["usage"]["drafter"] == "default" and r["usage"]["drafted_tokens"] > 0
        r = httpx.post(url + "/v1/completions", json={"model": "nope", "prompt": prompt})
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    finally:
        code, err = stop(p)
    assert code == 0, err
    assert "drafters: default, none" in err and "Traceback" not in err
