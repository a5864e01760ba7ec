"""cffi (API mode) build of the IGTree C library: `pip install .` runs this (setup.py).

The cdef is derived from csrc/igtree.h itself, so the header stays the one
statement of the API: preprocessor lines are dropped and integer macros are
substituted by their values (string macros such as IGT_VERSION_STRING are left
out: igt_version() returns it).
"""
import glob
import os
import re

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(os.path.dirname(os.path.dirname(HERE)), "csrc")


def header_cdef(path):
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    macros, lines = {}, []
    for line in text.splitlines():
        m = re.match(r"\s*#\s*define\s+(IGT_\w+)\s+(.+?)\s*$", line)
        if m:
            value = re.sub(r"(?<=[0-9a-fA-Fx])[uU]\b", "", m.group(2))
            if value.startswith('"'):
                continue
            macros[m.group(1)] = int(eval(value, {}))  # integer literals only
            continue
        if line.lstrip().startswith("#") or 'extern "C"' in line or line.strip() == "}":
            continue
        lines.append(line)
    body = "\n".join(lines)
    for name, value in macros.items():
        body = re.sub(rf"\b{name}\b", str(value), body)
    defines = "\n".join(f"#define {k} {v}" for k, v in macros.items() if v < 2**31)
    return defines + "\n" + body


ffibuilder = FFI()
ffibuilder.cdef(header_cdef(os.path.join(CSRC, "igtree.h")))
ffibuilder.cdef('extern "Python" int _igt_progress(void *, const char *, uint64_t, uint64_t);')
# every csrc/*.c except the test driver is the library
SOURCES = sorted(os.path.relpath(p) for p in glob.glob(os.path.join(CSRC, "*.c"))
                 if not os.path.basename(p).startswith("test_"))
ffibuilder.set_source(
    "olifant_mlx.draftmodel._igtree",
    '#include "igtree.h"',
    sources=SOURCES,
    include_dirs=[os.path.relpath(CSRC)],
    extra_compile_args=["-std=c99", "-O2", "-pthread"],
    extra_link_args=["-pthread"],
    libraries=["m"],
    py_limited_api=True,    # one abi3 wheel per platform, for every Python >= 3.10
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
