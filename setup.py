"""Only the optional C extension lives here; everything else is in pyproject.toml.

`chronolog.records._walk` speeds up the per-record walk of append validation. It is optional: where no
compiler or Python headers exist the build skips it and the pure-Python walk is used (same results)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("chronolog.records._walk", ["src/chronolog/records/_walk.c"], optional=True,
                             extra_compile_args=["-O2"])])
