"""`demo` measures over rounds: the aggregation (unit tests) and the real command (slow)."""
import math
import re
import subprocess
import sys

import pytest

from olifant_mlx.measure import rounds


def test_median_range_and_spread_of_the_round_speedups():
    s = rounds.speedups([10.0, 10.0, 20.0], [15.0, 12.0, 30.0])
    assert s.values == (1.5, 1.2, 1.5)
    assert (s.median, s.low, s.high) == (1.5, 1.2, 1.5)
    assert math.isclose(s.spread, 1.25) and s.trusted


def test_a_wide_spread_or_too_few_rounds_is_not_trusted():
    wide = rounds.speedups([10, 10, 10], [10, 12, 13])          # 1.3x max/min
    assert not wide.trusted
    assert any("spread too wide to trust" in line for line in rounds.summary(wide))
    two = rounds.speedups([10, 10], [12, 12])
    assert not two.trusted
    assert any("too few rounds" in line for line in rounds.summary(two))
    zero = rounds.speedups([0.0, 10, 10], [5, 10, 10])         # a round that measured nothing
    assert zero.spread == math.inf and not zero.trusted


def test_summary_prints_median_range_and_load():
    s = rounds.speedups([10, 10, 10], [11, 12, 12.5])
    lines = rounds.summary(s, "load average 1.00 on 2 cores")
    assert lines == ["speedup 1.20x (median of 3 rounds, range 1.10-1.25x, load average 1.00 on 2 cores)"]


def test_unpaired_rates_are_an_error():
    with pytest.raises(ValueError, match="one plain and one speculative rate per round"):
        rounds.speedups([1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        rounds.speedups([], [])


@pytest.mark.parametrize("bad", ["0", "x", "101"])
def test_rounds_flag_is_checked(bad):
    r = subprocess.run([sys.executable, "-m", "olifant_mlx", "demo", "--rounds", bad], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "--rounds must be" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_demo_prints_the_median_and_range_over_rounds():
    r = subprocess.run([sys.executable, "-m", "olifant_mlx", "demo", "-m", "8", "--rounds", "3"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())                    # rich wraps at the terminal's width
    assert "outputs identical: yes" in out
    m = re.search(r"speedup (\d+\.\d\d)x \(median of 3 rounds, range (\d+\.\d\d)-(\d+\.\d\d)x, "
                  r"load average \d+\.\d\d on \d+ cores\)", out)
    assert m, out
    median, low, high = map(float, m.groups())
    assert low <= median <= high
    if high / low > rounds.SPREAD_LIMIT * 1.02:         # clear of the printed values' rounding
        assert "spread too wide to trust" in out
    elif high / low < rounds.SPREAD_LIMIT / 1.02:
        assert "spread too wide to trust" not in out


def test_compare_tab_text_shows_the_rounds_and_their_warning():
    from olifant_mlx.engine.stats import Stats
    from olifant_mlx.tui.render import compare_text

    plain, spec = Stats(), Stats()
    wide = rounds.speedups([10, 10, 10], [10, 20, 15])
    text = compare_text(plain, spec, same=True, measured=wide, rates=(10.0, 15.0))
    assert "speedup 1.50x (median of 3 rounds, range 1.00-2.00x" in text
    assert "spread too wide to trust" in text and "outputs identical: yes" in text
    assert "    10.0 tok/s" in text and "    15.0 tok/s" in text
