"""Energy meters on every fixture in ../shared/fixtures/energy: parsers, counters, windows, CLI.

The macOS backends cannot run here: their pure parts (IOReport channel rules, powermetrics
streams) are tested on recorded captures, the IOReport glue on a fake library serving a trace,
and the backends themselves must report unavailable.
All clocks are injected, so no test depends on timing.
"""
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from olifant_mlx.cli import main
from olifant_mlx.energy import EnergyUnavailable, Mark, MeterInfo, detect, open_meter, parse_spec
from olifant_mlx.energy import apple, ioreport, nvml, powermetrics, rapl
from olifant_mlx.energy.meter import StallWatch

ROOT = Path(__file__).resolve().parent.parent
STALL = "cpu energy counter stopped advancing"


class Clock:
    """A monotonic clock the test sets by hand."""

    def __init__(self, s=0.0):
        self.at(s)

    def at(self, s):
        self.t = int(round(s * 1e9))
        return self

    def __call__(self):
        return self.t


@pytest.fixture(scope="module")
def fx(shared):
    return shared / "fixtures" / "energy"


def replay_path(fx, name):
    return fx / "ioreport" / f"replay_{name}.json"


# --- IOReport channel rules (pure) -----------------------------------------------------------

@pytest.mark.parametrize("channel, domain", [
    ("CPU Energy", "cpu"), ("DIE_0_CPU Energy", "cpu"), ("DIE_1_CPU Energy", "cpu"),
    ("GPU Energy", "gpu"), ("DIE_1_GPU Energy", "gpu"), ("DIE_0_ANE0", "ane"), ("ANE", "ane"),
    ("ANE0", "ane"), ("ANE1", "ane"),
    ("DRAM", "dram"), ("DRAM1", "dram"), ("GPU SRAM0", "gpu_sram"),
    ("PACC0_CPU", None), ("EACC_CPU0", None), ("MCPU0_3", None), ("PCPU0DTL00", None),
    ("PCPU0_SRAM", None), ("GPU0", None), ("PCIe Port 0 Energy", None), ("ECPM", None)])
def test_channel_domain(channel, domain):
    assert apple.channel_domain(channel) == domain


def test_unit_labels_convert_to_joules():
    assert apple.unit_scale("mJ") == 1e-3
    assert apple.unit_scale(" uJ ") == 1e-6
    assert apple.unit_scale("\u00b5J") == 1e-6
    assert apple.unit_scale("nJ") == 1e-9
    assert apple.unit_scale("mW") is None
    rows = [apple.Row("Energy Model", "", "CPU Energy", "mJ", 1500),
            apple.Row("Energy Model", "", "GPU Energy", "nJ", 2_000_000_000),
            apple.Row("Energy Model", "", "ANE", "pJ", 7),
            apple.Row("CPU Stats", "", "CPU Energy", "mJ", 99)]
    joules, warnings = apple.joules(rows)
    assert joules == pytest.approx({"cpu": 1.5, "gpu": 2.0})
    assert len(warnings) == 1 and "'pJ'" in warnings[0]


# energy over the traces' two samples: derived by hand from the rules, not by the code
ZEUS = {
    "m1_max": {"cpu": 1.701, "gpu": 0.00910498, "ane": 0.0, "dram": 0.358, "gpu_sram": 0.0},
    "m3_pro": {"cpu": 2.131, "gpu": 0.004126124, "ane": 0.0, "dram": 0.060, "gpu_sram": 0.0},
    "m4": {"cpu": 2.174, "gpu": 0.0, "ane": 0.0, "dram": 0.061, "gpu_sram": 0.0},
    "m5_max": {"cpu": 2.0, "gpu": 0.005, "ane": 0.010, "dram": 0.100},        # no GPU SRAM rows
    "ultra_2die": {"cpu": 3.1, "gpu": 0.05, "ane": 0.035, "dram": 0.38, "gpu_sram": 0.07},
}


@pytest.mark.parametrize("chip", sorted(ZEUS))
def test_replay_of_each_chip(fx, chip):
    clock = Clock(0)
    meter = open_meter(f"replay:{replay_path(fx, chip + '_zeus_apple_silicon')}", clock=clock)
    assert meter.info.backend == "replay" and meter.info.method == "replay"
    assert meter.info.headline == ("cpu", "gpu", "ane") and meter.info.estimate
    a = meter.mark()
    clock.at(1.0)
    w = meter.between(a, meter.mark())
    assert w.joules == pytest.approx(ZEUS[chip])
    want = ZEUS[chip]["cpu"] + ZEUS[chip]["gpu"] + ZEUS[chip]["ane"]
    assert w.total_j == pytest.approx(want)                    # DRAM and GPU SRAM apart
    assert w.mean_power_w == pytest.approx(want)               # one second
    assert w.warnings == ()


def synthetic_powers(path):
    """The per-interval (cpu, gpu) watts the synthetic trace's provenance says it encodes."""
    text = json.loads(path.read_text())["provenance"]
    return json.loads(re.search(r"cpu,gpu = (\[\[.*?\]\])", text)[1])


def test_replay_power_and_stall(fx):
    path = replay_path(fx, "synthetic_burst_and_cpu_stall")
    powers = synthetic_powers(path)
    clock = Clock(0)
    meter = open_meter(f"replay:{path}", clock=clock)
    seen = []
    for i, (cpu, gpu) in enumerate(powers[:13], start=1):      # 14 samples, 13 intervals
        clock.at(0.25 * i)
        p = meter.power()
        assert p.seconds == pytest.approx(0.25)
        assert p.watts["gpu"] == pytest.approx(gpu)
        assert p.watts["dram"] == pytest.approx(0.4)
        if i <= 9:
            assert p.watts["cpu"] == pytest.approx(cpu)
        else:                                                   # the frozen CPU counter
            assert p.watts["cpu"] == 0.0
        seen.append(any(w.startswith(STALL) for w in p.warnings))
    # flat for 0.25 s and 0.5 s is not yet a stall; from 0.5 s on it is
    assert seen == [False] * 10 + [True] * 3


def test_replay_drives_a_window_to_a_known_total(fx):
    path = replay_path(fx, "synthetic_burst_and_cpu_stall")
    clock = Clock(0)
    meter = open_meter(f"replay:{path}", clock=clock)
    clock.at(0.5)
    a = meter.mark()
    clock.at(1.25)
    b = meter.mark()
    w = meter.between(a, b)
    # the burst: (6.5 + 7.0 + 6.8) W x 0.25 s CPU + (14.0 + 15.5 + 15.1) W x 0.25 s GPU
    assert w.total_j == pytest.approx(5.075 + 11.15)
    assert w.joules["dram"] == pytest.approx(0.3)
    assert w.seconds == pytest.approx(0.75)
    assert w.j_per_100_tokens(50) == pytest.approx(100 * 16.225 / 50)
    assert w.tokens_per_joule(50) == pytest.approx(50 / 16.225)
    d = w.as_dict(n_tokens=50)
    assert d["backend"] == "replay" and d["headline"] == ["cpu", "gpu", "ane"]
    assert d["method"] == "replay" and d["energy_j"] == pytest.approx(16.225)
    # windows add up: start..stop equals the sum of the windows between
    clock.at(2.75)
    meter.read()         # a live reading; stalls are seen by reads (flat 2.75 -> 3.25 s)
    clock.at(3.25)
    c = meter.mark()
    assert meter.between(a, c).total_j == pytest.approx(w.total_j + meter.between(b, c).total_j)
    # the stall shows in the windows over it, not in the burst's
    assert any(x.startswith(STALL) for x in meter.between(b, c).warnings)
    assert not any(x.startswith(STALL) for x in w.warnings)


def test_replay_steps_and_loops(fx):
    path = replay_path(fx, "synthetic_burst_and_cpu_stall")
    clock = Clock(0)
    meter = open_meter(f"replay:{path}", clock=clock)
    start = meter.start()
    clock.at(0.3)                     # between samples: the last recorded sample counts
    assert meter.read().joules["cpu"] == pytest.approx(0.3)
    clock.at(3.25)
    once = meter.read().total_j
    assert once == pytest.approx(6.95 + 11.725)
    clock.at(6.5)                     # looped once: counters continue
    assert meter.read().total_j == pytest.approx(2 * once)
    assert meter.between(start, meter.mark()).total_j == pytest.approx(2 * once)
    clock.at(0)
    stopped = open_meter(f"replay:{path}", clock=clock, loop=False)
    clock.at(5.0)
    r = stopped.read()
    assert r.total_j == pytest.approx(once)
    assert any("replay trace ended" in w for w in r.warnings)


def test_replay_rejects_bad_traces(fx, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "something-else/2", "samples": []}))
    with pytest.raises(EnergyUnavailable, match="format"):
        open_meter(f"replay:{bad}")
    one = tmp_path / "one.json"
    data = json.loads(replay_path(fx, "m4_zeus_apple_silicon").read_text())
    one.write_text(json.dumps({**data, "samples": data["samples"][:1]}))
    with pytest.raises(EnergyUnavailable, match="two samples"):
        open_meter(f"replay:{one}")
    with pytest.raises(EnergyUnavailable, match="cannot read"):
        open_meter(f"replay:{tmp_path / 'missing.json'}")


def test_unknown_unit_in_a_trace_is_left_out_with_a_warning(fx, tmp_path):
    data = json.loads(replay_path(fx, "m1_max_zeus_apple_silicon").read_text())
    for s in data["samples"]:
        for r in s["rows"]:
            if r["channel"] == "GPU Energy":
                r["unit"] = "pJ"
    path = tmp_path / "odd_unit.json"
    path.write_text(json.dumps(data))
    clock = Clock(0)
    meter = open_meter(f"replay:{path}", clock=clock)
    assert "gpu" not in meter.info.domains
    a = meter.mark()
    clock.at(1)
    w = meter.between(a, meter.mark())
    assert w.total_j == pytest.approx(1.701)
    assert any("'GPU Energy'" in x and "'pJ'" in x for x in w.warnings)


def test_stall_watch_ignores_an_idle_machine():
    watch = StallWatch("cpu", 0, after_s=0.5)
    assert all(watch.update(t * 10**8, {"cpu": 0.0, "gpu": 0.0}) is None for t in range(1, 30))
    watch = StallWatch("cpu", 0, after_s=0.5)
    assert watch.update(6 * 10**8, {"cpu": 0.0, "gpu": 1.0}).startswith(STALL)
    assert watch.update(7 * 10**8, {"cpu": 0.1, "gpu": 1.0}) is None     # moving again


def test_ioreport_imports_and_reports_unavailable_off_macos():
    ffi = ioreport.build_ffi()                         # the cdef parses on any platform
    assert ffi.sizeof("CFIndex") == ffi.sizeof("long")
    assert {"CFIndex", "IOReportSubscriptionRef", "CFDictionaryRef"} <= set(ffi.list_types()[0])
    if sys.platform == "darwin":
        pytest.skip("on macOS the backend may be available")
    assert "macOS-only" in ioreport.unavailable()
    with pytest.raises(EnergyUnavailable, match="macOS-only"):
        open_meter("ioreport")


class Ref:
    """A stand-in for a CoreFoundation object."""

    def __init__(self, value):
        self.value = value


class FakeIOReport:
    """libIOReport + CoreFoundation serving a recorded trace, counting CF objects made and freed."""

    def __init__(self, ffi, trace):
        self.ffi, self.samples, self.live, self.handles = ffi, iter(trace["samples"]), set(), []

    def _new(self, value):
        ref = Ref(value)
        self.live.add(ref)
        return ref

    def _sample(self, rows):
        return self._new({"IOReportChannels": Ref([Ref(r) for r in rows])})

    def CFRelease(self, ref):
        if isinstance(ref, self.ffi.CData):
            ref = self.ffi.from_handle(ref)
        self.live.remove(ref)         # fails on a double release or a borrowed object

    def CFStringCreateWithCString(self, alloc, s, enc):
        return self._new(s.decode())

    def CFStringGetCString(self, ref, buf, size, enc):
        b = ref.value.encode() + b"\0"
        buf[0:len(b)] = b
        return 1

    def CFDictionaryGetCount(self, d):
        return len(d.value)

    def CFDictionaryGetValue(self, d, key):
        return d.value[key.value]

    def CFDictionaryCreateMutableCopy(self, alloc, capacity, d):
        return self._new(dict(d.value))

    def CFArrayGetCount(self, a):
        return len(a.value)

    def CFArrayGetValueAtIndex(self, a, i):
        return a.value[i]

    def IOReportCopyChannelsInGroup(self, group, subgroup, a, b, c):
        return self._new({"group": group.value})

    def IOReportCreateSubscription(self, a, desired, out, channel_id, b):
        self.handles.append(self.ffi.new_handle(self._new("subscribed")))
        out[0] = self.handles[-1]
        return self._new("subscription")

    def IOReportCreateSamples(self, sub, desired, a):
        return self._sample(next(self.samples)["rows"])

    def IOReportCreateSamplesDelta(self, prev, cur, a):
        rows = zip(prev.value["IOReportChannels"].value, cur.value["IOReportChannels"].value)
        return self._sample([{**c.value, "value": c.value["value"] - p.value["value"]}
                             for p, c in rows])

    def IOReportChannelGetGroup(self, item):
        return Ref(item.value["group"])

    def IOReportChannelGetSubGroup(self, item):
        return Ref(item.value["subgroup"])

    def IOReportChannelGetChannelName(self, item):
        return Ref(item.value["channel"])

    def IOReportChannelGetUnitLabel(self, item):
        return Ref(item.value["unit"])

    def IOReportSimpleGetIntegerValue(self, item, index):
        return item.value["value"]


def test_ioreport_source_on_a_fake_library(fx, monkeypatch):
    """The CoreFoundation walk, deltas and releases, on a fake library serving a trace."""
    path = replay_path(fx, "synthetic_burst_and_cpu_stall")
    ffi = ioreport.build_ffi()
    fake = FakeIOReport(ffi, json.loads(path.read_text()))
    ffi.dlopen = lambda name: fake
    monkeypatch.setattr(ioreport, "build_ffi", lambda: ffi)
    monkeypatch.setattr(ioreport, "unavailable", lambda: None)
    clock = Clock(0.25)
    meter = open_meter("ioreport", clock=clock)    # samples 0 and 1: subscription and baseline
    assert meter.info.backend == "ioreport" and meter.info.method == "counter"
    assert meter.info.headline == ("cpu", "gpu", "ane") and meter.info.estimate
    assert meter.info.domains == ("cpu", "gpu", "ane", "dram", "gpu_sram")
    powers = synthetic_powers(path)
    for k in range(2, 13):                            # one sample per read
        clock.at(0.25 * k)
        p = meter.power()
        cpu, gpu = powers[k - 1]
        assert p.watts["gpu"] == pytest.approx(gpu)
        assert p.watts["cpu"] == pytest.approx(cpu if k <= 9 else 0.0)
    assert any(w.startswith(STALL) for w in p.warnings)
    clock.at(3.25)
    w = meter.stop()                                  # from the baseline (sample 1) to sample 13
    assert w.total_j == pytest.approx((6950 - 300) / 1e3 + (11725 - 50) / 1e3)
    assert any(x.startswith(STALL) for x in w.warnings)
    meter.close()
    assert fake.live == set()           # every CF object made was released, none twice


# --- powermetrics (pure) ---------------------------------------------------------------------

def test_powermetrics_single_documents(fx):
    def capture(kind):
        path = fx / "powermetrics" / f"plist_macos26_25C56_Mac16-5_single_{kind}.plist"
        return powermetrics.sample_from_plist(path.read_bytes())

    full, trimmed = capture("full_pausemonitor"), capture("trimmed")
    assert full == trimmed
    assert full.elapsed_ns == 1023685416
    assert full.joules == pytest.approx({"cpu": 3.049, "gpu": 0.276, "ane": 0.0})
    # processor energy (mJ) agrees with its combined power (mW) over the real elapsed time
    assert sum(full.joules.values()) == pytest.approx(3.24807 * 1.023685416, rel=1e-3)
    assert full.watts["cpu"] == pytest.approx(2.97845, rel=1e-3)


STREAM = [  # (cpu J, gpu J, ane J) per document of the derived streams
    (3.049, 0.276, 0.0), (4.250, 19.049, 0.0), (4.032, 21.242, 0.013)]


@pytest.mark.parametrize("name", ["plist_stream_3docs_derived.bin",
                                  "plist_stream_3docs_derived_trailing_nul.bin"])
def test_powermetrics_streams(fx, name):
    samples, warnings = powermetrics.samples_from_stream((fx / "powermetrics" / name).read_bytes())
    assert warnings == []
    got = [s.joules[d] for s in samples for d in ("cpu", "gpu", "ane")]
    assert got == pytest.approx([j for doc in STREAM for j in doc])
    assert [s.elapsed_ns for s in samples] == [1023685416, 1009305000, 1011380000]


def test_powermetrics_truncated_stream(fx):
    data = (fx / "powermetrics" / "plist_stream_truncated_tail_derived.bin").read_bytes()
    samples, warnings = powermetrics.samples_from_stream(data)
    assert len(samples) == 1 and samples[0].joules["cpu"] == pytest.approx(3.049)
    assert len(warnings) == 1 and "truncated" in warnings[0]


@pytest.mark.parametrize("name", ["plist_stream_3docs_derived.bin",
                                  "plist_stream_3docs_derived_trailing_nul.bin",
                                  "plist_stream_truncated_tail_derived.bin"])
def test_plist_splitter_in_random_chunks(fx, name):
    data = (fx / "powermetrics" / name).read_bytes()
    whole = powermetrics.PlistSplitter()
    want, want_tail = whole.feed(data), whole.finish()
    rng = random.Random(name)
    for _ in range(5):
        split, docs, i = powermetrics.PlistSplitter(), [], 0
        while i < len(data):
            n = rng.choice([1, 7, 100, 4096, 40000])
            docs += split.feed(data[i:i + n])
            i += n
        assert docs == want and split.finish() == want_tail
    assert len(want) == (1 if "truncated" in name else 3)


def test_powermetrics_text_log(fx):
    log = fx / "powermetrics" / "text_macos12_21G115_m1_MacBookAir10-1_100ms_codecarbon.txt"
    text = log.read_text()
    samples = powermetrics.samples_from_text(text)
    assert len(samples) == text.count("*** Sampled system activity") == 10
    first = samples[0]
    assert first.elapsed_ns == 104510000
    assert first.watts == pytest.approx({"cpu": 0.947, "gpu": 0.153, "ane": 0.0, "dram": 0.220,
                                         "package": 1.473})
    assert samples[-1].watts == pytest.approx({"cpu": 0.239, "gpu": 0.009, "ane": 0.0,
                                               "dram": 0.083, "package": 0.321})
    # macOS 13+ layout: a Combined line, and GPU Power again under "GPU usage" (the first counts)
    later = ("*** Sampled system activity (Mon Jan 1 00:00:00 2024 +0000) (1000.00ms elapsed) ***\n"
             "CPU Power: 211 mW\nGPU Power: 147 mW\nANE Power: 0 mW\n"
             "Combined Power (CPU + GPU + ANE): 358 mW\n**** GPU usage ****\nGPU Power: 999 mW\n")
    (s,) = powermetrics.samples_from_text(later)
    assert s.joules == pytest.approx({"cpu": 0.211, "gpu": 0.147, "ane": 0.0})


def powermetrics_meter(clock):
    info = MeterInfo("powermetrics", powermetrics.HEADLINE, powermetrics.HEADLINE,
                                  "sampled-power", powermetrics.SCOPE, estimate=True)
    return powermetrics.PowermetricsMeter(info, clock=clock)


def test_powermetrics_meter_integrates_by_overlap(fx):
    data = (fx / "powermetrics" / "plist_stream_3docs_derived_trailing_nul.bin").read_bytes()
    docs = data.split(b"\0")
    clock = Clock(0)
    meter = powermetrics_meter(clock)
    assert meter.read().joules is None and meter.power().watts is None      # nothing yet
    ends = [1.023685416, 1.023685416 + 1.009305, 1.023685416 + 1.009305 + 1.01138]
    for doc, end in zip(docs, ends):
        clock.at(end)
        meter.feed(doc + b"\0")
    assert meter.power().watts["gpu"] == pytest.approx(21.242 / 1.01138)
    assert meter.read().total_j == pytest.approx(sum(sum(s) for s in STREAM))
    # a window over the second half of sample 2 and the first half of sample 3
    a, b = clock.at(ends[0] + 1.009305 / 2)(), clock.at(ends[1] + 1.01138 / 2)()
    w = meter.between(Mark(a), Mark(b))
    assert w.coverage == pytest.approx(1.0)
    assert w.joules["gpu"] == pytest.approx(19.049 / 2 + 21.242 / 2)
    assert w.info.method == "sampled-power" and w.warnings == ()
    # a window running past the last sample is only partly covered, and says so
    late = meter.between(Mark(b), Mark(clock.at(ends[2] + 1.01138 / 2)()))
    assert late.coverage == pytest.approx(0.5)
    assert any("cover 50%" in x for x in late.warnings)
    assert meter.between(Mark(clock.at(10)()), Mark(clock.at(11)())).joules is None


def test_powermetrics_meter_survives_a_truncated_stream(fx):
    data = (fx / "powermetrics" / "plist_stream_truncated_tail_derived.bin").read_bytes()
    clock = Clock(1.023685416)
    meter = powermetrics_meter(clock)
    meter.feed(data)
    clock.at(1.5)
    meter.end_of_stream()
    assert meter.read().joules["cpu"] == pytest.approx(3.049)
    w = meter.between(Mark(0), Mark(clock()))
    assert any("truncated" in x for x in w.warnings)


def test_powermetrics_reports_unavailable_off_macos():
    if sys.platform == "darwin":
        pytest.skip("on macOS the backend may be available")
    assert "macOS-only" in powermetrics.unavailable()
    with pytest.raises(EnergyUnavailable, match="macOS-only"):
        open_meter("powermetrics")


# --- RAPL ------------------------------------------------------------------------------------

def rapl_tree(fx, tmp_path, name):
    return rapl.materialise(fx / "rapl" / name, tmp_path / name)


def zone_file(root, entry, leaf="energy_uj"):
    return root / "class" / "powercap" / entry / leaf


def spec_zone(spec, ctype, *path):
    z = spec["control_types"][ctype][path[0]]
    return z["children"][path[1]] if len(path) > 1 else z


def test_rapl_intel_laptop_zones(fx, tmp_path):
    spec = json.loads((fx / "rapl" / "sysfs_intel_laptop_spec.json").read_text())
    root = rapl_tree(fx, tmp_path, "tree_intel_laptop")
    src = rapl.RaplSource(root)
    got = {z.key: (z.domain, z.max_uj, v) for z, v in zip(src.zones, src.prev)}
    msr = "intel-rapl"
    want = {"package-0": ("package-0", spec_zone(spec, msr, "intel-rapl:0")),
            "package-0/dram": ("dram", spec_zone(spec, msr, "intel-rapl:0", "intel-rapl:0:2")),
            "psys": ("psys", spec_zone(spec, msr, "intel-rapl:1"))}
    # core/uncore are parts of the package, the MMIO package-0 repeats the MSR one
    assert got == {k: (d, z["max_energy_range_uj"], z["energy_uj"]) for k, (d, z) in want.items()}
    meter = open_meter("rapl", rapl_root=str(root), clock=Clock(0))
    assert meter.info.headline == ("package-0",) and meter.info.method == "counter"
    assert meter.info.domains == ("package-0", "dram", "psys")


def test_rapl_window_reads_counters_at_its_edges(fx, tmp_path):
    root = rapl_tree(fx, tmp_path, "tree_intel_laptop")
    clock = Clock(0)
    meter = open_meter("rapl", rapl_root=str(root), clock=clock)
    a = meter.mark()
    for entry, add in [("intel-rapl:0", 5_000_000), ("intel-rapl:0:2", 1_000_000),
                       ("intel-rapl:1", 9_000_000), ("intel-rapl:0:0", 4_000_000),
                       ("intel-rapl-mmio:0", 5_000_000)]:
        f = zone_file(root, entry)
        f.write_text(str(int(f.read_text()) + add))
    clock.at(2)
    w = meter.between(a, meter.mark())
    assert w.joules == pytest.approx({"package-0": 5.0, "dram": 1.0, "psys": 9.0})
    assert w.total_j == pytest.approx(5.0) and w.mean_power_w == pytest.approx(2.5)
    assert w.warnings == ()
    a = meter.mark()
    clock.at(3)
    still = meter.between(a, meter.mark())
    assert still.total_j == 0.0 and any("no energy counter advanced" in x for x in still.warnings)


def test_rapl_amd_zen(fx, tmp_path):
    spec = json.loads((fx / "rapl" / "sysfs_amd_zen_spec.json").read_text())
    root = rapl_tree(fx, tmp_path, "tree_amd_zen")
    src = rapl.RaplSource(root)
    pkg = spec_zone(spec, "intel-rapl", "intel-rapl:0")
    assert [(z.key, z.max_uj) for z in src.zones] == [("package-0", pkg["max_energy_range_uj"])]
    assert src.prev == [pkg["energy_uj"]]


def test_rapl_sums_package_zones(fx, tmp_path):
    root = rapl_tree(fx, tmp_path, "tree_amd_zen")
    zone = root / "devices" / "virtual" / "powercap" / "intel-rapl" / "intel-rapl:1"
    zone.mkdir()
    for leaf, value in [("name", "package-1"), ("energy_uj", "1000"),
                        ("max_energy_range_uj", "65532610987")]:
        (zone / leaf).write_text(value + "\n")
    (root / "class" / "powercap" / "intel-rapl:1").symlink_to(
        "../../devices/virtual/powercap/intel-rapl/intel-rapl:1")
    clock = Clock(0)
    meter = open_meter("rapl", rapl_root=str(root), clock=clock)
    assert meter.info.headline == ("package-0", "package-1")
    a = meter.mark()
    for entry, add in [("intel-rapl:0", 30_000_000), ("intel-rapl:1", 12_000_000)]:
        f = zone_file(root, entry)
        f.write_text(str(int(f.read_text()) + add))
    clock.at(1)
    assert meter.between(a, meter.mark()).total_j == pytest.approx(42.0)


def test_rapl_counter_wraparound(fx, tmp_path):
    seq = json.loads((fx / "rapl" / "wraparound_sequence.json").read_text())
    root = rapl_tree(fx, tmp_path, "tree_intel_laptop")
    assert int(zone_file(root, "intel-rapl:0", "max_energy_range_uj").read_text()) == \
        seq["max_energy_range_uj"]
    counter = zone_file(root, "intel-rapl:0")
    clock = Clock(seq["t_s"][0])
    counter.write_text(str(seq["energy_uj"][0]))
    meter = open_meter("rapl", rapl_root=str(root), clock=clock)
    start = meter.start()
    for t, uj in zip(seq["t_s"][1:], seq["energy_uj"][1:]):
        counter.write_text(str(uj))
        clock.at(t)
        p = meter.power()
        assert p.watts["package-0"] == pytest.approx(20.0) and p.warnings == ()
    w = meter.between(start, meter.mark())
    assert w.joules["package-0"] == pytest.approx(seq["expected_total_uj"] / 1e6)
    assert rapl.counter_delta(262140000000, 16671150, seq["max_energy_range_uj"]) == 20_000_000


def test_rapl_permission_error_is_reported(fx, tmp_path):
    root = rapl_tree(fx, tmp_path, "tree_intel_laptop")

    def root_only(path, *args):
        if str(path).endswith("energy_uj"):
            raise PermissionError(13, "Permission denied", str(path))
        return open(path, *args)

    with pytest.raises(EnergyUnavailable, match="permission denied.*CVE-2020-8694") as e:
        open_meter("rapl", rapl_root=str(root), rapl_opener=root_only)
    assert "energy_uj" in str(e.value) and "chmod" in str(e.value)
    reasons = dict(detect(rapl_root=str(root), rapl_opener=root_only))
    assert "permission denied" in reasons["rapl"]


def test_rapl_missing_powercap(tmp_path):
    with pytest.raises(EnergyUnavailable, match="no .*class/powercap"):
        open_meter("rapl", rapl_root=str(tmp_path))


# --- NVML ------------------------------------------------------------------------------------

class FakeNvml:
    """pynvml over fake_nvml_h100.json: counter values follow the test's clock."""

    class NVMLError(Exception):
        pass

    def __init__(self, device, clock, energy=True):
        self.device, self.clock, self.energy, self.running = device, clock, energy, False

    def nvmlInit(self):
        self.running = True

    def nvmlShutdown(self):
        self.running = False

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, handle):
        return self.device["name"].encode()

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if not self.energy:
            raise self.NVMLError("Not Supported")
        now = [s for s in self.device["samples"] if s["t_s"] * 1e9 <= self.clock() + 1]
        return now[-1]["total_energy_mj"]


def test_nvml_on_the_fake_h100(fx):
    device = json.loads((fx / "nvml" / "fake_nvml_h100.json").read_text())["devices"][0]
    clock = Clock(0)
    fake = FakeNvml(device, clock)
    meter = open_meter("nvml", pynvml=fake, clock=clock)
    assert meter.info.domains == meter.info.headline == ("gpu0",)
    assert "H100" in meter.info.source and fake.running
    marks = []
    for s in device["samples"]:
        clock.at(s["t_s"])
        marks.append(meter.mark())
    first = meter.between(marks[0], marks[1])          # the counter had not updated yet
    assert first.total_j == 0.0 and any("no energy counter advanced" in x for x in first.warnings)
    e = [s["total_energy_mj"] for s in device["samples"]]
    w = meter.between(marks[0], marks[-1])
    assert w.total_j == pytest.approx((e[-1] - e[0]) / 1e3)
    for a, b, s in zip(marks[2:], marks[3:], device["samples"][3:]):
        # the counter's mean power agrees with the reported power draw
        assert meter.between(a, b).mean_power_w == pytest.approx(s["power_mw"] / 1e3, rel=5e-3)
    meter.close()
    assert not fake.running


def test_nvml_unavailable_reasons(fx, monkeypatch):
    device = json.loads((fx / "nvml" / "fake_nvml_h100.json").read_text())["devices"][0]
    fake = FakeNvml(device, Clock(0), energy=False)
    with pytest.raises(EnergyUnavailable, match="Volta"):
        open_meter("nvml", pynvml=fake)
    assert not fake.running
    monkeypatch.setitem(sys.modules, "pynvml", None)        # as if nvidia-ml-py were missing
    with pytest.raises(EnergyUnavailable, match=r"olifant_mlx\[nvml\]"):
        nvml.NvmlSource()


# --- none, selection --------------------------------------------------------------------------

def test_none_reads_not_measured():
    calls = []
    meter = open_meter("none", sync=lambda: calls.append(1))
    assert meter.info.label == "not measured" and not meter.info.measured
    r, p = meter.read(), meter.power()
    assert r.joules is None and r.total_j is None
    assert p.watts is None and p.total_w is None
    meter.start()
    w = meter.stop()
    assert calls == [1, 1]                     # sync before each mark
    assert w.joules is None and w.total_j is None and w.mean_power_w is None
    assert w.j_per_100_tokens(100) is None and w.tokens_per_joule(100) is None
    d = w.as_dict(n_tokens=100)
    assert d["energy_j"] is None and d["tokens_per_joule"] is None and d["backend"] == "none"


def test_selection(fx, tmp_path, monkeypatch):
    path = replay_path(fx, "m4_zeus_apple_silicon")
    monkeypatch.setenv("OLIFANT_ENERGY", f"replay:{path}")
    assert open_meter().info.backend == "replay"
    assert open_meter("none").info.backend == "none"        # the argument wins
    monkeypatch.delenv("OLIFANT_ENERGY")
    assert parse_spec("replay:/a:b.json") == ("replay", "/a:b.json")
    with pytest.raises(ValueError, match="unknown energy backend"):
        open_meter("wattmeter")
    with pytest.raises(ValueError, match="replay:PATH"):
        open_meter("replay")
    root = rapl_tree(fx, tmp_path, "tree_amd_zen")
    meter = open_meter(rapl_root=str(root), pynvml=None)
    if sys.platform != "darwin":
        assert meter.info.backend == "rapl"
        assert [n for n, _ in meter.skipped] == ["ioreport", "powermetrics"]
    monkeypatch.setitem(sys.modules, "pynvml", None)
    meter = open_meter(rapl_root=str(tmp_path / "nothing"))
    if sys.platform != "darwin":
        assert meter.info.backend == "none"
        assert [n for n, _ in meter.skipped] == ["ioreport", "powermetrics", "rapl", "nvml"]
        assert all(reason for _, reason in meter.skipped)


# --- CLI -------------------------------------------------------------------------------------

def run_cli(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("OLIFANT_ENERGY", None)
    r = subprocess.run([sys.executable, "-m", "olifant_mlx", "energy", *args], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_cli_replay_json(fx):
    path = replay_path(fx, "synthetic_burst_and_cpu_stall")
    out = json.loads(run_cli("--backend", f"replay:{path}", "--seconds", "1", "--interval",
                             "0.5", "--json"))
    assert out["backend"] == "replay" and out["measured"] is True
    assert out["headline"] == ["cpu", "gpu", "ane"] and out["method"] == "replay"
    assert len(out["readings"]) == 2
    assert {b["name"] for b in out["backends"]} >= {"ioreport", "powermetrics", "rapl", "nvml",
                                                    "none", "replay"}
    assert [b["name"] for b in out["backends"] if b["used"]] == ["replay"]
    assert all(b["reason"] for b in out["backends"] if not b["available"])
    w = out["window"]
    assert w["energy_j"] == pytest.approx(sum(w["energy_j_by_domain"][d] for d in out["headline"]))
    assert w["energy_j"] > 0          # the trace never stands still for a whole second
    assert out["readings"][-1]["total_j"] <= w["energy_j"] + 1e-9


def test_cli_none_says_not_measured():
    text = run_cli("--backend", "none", "--seconds", "0.2", "--interval", "0.1")
    assert "not measured" in text and "ioreport" in text
    out = json.loads(run_cli("--backend", "none", "--seconds", "0.2", "--interval", "0.1",
                             "--json"))
    assert out["label"] == "not measured" and out["measured"] is False
    assert out["window"]["energy_j"] is None
    assert all(r["watts"] is None and r["total_j"] is None for r in out["readings"])


def test_cli_errors(capsys):
    assert main(["energy", "--backend", "wattmeter"]) == 1
    assert "unknown energy backend" in capsys.readouterr().err
    if sys.platform != "darwin":
        assert main(["energy", "--backend", "ioreport", "--seconds", "0"]) == 1
        assert "macOS-only" in capsys.readouterr().err


# --- bad input never becomes a measurement ---------------------------------------------------

def wrong_shapes(good):
    """Valid JSON that is not a replay trace, each case changing one thing of a good trace."""
    s0 = good["samples"][0]
    row = s0["rows"][0]

    def with_sample(**change):
        return {**good, "samples": [{**s0, **change}] + good["samples"][1:]}

    def with_row(**change):
        return with_sample(rows=[{**row, **change}] + s0["rows"][1:])

    nan, inf = float("nan"), float("inf")
    yield from [[], 3, "trace", None, {**good, "format": 3}, {**good, "samples": {}},
                {**good, "samples": "abc"}, {**good, "samples": [1, 2]}, {**good, "samples": [{}, {}]},
                with_sample(t_ns="soon"), with_sample(t_ns=nan), with_sample(t_ns=None), with_sample(t_ns=True),
                {**good, "samples": [{"t_ns": 0}] + good["samples"][1:]}, with_sample(rows={}), with_sample(rows=[7]),
                with_row(group=None), with_row(channel=5), with_row(unit=["mJ"]), with_row(subgroup=1),
                with_row(value="12"), with_row(value=nan), with_row(value=inf), with_row(value=None)]


def test_replay_traces_of_the_wrong_shape_are_named(fx, tmp_path):
    good = json.loads(replay_path(fx, "m4_zeus_apple_silicon").read_text())
    cases = list(wrong_shapes(good))
    assert len(cases) == 24
    for i, data in enumerate(cases):
        path = tmp_path / f"case{i}.json"
        path.write_text(json.dumps(data))                   # NaN and Infinity as JSON allows them
        with pytest.raises(EnergyUnavailable, match=re.escape(str(path))):
            open_meter(f"replay:{path}")


def test_a_counter_that_goes_down_is_not_negative_energy(fx, tmp_path):
    data = json.loads(replay_path(fx, "m4_zeus_apple_silicon").read_text())
    for r in data["samples"][1]["rows"]:
        if r["channel"] == "CPU Energy":
            r["value"] = -1000                              # below the first sample's value
    path = tmp_path / "down.json"
    path.write_text(json.dumps(data))
    clock = Clock(0)
    meter = open_meter(f"replay:{path}", clock=clock, loop=False)
    a = meter.mark()
    clock.at(1)
    w = meter.between(a, meter.mark())
    assert all(j >= 0 for j in w.joules.values()) and w.total_j >= 0
    assert any("went back" in x for x in w.warnings)


def test_non_finite_readings_are_not_counted():
    from olifant_mlx.energy.meter import CounterMeter

    info = MeterInfo("test", ("cpu", "gpu"), ("cpu", "gpu"), "counter", "test")
    readings = iter([{"cpu": 0.0, "gpu": 0.0}, {"cpu": 0.0, "gpu": 0.0}, {"cpu": float("nan"), "gpu": 1.0},
                     {"cpu": float("inf"), "gpu": -2.0}, {"cpu": 3.0, "gpu": 1.0}])
    clock = Clock(0)

    def source():
        clock.at(clock.t / 1e9 + 1)
        return clock(), next(readings), []

    meter = CounterMeter(info, source, clock=clock)      # the first reading is the baseline
    a = meter.mark()
    meter.read()
    meter.read()
    b = meter.mark()
    w = meter.between(a, b)
    assert w.joules == {"cpu": 3.0, "gpu": 2.0} and w.total_j == 5.0
    assert json.dumps(w.as_dict(10), allow_nan=False)      # JSON, no NaN anywhere
    assert sum("not a finite number" in x for x in w.warnings) == 2
    assert any("went back" in x for x in w.warnings)


def plist_doc(elapsed, **processor):
    import plistlib

    return plistlib.dumps({"elapsed_ns": elapsed, "processor": processor})


@pytest.mark.parametrize("elapsed, processor", [
    (1_000_000_000, {"cpu_energy": float("nan")}), (1_000_000_000, {"cpu_energy": float("inf")}),
    (1_000_000_000, {"cpu_energy": -5.0}), (1_000_000_000, {"gpu_power": -1.0}),
    (0, {"cpu_energy": 5.0}), (-10, {"cpu_energy": 5.0}), (float("nan"), {"cpu_energy": 5.0}),
    (float("inf"), {"cpu_power": 5.0}), (1_000_000_000, {"cpu_energy": "5"})])
def test_powermetrics_documents_that_measure_nothing_are_warnings(elapsed, processor):
    samples, warnings = powermetrics.parse_documents([plist_doc(elapsed, **processor)])
    assert samples == [] and len(warnings) == 1 and "ignored" in warnings[0]


def test_powermetrics_text_samples_without_time_are_left_out():
    head = "*** Sampled system activity (Mon Jan 1 00:00:00 2024 +0000) ({} elapsed) ***\n"
    text = (head.format("0.00ms") + "CPU Power: 211 mW\n" + head.format("1.2.3ms") + "CPU Power: 5 mW\n"
            + head.format("1000.00ms") + "CPU Power: 1.2.3 mW\n" + head.format("1000.00ms") + "CPU Power: 7 mW\n")
    (s,) = powermetrics.samples_from_text(text)
    assert s.joules == pytest.approx({"cpu": 0.007}) and s.watts == pytest.approx({"cpu": 0.007})
    assert powermetrics.Sample(0, {"cpu": 1.0}).watts == {}


def assert_measurements(samples):
    for s in samples:
        assert s.elapsed_ns > 0 and s.joules
        assert all(isinstance(j, float) and 0 <= j < float("inf") for j in s.joules.values()), s


def mutants(data: bytes, n: int, seed: int, spans=None):
    """`n` copies of `data`, each with one byte replaced, at a position drawn from `spans`
    ([(start, end)], default the whole of it): a seeded, repeatable sample."""
    rng = random.Random(seed)
    spans = spans or [(0, len(data))]
    for _ in range(n):
        start, end = rng.choice(spans)
        b = bytearray(data)
        b[rng.randrange(start, end)] = rng.randrange(256)
        yield bytes(b)


@pytest.mark.parametrize("seed", range(3))
def test_powermetrics_byte_mutants_never_raise(fx, seed):
    """Every document of the fixture stream, one byte changed in its declaration, its opening
    or its closing (where plistlib fails with LookupError, IndexError, AttributeError ...):
    each parses to valid samples or to a warning, never an exception (which ended the meter's
    reader thread). The slow test below mutates anywhere in the whole stream."""
    docs = powermetrics.PlistSplitter().feed((fx / "powermetrics" / "plist_stream_3docs_derived.bin").read_bytes())
    assert len(docs) == 3
    doc = docs[seed]
    for mutant in mutants(doc, 80, seed, spans=[(0, 240), (len(doc) - 240, len(doc))]):
        samples, warnings = powermetrics.parse_documents([mutant])
        assert_measurements(samples)
        assert len(samples) + len(warnings) == 1


@pytest.mark.slow
def test_powermetrics_stream_mutants_never_raise(fx):
    """1,000 one-byte mutants of the whole fixture stream, through the meter's own feed."""
    data = (fx / "powermetrics" / "plist_stream_3docs_derived.bin").read_bytes()
    for mutant in mutants(data, 1000, 0):
        meter = powermetrics_meter(Clock(1))
        meter.feed(mutant)
        meter.end_of_stream()
        assert_measurements(meter._log.samples)
        assert meter.read().joules is None or all(j >= 0 for j in meter.read().joules.values())


@pytest.mark.parametrize("flags", [["--seconds", "inf"], ["--seconds", "nan"], ["--interval", "nan"],
                                   ["--interval", "0"]])
def test_cli_refuses_durations_that_are_no_numbers(capsys, flags):
    assert main(["energy", "--backend", "none", *flags]) == 1
    err = capsys.readouterr().err
    assert "--interval must be a positive number" in err and "Traceback" not in err


def test_a_backend_added_in_one_entry_shows_on_every_surface(monkeypatch, capsys):
    """One BACKENDS entry is enough: parse_spec, `energy --backend` and `--meter` help list it."""
    from olifant_mlx.cli.common import energy_help
    from olifant_mlx.energy import backends

    monkeypatch.setitem(backends.BACKENDS, "wattmeter", ("PORT", True))
    assert parse_spec("wattmeter:/dev/ttyUSB0") == ("wattmeter", "/dev/ttyUSB0")
    with pytest.raises(ValueError, match="wattmeter:PORT"):
        parse_spec("wattmeter")
    assert "wattmeter" in backends.order()
    assert "wattmeter:PORT" in energy_help()
    with pytest.raises(SystemExit):
        main(["energy", "--help"])
    assert "wattmeter:PORT" in capsys.readouterr().out.replace("\n", " ")


def test_choices_follow_the_backend_table():
    from olifant_mlx.energy import backends

    assert backends.choices() == "auto | ioreport | powermetrics | rapl | nvml | replay:PATH | none"
    assert backends.order() == ("ioreport", "powermetrics", "rapl", "nvml", "none")
    with pytest.raises(ValueError, match="replay needs a trace: replay:PATH"):
        parse_spec("replay")
