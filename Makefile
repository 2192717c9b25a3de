# stoker: `make demo` and `make test` work as the first command on a fresh Debian machine.
# They run `setup` when needed (system packages, .venv, pinned Python packages, the C++ build).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
APT_PACKAGES := g++ make libgtest-dev clang-format clang-tidy
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
BUILD_DIR = $(firstword $(wildcard build/cp3*))
ASAN_DIR := build/asan
JOBS ?= $(shell nproc)

.PHONY: setup build demo test test-cpp test-python test-asan bench bench-smoke format lint clean

setup: $(VENV)/.setup-done

$(VENV)/.setup-done: requirements.txt requirements-build.txt
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if ! $(PYTHON) -c "import venv, ensurepip" >/dev/null 2>&1; then missing="$$missing python3-venv"; fi; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -r requirements-build.txt
	$(PIP) install -q -r requirements.txt
	touch $@

# Incremental: scikit-build-core reuses build/<wheel tag> and ninja rebuilds what changed.
build: setup
	$(PIP) install -q --no-build-isolation -e . \
	  -Ccmake.define.STOKER_BUILD_TESTS=ON -Cbuild.verbose=false

demo: build
	$(PY) -m stoker demo

test: build
	$(MAKE) --no-print-directory test-cpp test-python test-asan

test-cpp:
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

test-python:
	$(PY) -m pytest -v --timeout=300 tests

# AddressSanitizer + UndefinedBehaviorSanitizer over the C++ unit tests.
test-asan: setup
	$(VENV)/bin/cmake -S . -B $(ASAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Debug \
	  -DSTOKER_SANITIZE=ON -DSTOKER_BUILD_TESTS=ON -DSTOKER_BUILD_PYTHON=OFF \
	  -DPython3_EXECUTABLE=$(abspath $(PY)) -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV)/bin/ninja) >/dev/null
	$(VENV)/bin/cmake --build $(ASAN_DIR) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 ctest --test-dir $(ASAN_DIR) --output-on-failure -j $(JOBS)

bench: build
	$(PY) -m bench --quick

bench-smoke: build
	$(PY) -m bench --smoke

format:
	clang-format -i $$(git ls-files 'cpp/*.cc' 'cpp/*.h' 'python/bindings/*.cc' 'python/bindings/*.h')

lint: build
	clang-format --dry-run --Werror $$(git ls-files 'cpp/*.cc' 'cpp/*.h' 'python/bindings/*.cc' 'python/bindings/*.h')
	clang-tidy -p $(BUILD_DIR) --quiet $$(git ls-files 'cpp/src/*.cc' | grep -v _test.cc)

clean:
	rm -rf build
