"""IOReport (macOS on Apple Silicon, no sudo): the "Energy Model" counters through cffi ABI mode.

Subscribe once to the group, then at every read take a sample, difference it against the
previous one (`IOReportCreateSamplesDelta`) and turn the delta's rows into joules per domain with
`apple.joules`. This module only walks CoreFoundation objects into `apple.Row`s; the rules live
in `apple`, which is tested on Linux. The private API's signatures are those macmon, mactop and
zeus-apple-silicon declare; the library ships in the dyld shared cache, so it is loaded by path.
"""
from __future__ import annotations

import platform
import sys
import time

from olifant_mlx.energy import apple
from olifant_mlx.energy.meter import CounterMeter, EnergyError, EnergyUnavailable, MeterInfo

LIB_IOREPORT = "/usr/lib/libIOReport.dylib"
LIB_CF = "/System/Library/Frameworks/CoreFoundation.framework/CoreFoundation"
UTF8 = 0x08000100   # kCFStringEncodingUTF8

# CF types are all `void *` here: cffi then passes any of them where another is declared
CDEF = """
typedef const void *CFTypeRef;
typedef const void *CFStringRef;
typedef const void *CFDictionaryRef;
typedef void *CFMutableDictionaryRef;
typedef const void *CFArrayRef;
typedef const void *CFAllocatorRef;
typedef void *IOReportSubscriptionRef;
typedef long CFIndex;
typedef uint32_t CFStringEncoding;
typedef unsigned char Boolean;

CFStringRef CFStringCreateWithCString(CFAllocatorRef alloc, const char *s, CFStringEncoding enc);
Boolean CFStringGetCString(CFStringRef s, char *buf, CFIndex size, CFStringEncoding enc);
CFIndex CFDictionaryGetCount(CFDictionaryRef d);
const void *CFDictionaryGetValue(CFDictionaryRef d, const void *key);
CFMutableDictionaryRef CFDictionaryCreateMutableCopy(CFAllocatorRef alloc, CFIndex capacity,
                                                     CFDictionaryRef d);
CFIndex CFArrayGetCount(CFArrayRef a);
const void *CFArrayGetValueAtIndex(CFArrayRef a, CFIndex i);
void CFRelease(CFTypeRef cf);

CFDictionaryRef IOReportCopyChannelsInGroup(CFStringRef group, CFStringRef subgroup,
                                            uint64_t a, uint64_t b, uint64_t c);
IOReportSubscriptionRef IOReportCreateSubscription(const void *a, CFMutableDictionaryRef desired,
                                                   CFMutableDictionaryRef *subscribed,
                                                   uint64_t channel_id, CFTypeRef b);
CFDictionaryRef IOReportCreateSamples(IOReportSubscriptionRef sub, CFMutableDictionaryRef channels,
                                      CFTypeRef a);
CFDictionaryRef IOReportCreateSamplesDelta(CFDictionaryRef prev, CFDictionaryRef cur, CFTypeRef a);
CFStringRef IOReportChannelGetGroup(CFDictionaryRef item);
CFStringRef IOReportChannelGetSubGroup(CFDictionaryRef item);
CFStringRef IOReportChannelGetChannelName(CFDictionaryRef item);
CFStringRef IOReportChannelGetUnitLabel(CFDictionaryRef item);
int64_t IOReportSimpleGetIntegerValue(CFDictionaryRef item, int32_t index);
"""


def build_ffi():
    """The cffi FFI with IOReport and CoreFoundation declared (parses on any platform)."""
    from cffi import FFI

    ffi = FFI()
    ffi.cdef(CDEF)
    return ffi


def unavailable() -> str | None:
    """Why IOReport cannot run here, or None."""
    if sys.platform != "darwin":
        return f"IOReport is macOS-only (this is {sys.platform}/{platform.machine()})"
    if platform.machine() != "arm64":
        return f"IOReport's Energy Model needs Apple Silicon (this Mac is {platform.machine()})"
    return None


class IOReportSource:
    """One subscription to the Energy Model; each call returns the joules since the last."""

    def __init__(self, clock=time.monotonic_ns):
        reason = unavailable()
        if reason:
            raise EnergyUnavailable(reason)
        self.clock = clock
        self.ffi = ffi = build_ffi()
        try:
            self.ior = ffi.dlopen(LIB_IOREPORT)
            self.cf = ffi.dlopen(LIB_CF)
        except OSError as e:
            raise EnergyUnavailable(f"cannot load {LIB_IOREPORT}: {e}") from None
        self.key = self._cfstr("IOReportChannels")
        group = self._cfstr(apple.GROUP)
        chans = self.ior.IOReportCopyChannelsInGroup(group, ffi.NULL, 0, 0, 0)
        self.cf.CFRelease(group)
        if chans == ffi.NULL:
            raise EnergyUnavailable(f"IOReport has no {apple.GROUP!r} group on this Mac")
        self.desired = self.cf.CFDictionaryCreateMutableCopy(
            ffi.NULL, self.cf.CFDictionaryGetCount(chans), chans)
        self.cf.CFRelease(chans)
        # a real out-pointer: with NULL the call fails on some machines
        self.subscribed = ffi.new("CFMutableDictionaryRef *")
        self.sub = self.ior.IOReportCreateSubscription(ffi.NULL, self.desired, self.subscribed,
                                                       0, ffi.NULL)
        if self.sub == ffi.NULL:
            self.close()
            raise EnergyUnavailable("IOReportCreateSubscription failed for the Energy Model")
        self.meta = []        # per array index: the channel's Row (value 0) if it counts, else None
        self.prev = self.ior.IOReportCreateSamples(self.sub, self.desired, ffi.NULL)
        if self.prev == ffi.NULL:
            self.close()
            raise EnergyUnavailable("IOReportCreateSamples returned NULL for the Energy Model")
        self._resolve(self.prev)    # the raw sample names the channels: domains are known now

    def _cfstr(self, s: str):
        return self.cf.CFStringCreateWithCString(self.ffi.NULL, s.encode(), UTF8)

    def _str(self, ref) -> str:
        if ref == self.ffi.NULL:
            return ""
        buf = self.ffi.new("char[]", 256)
        if not self.cf.CFStringGetCString(ref, buf, 256, UTF8):
            return ""
        return self.ffi.string(buf).decode("utf-8", "replace")

    def _items(self, sample):
        arr = self.cf.CFDictionaryGetValue(sample, self.key)
        if arr == self.ffi.NULL:
            return []
        return [self.cf.CFArrayGetValueAtIndex(arr, i) for i in range(self.cf.CFArrayGetCount(arr))]

    def _resolve(self, sample):
        """Name and unit of every channel, once (and again if the count changes); only the
        rows that count are read afterwards."""
        ior = self.ior
        rows = [apple.Row(self._str(ior.IOReportChannelGetGroup(item)),
                          self._str(ior.IOReportChannelGetSubGroup(item)),
                          self._str(ior.IOReportChannelGetChannelName(item)),
                          self._str(ior.IOReportChannelGetUnitLabel(item)), 0)
                 for item in self._items(sample)]
        plan, self.warnings = apple.classify(rows)
        self.meta = [r if p is not None else None for r, p in zip(rows, plan)]
        self.domains = tuple(d for d in apple.DOMAINS if any(p and p[0] == d for p in plan))

    def __call__(self):
        ffi, ior = self.ffi, self.ior
        cur = ior.IOReportCreateSamples(self.sub, self.desired, ffi.NULL)
        t = self.clock()
        if cur == ffi.NULL:
            raise EnergyError("IOReportCreateSamples returned NULL")
        delta = ior.IOReportCreateSamplesDelta(self.prev, cur, ffi.NULL)
        self.cf.CFRelease(self.prev)
        self.prev = cur
        if delta == ffi.NULL:
            raise EnergyError("IOReportCreateSamplesDelta returned NULL")
        try:
            items = self._items(delta)
            if len(items) != len(self.meta):
                self._resolve(delta)
            rows = [apple.Row(m.group, m.subgroup, m.channel, m.unit,
                              ior.IOReportSimpleGetIntegerValue(item, 0))
                    for item, m in zip(items, self.meta) if m is not None]
        finally:
            self.cf.CFRelease(delta)
        joules, _ = apple.joules(rows)
        return t, joules, self.warnings

    def close(self):
        ffi, cf = self.ffi, self.cf
        for name in ("prev", "desired", "sub", "key"):
            ref = getattr(self, name, ffi.NULL)
            if ref != ffi.NULL:
                cf.CFRelease(ref)
            setattr(self, name, ffi.NULL)
        if getattr(self, "subscribed", None) is not None and self.subscribed[0] != ffi.NULL:
            cf.CFRelease(self.subscribed[0])
            self.subscribed[0] = ffi.NULL


def open_meter(arg=None, *, clock=time.monotonic_ns, sync=None, **_):
    src = IOReportSource(clock)
    info = MeterInfo("ioreport", src.domains, apple.headline(src.domains), "counter",
                     apple.SCOPE, estimate=True, source=f"{LIB_IOREPORT} {apple.GROUP!r}")
    return CounterMeter(info, src, clock=clock, on_close=src.close,
                        watch=("cpu",) if "cpu" in src.domains else (), sync=sync)
