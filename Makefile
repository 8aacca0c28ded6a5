# tracediff developer entry points. `make demo` and `make check` are the README's two commands;
# `make check` is what CI runs (.ci/run).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
NSYS_PREFIX ?= /opt/nsys-2024.2.3
# The tests start `python -m tracediff` hundreds of times: with PYTHONDONTWRITEBYTECODE set (as on
# this workplace's machines) each would compile ~200 modules again, so the suite writes the
# bytecode caches (git ignores __pycache__). pytest-xdist workers: 3 on the 2-core CI machine (a
# module's tests stay on one worker: --dist loadfile, so a module's git repos and captures are
# built once), handed out longest first (--no-loadscope-reorder keeps tests/conftest.py's
# LONGEST_FIRST order; xdist's own, most tests first, left the bisect modules to the end). A
# capture under nsys is mostly waiting (~1.5 s wall, ~1 CPU-s of nsys's own, measured with a
# subreaper), and the suite is CPU-bound on 2 cores (91-93 % busy; its dips were three bisect
# modules at once: tests/support/schedule.py keeps one worker on CPU modules while two capture).
# Session 14, quiet machine, 3 workers: 633.7 s before the ordering, 590.5 s and 615.2 s after;
# session 13: 4 workers used more CPU (1218 vs 1071 CPU-s) and nsys failed on its own once ("End of file").
TEST_WORKERS ?= 3

.PHONY: setup nsys chromium system-tools demo test check lint typecheck imports bench fuzz-pages fuzz-kineto

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml tracediff/parse/nsys/_sqlite_pages.c \
  tracediff/parse/kineto/_kineto_scan.c tracediff/parse/stacks/_stack_walk.c \
  tracediff/engine/statistics/multinomial.c
	# Where the interpreter's own pip takes --python (pip >= 22.3): the venv made without ensurepip's
	# pip (~9 s) and that pip installs the newest pip into it with everything else (no second pip
	# run to upgrade it, ~4 s). Elsewhere the plain way.
	if $(PY) -m pip --help 2>/dev/null | grep -q -- "--python <python>"; then \
	  $(PY) -m venv --without-pip $(VENV) && \
	  $(PY) -m pip --python $(BIN)/python install -q pip -e '.[dev]'; \
	else \
	  $(PY) -m venv $(VENV) && $(BIN)/pip install -q --upgrade pip && \
	  $(BIN)/pip install -q -e '.[dev]'; \
	fi
	# nvtx 0.2.17 beside the venv (not in it: the dev pin is 0.2.10): the capture tests of a
	# workload whose NVTX ranges nsys 2024.2 drops (tests/integration/test_capture_nvtx_dropped.py)
	$(BIN)/pip install -q --target $(VENV)/nvtx-0.2.17 nvtx==0.2.17
	touch $@

nsys:
	@command -v nsys >/dev/null 2>&1 || [ -x "$(NSYS_PREFIX)/bin/nsys" ] || bash tools/install-nsys.sh "$(NSYS_PREFIX)"

# The HTML report's browser tests (pytest -m browser) open pages in Debian's headless Chromium,
# driven through chromedriver: both installed from the distribution when absent.
chromium:
	@[ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; }

# nsys and Chromium one after the other: both may run apt-get (Chromium, and libssh for nsys), and
# two apt-get at once fail on dpkg's lock.
system-tools:
	@$(MAKE) --no-print-directory nsys
	@$(MAKE) --no-print-directory chromium

demo: setup
	$(BIN)/tracediff compare samples/runs/good samples/runs/bad

test: setup nsys chromium
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m compileall -q tracediff capture tests > /dev/null
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25 tests

SOURCES := tracediff capture tests bench tools

lint: setup
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)

# mypy --strict over tracediff and capture (pyproject's [tool.mypy]).
typecheck: setup
	$(BIN)/mypy

# The import contracts of pyproject's [tool.importlinter]: no cycles, the engine's isolation, textual.
imports: setup
	$(BIN)/lint-imports

# On a fresh machine the venv (pip) is built beside nsys and Chromium (Debian's archive), and the
# static checks run side by side as soon as the venv is there (mypy, ~23 s of one core from a cold
# cache, the longest), each target's output printed whole (-Otarget); then the tests (minutes),
# their progress live. (mypy beside the tests was tried in session 16: it adds its load to the
# suite's first minutes, the nsys-bound bisect modules, whose captures are the load-sensitive part;
# one of its two runs had a capture fail and be retried. Not kept.)
check:
	@$(MAKE) --no-print-directory -j3 -Otarget lint typecheck imports system-tools
	@$(MAKE) --no-print-directory test

bench: setup nsys
	$(BIN)/python bench/ingest.py

# A native module under ASan + UBSan, fed damaged real inputs by its tools/fuzz_*.py for 120 s
# (not part of CI). $(call fuzz,MODULE,TOOL,ENV): builds /tmp/tracediff-asan/MODULE.so first
# from tracediff/parse/MODULE.c (MODULE with its folder: nsys/_sqlite_pages).
ASAN_DIR := /tmp/tracediff-asan
define fuzz
	mkdir -p $(ASAN_DIR)
	gcc -shared -fPIC -fsanitize=address,undefined -fno-omit-frame-pointer -g -O1 -std=c11 \
	  -I$$($(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['include'])") \
	  tracediff/parse/$(1).c -o $(ASAN_DIR)/$(notdir $(1)).so
	LD_PRELOAD=$$(gcc -print-file-name=libasan.so):$$(gcc -print-file-name=libubsan.so) \
	  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  $(3) $(BIN)/python tools/$(2) $(ASAN_DIR)/$(notdir $(1)).so 120
endef

# The SQLite page decoder, fed damaged copies of real reports.
fuzz-pages: setup
	$(call fuzz,nsys/_sqlite_pages,fuzz_sqlite_pages.py,)

# The Kineto JSON scanner, fed damaged pieces of real traces. PYTHONMALLOC=malloc: each piece
# gets its own allocation, so ASan sees a read past its end.
fuzz-kineto: setup
	$(call fuzz,kineto/_kineto_scan,fuzz_kineto_scan.py,PYTHONMALLOC=malloc)
