# Everything a fresh machine needs: `make demo` and `make test` install what they use first.
PY ?= python3
PIP ?= $(PY) -m pip
OUT ?= out

.PHONY: install install-test install-browser demo test bench fuzz mutate mutate-sample hand-mutants clean

install:
	$(PIP) install -q -e .

# Tests also run pptl's CPU executor (torch, gloo) and open the HTML in a headless browser
# (Debian's chromium, driven by the playwright package from the test extra). Without them those
# tests skip; under CI=true a missing one is an error (one line, exit 1), so a failed install cannot
# pass as a green build with part of the suite unrun.
MISSING = { if [ "$(CI)" = true ]; then echo "error: CI=true and $(1) is not installed ($(2)); the tests that need it would skip" >&2; exit 1; \
	    else echo "$(1) not installed: the tests that need it will skip"; fi; }

install-test: install
	$(PIP) install -q -e '.[test]'
	@$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q torch==2.13.0 || true
	@$(PY) -c "import torch" 2>/dev/null || $(call MISSING,torch,pip install torch==2.13.0 failed)
	@$(MAKE) --no-print-directory install-browser

install-browser:
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	  (apt-get update -qq >/dev/null 2>&1; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1); true; }
	@command -v chromium >/dev/null 2>&1 || $(call MISSING,chromium,apt-get install chromium failed or needs root)

demo: install
	pptl demo --out $(OUT)
	@echo "explore schedules in the browser (offline): pptl serve [CONFIG] --port 8000, then open http://127.0.0.1:8000/"

test: install-test
	$(PY) -m ruff check pptl tests bench
	$(PY) -m mypy
	$(PY) -m pytest -q -rs -p no:cacheprovider tests

bench: install
	$(PY) bench/plan_scale.py
	$(PY) bench/ci_path.py

# Long fuzzing (docs/reliability.md): 5000 inputs per target, under an 8 GiB address-space cap so a
# memory blow-up fails as a MemoryError (a finding) instead of taking the machine down.
fuzz: install-test
	mkdir -p $(OUT)
	ulimit -v 8388608 2>/dev/null; PPTL_FUZZ_EXAMPLES=5000 PPTL_FUZZ_STATS=$(OUT)/fuzz-stats.json \
	  $(PY) -m pytest -q -p no:cacheprovider tests -k fuzz

# Mutation testing (docs/testing.md): mutmut changes one thing at a time in the pure core and runs the
# fast tests that reach it (pyproject.toml [tool.mutmut]). Hours on 2 cores: narrow it with
# MUTANTS='pptl.simulate.*', and JOBS=N runs N mutants at once. Survivors: `mutmut results`.
MUTANTS ?= pptl.checks.* pptl.simulate.* pptl.deps.* pptl.schedules.* pptl.formats.torch_csv.*
JOBS ?= 2
mutate: install-test
	$(PIP) install -q mutmut==3.8.1
	$(PY) -m mutmut run --max-children $(JOBS) $(foreach m,$(MUTANTS),'$(m)')
	$(PY) -m mutmut results

# A reproducible sample of the same mutants (docs/testing.md): SIZE drawn per module group with SEED,
# run by mutmut against the tests that reach each one; prints kill rates and survivors (~25 min on 2 cores).
SEED ?= 2026
SIZE ?= 50
mutate-sample: install-test
	$(PIP) install -q mutmut==3.8.1
	$(PY) tests/mutate_sample.py --seed $(SEED) --size $(SIZE) --jobs $(JOBS)

hand-mutants:  # the hand-written boundary mutants of docs/testing.md, each against its tests (~20 min on 2 cores)
	$(PY) tests/hand_mutants.py

clean:
	rm -rf $(OUT) build *.egg-info mutants
