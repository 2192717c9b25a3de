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

.PHONY: setup build demo test test-cpp test-python test-asan test-tsan soak fuzz bench bench-peers bench-smoke format lint stubs clean

setup: $(VENV)/.setup-done

$(VENV)/.setup-done: requirements.txt requirements-build.txt bench/requirements-nodeps.txt
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if ! $(PYTHON) -c "import venv, ensurepip" >/dev/null 2>&1; then missing="$$missing python3-venv"; fi; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	# --no-compile: byte-compiling all ~17,500 installed modules up front costs about 50 s of CPU;
	# Python compiles the few it imports on first use.
	$(PIP) install -q --no-compile -r requirements-build.txt
	$(PIP) install -q --no-compile -r requirements.txt
	# Petastorm's metadata pins setuptools<70 against torch's >=77; its real dependencies are in
	# requirements.txt, so it is installed without them (see bench/requirements-nodeps.txt).
	$(PIP) install -q --no-compile --no-deps -r bench/requirements-nodeps.txt
	touch $@

# Incremental: scikit-build-core reuses build/<wheel tag> and ninja rebuilds what changed. The
# folder is named here, not in pyproject.toml, so a user's `pip install .` from a clone builds in a
# temporary folder and never re-points this one at another environment.
build: setup
	$(PIP) install -q --no-build-isolation -e . -Cbuild-dir=build/{wheel_tag} \
	  -Ccmake.define.STOKER_BUILD_TESTS=ON -Ccmake.define.STOKER_WERROR=ON -Cbuild.verbose=false

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

# AddressSanitizer + UndefinedBehaviorSanitizer over the C++ unit tests.
test-asan: setup
	$(VENV)/bin/cmake -S . -B $(ASAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Debug \
	  -DSTOKER_SANITIZE=ON -DSTOKER_WERROR=ON -DSTOKER_BUILD_TESTS=ON -DSTOKER_BUILD_PYTHON=OFF \
	  -DPython3_EXECUTABLE=$(abspath $(PY)) -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV)/bin/ninja) >/dev/null
	$(VENV)/bin/cmake --build $(ASAN_DIR) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 ctest --test-dir $(ASAN_DIR) --output-on-failure -j $(JOBS)

# ThreadSanitizer over the C++ unit tests (not part of `test`). Left out: the DiskCache tests
# fork() children that go on to use threads and locks: TSan does not support that after a fork()
# from a multi-threaded process (its die_after_fork option ends such children, and its runtime
# state is not fork-safe). Arrow allocates with
# the system malloc here: pyarrow's mimalloc is not instrumented, so TSan cannot see that a block
# was freed before it is handed out again and reports the reuse as a race.
TSAN_FORK_TESTS := DiskCacheTest\.(GetOrFillRunsTheFillerOncePerKeyAcrossProcesses|GetOrFillWaiterTakesOverFromAKilledFiller|OpenRemovesOnlyAbandonedTempFiles|AProcessForkedDuringAFillDoesNotKeepTheKeyLocked|KilledWriterLeavesNoEntryAndTheNextOpenRemovesItsTempFile|ProcessesSharingAFolderSeeOnlyWholeEntriesWithinBudget|ObjectOpenedBeforeForkWorksInTheChild)
test-tsan: setup
	$(VENV)/bin/cmake -S . -B $(TSAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DSTOKER_TSAN=ON -DSTOKER_WERROR=ON -DSTOKER_BUILD_TESTS=ON -DSTOKER_BUILD_PYTHON=OFF \
	  -DPython3_EXECUTABLE=$(abspath $(PY)) -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV)/bin/ninja) >/dev/null
	$(VENV)/bin/cmake --build $(TSAN_DIR) -j $(JOBS)
	ARROW_DEFAULT_MEMORY_POOL=system TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
	  ctest --test-dir $(TSAN_DIR) --output-on-failure -j $(JOBS) -E '$(TSAN_FORK_TESTS)'

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
# the library and binding sources, JOBS at a time; any finding fails the target, each file's findings
# print together. Headers are checked through the sources that include them. A source that passed
# leaves a stamp under build/lint/ and is checked again only when it, a project header or
# .clang-tidy changes (rm -rf build/lint to check everything).
LINT_SOURCES = $(shell git ls-files 'cpp/src/*.cc' 'python/bindings/*.cc' | grep -v '_test\.cc$$')
LINT_HEADERS = $(shell git ls-files 'cpp/*.h' 'python/bindings/*.h')
lint: build
	clang-format --dry-run --Werror $$(git ls-files 'cpp/*.cc' 'cpp/*.h' 'python/bindings/*.cc' 'python/bindings/*.h')
	$(MAKE) --no-print-directory -k -j $(JOBS) $(LINT_SOURCES:%=build/lint/%.ok)

build/lint/%.ok: % $(LINT_HEADERS) .clang-tidy
	@mkdir -p $(@D)
	@echo "clang-tidy $<"
	@clang-tidy -p $(BUILD_DIR) --quiet $< > $@.log 2>&1 || { cat $@.log; exit 1; }
	@touch $@

# Type stubs of the extension module, regenerated from the build.
stubs: build
	$(PY) -m nanobind.stubgen -m stoker._stoker -o python/stoker/_stoker.pyi
	sed -i '1i # Generated by `make stubs` (nanobind.stubgen) from the compiled extension; do not edit by hand.\n' python/stoker/_stoker.pyi

clean:
	rm -rf build
