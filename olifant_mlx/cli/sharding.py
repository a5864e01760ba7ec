"""Commands on a sharded verifier, under `mlx.launch` (docs/distributed.md).

    mlx.launch --backend ring -n 3 -- python -m olifant_mlx generate --model smollm2-135m \\
        --sharded tensor -p "..."

A command becomes sharded with two lines: `add_sharding_args(parser)` and
`set_defaults(func=sharded_command(cmd))`, and it loads its verifier with
`load_verifier(spec, shard=args.shard)` (`args.shard` is None when the process was started
alone, and the command runs as before). Under a launch, rank 0 runs the command as it would
alone; every other rank loads its shard of rank 0's verifier and follows rank 0's generations
(`engine.distributed.follow`) until rank 0's command returns. Commands need not know more, with
one rule: generate from one thread at a time (a generation is a sequence of collectives that
every rank joins in the same order; a server serialises its requests), and run every stream
to its last response: `should_stop` ends one early (rank 0's answer is shared after every
pass); a stream abandoned half way ends the run with an error rather than leave the other ranks
waiting.
"""
from __future__ import annotations

import functools

SHARDED_HELP = ("under mlx.launch: split the verifier over the launched processes, 'tensor' "
                "(every layer's heads and MLP split across ranks) or 'pipeline' (the layers "
                "split); default: detected from the launch, tensor where the model allows it")


def add_sharding_args(p) -> None:
    p.add_argument("--sharded", choices=["tensor", "pipeline"], help=SHARDED_HELP)
    p.add_argument("--dist-timeout", type=float, metavar="SECONDS",
                   help="under mlx.launch: a rank silent this long counts as lost and ends the "
                        "run on every rank (default 20; $OLIFANT_DIST_TIMEOUT)")


def not_launched_error(mode: str) -> str:
    return (f"--sharded {mode} needs two or more processes started by mlx.launch, e.g. "
            f"`mlx.launch --backend ring -n 3 -- python -m olifant_mlx generate --sharded {mode} "
            f"...` (docs/distributed.md)")


def sharded_command(command, handlers=None):
    """`command(args)` made to run under mlx.launch (see the module docstring); `handlers`
    are the follower-side functions of jobs other than generation (bench's calibration)."""
    @functools.wraps(command)
    def run(args) -> int:
        return run_sharded(args, command, handlers)
    return run


def run_sharded(args, command, handlers=None) -> int:
    from olifant_mlx.engine import distributed as dist

    mode = dist.check_mode(getattr(args, "sharded", None))
    timeout = getattr(args, "dist_timeout", None)
    dist.timeouts(timeout)                          # a bad value is an error before anything starts
    launch = dist.launch_env()
    if launch is None or launch.size < 2:
        if mode:
            raise ValueError(not_launched_error(mode))
        args.shard = None
        return command(args)
    shard = dist.start(launch, mode or "auto", timeout)
    args.shard = shard
    try:
        if shard.is_root:
            rc = command(args)
        else:
            from olifant_mlx.verifier import load_verifier

            dist.follow(load_verifier(None, shard=shard), shard, handlers)
            rc = 0
        shard.close()
    except KeyboardInterrupt:
        shard.fail("interrupted", 130)
    except BrokenPipeError:
        shard.fail("the output was closed", 141)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
        if code == 0:
            shard.close()
            return 0
        shard.fail(f"exited with status {code}" if isinstance(e.code, int) else str(e.code), code)
    except BaseException as e:   # noqa: B036 — every rank must hear of any failure
        shard.fail_with(e)
    return rc
