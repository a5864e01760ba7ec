"""The measuring tools under benchmarks/ that published numbers depend on."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from child_process import run_measured  # noqa: E402

GROW = "import sys; x = bytearray({mb} << 20); x[::4096] = b'y' * len(x[::4096]); print('ok'); sys.exit(3)"


def test_a_childs_peak_rss_is_its_own_not_its_parents():
    """A parent holding 400 MB: subprocess's own wait4 would give its child a 400 MB peak
    (the high-water mark carried over at exec); run_measured gives the child's 60 MB."""
    held = bytearray(400 << 20)
    held[::4096] = b"x" * len(held[::4096])
    m = run_measured([sys.executable, "-c", GROW.format(mb=60)])
    assert (m["code"], m["stdout"]) == (3, b"ok\n")
    assert 60 <= m["peak_rss_mb"] < 200, m["peak_rss_mb"]
    assert m["cpu_s"] > 0
    del held
