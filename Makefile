# The README's two commands:
#   make run    build, then `ferry info` and a quick benchmark on every device present
#   make test   build, then every test (a backend whose driver is absent is skipped, by name)
# Options: BUILD=dir (default build), CMAKE_FLAGS="-DFERRY_SANITIZE=address", JOBS=n.

BUILD ?= build
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: all build run test clean format install install-python

all: build

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

run: build
	./$(BUILD)/ferry info
	./$(BUILD)/ferry bench --quick

# ctest reports each backend's conformance run as passed, failed or skipped;
# the last line lists the backends and why any were skipped (and fails when
# FERRY_REQUIRE_BACKENDS names one without devices).
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@echo "backends:"
	@./$(BUILD)/tests/ferry_conformance --backends

format:
	clang-format -i include/*.h src/*/*.[ch] src/backends/*/*.[ch] tools/*.[ch] tests/*.[ch] bench/*.[ch]

clean:
	rm -rf $(BUILD)

# make install's Python step: the ferry package for $(PYTHON) under $(PREFIX)
# (bindings/python/install.sh; skipped, saying why, without python3-dev).
PREFIX ?= /usr/local
PYTHON ?= python3
install: install-python
install-python:
	PYTHON=$(PYTHON) sh bindings/python/install.sh $(PREFIX)
