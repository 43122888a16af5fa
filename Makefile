# The lab's two entry points. Each installs what it needs first (CPU machine, Python >= 3.10).
#   make sweep   -> python -m fp8lab.sweep --plot   (the quality sweep on the embedded offline model)
#   make test    -> python -m pytest                (tests, including every notebook, on the CPU)
PY ?= python3

install:
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -r requirements-nodeps.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .

sweep: install
	$(PY) -m fp8lab.sweep --plot

test: install
	$(PY) -m pytest -q

.PHONY: install sweep test
