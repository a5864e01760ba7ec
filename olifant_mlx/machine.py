"""What this machine offers a run: CPUs and memory (standard library only, cheap to import,
so the command line can show the defaults they give in --help)."""
from __future__ import annotations

import os

DEFAULT_MEMORY_SHARE = 2      # the training memory bound: half of physical_memory()
UNKNOWN_MEMORY_LIMIT = 4 << 30


def cpus() -> int:
    """CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def physical_memory() -> int | None:
    """Bytes of memory this process may use: the machine's RAM, or a smaller cgroup (v2 or v1)
    limit where one is set; None where neither can be read."""
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        ram = None
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                limit = int(f.read().strip())
        except (OSError, ValueError):     # absent, or "max"
            continue
        if ram is None or 0 < limit < ram:
            ram = limit
    return ram if ram and ram > 0 else None


def default_memory_limit() -> int:
    """The training builder's default memory bound: half of physical_memory() (4 GiB where
    that is unknown)."""
    ram = physical_memory()
    return ram // DEFAULT_MEMORY_SHARE if ram else UNKNOWN_MEMORY_LIMIT
