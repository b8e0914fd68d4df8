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

ferry.mpi's extension, ferry._mpi (libferry_mpi's src/mpi/ferry_mpi.c compiled
in, over ferry._ferry's libferry), is built besides when the package is built
from the repository's sources or FERRY_LIBRARY (not over pkg-config's libferry),
an MPI compiler wrapper is found (``MPICC``, else ``mpicc``: Open MPI or MPICH,
for MPI's flags) and mpi4py is importable (for its C API); otherwise one line
says why, and the package is built without it (Debian: libopenmpi-dev and
python3-mpi4py).
"""

import concurrent.futures
import glob
import os
import shutil
import subprocess
import sys

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
        if BUILD_LIBFERRY and ext.name == "ferry._ferry":
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
        if ext.name == "ferry._mpi":
            # libferry_mpi's source, outside the package: compiled here, with
            # the extension's flags (setup() takes no path outside the package).
            ext.extra_objects = list(ext.extra_objects or []) + self.compiler.compile(
                [FERRY_MPI_C],
                output_dir=os.path.join(self.build_temp, "libferry_mpi"),
                macros=ext.define_macros + LIBFERRY_MACROS,
                include_dirs=ext.include_dirs,
                extra_postargs=ext.extra_compile_args,
                debug=self.debug,
            )
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

# ferry._ferry's C API (ferry/_capi.h) for ferry._mpi: it needs libferry's
# companion interface (src/core/companion.h), in the repository's sources and in
# its libferry.a, not in an installed libferry.
COMPANION_H = os.path.join(ROOT, "src", "core", "companion.h")
FERRY_MPI_C = os.path.join(ROOT, "src", "mpi", "ferry_mpi.c")
HAVE_C_API = (bool(prebuilt) or BUILD_LIBFERRY) and os.path.exists(COMPANION_H)
if HAVE_C_API:
    extension["include_dirs"].append(os.path.dirname(COMPANION_H))
    extension["define_macros"] = [("FERRY_PY_C_API", "1")]


def mpi_flags():
    """MPI's compile and link flags from its compiler wrapper (Open MPI's
    -showme:compile/-showme:link, MPICH's -compile_info/-link_info), or the
    reason there are none."""
    mpicc = os.environ.get("MPICC") or "mpicc"
    path = shutil.which(mpicc)
    if not path:
        return None, f"no {mpicc} on PATH (Debian: apt-get install libopenmpi-dev)"

    def ask(option):
        out = subprocess.run([path, option], check=True, capture_output=True, text=True)
        return out.stdout.split()

    # Open MPI's options, then MPICH's.
    for cflags, lflags in (("-showme:compile", "-showme:link"), ("-compile_info", "-link_info")):
        try:
            return (ask(cflags), ask(lflags)), None
        except (OSError, subprocess.CalledProcessError):
            continue
    return None, f"{path} answers neither -showme:compile (Open MPI) nor -compile_info (MPICH)"


def mpi_extension():
    """ferry._mpi's Extension arguments, or None after one line saying why not."""
    why = None
    if not HAVE_C_API:
        why = "it needs libferry's sources (FERRY_LIBRARY or this repository), not pkg-config's"
    elif not os.path.exists(FERRY_MPI_C):
        why = f"no {FERRY_MPI_C}"
    else:
        flags, why = mpi_flags()
    if why is None:
        try:
            import mpi4py  # the package only: importing mpi4py.MPI would start MPI
        except ImportError:
            why = f"{sys.executable} cannot import mpi4py (Debian: apt-get install python3-mpi4py)"
    if why is not None:
        print(f"ferry: building without ferry.mpi: {why}", file=sys.stderr)
        return None
    cflags, lflags = flags
    ext = dict(
        name="ferry._mpi",
        sources=["ferry/_mpi.c", "ferry/_mpi_glue.c"],
        include_dirs=[
            os.path.join(ROOT, "include"),
            os.path.dirname(COMPANION_H),
            mpi4py.get_include(),
        ]
        + [f[2:] for f in cflags if f.startswith("-I")],
        # Nothing exported but PyInit__mpi: its libferry_mpi and libferry
        # forwarders are its own (FERRY_API empty, hidden visibility).
        define_macros=[("FERRY_API", "")]
        + [tuple((f[2:].split("=", 1) + [None])[:2]) for f in cflags if f.startswith("-D")],
        extra_compile_args=["-Wall", "-Wextra", "-fvisibility=hidden"]
        + [f for f in cflags if f == "-pthread"],
        library_dirs=[f[2:] for f in lflags if f.startswith("-L")],
        libraries=[f[2:] for f in lflags if f.startswith("-l")],
        extra_link_args=[f for f in lflags if f == "-pthread" or f.startswith("-Wl,")],
    )
    return ext


ext_modules = [Extension(**extension)]
mpi = mpi_extension()
if mpi is not None:
    ext_modules.append(Extension(**mpi))

setup(
    packages=["ferry"],
    package_data={"ferry": ["py.typed", "*.pyi"]},
    ext_modules=ext_modules,
    cmdclass={"build_ext": build_ext_with_libferry},
)
