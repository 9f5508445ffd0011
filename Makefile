# The two commands for a fresh machine: `make demo` and `make test`. Both create .venv.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo up test test-slow chaos bench lint clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: install            ## one agent conversation on the embedded stack, then stop
	$(VENV)/bin/turnstream demo

up: install              ## the whole stack until Ctrl-C
	$(VENV)/bin/turnstream up

test: install            ## the whole default suite (CI runs this)
	$(PY) -m pytest -q -p no:cacheprovider

test-slow: install       ## slow tests (long benchmarks-as-tests)
	$(PY) -m pytest -q -p no:cacheprovider -m slow

chaos: install           ## the full chaos suite
	$(PY) -m pytest -q -p no:cacheprovider -m chaos

bench: install           ## every benchmark; results in bench/results/
	$(VENV)/bin/turnstream bench all

clean:
	rm -rf $(VENV) bench/results/*.png .pytest_cache
