"""Builds the ferry package's C extension, ferry._ferry, over libferry.

Where libferry comes from, the first that applies:

1. ``FERRY_LIBRARY=/path/to/libferry.a``: a static libferry built with
   position-independent code (ferry's CMake build makes one: build/libferry.a),
   linked into the extension. The tests use it, to build in a second.
2. The C sources of the ferry repository this package sits in (../../src and
   ../../include): compiled into the extension, on every processor. This is
   what ``pip install ./bindings/python`` does: the extension then needs nothing
   at run time but libc (every driver is loaded with dlopen, as in libferry),
   and the Python package cannot disagree with a libferry installed elsewhere.
3. A libferry installed where pkg-config finds it (``pkg-config ferry``): linked
   as a shared library, with its directory as the run path.

Only setuptools and Python's headers (Debian: python3-dev) are needed.
"""

import concurrent.futures
import glob
import os
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
LIBFERRY_SOURCES = sorted(
    glob.glob(os.path.join(ROOT, "src", "core", "*.c"))
    + glob.glob(os.path.join(ROOT, "src", "backends", "*", "*.c"))
)
# The flags of ferry's CMake build: strict C11 with POSIX interfaces, and only
# the ferry_ API visible.
LIBFERRY_CFLAGS = ["-std=c11", "-fPIC", "-fvisibility=hidden", "-O2", "-Wall", "-Wextra"]
LIBFERRY_MACROS = [("_POSIX_C_SOURCE", "200809L")]


class build_ext_with_libferry(build_ext):
    """Compiles libferry's sources (when the package builds them in) on every
    processor, then links their objects into the extension."""

    def build_extension(self, ext):
        if BUILD_LIBFERRY:
            out = os.path.join(self.build_temp, "libferry")

            def compile_one(source):
                return self.compiler.compile(
                    [source],
                    output_dir=out,
                    macros=LIBFERRY_MACROS,
                    include_dirs=[os.path.join(ROOT, "include")],
                    extra_postargs=LIBFERRY_CFLAGS,
                    debug=self.debug,
                )

            with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
                objects = [obj for objs in pool.map(compile_one, LIBFERRY_SOURCES) for obj in objs]
            ext.extra_objects = list(ext.extra_objects or []) + objects
        super().build_extension(ext)


def pkg_config(*args):
    try:
        out = subprocess.run(
            ["pkg-config", *args, "ferry"], check=True, capture_output=True, text=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.split()


extension = dict(
    name="ferry._ferry",
    sources=["ferry/_ferry.c"],
    include_dirs=[os.path.join(ROOT, "include")],
    libraries=[],
    extra_compile_args=["-Wall", "-Wextra"],
    extra_link_args=[],
)
prebuilt = os.environ.get("FERRY_LIBRARY")
BUILD_LIBFERRY = not prebuilt and bool(LIBFERRY_SOURCES)
if prebuilt:
    extension["extra_objects"] = [prebuilt]
    extension["libraries"] += ["pthread", "dl"]
elif BUILD_LIBFERRY:
    extension["libraries"] += ["pthread", "dl"]
else:
    cflags, libs = pkg_config("--cflags"), pkg_config("--libs")
    if libs is None:
        raise SystemExit(
            "ferry: no libferry to build against: this package is not inside the ferry repository "
            "(no ../../src), FERRY_LIBRARY is unset, and pkg-config finds no installed ferry"
        )
    extension["include_dirs"] += [f[2:] for f in cflags if f.startswith("-I")]
    extension["library_dirs"] = [f[2:] for f in libs if f.startswith("-L")]
    extension["runtime_library_dirs"] = list(extension["library_dirs"])
    extension["libraries"] += [f[2:] for f in libs if f.startswith("-l")]

setup(
    packages=["ferry"],
    package_data={"ferry": ["py.typed", "*.pyi"]},
    ext_modules=[Extension(**extension)],
    cmdclass={"build_ext": build_ext_with_libferry},
)
