"""Only the optional C extensions live here; everything else is in pyproject.toml.

`chronolog.records._walk` speeds up the per-record walk of append validation, `chronolog.records._columns`
the columnar decoder of readers (Spark, the Arrow reader, consume), `chronolog.storage._headers`
the batch-header walk that finds a fetch's byte range and recovery's walk over valid batches,
`chronolog.records._timeline` the console timeline's late-record placement,
`chronolog.records._clean` the log cleaner's offset map and copy, `chronolog.records._encode` the
Spark sink's record batches from Arrow columns, `chronolog.records._lines` the line splitter and syslog
time reader of `chronolog produce`. All are
optional: where no compiler or Python
headers exist the build skips them and the pure-Python walks are used (same results)."""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("chronolog.records._walk", ["src/chronolog/records/_walk.c"], optional=True,
              depends=["src/chronolog/records/_recordwalk.h"], extra_compile_args=["-O2"]),
    Extension("chronolog.records._clean", ["src/chronolog/records/_clean.c"], optional=True,
              depends=["src/chronolog/records/_recordwalk.h", "src/chronolog/records/_crc32c.h",
                       "src/chronolog/records/_bigendian.h"], extra_compile_args=["-O2"]),
    Extension("chronolog.records._columns", ["src/chronolog/records/_columns.c"], optional=True,
              depends=["src/chronolog/records/_recordwalk.h", "src/chronolog/records/_varint.h"],
              extra_compile_args=["-O2"]),
    Extension("chronolog.records._timeline", ["src/chronolog/records/_timeline.c"], optional=True,
              depends=["src/chronolog/records/_recordwalk.h", "src/chronolog/records/_varint.h"],
              extra_compile_args=["-O2"]),
    Extension("chronolog.records._encode", ["src/chronolog/records/_encode.c"], optional=True,
              depends=["src/chronolog/records/_crc32c.h", "src/chronolog/records/_bigendian.h"],
              extra_compile_args=["-O2"]),
    Extension("chronolog.records._lines", ["src/chronolog/records/_lines.c"], optional=True,
              extra_compile_args=["-O2"]),
    Extension("chronolog.storage._headers", ["src/chronolog/storage/_headers.c"], optional=True,
              depends=["src/chronolog/records/_crc32c.h"], extra_compile_args=["-O2"]),
])
