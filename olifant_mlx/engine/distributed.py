"""Speculative decoding on a verifier sharded over several processes (`mlx.launch`).

MLX's engine does the sharding: `mx.distributed` (ring over TCP, jaccl over Thunderbolt, mpi,
nccl), mlx-lm's `Model.shard(group)` (tensor parallel) and `model.model.pipeline(group)`
(pipeline). What this module adds is what speculation needs on top of it:

- **Rank 0 decides, every rank computes.** Only rank 0 holds the drafter (its draft-model and
  history files need exist only there). Its drafts reach the other ranks by an MLX collective
  (`SharedDrafter`), and so does every choice of token the verifier makes (`Shard.choices`):
  the accepted prefix, the rollback and the fast path follow from those numbers alone, so every
  rank takes the same verifier passes and rolls its KV cache back by the same amount, even on
  machines whose float results differ in the last bit. Running the same drafter on every rank
  instead would not be exact: the adaptive drafter sizes its drafts from measured pass times,
  which differ from rank to rank.
- **Rank 0 runs the command, the others follow.** `generate`, `chat`, `bench` (and a server)
  run on rank 0 as they do alone; each generation is announced to the other ranks as a job
  (the prompt ids and the options: `Shard.begin`), which `follow` runs there. Only rank 0 reads
  input, prints, streams, writes files and measures energy.
- **A rank that fails ends the run everywhere, never a hang.** MLX's ring raises when a peer's
  process ends, but waits forever for a peer that hangs or whose network went away. A control
  channel beside MLX's (`Watchdog`: TCP, every rank to rank 0, a heartbeat every 0.5 s) carries
  errors and notices silence; whichever rank learns of a failure first prints one line and
  exits, and the others are told the same cause.

One verifier pass with tensor parallelism costs 2 all-reduces per layer of the new tokens'
hidden states (mlx-lm's sharded linears); this module adds one collective of 264 bytes per
draft and per choice of tokens (`Traffic`). docs/distributed.md has the measured costs.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import sys
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from olifant_mlx.drafters.base import DrafterBase, as_drafter
from olifant_mlx.mlx_setup import mx

MODES = ("tensor", "pipeline")
SLOT = 66                     # one length and up to 65 ids: k <= 64 drafts, or k + 1 choices
HEARTBEAT_S = 0.5
DEFAULT_TIMEOUT_S = 20.0      # silence after which a rank counts as lost
CONNECT_TIMEOUT_S = 90.0      # for every rank to start and reach the others
TIMEOUT_ENV = "OLIFANT_DIST_TIMEOUT"
CONNECT_ENV = "OLIFANT_DIST_CONNECT_TIMEOUT"
GRACE_S = 2.0                 # how long an MLX error waits for the control channel's cause
MLX_ERRORS = ("[ring]", "[jaccl]", "[mpi]", "[nccl]")     # how MLX's backends begin theirs


class DistributedError(RuntimeError):
    """A sharded run that cannot start or go on: a rank failed, hung or disconnected, or the
    ranks do not agree (different models, a model that cannot be split that way)."""


@dataclass(frozen=True)
class Launch:
    """How this process was started: by `mlx.launch` (or mpirun) as one of `size` ranks."""
    backend: str
    rank: int
    size: int
    root_host: str | None = None      # where rank 0 can be reached, when the launch says


def _json_file(path):
    try:
        text = open(path, encoding="utf-8").read().strip()
    except OSError:
        return None
    if not text:
        return []
    try:
        return json.loads(text)
    except ValueError:
        return None


def launch_env(env=None) -> Launch | None:
    """The launch this process belongs to, from the variables `mlx.launch` sets for each
    backend (ring: MLX_RANK and MLX_HOSTFILE; jaccl: MLX_IBV_DEVICES and
    MLX_JACCL_COORDINATOR; nccl: MLX_WORLD_SIZE and NCCL_HOST_IP; mpi: OMPI_COMM_WORLD_*),
    or None when it was started alone."""
    env = os.environ if env is None else env
    if "OMPI_COMM_WORLD_SIZE" in env:
        return Launch("mpi", int(env.get("OMPI_COMM_WORLD_RANK", 0)), int(env["OMPI_COMM_WORLD_SIZE"]))
    if "MLX_RANK" not in env:
        return None
    rank = int(env["MLX_RANK"])
    if env.get("MLX_IBV_DEVICES") or env.get("MLX_JACCL_COORDINATOR"):
        devices = _json_file(env.get("MLX_IBV_DEVICES", "")) or []
        coordinator = env.get("MLX_JACCL_COORDINATOR", "")
        return Launch("jaccl", rank, len(devices) or 1, coordinator.rpartition(":")[0] or None)
    if env.get("MLX_WORLD_SIZE"):
        return Launch("nccl", rank, int(env["MLX_WORLD_SIZE"]), env.get("NCCL_HOST_IP"))
    if "MLX_HOSTFILE" in env:
        hosts = _json_file(env["MLX_HOSTFILE"])
        if hosts is None:
            raise DistributedError(f"MLX_HOSTFILE {env['MLX_HOSTFILE']} is not the JSON list of "
                                   f"addresses mlx.launch writes")
        root = hosts[0][0].rpartition(":")[0] if hosts and hosts[0] else None
        return Launch("ring", rank, max(len(hosts), 1), root)
    return None


def _seconds(value, default, what) -> float:
    if value is None or value == "":
        return default
    try:
        s = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number of seconds, got {value!r}") from None
    if not 0 < s < 86400:
        raise ValueError(f"{what} must be between 0 and 86400 seconds, got {value!r}")
    return s


def timeouts(timeout=None, env=None) -> tuple:
    """(heartbeat timeout, connect timeout) in seconds: the argument, else $OLIFANT_DIST_TIMEOUT,
    else 20 s; $OLIFANT_DIST_CONNECT_TIMEOUT, else 90 s."""
    env = os.environ if env is None else env
    t = _seconds(timeout if timeout is not None else env.get(TIMEOUT_ENV), DEFAULT_TIMEOUT_S,
                 "the distributed timeout")
    return t, _seconds(env.get(CONNECT_ENV), CONNECT_TIMEOUT_S, CONNECT_ENV)


def check_mode(mode) -> str | None:
    if mode not in (None, "auto") + MODES:
        raise ValueError(f"--sharded must be tensor or pipeline, got {mode!r}")
    return mode


@dataclass
class Traffic:
    """What this module itself sent through MLX's collectives (the model's own all-reduces
    are counted by benchmarks/sharded.py)."""
    collectives: int = 0
    bytes: int = 0
    disagreements: int = 0      # this rank's own choice differed from rank 0's (adopted)
    by_kind: dict = field(default_factory=dict)

    def add(self, kind: str, nbytes: int) -> None:
        self.collectives += 1
        self.bytes += nbytes
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1


class Shard:
    """This process's part of a sharded run: the MLX group, its rank, the sharding mode, the
    control channel, and the collectives through which rank 0's decisions reach every rank.

    The engine and the Session use it without importing this module (`verifier.shard`): the
    loop through `drafter(d)` and `choices(pick)` (engine.collective.Collective), the Session
    through `begin(ids, options, should_stop)`."""

    def __init__(self, group, launch: Launch | None = None, mode: str = "auto",
                 timeout: float = DEFAULT_TIMEOUT_S):
        self.group = group
        self.rank, self.size = group.rank(), group.size()
        self.launch = launch or Launch("none", self.rank, self.size)
        self.backend = self.launch.backend
        self.mode = mode or "auto"
        self.timeout = timeout
        self.traffic = Traffic()
        self.watchdog = None
        self.closed = False

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    @property
    def label(self) -> str:
        return f"rank {self.rank} of {self.size}"

    def describe(self) -> dict:
        return {"mode": self.mode, "ranks": self.size, "backend": self.backend,
                "collectives": self.traffic.collectives, "bytes": self.traffic.bytes,
                "disagreements": self.traffic.disagreements}

    # -- collectives: rank 0's values on every rank ----------------------------------------

    def _sum(self, buf: np.ndarray, kind: str) -> np.ndarray:
        self.traffic.add(kind, buf.nbytes)
        out = mx.distributed.all_sum(mx.array(buf), group=self.group, stream=mx.cpu)
        return np.array(out)

    def share_ints(self, values, kind: str = "ints") -> list:
        """Rank 0's list of up to SLOT - 1 whole numbers, on every rank (others' are ignored)."""
        buf = np.zeros(SLOT, np.int32)
        if self.is_root:
            values = [int(v) for v in values]
            if len(values) >= SLOT:
                raise ValueError(f"at most {SLOT - 1} values per collective, got {len(values)}")
            buf[0] = len(values)
            buf[1:1 + len(values)] = values
        out = self._sum(buf, kind)
        return out[1:1 + int(out[0])].tolist()

    def share_bytes(self, data: bytes | None, kind: str = "bytes") -> bytes:
        """Rank 0's bytes on every rank: the length, then the bytes."""
        n = self.share_ints([len(data)] if self.is_root else [], kind)[0]
        if n == 0:
            return b""
        buf = np.zeros(n, np.uint8)
        if self.is_root:
            buf[:] = np.frombuffer(data, np.uint8)
        return self._sum(buf, kind).tobytes()

    def share_json(self, obj=None, kind: str = "json"):
        data = json.dumps(obj).encode() if self.is_root else None
        return json.loads(self.share_bytes(data, kind).decode())

    def share_flag(self, value: bool, kind: str = "flag") -> bool:
        return bool(self.share_ints([int(bool(value))] if self.is_root else [], kind)[0])

    def barrier(self) -> None:
        self._sum(np.ones(1, np.int32), "barrier")

    def check_same(self, text: str, what: str) -> None:
        """Every rank must hold the same `what` (its digest is compared with rank 0's)."""
        mine = np.frombuffer(hashlib.sha256(text.encode()).digest()[:16], np.uint8)
        self.traffic.add("check", mine.nbytes)
        every = np.array(mx.distributed.all_gather(mx.array(mine), group=self.group,
                                                   stream=mx.cpu)).reshape(self.size, -1)
        odd = [r for r in range(self.size) if not np.array_equal(every[r], every[0])]
        if odd:
            raise DistributedError(f"rank{'s' if len(odd) > 1 else ''} {', '.join(map(str, odd))} "
                                   f"of {self.size} loaded a different {what} than rank 0: every "
                                   f"machine needs the same model files")

    # -- the loop's collective (engine.collective.Collective) ----------------------------------

    def drafter(self, drafter) -> SharedDrafter:
        """The drafter the loop uses on this rank: rank 0's own, its drafts shared; elsewhere
        a stand-in that only receives them."""
        if isinstance(drafter, SharedDrafter):
            return drafter
        return SharedDrafter(as_drafter(drafter) if self.is_root else None, self)

    def choices(self, pick):
        """The verifier's choice function, made rank 0's: every rank computes its own (which
        also runs the pass's collectives) and takes rank 0's."""
        def shared(logits, position, context=()):
            own = pick(logits, position, context)
            many = isinstance(own, list)
            got = self.share_ints(own if many else [own], "choice")
            if not self.is_root and got != (own if many else [own]):
                self.traffic.disagreements += 1
            return got if many else got[0]
        # no lazy choice: a rank may only go on with rank 0's token, which needs the collective
        shared.lazy = lambda logits, position, context=(): None
        shared.lazy_ok = False
        return shared

    def begin(self, ids, options, should_stop=None):
        """The start of a generation on every rank: rank 0 announces the job (prompt ids and
        options) that `follow` runs elsewhere. Returns `should_stop` made rank 0's (asked
        after every pass, one collective), or None."""
        if self.is_root:
            self.announce({"kind": "generate", "ids": [int(t) for t in ids],
                           "options": options_dict(options), "stoppable": should_stop is not None})
        if should_stop is None:
            return None
        return lambda: self.share_flag(bool(should_stop()) if self.is_root else False, "stop")

    def announce(self, job: dict) -> None:
        """Rank 0: the next job for the other ranks ({"kind": ..., ...})."""
        self.share_json(job, "job")

    def receive(self) -> dict:
        """The other ranks: rank 0's next job."""
        return self.share_json(None, "job")

    def everywhere(self, kind: str, **args) -> None:
        """Rank 0: have the other ranks run the handler `kind` with these arguments (see
        `follow`'s handlers), before running it here."""
        if self.is_root:
            self.announce({"kind": kind, "args": args})

    # -- the run's life ----------------------------------------------------------------------

    def close(self) -> None:
        """A clean end: rank 0 tells the others there is no more work; every rank meets the
        others once more, then leaves the control channel."""
        if self.closed:
            return
        if self.is_root:
            self.announce({"kind": "end"})
        self.barrier()
        self.closed = True
        if self.watchdog is not None:
            self.watchdog.stop()

    def fail(self, message: str, status: int = 1, relay: str | None = None):
        """End the run on every rank: tell the others (rank 0 tells every rank; another rank
        tells rank 0, which tells the rest), print one line, exit. Never returns."""
        _fail(self, message, status, relay)

    def fail_with(self, exc: BaseException, status: int = 1):
        """An exception on this rank. MLX's own errors ("connection to a peer was lost") are
        consequences: the control channel, which knows which rank went away, gets a moment to
        report that first."""
        message = str(exc) or type(exc).__name__
        if self.watchdog is not None and message.startswith(MLX_ERRORS):
            time.sleep(GRACE_S)
        if not isinstance(exc, (ValueError, OSError, RuntimeError)):
            message = f"{type(exc).__name__}: {message}"
        self.fail(message, status)


def options_dict(options) -> dict:
    """GenerationOptions as JSON for the other ranks: every option but the rank-local ones
    (`Option.rank_local`: the drafter spec, whose drafter rank 0 alone builds (the others draft
    through SharedDrafter: a spec sent would have them build one), the history file and the
    libraries, which stay on rank 0, the cost models, which each rank fits itself)."""
    from olifant_mlx.engine.options import options as table

    return {name: getattr(options, name) for name, o in table().items() if not o.rank_local}


class SharedDrafter(DrafterBase):
    """Rank 0's drafter as every rank sees it: on rank 0 it drafts and shares the drafts; on
    the others it has no drafter at all, only rank 0's drafts (one collective per step)."""

    def __init__(self, inner, shard: Shard):
        self.inner, self.shard = inner, shard
        self.name = inner.name if inner is not None else "rank 0's drafter"
        self.wants_bos = inner.wants_bos if inner is not None else False

    def start(self, prompt):
        if self.inner is not None:
            self.inner.start(prompt)

    def draft(self, context, k):
        mine = [int(t) for t in self.inner.draft(context, k)[:k]] if self.inner is not None else []
        return self.shard.share_ints(mine, "draft")

    def accept(self, tokens):
        if self.inner is not None:
            self.inner.accept(tokens)

    def observe(self, step, kv_cache):
        if self.inner is not None:
            self.inner.observe(step, kv_cache)


def follow(verifier, shard: Shard, handlers=None) -> int:
    """What every rank but 0 does: run rank 0's jobs on this rank's shard of the verifier until
    rank 0 says there are no more. `handlers` maps other job kinds to functions
    handler(verifier, **args) (bench's calibration). Returns the number of jobs run."""
    from olifant_mlx.engine.session import GenerationOptions, Session

    handlers = dict(handlers or {})
    session = Session(verifier, SharedDrafter(None, shard))
    done = 0
    while True:
        job = shard.receive()
        kind = job.get("kind")
        if kind == "end":
            return done
        if kind == "generate":
            o = {k: tuple(v) if isinstance(v, list) else v for k, v in job["options"].items()}
            stop = (lambda: False) if job.get("stoppable") else None
            for _ in session.stream(session.plan(job["ids"], GenerationOptions(**o)), should_stop=stop):
                pass
        elif kind in handlers:
            handlers[kind](verifier, **job.get("args", {}))
        else:
            raise DistributedError(f"rank 0 sent a job this rank cannot run: {kind!r} (are all "
                                   f"machines running the same olifant_mlx version?)")
        done += 1


# -- starting a run -------------------------------------------------------------------------

def start(launch: Launch, mode: str = "auto", timeout: float | None = None) -> Shard:
    """Join the launch: MLX's group, then the control channel. Gives up with one clear error
    when the other ranks do not all turn up within the connect timeout."""
    beat, connect = timeouts(timeout)
    timer = threading.Timer(connect, lambda: _die(
        f"[rank {launch.rank} of {launch.size}] error: the {launch.size} ranks did not all connect "
        f"within {connect:g} s (${CONNECT_ENV}): are they all started, and do the hostfile's "
        f"addresses reach every machine?"))
    timer.daemon = True
    timer.start()
    try:
        try:
            group = mx.distributed.init(strict=True, backend=launch.backend)
        except RuntimeError as e:
            raise DistributedError(f"rank {launch.rank} of {launch.size} could not join the "
                                   f"{launch.backend} group: {e}") from e
        if group.size() != launch.size:
            raise DistributedError(f"the {launch.backend} group has {group.size()} ranks, the "
                                   f"launch {launch.size}")
        shard = Shard(group, launch, mode, beat)
        shard.watchdog = Watchdog(shard, beat, connect).start()
    finally:
        timer.cancel()
    return shard


def _die(line: str, status: int = 1):
    try:
        sys.stdout.flush()
    except Exception:
        pass
    try:
        # MLX's ring backend writes its own "[ring] " and its message in separate writes from
        # its threads; a line of ours landing between them would not start a line. One write,
        # after a newline, always does (at the cost of a blank line when nothing came before).
        sys.stderr.write("\n" + line.rstrip("\n") + "\n")
        sys.stderr.flush()
    except Exception:
        pass
    os._exit(status)


_FAILING = threading.Lock()


def _fail(shard: Shard, message: str, status: int, relay: str | None):
    if not _FAILING.acquire(blocking=False):     # another thread is already ending the run
        time.sleep(30)
        os._exit(status)
    if shard.watchdog is not None:
        if relay is None:
            relay = (f"rank 0 stopped the run: {message}" if shard.is_root
                     else f"{shard.label} failed: {message}")
        shard.watchdog.tell(relay)
    _die(f"error: {'' if shard.is_root else f'[{shard.label}] '}{message}", status)


def _line(sock, limit: int = 256) -> str:
    """One line from a socket, read byte by byte (nothing after it is consumed)."""
    out = b""
    while not out.endswith(b"\n") and len(out) < limit:
        b = sock.recv(1)
        if not b:
            break
        out += b
    return out.decode(errors="replace")


class Watchdog:
    """The control channel: every rank keeps one TCP connection to rank 0 (authenticated by a
    token rank 0 shares through MLX), each side sends a heartbeat every 0.5 s, and errors
    travel on it. A connection that closes without a goodbye, or stays silent for `timeout`
    seconds, is a lost rank: the run ends on every rank with that cause."""

    def __init__(self, shard: Shard, timeout: float, connect_timeout: float):
        self.shard, self.timeout, self.connect_timeout = shard, timeout, connect_timeout
        self.peers = {}                 # rank -> socket (rank 0: every other rank; else: {0: ...})
        self.names = {}                 # rank -> address, for messages
        self.send_lock = threading.Lock()
        self.stopping = threading.Event()
        self.gone = set()               # ranks that said goodbye

    def start(self) -> Watchdog:
        s = self.shard
        if s.size < 2:
            return self
        if s.is_root:
            host = s.launch.root_host
            try:
                server = socket.create_server((host or "", 0))
            except OSError:
                server = socket.create_server(("", 0))
            token = secrets.token_hex(16)
            s.share_json({"host": host or socket.gethostname(), "port": server.getsockname()[1],
                          "token": token}, "control")
            self._accept(server, token)
        else:
            info = s.share_json(None, "control")
            self._connect(info)
        for rank, sock in self.peers.items():
            threading.Thread(target=self._read, args=(rank, sock), daemon=True,
                             name=f"olifant-watchdog-{rank}").start()
        threading.Thread(target=self._beat, daemon=True, name="olifant-heartbeat").start()
        return self

    def _accept(self, server, token):
        server.settimeout(self.connect_timeout)
        deadline = time.monotonic() + self.connect_timeout
        try:
            while len(self.peers) < self.shard.size - 1:
                server.settimeout(max(deadline - time.monotonic(), 0.01))
                try:
                    conn, addr = server.accept()
                except TimeoutError:
                    missing = sorted(set(range(1, self.shard.size)) - set(self.peers))
                    raise DistributedError(
                        f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} did "
                        f"not reach rank 0's control port {server.getsockname()[1]} within "
                        f"{self.connect_timeout:g} s (a firewall between the machines?)") from None
                conn.settimeout(5.0)
                try:
                    hello = _line(conn).split()
                except OSError:
                    conn.close()
                    continue
                if len(hello) != 3 or hello[0] != "HELLO" or hello[1] != token \
                        or not hello[2].isdigit() or not 0 < int(hello[2]) < self.shard.size:
                    conn.close()        # not one of ours
                    continue
                conn.settimeout(self.timeout)     # reads and writes alike
                self.peers[int(hello[2])] = conn
                self.names[int(hello[2])] = addr[0]
        finally:
            server.close()

    def _connect(self, info):
        deadline = time.monotonic() + self.connect_timeout
        while True:
            try:
                sock = socket.create_connection((info["host"], info["port"]), timeout=5.0)
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    raise DistributedError(f"{self.shard.label} cannot reach rank 0's control port "
                                           f"{info['host']}:{info['port']}: {e}") from e
                time.sleep(0.2)
        sock.sendall(f"HELLO {info['token']} {self.shard.rank}\n".encode())
        sock.settimeout(self.timeout)
        self.peers[0] = sock
        self.names[0] = info["host"]

    def _who(self, rank) -> str:
        return f"rank {rank} of {self.shard.size} ({self.names.get(rank, '?')})"

    def _read(self, rank, sock):
        buf = b""
        while True:
            try:
                data = sock.recv(4096)
            except TimeoutError:
                self._lost(rank, f"{self._who(rank)} stopped responding: no heartbeat for "
                                 f"{self.timeout:g} s (hung, or the network to it is down)")
                return
            except OSError as e:
                data, err = b"", e
            else:
                err = None
            if not data:
                how = f"its connection was lost ({err.strerror or err})" if err else "its connection closed"
                self._lost(rank, f"{self._who(rank)} disconnected: {how}; the process ended or "
                                 f"was killed")
                return
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                self._message(rank, line.decode(errors="replace"))

    def _message(self, rank, line):
        if line == "BYE":
            self.gone.add(rank)
            return
        if line.startswith("ERR "):
            text = line[4:]
            if self.shard.is_root:          # tell the others, then end here
                self.tell(text, skip=rank)
            _fail(self.shard, text, 1, relay="")

    def _lost(self, rank, why):
        if rank in self.gone or self.stopping.is_set() or self.shard.closed:
            return
        _fail(self.shard, why, 1, relay=why if self.shard.is_root else "")

    def _beat(self):
        while not self.stopping.wait(HEARTBEAT_S):
            self._send(b"HB\n")

    def _send(self, data: bytes, skip=None):
        with self.send_lock:
            for rank, sock in list(self.peers.items()):
                if rank == skip:
                    continue
                try:
                    sock.sendall(data)
                except OSError:
                    pass                    # its reader will say what happened

    def tell(self, text: str, skip=None):
        """An error for the other ranks (rank 0: every other rank; else: rank 0)."""
        if text:
            self._send(("ERR " + text.replace("\n", " ") + "\n").encode(), skip)

    def stop(self):
        """Leave cleanly: a goodbye, then close (a closed connection is no longer a failure)."""
        self.stopping.set()
        self._send(b"BYE\n")
        for sock in self.peers.values():
            try:
                sock.close()
            except OSError:
                pass
