# The cffi extension (csrc/ -> olifant_mlx._igtree) needs setup.py's cffi_modules;
# everything else lives in pyproject.toml.
from setuptools import setup

setup(cffi_modules=["olifant_mlx/_build_igtree.py:ffibuilder"])
