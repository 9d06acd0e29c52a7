# Two entry points for a fresh Debian/Ubuntu machine; both are idempotent.
#   make demo   system packages + .venv + edgesdk[dev], then `edgesdk quickstart`
#   make test   the same set-up, then the whole test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# OpenCL (PoCL CPU driver + ICD loader) for the opencl backend, a C++ toolchain and CMake for the
# native module, an aarch64 cross toolchain + qemu to check the NEON/aarch64 code paths, an OpenSSH
# server/client for the remote-board tests, headless Chromium to render the HTML reports, and Bochs
# (an emulated AVX-512 PC) with xorriso + isolinux to boot the AVX-512 kernel checks.
APT_PACKAGES := build-essential cmake python3-dev python3-venv pocl-opencl-icd ocl-icd-libopencl1 \
                ocl-icd-opencl-dev opencl-headers clinfo oclgrind g++-aarch64-linux-gnu qemu-user \
                openssh-server openssh-client chromium-headless-shell bochs bochsbios vgabios xorriso \
                isolinux syslinux-common
PYTEST_ARGS ?=
NATIVE_SOURCES := $(shell find cpu_native -type f 2>/dev/null) CMakeLists.txt

.PHONY: demo test setup system-packages bench clean

demo: setup
	$(BIN)/edgesdk quickstart

test: setup
	$(BIN)/python -m pytest -n 2 $(PYTEST_ARGS)

setup: system-packages $(VENV)/.installed

system-packages:
	@missing=$$(for p in $(APT_PACKAGES); do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:" $$missing; \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$sudo apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q --no-install-recommends $$missing; \
	fi

# Re-installs when the project metadata or the native sources change.
$(VENV)/.installed: pyproject.toml $(NATIVE_SOURCES)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $@

bench: setup
	$(BIN)/python tools/bench.py default --threads 1

clean:
	rm -rf build $(VENV) tests/.cache .pytest_cache
