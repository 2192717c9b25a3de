# stoker: `make demo` and `make test` work as the first command on a fresh Debian machine.
# They run `setup` when needed (system packages, .venv, pinned Python packages, the C++ build).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
APT_PACKAGES := g++ make libgtest-dev libxxhash-dev clang-format clang-tidy \
  libturbojpeg0-dev libjpeg62-turbo-dev libspng-dev libwebp-dev zlib1g-dev openjdk-17-jre-headless
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
BUILD_DIR = $(firstword $(wildcard build/cp3*))
ASAN_DIR := build/asan
TSAN_DIR := build/tsan
JOBS ?= $(shell nproc)

# No built-in rules: one would offer to relink the build's unity sources (x.cxx from x.cxx.o) for lint.
.SUFFIXES:
MAKEFLAGS += --no-builtin-rules

.PHONY: setup build wheel sdist demo test test-cpp test-python test-asan test-tsan soak fuzz bench bench-peers bench-smoke format lint stubs clean

setup: $(VENV)/.setup-done

$(VENV)/.setup-done: requirements.txt requirements-build.txt bench/requirements-nodeps.txt
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if ! $(PYTHON) -c "import venv, ensurepip" >/dev/null 2>&1; then missing="$$missing python3-venv"; fi; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	# --no-compile, then one compileall on both cores (29 s instead of pip's serial ~50 s).
	$(PIP) install -q --no-compile -r requirements-build.txt
	$(PIP) install -q --no-compile -r requirements.txt
	# Petastorm's metadata pins setuptools<70 against torch's >=77; its real dependencies are in
	# requirements.txt, so it is installed without them (see bench/requirements-nodeps.txt).
	$(PIP) install -q --no-compile --no-deps -r bench/requirements-nodeps.txt
	# Bytecode for every installed module, written once here. Where PYTHONDONTWRITEBYTECODE is set
	# (as on the CI machines) Python never writes it itself, so every process compiled what it
	# imported, again: `import torch` 3.5 s instead of 1.6 s, Lightning 10.8 s instead of 4.2 s,
	# pandas 1.6 s instead of 0.5 s, and the tests start hundreds of such processes (torchrun
	# ranks, Lightning, Ray workers, bench runners): the Lightning and torchrun test files took
	# 116 s instead of 45 s. `|| true`: a few files of torch's test helpers use Python 3.12 syntax
	# and do not compile on 3.11 (pip's own byte-compiling skips such files the same way).
	$(PY) -m compileall -qq -j 0 $(VENV)/lib || true
	touch $@

# Incremental: scikit-build-core reuses build/<wheel tag> and ninja rebuilds what changed. The
# folder is named here, not in pyproject.toml, so a user's `pip install .` from a clone builds in a
# temporary folder and never re-points this one at another environment.
build: setup
	$(PIP) install -q --no-build-isolation -e . -Cbuild-dir=build/{wheel_tag} \
	  -Ccmake.define.STOKER_BUILD_TESTS=ON -Ccmake.define.STOKER_WERROR=ON -Cbuild.verbose=false
	# Bytecode of stoker's own modules (and the bench's and tests' helpers), as a wheel's install
	# writes it: with PYTHONDONTWRITEBYTECODE set, every process compiled them again, 115 ms of
	# `import stoker` and the modules Loader() imports (130 ms -> 17 ms), inside the study bench's
	# clock and in each of the suite's hundreds of processes. Wheels and sdists leave __pycache__
	# out (scikit-build-core); a source edited since only loses the speed-up (Python checks the
	# source's time and size).
	$(PY) -m compileall -qq -j 0 python/stoker bench tests

# A wheel in dist/ that runs without the system's image and hash libraries (issue 27, docs/install.md):
# built in build/wheel (Release, no tests; STOKER_WERROR like `make build`, so each source compiles
# with the same command line and ccache reuses `make build`'s objects), then
# `auditwheel repair` copies libturbojpeg, libjpeg, libspng, libwebp and libxxhash into
# stoker.libs/ and tags it manylinux (libz.so.1 is one of the libraries its policy assumes). libarrow* and libparquet* are never copied: they come from the
# user's pyarrow (the wheel requires the pyarrow minor it was built against). Incremental, like build.
# The release build's folder and configuration (tests on, as `make build`): the wheel links the
# objects `make build` compiled instead of compiling the core again.
WHEEL_BUILD_DIR := build/{wheel_tag}
AUDITWHEEL_EXCLUDE := --exclude 'libarrow*' --exclude 'libparquet*'
wheel: setup
	rm -rf dist/raw && mkdir -p dist
	$(PIP) wheel -q --no-build-isolation --no-deps -w dist/raw . -Cbuild-dir=$(WHEEL_BUILD_DIR) -Ccmake.define.STOKER_BUILD_TESTS=ON \
	  -Ccmake.define.STOKER_WERROR=ON -Cbuild.verbose=false
	rm -f dist/stoker-*.whl
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/auditwheel repair -w dist $(AUDITWHEEL_EXCLUDE) dist/raw/stoker-*.whl
	rm -rf dist/raw
	$(VENV)/bin/auditwheel show dist/stoker-*.whl

# A source archive in dist/ (scikit-build-core's PEP 517 build_sdist); `pip wheel` on it builds the
# same wheel as `make wheel` before the repair.
sdist: setup
	mkdir -p dist && rm -f dist/stoker-*.tar.gz
	$(PY) -c "from scikit_build_core.build import build_sdist; print(build_sdist('dist'))"

demo: build
	$(PY) -m stoker demo

test: build
	$(MAKE) --no-print-directory test-cpp test-python test-asan test-tsan lint

test-cpp:
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

# In PYTEST_WORKERS processes (pytest-xdist); tests marked xdist_group run one after another on one
# worker (see tests/conftest.py). PYTEST_WORKERS=0 runs them all in this process.
PYTEST_WORKERS ?= $(JOBS)
test-python:
	$(PY) -m pytest -v --timeout=300 --durations=25 -n $(PYTEST_WORKERS) --dist loadgroup tests

# AddressSanitizer + UndefinedBehaviorSanitizer over the C++ unit tests. Debug (-O0) with -g1
# (line tables only): reports still name file and line; full -g costs about 6 % more compile CPU.
# The sanitizer runs start JOBS processes, each running its share of the tests
# (tools/run_gtest_shards.sh), not ctest's process per test: under ASan a process's start and exit
# cost about 0.15 s, under TSan 0.08 s, most of a short test's time; the ~290 tests take about
# 10 s instead of 27 s (ASan) and 10 s instead of 25 s (TSan) on 2 cores. Every test still runs
# once under the sanitizer, a report still fails the run (ASan and UBSan abort, TSan halts), and
# LeakSanitizer checks each shard at its exit. A shard that runs past SANITIZER_TIMEOUT seconds
# fails. `ctest` in the folder still runs them one process each.
SANITIZER_TIMEOUT ?= 900
test-asan: setup
	$(VENV)/bin/cmake -S . -B $(ASAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
	  -DSTOKER_SANITIZE=ON -DSTOKER_WERROR=ON -DSTOKER_BUILD_TESTS=ON -DSTOKER_BUILD_PYTHON=OFF \
	  -DPython3_EXECUTABLE=$(abspath $(PY)) -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV)/bin/ninja) >/dev/null
	$(VENV)/bin/cmake --build $(ASAN_DIR) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 tools/run_gtest_shards.sh $(ASAN_DIR)/stoker_tests $(JOBS) $(SANITIZER_TIMEOUT)

# ThreadSanitizer over the C++ unit tests. -O1 -g1 instead of RelWithDebInfo's -O2 -g: half the
# compile CPU (4.5 s instead of 9.0 s for one unity batch), and TSan's instrumentation of every
# memory access and its reports (file:line from the line tables) are the same. Left out: the DiskCache tests
# fork() children that go on to use threads and locks: TSan does not support that after a fork()
# from a multi-threaded process (its die_after_fork option ends such children, and its runtime
# state is not fork-safe). Arrow allocates with
# the system malloc here: pyarrow's mimalloc is not instrumented, so TSan cannot see that a block
# was freed before it is handed out again and reports the reuse as a race. atexit_sleep_ms=0: TSan
# otherwise sleeps 1 s in every process's exit (for threads still running to race): with ctest's
# process per test, 1.08 s instead of 0.08 s for a test that takes 0 ms, about 160 s instead of
# 25 s for the ~280 tests on 2 cores. Every test joins its threads before it returns (stoker
# detaches none), so there is nothing of ours left running for the sleep to wait for.
empty :=
space := $(empty) $(empty)
TSAN_FORK_TESTS := $(addprefix DiskCacheTest.,GetOrFillRunsTheFillerOncePerKeyAcrossProcesses GetOrFillWaiterTakesOverFromAKilledFiller OpenRemovesOnlyAbandonedTempFiles AProcessForkedDuringAFillDoesNotKeepTheKeyLocked KilledWriterLeavesNoEntryAndTheNextOpenRemovesItsTempFile ProcessesSharingAFolderSeeOnlyWholeEntriesWithinBudget ObjectOpenedBeforeForkWorksInTheChild)
test-tsan: setup
	$(VENV)/bin/cmake -S . -B $(TSAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
	  -DSTOKER_TSAN=ON -DSTOKER_WERROR=ON -DSTOKER_BUILD_TESTS=ON -DSTOKER_BUILD_PYTHON=OFF \
	  -DPython3_EXECUTABLE=$(abspath $(PY)) -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV)/bin/ninja) >/dev/null
	$(VENV)/bin/cmake --build $(TSAN_DIR) -j $(JOBS)
	ARROW_DEFAULT_MEMORY_POOL=system TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 atexit_sleep_ms=0 suppressions=$(abspath tools/tsan.supp)" \
	  tools/run_gtest_shards.sh $(TSAN_DIR)/stoker_tests $(JOBS) $(SANITIZER_TIMEOUT) \
	  --gtest_filter=-$(subst $(space),:,$(strip $(TSAN_FORK_TESTS)))

# Long-running check of resource growth (RSS, threads, fds) over resumes and cache evictions; not
# part of `test` or CI. SOAK_SECONDS (default 600) sets the duration.
soak: build
	$(PY) tools/soak.py

# Mutation fuzzing of the decode path (tools/fuzz_parquet.py): FUZZ_ITERATIONS mutants of a seeded
# corpus, each read by pyarrow and stoker in a worker subprocess; findings are saved under
# tests/data/fuzz_crashes/ and fail the target. `make test` runs a short run (tests/system/test_fuzz.py).
FUZZ_ITERATIONS ?= 3000
FUZZ_SEED ?= 1
FUZZ_TIMEOUT ?= 60
FUZZ_WORKERS ?= $(JOBS)
fuzz: build
	$(PY) tools/fuzz_parquet.py --iterations $(FUZZ_ITERATIONS) --seed $(FUZZ_SEED) \
	  --timeout $(FUZZ_TIMEOUT) --workers $(FUZZ_WORKERS)

# Optional, heavy image peers of the bench (SPDL with FFmpeg's libraries, DALI's CPU pipeline).
bench-peers: setup
	$(SUDO) apt-get install -y -qq libavcodec59 libavfilter8 libavformat59 libavdevice59
	$(PIP) install -q -r bench/requirements-peers.txt

bench: build
	$(PY) -m bench --quick

bench-smoke: build
	$(PY) -m bench --smoke

format:
	clang-format -i $$(git ls-files 'cpp/*.cc' 'cpp/*.h' 'python/bindings/*.cc' 'python/bindings/*.h')

# clang-format, then clang-tidy (.clang-tidy: checks, reasons for those off, warnings as errors) over
# the library and binding sources, JOBS at a time; any finding fails the target, each unit's findings
# print together. The units are what the release build compiles for stoker_core and _stoker (its
# compile_commands.json): with unity builds (the default) a batch of sources at a time, as the
# compiler sees them. Most of clang-tidy's time is parsing Arrow's headers and running the matchers
# over their declarations (about 5 s of a 5.7 s file), so a batch of 8 sources costs about as much as
# one source alone: 13 units instead of 65 files (the findings, checked on a batch with defects
# planted in two of its files, are the same either way; the included sources match
# HeaderFilterRegex, and CMake's unity files mark their own #include lines NOLINT). Headers are
# checked through the sources that include them. A unit that passed leaves a stamp under
# build/lint/ and is checked again only when it, a source it includes, a project header or
# .clang-tidy changes (rm -rf build/lint to check everything).
LINT_UNITS = $(shell $(PY) -c 'import json, os, sys; [print(os.path.relpath(c["file"])) for c in json.load(open(sys.argv[1])) if "stoker_core.dir/" in c["output"] or "_stoker.dir/" in c["output"]]' $(BUILD_DIR)/compile_commands.json)
LINT_HEADERS = $(shell git ls-files 'cpp/*.h' 'python/bindings/*.h')
lint: build
	clang-format --dry-run --Werror $$(git ls-files 'cpp/*.cc' 'cpp/*.h' 'python/bindings/*.cc' 'python/bindings/*.h')
	@units="$(LINT_UNITS)"; [ -n "$$units" ] || { echo "lint: no stoker_core/_stoker sources in $(BUILD_DIR)/compile_commands.json"; exit 1; }
	$(MAKE) --no-print-directory -k -j $(JOBS) $(LINT_UNITS:%=build/lint/%.ok)

# A unity unit's prerequisites include the sources it #includes (absolute paths, written by CMake).
.SECONDEXPANSION:
build/lint/%.ok: % $$(shell sed -n 's|^.include "$(CURDIR)/\([^"]*\)".*|\1|p' $$*) $(LINT_HEADERS) .clang-tidy
	@mkdir -p $(@D)
	@echo "clang-tidy $<"
	@clang-tidy -p $(BUILD_DIR) --quiet $< > $@.log 2>&1 || { cat $@.log; exit 1; }
	@touch $@

# Type stubs of the extension module, regenerated from the build.
stubs: build
	$(PY) -m nanobind.stubgen -m stoker._stoker -o python/stoker/_stoker.pyi
	sed -i '1i # Generated by `make stubs` (nanobind.stubgen) from the compiled extension; do not edit by hand.\n' python/stoker/_stoker.pyi

clean:
	rm -rf build dist
