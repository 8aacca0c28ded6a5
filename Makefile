# tracediff developer entry points. `make demo` and `make test` are the README's two commands.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
NSYS_PREFIX ?= /opt/nsys-2024.2.3

.PHONY: setup nsys demo test check lint typecheck bench fuzz-pages fuzz-kineto

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml tracediff/parse/_sqlite_pages.c tracediff/parse/_kineto_scan.c
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

nsys:
	@command -v nsys >/dev/null 2>&1 || [ -x "$(NSYS_PREFIX)/bin/nsys" ] || bash tools/install-nsys.sh "$(NSYS_PREFIX)"

demo: setup
	$(BIN)/tracediff compare samples/g_good.arrow samples/g_bad.arrow

test: setup nsys
	$(BIN)/pytest -q -p no:cacheprovider tests

lint: setup
	$(BIN)/ruff check tracediff capture tests bench
	$(BIN)/ruff format --check tracediff capture

typecheck: setup
	$(BIN)/mypy

check: lint typecheck test

bench: setup nsys
	$(BIN)/python bench/ingest.py

# The SQLite page decoder under ASan + UBSan, fed damaged copies of real reports (not part of CI).
ASAN_SO := /tmp/tracediff-asan/_sqlite_pages.so
fuzz-pages: setup
	mkdir -p $(dir $(ASAN_SO))
	gcc -shared -fPIC -fsanitize=address,undefined -fno-omit-frame-pointer -g -O1 -std=c11 \
	  -I$$($(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['include'])") \
	  tracediff/parse/_sqlite_pages.c -o $(ASAN_SO)
	LD_PRELOAD=$$(gcc -print-file-name=libasan.so):$$(gcc -print-file-name=libubsan.so) \
	  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  $(BIN)/python tools/fuzz_sqlite_pages.py $(ASAN_SO) 120

# The Kineto JSON scanner under ASan + UBSan, fed damaged pieces of real traces (not part of CI).
# PYTHONMALLOC=malloc: each piece gets its own allocation, so ASan sees a read past its end.
ASAN_KINETO_SO := /tmp/tracediff-asan/_kineto_scan.so
fuzz-kineto: setup
	mkdir -p $(dir $(ASAN_KINETO_SO))
	gcc -shared -fPIC -fsanitize=address,undefined -fno-omit-frame-pointer -g -O1 -std=c11 \
	  -I$$($(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['include'])") \
	  tracediff/parse/_kineto_scan.c -o $(ASAN_KINETO_SO)
	LD_PRELOAD=$$(gcc -print-file-name=libasan.so):$$(gcc -print-file-name=libubsan.so) \
	  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  PYTHONMALLOC=malloc $(BIN)/python tools/fuzz_kineto_scan.py $(ASAN_KINETO_SO) 120
