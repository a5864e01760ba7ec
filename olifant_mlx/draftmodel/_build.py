"""cffi (API mode) builds of the C libraries: `pip install .` runs this (setup.py).

`ffibuilder`: the IGTree (csrc/igtree.h, igtree.c and igt_*.c); `suffix_ffibuilder`: the
retrieval drafters' suffix array and n-gram cache (csrc/suffix.h), a module of its own. Each
cdef is derived from its header itself, so the header stays the one statement of the API:
preprocessor lines are dropped and integer macros are substituted by their values (string
macros such as IGT_VERSION_STRING are left out: igt_version() returns it).
"""
import glob
import os
import re

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(os.path.dirname(os.path.dirname(HERE)), "csrc")


def header_cdef(path, prefix="IGT", known=None):
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    # enum constants (the file layer's status codes) may be the values of a header's macros
    known = dict(known or {}, **{k: int(v) for k, v in re.findall(r"\b([A-Z]+_\w+)\s*=\s*(\d+)", text)})
    macros, dropped, lines, included = {}, [], [], ""
    for line in text.splitlines():
        inc = re.match(r'\s*#\s*include\s+"(olif_file\.h)"', line)
        if inc:     # the shared file layer: its declarations are part of this module's cdef
            included = header_cdef(os.path.join(os.path.dirname(path), inc.group(1)), "OLIF")
            known.update(_constants(included))
            continue
        m = re.match(rf"\s*#\s*define\s+({prefix}_\w+)\s+(.+?)\s*$", line)
        if m:
            value = re.sub(r"(?<=[0-9a-fA-Fx])[uU]\b", "", m.group(2))
            try:
                number = int(eval(value, {}, {**known, **macros}))  # integer literals and known names only
            except (NameError, SyntaxError, TypeError, ValueError):
                dropped.append(m.group(1))  # string macros, attributes: left out
                continue
            macros[m.group(1)] = number
            continue
        if line.lstrip().startswith("#") or 'extern "C"' in line or line.strip() == "}":
            continue
        lines.append(line)
    body = "\n".join(lines)
    for name in dropped:
        body = re.sub(rf"\b{name}\b", "", body)
    for name, value in macros.items():
        body = re.sub(rf"\b{name}\b", str(value), body)
    defines = "\n".join(f"#define {k} {v}" for k, v in macros.items() if v < 2**31)
    return included + "\n" + defines + "\n" + body


def _constants(cdef):
    """The integer #defines and enum constants of a cdef, by name."""
    found = {k: int(v) for k, v in re.findall(r"#define (\w+) (\d+)", cdef)}
    found.update({k: int(v) for k, v in re.findall(r"\b([A-Z]+_\w+)\s*=\s*(\d+)", cdef)})
    return found


ffibuilder = FFI()
ffibuilder.cdef(header_cdef(os.path.join(CSRC, "igtree.h")))
ffibuilder.cdef('extern "Python" int _igt_progress(void *, const char *, uint64_t, uint64_t);')
# igtree.c, its parts igt_*.c and the file layer olif_file.c are the library
# (suffix.c is the other module, test_*.c drivers)
FILE_LAYER = os.path.relpath(os.path.join(CSRC, "olif_file.c"))  # both modules' file layer
SOURCES = sorted(os.path.relpath(p) for p in [os.path.join(CSRC, "igtree.c"), FILE_LAYER,
                                               *glob.glob(os.path.join(CSRC, "igt_*.c"))])
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

suffix_ffibuilder = FFI()
suffix_ffibuilder.cdef(header_cdef(os.path.join(CSRC, "suffix.h"), prefix="SFX"))
suffix_ffibuilder.cdef('extern "Python" int _sfx_progress(void *, const char *, uint64_t, uint64_t);')
suffix_ffibuilder.set_source(
    "olifant_mlx.draftmodel._suffix",
    '#include "suffix.h"',
    sources=[os.path.relpath(os.path.join(CSRC, "suffix.c")), FILE_LAYER],
    include_dirs=[os.path.relpath(CSRC)],
    extra_compile_args=["-std=c11", "-O2"],
    py_limited_api=True,
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
    suffix_ffibuilder.compile(verbose=True)
