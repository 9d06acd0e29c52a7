# Two entry points for a fresh Debian/Ubuntu machine; both are idempotent.
#   make demo   what the demo needs (apt + .venv + edgesdk[bench]), then `edgesdk quickstart`
#   make test   that, the test tools and edgesdk[dev], then the whole test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The demo: a C++ toolchain, CMake and the Python headers/venv to build the native module, and an
# OpenCL driver (PoCL's CPU device, with the ICD loader) because quickstart runs every backend,
# opencl included.
DEMO_APT_PACKAGES := build-essential cmake python3-dev python3-venv pocl-opencl-icd ocl-icd-libopencl1
# Test tools only: OpenCL headers and clinfo, oclgrind (the OpenCL simulator the kernel tests run
# under), an aarch64 cross toolchain + qemu to check the NEON/aarch64 code paths, an OpenSSH
# server/client for the remote-board tests, headless Chromium to render the HTML reports, and Bochs
# (an emulated AVX-512 PC) with xorriso + isolinux to boot the AVX-512 kernel checks.
TEST_APT_PACKAGES := ocl-icd-opencl-dev opencl-headers clinfo oclgrind g++-aarch64-linux-gnu qemu-user \
                     openssh-server openssh-client chromium-headless-shell bochs bochsbios vgabios xorriso \
                     isolinux syslinux-common
PYTEST_ARGS ?=
COMMA := ,
NATIVE_SOURCES := $(shell find cpu_native -type f 2>/dev/null) CMakeLists.txt
# The editable install (scikit-build-core's redirect mode) lists the package's modules when it is
# made: a module added or removed since (edgesdk/cli.py -> edgesdk/cli/) needs a reinstall. Adding
# or removing a file changes its folder's mtime, so the folders are prerequisites of the stamps.
PACKAGE_DIRS := $(shell find edgesdk -type d -not -name __pycache__ 2>/dev/null)

.PHONY: demo test setup demo-setup demo-packages test-packages bench peers peers-litert peers-openvino \
        peers-mnn peers-ncnn clean

demo: demo-setup
	$(BIN)/edgesdk quickstart

test: setup
	$(BIN)/python -m pytest -n 2 $(PYTEST_ARGS)

# Everything the tests need (the demo's packages included).
setup: demo-packages test-packages $(VENV)/.installed-dev

demo-setup: demo-packages $(VENV)/.installed-demo

demo-packages:
	$(call apt_install,$(DEMO_APT_PACKAGES))

test-packages:
	$(call apt_install,$(TEST_APT_PACKAGES))

# $(call apt_install,PACKAGES): apt-get install those that dpkg does not list as installed (none:
# no apt-get, no sudo), so a second run does nothing.
apt_install = @missing=$$(for p in $(1); do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:" $$missing; \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$sudo apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q --no-install-recommends $$missing; \
	fi

# Each stamp re-installs when the project metadata or the native sources change. The demo gets
# the runtime dependencies plus ONNX Runtime (the `bench` extra: the baseline quickstart compares
# against); the tests get the `dev` extra, a superset, so installing it satisfies the demo too.
$(VENV)/.installed-demo: pyproject.toml $(NATIVE_SOURCES) $(PACKAGE_DIRS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[bench]"
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(NATIVE_SOURCES) $(PACKAGE_DIRS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $@ $(VENV)/.installed-demo

bench: demo-setup
	$(BIN)/python tools/bench.py default --threads 1

# The LiteRT peer of tools/bench_int8.py speed (LiteRT int8 with XNNPACK, converted by onnx2tf): its
# own venv, never .venv (TensorFlow and onnx2tf pin numpy, onnx and protobuf versions edgesdk's
# venv does not have); every version pinned in tools/peers/requirements-litert.txt. About 2.6 GB.
PEERS_LITERT := .peers-litert
peers-litert: $(PEERS_LITERT)/.installed

$(PEERS_LITERT)/.installed: tools/peers/requirements-litert.txt
	test -x $(PEERS_LITERT)/bin/python || $(PYTHON) -m venv $(PEERS_LITERT)
	$(PEERS_LITERT)/bin/python -m pip install -q --upgrade pip
	$(PEERS_LITERT)/bin/python -m pip install -q -r tools/peers/requirements-litert.txt
	$(PEERS_LITERT)/bin/python -m pip check
	touch $@

# The peers of tools/bench_peers.py (fp32 latency of edgesdk cpu against ONNX Runtime, OpenVINO,
# LiteRT, MNN and ncnn; ONNX Runtime is .venv's, the `bench` extra). One venv per peer, never
# .venv, every version pinned in tools/peers/requirements-<peer>.txt and installed with --no-deps
# (each file lists every package its venv gets), so what a wheel would add beyond that is left
# out on purpose (each file says what and why: OpenVINO's telemetry, pnnx's multi-GB torch);
# `pip check` may report exactly those and nothing else. About 250 MB (OpenVINO), 60 MB (MNN),
# 200 MB (ncnn + pnnx).
PEERS_OPENVINO := .peers-openvino
PEERS_MNN := .peers-mnn
PEERS_NCNN := .peers-ncnn
peers: peers-litert peers-openvino peers-mnn peers-ncnn
peers-openvino: $(PEERS_OPENVINO)/.installed
peers-mnn: $(PEERS_MNN)/.installed
peers-ncnn: $(PEERS_NCNN)/.installed

# $(call pip_check_except,VENV,REGEX): pip check, failing on any complaint but lines matching REGEX.
pip_check_except = @out=$$($(1)/bin/python -m pip check 2>&1); echo "$$out"; \
	if echo "$$out" | grep -v '^No broken requirements found' | grep -Ev '$(2)' | grep -q .; then exit 1; fi

$(PEERS_OPENVINO)/.installed: tools/peers/requirements-openvino.txt
	test -x $(PEERS_OPENVINO)/bin/python || $(PYTHON) -m venv $(PEERS_OPENVINO)
	$(PEERS_OPENVINO)/bin/python -m pip install --no-deps -r $<
	$(call pip_check_except,$(PEERS_OPENVINO),^openvino [^ ]+ requires openvino-telemetry$(COMMA))
	touch $@

$(PEERS_MNN)/.installed: tools/peers/requirements-mnn.txt
	test -x $(PEERS_MNN)/bin/python || $(PYTHON) -m venv $(PEERS_MNN)
	$(PEERS_MNN)/bin/python -m pip install --no-deps -r $<
	$(call pip_check_except,$(PEERS_MNN),^$$)
	touch $@

$(PEERS_NCNN)/.installed: tools/peers/requirements-ncnn.txt
	test -x $(PEERS_NCNN)/bin/python || $(PYTHON) -m venv $(PEERS_NCNN)
	$(PEERS_NCNN)/bin/python -m pip install --no-deps -r $<
	$(call pip_check_except,$(PEERS_NCNN),^pnnx [^ ]+ requires torch$(COMMA))
	touch $@

clean:
	rm -rf build $(VENV) tests/.cache .pytest_cache
