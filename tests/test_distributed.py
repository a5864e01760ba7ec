"""Speculative decoding on a sharded verifier (mlx.distributed, issue 16).

The fast part checks the pieces in this process (launch detection, options, the model-split
rules, rank 0's decisions shared on a group of one, the calculator's communication model).
The slow part launches real multi-process runs on localhost over the ring backend: sharded
speculative output equals sharded plain output for the olifant, hybrid and adaptive drafters
in both regimes, and single-process output; the commands print, stream and write files on
rank 0 only; and a rank killed or frozen mid-generation ends the run on every rank with one
clear error within seconds (the only timing bound here).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from olifant_mlx.engine import distributed as dist
from olifant_mlx.engine import GenerationOptions, Session, generate
from olifant_mlx.measure import calc

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import tiers  # noqa: E402
from sharded_models import PROMPTS, own_output_draft_model, tiny_verifier  # noqa: E402
from tiny_models import TinyVerifier, tiny_llama  # noqa: E402

LAUNCH = "import sys; from mlx._distributed_utils.launch import main; sys.exit(main())"  # mlx.launch
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(ROOT))


# -- helpers: launching ranks on localhost ----------------------------------------------------

def free_ports(n: int) -> int:
    """A first port of n consecutive free ones (mlx.launch --starting-port)."""
    import random

    for _ in range(200):
        base = random.randrange(20000, 60000 - n)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                s.bind(("127.0.0.1", p))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free ports")


def mlx_launch(n, argv, timeout=1200, stdin=None, env=None):
    """`mlx.launch --backend ring -n N -- python ARGV` on localhost."""
    cmd = [sys.executable, "-c", LAUNCH, "--backend", "ring", "-n", str(n), "--starting-port",
           str(free_ports(n)), "--env", "OPENBLAS_NUM_THREADS=1", "--", sys.executable, *argv]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=env or ENV)


def direct_launch(n, argv, folder, env=None):
    """The ranks started by hand, as on machines with no launcher watching them: a hostfile (in
    `folder`, the test's tmp_path) and MLX_RANK per process. Returns their Popen objects."""
    base = free_ports(n)
    hostfile = Path(folder) / "hosts.json"
    hostfile.write_text(json.dumps([[f"127.0.0.1:{base + r}"] for r in range(n)]))
    return [subprocess.Popen([sys.executable, *argv], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE,
                             env=dict(env or ENV, MLX_RANK=str(r), MLX_HOSTFILE=str(hostfile)))
            for r in range(n)]


def direct_run(n, argv, folder, timeout=1200):
    """direct_launch to the end: rank 0's output (a CompletedProcess) once every rank exited 0.
    Not through mlx.launch, whose I/O threads poll without sleeping (select on the ranks'
    always-writable stdin pipes) and so take one of this machine's two cores from the ranks:
    SmolLM2 over 3 ranks took 148 s under it and 50 s without. Tests that are about the
    launcher itself still use mlx_launch."""
    from concurrent.futures import ThreadPoolExecutor

    procs = direct_launch(n, argv, folder)
    try:                                 # every rank's pipes drained at once: none blocks on a full one
        with ThreadPoolExecutor(n) as pool:
            outs = list(pool.map(lambda p: p.communicate(timeout=timeout), procs))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for r, (p, (_, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {r} exited {p.returncode}:\n{err.decode()[-3000:]}"
    return subprocess.CompletedProcess(argv, 0, outs[0][0].decode(), outs[0][1].decode())


def result(proc) -> dict:
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert len(lines) == 1, f"rank 0's one result expected:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(lines[0][7:])


def errors(text: str) -> list:
    return [x for x in text.splitlines() if x.startswith("error:")]


# -- fast: the pieces ---------------------------------------------------------------------

def test_launch_detected_from_the_environment(tmp_path):
    hosts = tmp_path / "hosts.json"
    hosts.write_text(json.dumps([["10.0.0.1:5000"], ["10.0.0.2:5000"], ["10.0.0.3:5000"]]))
    assert dist.launch_env({}) is None
    assert dist.launch_env({"MLX_RANK": "2", "MLX_HOSTFILE": str(hosts)}) == dist.Launch("ring", 2, 3, "10.0.0.1")
    single = tmp_path / "one.json"
    single.write_text("")                      # mlx.launch -n 1 writes an empty hostfile
    assert dist.launch_env({"MLX_RANK": "0", "MLX_HOSTFILE": str(single)}).size == 1
    ibv = tmp_path / "ibv.json"
    ibv.write_text(json.dumps([[None, "rdma_en3"], ["rdma_en3", None]]))
    assert dist.launch_env({"MLX_RANK": "1", "MLX_IBV_DEVICES": str(ibv),
                            "MLX_JACCL_COORDINATOR": "192.168.1.10:32323"}) == \
        dist.Launch("jaccl", 1, 2, "192.168.1.10")
    assert dist.launch_env({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "3"}) == dist.Launch("mpi", 3, 4)
    assert dist.launch_env({"MLX_RANK": "1", "MLX_WORLD_SIZE": "2", "NCCL_HOST_IP": "10.1.1.1"}) == \
        dist.Launch("nccl", 1, 2, "10.1.1.1")
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    with pytest.raises(dist.DistributedError, match="not the JSON list"):
        dist.launch_env({"MLX_RANK": "0", "MLX_HOSTFILE": str(bad)})


def test_timeouts_and_modes_are_checked():
    assert dist.timeouts(None, {}) == (dist.DEFAULT_TIMEOUT_S, dist.CONNECT_TIMEOUT_S)
    assert dist.timeouts(None, {dist.TIMEOUT_ENV: "3", dist.CONNECT_ENV: "10"}) == (3.0, 10.0)
    assert dist.timeouts(5, {dist.TIMEOUT_ENV: "3"})[0] == 5.0
    for bad in (0, -1, "soon", 1e9):
        with pytest.raises(ValueError, match="seconds"):
            dist.timeouts(bad, {})
    with pytest.raises(ValueError, match="tensor or pipeline"):
        dist.check_mode("ring")


@pytest.mark.parametrize("argv", [["generate", "-p", "hi"], ["chat"],
                                  ["bench", "--prompts", "t=x.txt"]])
def test_sharded_outside_a_launch_is_an_error_before_loading(argv, monkeypatch, capsys):
    import olifant_mlx.verifier.loader as loader
    from olifant_mlx.cli import main

    for k in ("MLX_RANK", "MLX_HOSTFILE", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(loader, "load_verifier", lambda *a, **k: pytest.fail("a model was loaded"))
    assert main(argv + ["--sharded", "tensor"]) == 1
    err = capsys.readouterr().err
    assert "--sharded tensor needs two or more processes started by mlx.launch" in err
    assert main(argv + ["--dist-timeout", "-2"]) == 1
    assert "seconds" in capsys.readouterr().err


def split_case(config, n, mode="auto", family=None):
    """_split_mode for a model of this config over n ranks (the model built lazily, no weights)."""
    from mlx_lm.utils import _get_classes

    from olifant_mlx.verifier.loader import _split_mode

    cls, args_cls = _get_classes(config)
    model = cls(args_cls.from_dict(config))

    class FakeShard:
        size = n

    FakeShard.mode = mode
    return _split_mode("m", config, model, FakeShard())


SMOL = {"model_type": "llama", "hidden_size": 576, "num_hidden_layers": 30, "intermediate_size": 1536,
        "num_attention_heads": 9, "num_key_value_heads": 3, "rms_norm_eps": 1e-5, "vocab_size": 64,
        "tie_word_embeddings": True}


def test_which_models_split_how():
    from olifant_mlx.verifier import VerifierError

    assert split_case(SMOL, 3) == "tensor"                       # 9 heads / 3 KV heads: 3 ways
    with pytest.raises(VerifierError, match=r"9 attention heads and 3 KV heads do not split 2 ways"
                                            r" \(tensor parallel works over 3 ranks\)"):
        split_case(SMOL, 2, "tensor")
    with pytest.raises(VerifierError, match="mlx-lm has no pipeline for llama models"):
        split_case(SMOL, 2, "auto")                               # neither way: both reasons
    qwen = dict(SMOL, model_type="qwen2", num_hidden_layers=4)
    assert split_case(qwen, 2, "auto") == "pipeline"              # heads do not split, layers do
    assert split_case(dict(qwen, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128), 2) == "tensor"
    with pytest.raises(VerifierError, match="4 layers are fewer than the 5 ranks"):
        split_case(qwen, 5, "pipeline")


@pytest.fixture(scope="module")
def solo():
    """A group of one: every collective is the identity, so the hooks must change nothing."""
    from olifant_mlx.mlx_setup import mx

    return dist.Shard(mx.distributed.init(), dist.Launch("none", 0, 1))


def test_rank_zero_values_travel_unchanged(solo):
    assert solo.is_root and solo.size == 1
    assert solo.share_ints([3, 49151, 0, 262143]) == [3, 49151, 0, 262143]
    assert solo.share_ints([]) == []
    assert solo.share_ints(list(range(65))) == list(range(65))
    with pytest.raises(ValueError, match="at most 65"):
        solo.share_ints(list(range(66)))
    payload = json.dumps({"ids": list(range(5000)), "text": "naïve ✓"}).encode()
    assert solo.share_bytes(payload) == payload and solo.share_bytes(b"") == b""
    assert solo.share_json({"a": [1, 2]}) == {"a": [1, 2]}
    assert solo.share_flag(True) is True and solo.share_flag(False) is False
    solo.check_same("same model", "verifier")
    assert solo.traffic.collectives > 0 and solo.traffic.disagreements == 0


def test_options_travel_as_json():
    o = GenerationOptions(k=5, max_tokens=9, kv_cache=False, temperature=0.7, seed=3, top_k=4,
                          stop=("\n\n",), extra_eos_tokens=("<|x|>",), history="/rank0/only.hist")
    d = json.loads(json.dumps(dist.options_dict(o)))
    assert "history" not in d                       # the history file stays on rank 0
    back = GenerationOptions(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})
    assert back == o.replace(history=None)


ABANDON = """
import sys
sys.path.insert(0, {tests!r})
from tiny_models import TinyVerifier, tiny_llama
from olifant_mlx.engine import distributed as dist, GenerationOptions, Session
from olifant_mlx.mlx_setup import mx
shard = dist.Shard(mx.distributed.init(), dist.Launch("none", 0, 1))
s = Session(TinyVerifier(tiny_llama(0), shard), "lookup", GenerationOptions(k=3, max_tokens=20))
stream = s.stream(s.plan([1, 2, 3, 4]))
next(stream)
stream.close()
print("not reached")
"""


def test_a_sharded_stream_abandoned_half_way_ends_the_run():
    """Rank 0 must not leave a generation half done (the other ranks would wait for it): it
    ends the run saying so, instead of hanging them."""
    proc = subprocess.run([sys.executable, "-c", ABANDON.format(tests=str(HERE))], capture_output=True,
                          text=True, cwd=ROOT, env=ENV, timeout=300)
    assert proc.returncode == 1 and "not reached" not in proc.stdout
    assert errors(proc.stderr) == ["error: a generation on the sharded verifier was abandoned before its "
                                   "end: every rank must run it to the end (end it early with should_stop)"]


def test_the_hooks_change_nothing_on_one_rank(solo):
    """Session and loop with a Shard of one rank: the same tokens as without, every drafter
    wrapped so that rank 0's drafts are shared, every choice shared."""
    from olifant_mlx.drafters import AdaptiveDrafter, LookupDrafter

    model = tiny_llama(0)
    V = lambda shard=None: TinyVerifier(model, shard)   # noqa: E731

    prompt = [5, 9, 33, 2, 17, 40, 1, 8]
    for kv in (True, False):
        ref, _ = generate(model, prompt, max_tokens=30, kv_cache=kv)
        for drafter in (LookupDrafter(), AdaptiveDrafter(LookupDrafter())):
            opts = GenerationOptions(k=4, max_tokens=30, kv_cache=kv)
            before = solo.traffic.collectives
            alone = Session(V(), drafter, opts).generate(prompt)
            sharded = Session(V(solo), drafter, opts).generate(prompt, should_stop=lambda: False)
            assert alone.tokens == sharded.tokens == ref
            assert sharded.stats.extra["sharded"]["ranks"] == 1
            assert solo.traffic.collectives - before >= sharded.stats.steps   # drafts and choices
            assert solo.traffic.by_kind.get("stop", 0) > 0                    # should_stop shared


def test_the_calculator_models_sharded_passes():
    t = calc.pass_traffic(1, 576, 30, 3, "tensor")
    assert t["collectives"] == 60 and t["bytes_each"] == 2304 and t["hops"] == 240
    assert calc.pass_traffic(8, 576, 30, 3)["bytes"] == 8 * t["bytes"]
    assert calc.pass_traffic(1, 576, 30, 1)["collectives"] == 0
    p = calc.pass_traffic(4, 64, 4, 2, "pipeline")
    assert p["collectives"] == 2 and p["bytes"] == 2 * 4 * 64 * 4
    # a pure-latency link: every pass costs the same, whatever its size
    assert calc.pass_comm_ms(1, 576, 30, 3, 0.05, 1e12) == pytest.approx(calc.pass_comm_ms(8, 576, 30, 3, 0.05, 1e12))
    assert calc.ring_all_reduce_ms(3000, 3, 0.1, 1000.0) == pytest.approx(4 * (0.1 + 1.0))
    lat, bw = calc.fit_link([(b, 3, calc.ring_all_reduce_ms(b, 3, 0.2, 500.0)) for b in (100, 10_000, 1_000_000)])
    assert lat == pytest.approx(0.2) and bw == pytest.approx(500.0)
    costs = calc.sharded_verify_costs({1: 10.0, 8: 20.0}, {1: 30.0, 8: 30.0})
    assert costs == {1: 1.0, 8: pytest.approx(50 / 40)}
    # latency-bound passes make a k-token pass nearly free: speculation pays more when sharded
    assert calc.speedup_fast_path(0.7, 8, 0.01, costs[8]) > calc.speedup_fast_path(0.7, 8, 0.01, 3.0)
    with pytest.raises(ValueError):
        calc.pass_traffic(1, 576, 30, 3, "ring")


# -- slow: real multi-process runs on localhost ---------------------------------------------

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Random llama (tensor, 2 ranks) and qwen2 (pipeline) verifiers with draft models trained
    on their own output."""
    root = tmp_path_factory.mktemp("sharded")
    out = {}
    for family, layers in (("llama", 2), ("qwen2", 4)):
        folder = tiny_verifier(root / family, family, layers=layers)
        out[family] = (folder, own_output_draft_model(folder, root / f"{family}.olif"))
    return out


def drafter_specs(olif):
    return [f"olifant:{olif}", f"hybrid:{olif}", f"adaptive:olifant:{olif}", f"adaptive:hybrid:{olif}"]


def single_process_plain(folder_or_verifier, prompts, n):
    """(verifier, {prompt: plain tokens}) in this process; a loaded verifier is used as it is."""
    from olifant_mlx.verifier import load_verifier

    v = load_verifier(str(folder_or_verifier)) if isinstance(folder_or_verifier, (str, Path)) else folder_or_verifier
    out = {}
    for p in prompts:
        out[p] = Session(v, "none", GenerationOptions(k=0, max_tokens=n)).generate(p).tokens
    return v, out


def compare_logits(v, prompt, single, sharded, sharded_top2):
    """Where a sharded plain output leaves the single-process one (None: nowhere), and why: at
    every generated position where both still agree, the single-process greedy margin (top
    logit minus the runner-up) and how far the sharded top logit is from the single-process
    one. Returns (first differing position or None, [margins], largest deviation before it)."""
    from sharded_run import top2

    ids = v.encode(prompt)
    diff = next((i for i, (a, b) in enumerate(zip(single, sharded)) if a != b), None)
    mine = top2(v, ids + single)
    base = len(ids) - 1
    upto = len(single) if diff is None else diff + 1
    margins = [mine[base + i][1] - mine[base + i][3] for i in range(upto)]
    noise = max((abs(mine[base + i][1] - sharded_top2[base + i][1]) for i in range(upto if diff is None else diff)),
                default=0.0)
    return diff, margins, noise


def check_equalities(res, prompts, drafters, regimes, single=None, v=None):
    runs = res["runs"]
    for prompt in prompts:
        plain = {r: next(x for x in runs if x["prompt"] == prompt and x["regime"] == r and x["drafter"] == "none")
                 for r in regimes}
        assert len({tuple(p["tokens"]) for p in plain.values()}) == 1, "kv and uncached differ"
        for x in runs:
            if x["prompt"] == prompt and x["drafter"] != "none":
                assert x["tokens"] == plain[x["regime"]]["tokens"], (x["drafter"], x["regime"], prompt)
        if single is not None:
            ref, got = single[prompt], plain[regimes[0]]["tokens"]
            p, margins, noise = compare_logits(v, prompt, ref, got, res["top2"][prompt])
            if p is None:
                print(f"{prompt!r}: sharded == single-process for all {len(ref)} tokens (smallest "
                      f"greedy margin {min(margins):.3g}; sharded top logits within {noise:.3g})")
            else:            # float summation order across shards: allowed only at a near-tie
                print(f"{prompt!r}: sharded leaves single-process output at token {p}: greedy margin "
                      f"{margins[p]:.3g}, sharded top logits off by up to {noise:.3g} before it")
                assert margins[p] <= 4 * noise + 1e-6, (
                    f"sharded output leaves single-process output at token {p} with a greedy "
                    f"margin of {margins[p]:.3g}, far above the sharded logits' deviation {noise:.3g}")
    drafted = [x for x in runs if x["drafter"] != "none"]
    assert sum(x["accepted"] for x in drafted) > 0, "no draft was ever accepted: nothing was tested"
    assert any(x["fast_path"] for x in drafted if x["regime"] == "kv"), "the fast path never ran"
    assert res["traffic"]["disagreements"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("family,mode,ranks", [("llama", "tensor", 2), ("qwen2", "pipeline", 2),
                                               ("qwen2", "pipeline", 3)])
def test_sharded_speculation_equals_plain_and_single_process(tiny, family, mode, ranks, tmp_path):
    """The ranks started by hand (direct_run); under mlx.launch: the commands' and sampling tests."""
    folder, olif = tiny[family]
    prompts = [PROMPTS[0], PROMPTS[4]]
    specs = drafter_specs(olif)
    proc = direct_run(ranks, ["tests/sharded_run.py", "--model", str(folder), "--sharded", mode,
                              "--draft", *specs, "--regimes", "kv", "uncached", "-k", "4", "-m", "24",
                              "--margins", "-p", *prompts], tmp_path)
    res = result(proc)
    assert res["mode"] == mode and res["ranks"] == ranks
    v, single = single_process_plain(folder, prompts, 24)
    check_equalities(res, prompts, specs, ["kv", "uncached"], single, v)


@pytest.mark.slow
def test_sharded_sampling_stays_lossless(tiny):
    folder, olif = tiny["llama"]
    proc = mlx_launch(2, ["tests/sharded_run.py", "--model", str(folder), "--draft", f"adaptive:hybrid:{olif}",
                          "--regimes", "kv", "uncached", "-m", "20", "--temp", "0.8", "--seed", "7",
                          "-p", PROMPTS[0]])
    res = result(proc)
    assert res["mode"] == "tensor"          # detected: 4 heads and 2 KV heads split 2 ways
    plain = [x["tokens"] for x in res["runs"] if x["drafter"] == "none"]
    assert all(x["tokens"] == plain[0] for x in res["runs"])


@pytest.mark.slow
def test_smollm2_shards_three_ways_in_tensor_parallel(smol, draft_path, tmp_path):
    """The offline verifier: 9 heads and 3 KV heads split 3 ways, the ranks started by hand
    (direct_run: mlx.launch is the tiny models' tests'); drafts from the demo's draft model
    (the MIT licence text continued). The single-process reference runs on the session's
    loaded SmolLM2 (conftest's smol, draft_path): no second load here."""
    from olifant_mlx.cli.generate import DEMO_PROMPT

    v, single = single_process_plain(smol, [DEMO_PROMPT], 10)
    olif = draft_path
    specs = [f"olifant:{olif}", f"hybrid:{olif}", f"adaptive:hybrid:{olif}"]
    regimes = ["kv", "uncached"] if tiers.on() else ["kv"]     # the tiny models shard both in every run
    proc = direct_run(3, ["tests/sharded_run.py", "--model", "smollm2-135m", "--sharded", "tensor",
                          "--draft", *specs, "--regimes", *regimes, "-k", "6", "-m", "10",
                          "--margins", "-p", DEMO_PROMPT], tmp_path, timeout=3000)
    res = result(proc)
    assert res["mode"] == "tensor" and res["ranks"] == 3
    check_equalities(res, [DEMO_PROMPT], specs, regimes, single, v)


@pytest.mark.slow
def test_commands_print_and_write_on_rank_zero_only(tiny, tmp_path):
    from olifant_mlx.drafters.history import SessionHistory
    from olifant_mlx.verifier import load_tokenizer

    folder, olif = tiny["llama"]
    hist = tmp_path / "session.hist"
    args = ["-m", "olifant_mlx", "generate", "--model", str(folder), "--draft", f"adaptive:hybrid:{olif}",
            "-p", PROMPTS[1], "-m", "20", "--json", "--history", str(hist)]
    proc = mlx_launch(2, args)
    objs = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert len(objs) == 1, proc.stdout + proc.stderr           # one rank printed
    assert objs[0]["stats"]["sharded"]["mode"] == "tensor"
    alone = subprocess.run([sys.executable, *args[:-2]], capture_output=True, text=True, cwd=ROOT, env=ENV)
    assert json.loads(alone.stdout)["tokens"] == objs[0]["tokens"]
    tok = load_tokenizer(str(folder))
    assert SessionHistory(hist, tok.digest, tok.vocab_size).sessions == 1   # written once

    chat_args = ["-m", "olifant_mlx", "chat", "--model", str(folder), "--draft", f"olifant:{olif}",
                 "-m", "8", "--quiet"]
    chat = mlx_launch(2, chat_args, stdin="hello\nwhat next?\nq\n")
    chat_alone = subprocess.run([sys.executable, *chat_args], input="hello\nwhat next?\nq\n",
                                capture_output=True, text=True, cwd=ROOT, env=ENV)
    assert chat.stdout == chat_alone.stdout and chat.stdout.count("\n") == 2, chat.stderr  # two answers, once

    prompts = tmp_path / "prompts.txt"
    prompts.write_text(PROMPTS[0] + "\n")
    results = tmp_path / "results.jsonl"
    bench = mlx_launch(2, ["-m", "olifant_mlx", "bench", "--model", str(folder), "--prompts", f"t={prompts}",
                           "--strategy", f"a=adaptive:hybrid:{olif}", "--quick", "--n-prompts", "1",
                           "--max-tokens", "12", "--results", str(results), "--out-dir", str(tmp_path / "out"),
                           "--calibrate"])
    rows = [json.loads(x) for x in results.read_text().splitlines()]
    assert [r["strategy"] for r in rows] == ["plain", "a"], bench.stderr   # one rank wrote them
    assert rows[1]["exact_match"] and (tmp_path / "out" / "calibration.json").is_file()


def wait_for_output(proc, n_bytes, limit):
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    got, t = b"", time.monotonic()
    while len(got) < n_bytes and time.monotonic() - t < limit and proc.poll() is None:
        try:
            got += os.read(fd, 4096) or b""
        except BlockingIOError:
            time.sleep(0.05)
    return got


@pytest.mark.slow
@pytest.mark.parametrize("victim,sig,bound", [(1, signal.SIGKILL, 10), (0, signal.SIGKILL, 10),
                                              (1, signal.SIGSTOP, 3 + 10)],
                         ids=["rank-1-killed", "rank-0-killed", "rank-1-frozen"])
def test_a_lost_rank_ends_the_run_everywhere_within_seconds(tiny, victim, sig, bound, tmp_path):
    """Three ranks started by hand (no launcher to clean up after them), a long generation
    streaming on rank 0; one rank is killed (its sockets close) or frozen (they stay open:
    a hung machine, a pulled cable): the others exit with status 1 and one error line each,
    naming the lost rank."""
    folder, olif = tiny["qwen2"]
    procs = direct_launch(3, ["-m", "olifant_mlx", "generate", "--model", str(folder), "--sharded", "pipeline",
                              "--draft", f"adaptive:hybrid:{olif}", "-m", "3000", "-p", PROMPTS[2],
                              "--dist-timeout", "3"], folder=tmp_path)
    try:
        assert len(wait_for_output(procs[0], 10, 300)) >= 10, "rank 0 never started streaming"
        t = time.monotonic()
        os.kill(procs[victim].pid, sig)
        ended = {}
        while len(ended) < 2 and time.monotonic() - t < bound + 30:
            for r, p in enumerate(procs):
                if r != victim and r not in ended and p.poll() is not None:
                    ended[r] = time.monotonic() - t
            time.sleep(0.05)
        assert sorted(ended) == sorted(set(range(3)) - {victim}), f"still running after {bound + 30} s"
        assert max(ended.values()) < bound, ended
        for r in ended:
            err = procs[r].stderr.read().decode()
            assert procs[r].returncode == 1, (r, procs[r].returncode, err[-3000:])
            lines = errors(err)
            assert len(lines) == 1, (r, err[-3000:])
            assert f"rank {victim} of 3" in lines[0]
            assert ("disconnected" if sig == signal.SIGKILL else "stopped responding") in lines[0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


@pytest.mark.slow
def test_a_rank_killed_under_mlx_launch_ends_the_launch(tiny, tmp_path):
    """The same through mlx.launch: the rank's process found by its environment and killed."""
    folder, olif = tiny["llama"]
    mark = f"olifant-test-{os.getpid()}-{time.time_ns()}"
    cmd = [sys.executable, "-c", LAUNCH, "--backend", "ring", "-n", "2", "--starting-port", str(free_ports(2)),
           "--env", "OPENBLAS_NUM_THREADS=1", "--env", f"OLIFANT_TEST_MARK={mark}", "--", sys.executable,
           "-m", "olifant_mlx", "generate", "--model", str(folder), "--draft", f"olifant:{olif}",
           "-m", "3000", "-p", PROMPTS[3]]
    launcher = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert len(wait_for_output(launcher, 10, 300)) >= 10
        victim = next(pid for pid in _pids_with(f"OLIFANT_TEST_MARK={mark}") if _rank_of(pid) == 1)
        t = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        launcher.wait(timeout=40)
        assert time.monotonic() - t < 10
        assert not _pids_with(f"OLIFANT_TEST_MARK={mark}"), "a rank outlived the launch"
        err = launcher.stderr.read().decode()
        assert "rank 1 of 2" in err or "rank with rank 1" in err.lower() or "Node with rank 1" in err
    finally:
        if launcher.poll() is None:
            launcher.kill()
        for pid in _pids_with(f"OLIFANT_TEST_MARK={mark}"):
            os.kill(pid, signal.SIGKILL)


def _pids_with(marker: str) -> list:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker.encode() in (d / "environ").read_bytes() and b"python" in (d / "cmdline").read_bytes():
                    out.append(int(d.name))
            except OSError:
                continue
    return out


def _rank_of(pid: int):
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next((int(e.split(b"=", 1)[1]) for e in env if e.startswith(b"MLX_RANK=")), None)
