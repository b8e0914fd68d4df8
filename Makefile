# The README's commands:
#   make run    build the command, then `ferry info` and a short table of a quick benchmark
#   make test   build, then every test (a backend whose driver is absent is skipped, by name)
#   make install PREFIX=dir   build, then install everything a user needs under dir
# Options: BUILD=dir (default build), CMAKE_FLAGS="-DFERRY_SANITIZE=address", JOBS=n.

# No "Entering directory" lines from make, here or in the builds it starts.
MAKEFLAGS += --no-print-directory

BUILD ?= build
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PREFIX ?= /usr/local
PYTHON ?= python3

.PHONY: all build run test clean format install install-files install-python

all: build

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

# make run builds the command alone (not the tests), then shows `ferry info` and a
# short table of a quick benchmark; the full tables and the JSON go to files it names.
run:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)
	cmake --build $(BUILD) --target ferry_tool -j $(JOBS)
	@./$(BUILD)/ferry info
	@./$(BUILD)/ferry bench --quick --summary --tables $(BUILD)/bench-quick.txt --json $(BUILD)/bench-quick.json

# ctest reports each backend's conformance run as passed, failed or skipped;
# the last line lists the backends and why any were skipped (and fails when
# FERRY_REQUIRE_BACKENDS names one without devices).
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@echo "backends:"
	@./$(BUILD)/tests/ferry_conformance --backends

# Everything a user needs, under PREFIX: libferry (shared and static), ferry.h,
# the CMake package, ferry.pc and the ferry command; the OCaml library `ferry`
# where ocamlfind and dune are present (OCAMLPATH=PREFIX/lib); the Python package
# where python3-dev is. install-files is the C and OCaml steps without the build
# (the install ctests run it), install-python the Python step: one line per part.
install: build
	$(MAKE) --no-print-directory install-files BUILD=$(BUILD) PREFIX=$(PREFIX)
	$(MAKE) --no-print-directory install-python PREFIX=$(PREFIX)

install-files:
	cmake --install $(BUILD) --prefix $(PREFIX)
	sh bindings/ocaml/install.sh $(BUILD) $(PREFIX)

# The Python package `ferry` for $(PYTHON) (default: the first python3 on PATH;
# PYTHON=/usr/bin/python3 for Debian's) under $(PREFIX) (bindings/python/install.sh;
# skipped, saying what that Python lacks and how to choose another).
install-python:
	PYTHON=$(PYTHON) sh bindings/python/install.sh $(PREFIX)

format:
	clang-format -i include/*.h src/*/*.[ch] src/backends/*/*.[ch] tools/*.[ch] raw/*.[ch] tests/*.[ch] bench/*.[ch]

clean:
	rm -rf $(BUILD)

