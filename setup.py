# The cffi extensions (csrc/ -> olifant_mlx.draftmodel._igtree, ._suffix) need setup.py's cffi_modules;
# everything else lives in pyproject.toml. The extension uses the limited API, so the wheel
# is tagged abi3: one wheel per platform for every CPython >= 3.10.
from setuptools import setup

setup(cffi_modules=["olifant_mlx/draftmodel/_build.py:ffibuilder",
                    "olifant_mlx/draftmodel/_build.py:suffix_ffibuilder"],
      options={"bdist_wheel": {"py_limited_api": "cp310"}})
