# CommInsight build, generation, tests and benchmarks. Everything a fresh machine needs is set
# up from here: `make test` creates .venv from requirements/dev.txt (exact pins) first.

SHELL := /bin/bash
.DEFAULT_GOAL := all

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
VENV_STAMP := $(VENV)/.installed
CC ?= gcc
# The flags every generated header and contract program must pass.
CSTRICT := -std=c11 -Wall -Wextra -Werror -pedantic
# Where build outputs go; both may be set on the command line (`make DIST=/tmp/d build-profiler`
# builds beside, not over, the dist/ that jobs and other tests load).
BUILD := build
DIST := dist
INSTALL_PREFIX ?= /opt/comminsight
# an interpreter of the training environment: `make install` gives it Inject only (empty: none)
TRAINING_PYTHON ?=
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
# the wheel carries a native library (setup.py): tagged for this platform, e.g. linux_x86_64
WHEEL_PLATFORM := $(shell python3 -c "import sysconfig; print(sysconfig.get_platform().replace('-', '_').replace('.', '_'))")
WHEEL := $(DIST)/comminsight-$(VERSION)-py3-none-$(WHEEL_PLATFORM).whl
PYTEST_ARGS ?=
# Bytecode is cached, outside the tree, even where the environment turns it off
# (PYTHONDONTWRITEBYTECODE=1): every simulated rank, Agent, engine and CLI process the tests start
# would otherwise compile each module it imports again, twice the CPU of its start-up.
export PYTHONDONTWRITEBYTECODE :=
export PYTHONPYCACHEPREFIX := $(abspath $(BUILD))/pycache

GEN_HEADERS := $(wildcard generated/c/include/comminsight/*.h)

# Every artifact under $(BUILD) and $(DIST) is written under a temporary name beside its target,
# unique to the shell that writes it ($@.tmp.<pid>), and renamed over the target only once
# complete: a job loading the plugin, or a second make, sees the old file or the new one, never
# half of one (rename(2) within a directory is atomic). On failure or interruption the EXIT trap
# removes the temporary and the target stays as it was. A rule writes "$$tmp" between the two:
#   $(ATOMIC) <command writing "$$tmp"> $(ATOMIC_DONE)
ATOMIC = tmp="$@.tmp.$$$$"; trap 'rm -rf "$$tmp"' EXIT;
ATOMIC_DONE = && mv -f "$$tmp" "$@"

.PHONY: build-profiler build-sim build-profiler-sanitizers bench-profiler bench-agent bench-engine bench-engine-soak bench-master-scale bench-faults bench-metrics bench-log-bytes bench-engine-distributed bench-relay-soak bench-inject-markers build-engine
.PHONY: all build venv generate verify-generated check-schemas check-compat headers test test-contract \
        test-unit lint bench demo install uninstall wheel-manylinux clean

## help: every target with what it does (the `## target: ...` lines of this Makefile)
.PHONY: help
help:
	@sed -n 's/^## \([a-z][a-z0-9-]*\): /\1\t/p' $(MAKEFILE_LIST) | sort | \
	  awk -F'\t' '{ printf "  %-26s %s\n", $$1, $$2 }'

## all: build everything buildable so far (artifacts under dist/)
all: build

## build: the wheel, the generated headers compiled, the Profiler, the engine's C core and Inject's wheel
build: $(WHEEL) headers build-profiler build-sim build-engine build-inject

# ---- Inject: a dependency-free wheel for the training environment (.pth + comminsight/inject) ----
.PHONY: build-inject
INJECT_VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' comminsight/inject/__init__.py)
INJECT_WHEEL := $(DIST)/comminsight_inject-$(INJECT_VERSION)-py3-none-any.whl
# what Inject's wheel ships of the generated code (the config file parser, the names of the
# records it writes and of the home's paths): modules of the standard library alone
INJECT_CONFIG := generated/python/comminsight_gen/config_file_v1.py \
  generated/python/comminsight_gen/inject_metadata_v1_names.py \
  generated/python/comminsight_gen/python_stack_v1_names.py \
  generated/python/comminsight_gen/home_v1_names.py
INJECT_SRC := $(wildcard comminsight/inject/*.py) $(wildcard inject/*) $(INJECT_CONFIG)

## build-inject: dist/comminsight_inject-<version>-py3-none-any.whl
build-inject: $(INJECT_WHEEL)

# The sources are staged as the package `comminsight_inject` (the wheel's import name) in a
# directory of this make's own and built from that copy with the venv's pinned setuptools;
# pip writes the wheel into a temporary directory beside the target, whence it is renamed.
$(INJECT_WHEEL): $(VENV_STAMP) $(INJECT_SRC)
	@mkdir -p $(BUILD) $(DIST)
	$(ATOMIC) stage="$(BUILD)/inject.tmp.$$$$"; trap 'rm -rf "$$tmp" "$$stage"' EXIT; \
	  mkdir -p "$$tmp" "$$stage/comminsight_inject" && \
	  cp inject/pyproject.toml inject/setup.py inject/comminsight_inject.pth "$$stage/" && \
	  cp comminsight/inject/*.py $(INJECT_CONFIG) "$$stage/comminsight_inject/" && \
	  $(VPY) -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
	    -w "$$tmp" "$$stage" && \
	  mv -f "$$tmp/$(@F)" "$@"

# ---- the Profiler plugin (C11, generated headers only; no NCCL/CUDA headers) ----
PROFILER_SO := $(DIST)/libnccl-profiler-comminsight.so
PROFILER_SRC := $(wildcard profiler/src/*.c)
PROFILER_DEPS := $(PROFILER_SRC) $(wildcard profiler/src/*.h) $(GEN_HEADERS)
PROFILER_CFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fPIC -shared -pthread -fno-strict-aliasing \
  -fvisibility=hidden -Igenerated/c/include
PROFILER_LIBS := -lm -ldl
# Link-time optimization lets the hot path inline across files; some toolchains ship a gcc
# whose lto-wrapper cannot run, so use it only where it works.
PROFILER_LTO := $(shell echo 'int main(void){return 0;}' | $(CC) -flto -x c - -o /dev/null 2>/dev/null && echo -flto)

## build-profiler: dist/libnccl-profiler-comminsight.so
build-profiler: $(PROFILER_SO)

$(PROFILER_SO): $(PROFILER_DEPS)
	@mkdir -p $(@D)
	$(ATOMIC) $(CC) $(PROFILER_CFLAGS) -O2 -g $(PROFILER_LTO) $(PROFILER_SRC) -o "$$tmp" \
	  $(PROFILER_LIBS) $(ATOMIC_DONE)

# Sanitizer builds for the test suites (loaded with the sanitizer runtime preloaded).
$(BUILD)/asan/libnccl-profiler-comminsight.so: $(PROFILER_DEPS)
	@mkdir -p $(@D)
	$(ATOMIC) $(CC) $(PROFILER_CFLAGS) -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
	  -fno-sanitize-recover=undefined $(PROFILER_SRC) -o "$$tmp" $(PROFILER_LIBS) $(ATOMIC_DONE)

$(BUILD)/tsan/libnccl-profiler-comminsight.so: $(PROFILER_DEPS)
	@mkdir -p $(@D)
	$(ATOMIC) $(CC) $(PROFILER_CFLAGS) -Wno-error=tsan -Wno-tsan -O1 -g -fsanitize=thread \
	  $(PROFILER_SRC) -o "$$tmp" $(PROFILER_LIBS) $(ATOMIC_DONE)

## build-profiler-sanitizers: the Profiler under ASan+UBSan and under TSan (build/asan/, build/tsan/), for the tests
build-profiler-sanitizers: $(BUILD)/asan/libnccl-profiler-comminsight.so $(BUILD)/tsan/libnccl-profiler-comminsight.so

# ---- the Semantic Engine's C core (loaded with cffi; see comminsight/semantic/native) ----
ENGINE_SO := $(BUILD)/engine/libciengine.so
ENGINE_SRC := comminsight/semantic/native/engine_core.c
# the log scanner spells every key as the inspector-log schema does (the writer's header), reads
# the writer's compact lines by the decoders generated beside the writer's encoders, and
# datatypes by the shm protocol's codes; its structs and prototypes are the engine-core protocol's
ENGINE_HEADERS := generated/c/include/comminsight/engine_core_v1.h generated/c/include/comminsight/inspector_log_v1.h generated/c/include/comminsight/inspector_log_v1_codec.h generated/c/include/comminsight/shm_v1.h
# where the engine was built before it moved under build/: a copy left there would be loaded
# by nothing now, and packaged by nothing, but it is a build output in the source tree
ENGINE_SO_OLD := comminsight/semantic/native/libciengine.so

## build-engine: the Semantic Engine's C core, build/engine/libciengine.so (a checkout loads it there; the wheel carries it beside the package)
build-engine: $(ENGINE_SO)

# -ffp-contract=off: Step totals must be the same float operations as the Python definition;
# -Wmissing-prototypes: every function the library exports is declared by the engine-core
# protocol's header (which its Python side loads as cffi's cdef), or the build fails
$(ENGINE_SO): $(ENGINE_SRC) $(ENGINE_HEADERS)
	@mkdir -p $(@D)
	@rm -f $(ENGINE_SO_OLD)
	$(ATOMIC) $(CC) -std=gnu11 -Wall -Wextra -Wmissing-prototypes -Werror -O2 -g -fPIC -shared -ffp-contract=off \
	  -Igenerated/c/include $< -o "$$tmp" $(ATOMIC_DONE)

# ---- the simulated NCCL's per-channel event loops (loaded with cffi; see comminsight/sim/abi.py) ----
SIM_SO := $(BUILD)/sim/libcisim.so
SIM_SRC := comminsight/sim/sim_channels.c

## build-sim: the simulated NCCL's C part, build/sim/libcisim.so (without it the simulator makes the same calls from Python, at several times the CPU)
build-sim: $(SIM_SO)

$(SIM_SO): $(SIM_SRC) $(GEN_HEADERS)
	@mkdir -p $(@D)
	$(ATOMIC) $(CC) -std=c11 -Wall -Wextra -Werror -O2 -g -fPIC -shared -Igenerated/c/include \
	  $< -o "$$tmp" $(ATOMIC_DONE)

## debian-packages: the Debian packages the build and tests use (scripts/debian-packages.txt), installed if missing
.PHONY: debian-packages
debian-packages:
	@bash scripts/install-debian-packages.sh

# order-only: the check runs first on a fresh machine (python3-venv), never forces a rebuild.
# Dependencies are not compiled ahead (a third of the install's CPU, mostly modules of torch no
# test imports): a module is compiled once, into PYTHONPYCACHEPREFIX, when first imported.
# uv (pinned in requirements/installer.txt) installs the pinned packages: the same pins as
# pip, a tenth of the time on a fresh machine (pip: 90 s of a 2-core machine's first `make
# test`). uv reads no pip configuration but the find-links given here; where it cannot
# install them (an index or proxy only pip is configured for), pip does.
PIP_INSTALL := $(VPY) -m pip install --quiet --disable-pip-version-check --no-compile
UV_INSTALL := UV_LINK_MODE=copy $(VENV)/bin/uv pip install --quiet --python $(VPY) \
  $(foreach links,$(PIP_FIND_LINKS),--find-links $(links))
$(VENV_STAMP): requirements/dev.txt requirements/runtime.txt requirements/installer.txt \
  pyproject.toml | debian-packages
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) -r requirements/installer.txt
	$(UV_INSTALL) -r requirements/dev.txt || { \
	  echo "uv could not install requirements/dev.txt: pip installs it" >&2; \
	  $(PIP_INSTALL) -r requirements/dev.txt; }
	$(PIP_INSTALL) --no-deps --no-build-isolation -e .
	touch $@

## venv: the development virtualenv from pinned dependencies
venv: $(VENV_STAMP)

## generate: regenerate generated/ (and README tables) from protocols/
generate: $(VENV_STAMP)
	$(VPY) -m codegen generate

## verify-generated: fail if generated/ differs from what protocols/ produce
verify-generated: $(VENV_STAMP)
	$(VPY) -m codegen verify

## check-schemas: validate the registry and every protocol source, write nothing
check-schemas: $(VENV_STAMP)
	$(VPY) -m codegen check

## check-compat: fail if a live protocol version changed incompatibly against the committed baseline, protocols/compat-baseline/ (no tag needed; a missing or damaged baseline fails too; COMPAT_BASE=<ref> compares with that git ref's protocols/ instead)
check-compat: $(VENV_STAMP)
	$(VPY) -m codegen check-compat $(if $(COMPAT_BASE),--base $(COMPAT_BASE))

## compat-baseline: release step: freeze every live protocol version into protocols/compat-baseline/ (one canonical JSON file each and a sha256 index; commit it); refuses while the tree breaks the baseline it replaces unless COMPAT_FORCE=1
.PHONY: compat-baseline
compat-baseline: $(VENV_STAMP)
	$(VPY) -m codegen compat-baseline $(if $(COMPAT_FORCE),--force)

## headers: every generated C header compiles on its own with -Werror
headers: $(patsubst generated/c/include/comminsight/%.h,$(BUILD)/headers/%.o,$(GEN_HEADERS))

# (the typedef only keeps a header of nothing but macros from being an "empty translation unit")
$(BUILD)/headers/%.o: generated/c/include/comminsight/%.h
	@mkdir -p $(@D)
	$(ATOMIC) printf '#include "comminsight/%s.h"\ntypedef int header_check;\n' $* | \
	  $(CC) $(CSTRICT) -Igenerated/c/include -x c -c - -o "$$tmp" $(ATOMIC_DONE)

# pip writes the wheel into a temporary directory beside the target, whence it is renamed;
# setuptools builds under that directory too (COMMINSIGHT_BUILD_BASE, not ./build: two makes
# never share its tree), and setup.py packages the engine this make built ($(ENGINE_SO))
$(WHEEL): $(VENV_STAMP) $(ENGINE_SO) $(shell find comminsight generated/python -name '*.py' 2>/dev/null) pyproject.toml setup.py
	@mkdir -p $(DIST)
	$(ATOMIC) mkdir -p "$$tmp/setuptools" && base="$$(cd "$$tmp" && pwd)" && \
	  COMMINSIGHT_ENGINE_SO="$(abspath $(ENGINE_SO))" COMMINSIGHT_BUILD_BASE="$$base/setuptools" \
	  $(VPY) -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
	    -w "$$tmp" . && \
	  mv -f "$$tmp/$(@F)" "$@"

## test: Debian packages (installed if missing), verify-generated, check-compat, lint, contract tests, then every pytest suite (unit, integration, e2e) spread over the cores
# The checks and builds before the tests are independent of each other (the C builds need no
# venv): they run side by side, one per core, each target's output kept together; then the tests.
NPROC := $(shell nproc 2>/dev/null || echo 2)
test: debian-packages
	$(MAKE) --no-print-directory -j$(NPROC) -Otarget verify-generated check-compat headers lint \
	  build-profiler $(SIM_SO) build-profiler-sanitizers $(ENGINE_SO) test-contract test-bytecode
	$(MAKE) --no-print-directory test-suites

## test-bytecode: collect the tests once (no test runs), so that pytest's rewritten test modules are cached before the workers start
# pytest rewrites each test module's asserts when it imports it and keeps the result beside its
# bytecode (in PYTHONPYCACHEPREFIX); on a fresh clone every xdist worker would rewrite every
# module itself at once (13 s of CPU each, measured). Collected once first, the workers load it.
.PHONY: test-bytecode
test-bytecode: $(VENV_STAMP)
	@mkdir -p $(BUILD)
	@tmp="$(BUILD)/collected.txt.tmp.$$$$"; trap 'rm -f "$$tmp"' EXIT; \
	  $(VPY) -m pytest tests --collect-only -q -p no:cacheprovider > "$$tmp" || \
	  { cat "$$tmp"; exit 1; }; tail -n 1 "$$tmp"; mv -f "$$tmp" $(BUILD)/collected.txt

## test-fresh-boot: make test on a machine that seems booted FRESH_BOOT_UPTIME_S (120) seconds ago: a time namespace (scripts/as-if-booted.sh; needs CAP_SYS_ADMIN)
FRESH_BOOT_UPTIME_S ?= 120
.PHONY: test-fresh-boot
test-fresh-boot:
	scripts/as-if-booted.sh $(FRESH_BOOT_UPTIME_S) $(MAKE) --no-print-directory test

## lint: ruff on the hand-written Python (generated/ is excluded), and import-linter's contracts (pyproject.toml: the Agent's layers import only downward)
lint: $(VENV_STAMP)
	$(VPY) -m ruff check comminsight codegen tests contract-tests bench
	$(VPY) -m ruff format --check comminsight codegen tests contract-tests bench
	$(VENV)/bin/lint-imports --no-cache --config pyproject.toml

## test-contract: the cross-language contract tests (contract-tests/: C, cffi, numpy and the generated readers on the same fixtures)
test-contract: $(VENV_STAMP) $(ENGINE_SO)
	$(VPY) -m pytest contract-tests $(PYTEST_ARGS)

# pytest-xdist workers: two per core by default (PYTEST_WORKERS=0 runs in one process). Much
# of an end-to-end test is waiting (a hang threshold, a hold, an Agent's passes) while its
# processes use little CPU: a second worker per core runs another module meanwhile (measured
# on 2 cores: 806 s with 4 workers, 1,197 s with 2). A module's tests stay on one worker so a
# module-scoped simulator run is shared, not repeated.
PYTEST_WORKERS ?= $(shell echo $$((2 * $(NPROC))))
PYTEST_XDIST := $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder)

## test-suites: tests/unit, tests/integration and tests/e2e in one pytest run (PYTEST_ARGS=... to select)
.PHONY: test-suites test-integration test-e2e
test-suites: $(VENV_STAMP) $(ENGINE_SO) build-profiler $(SIM_SO)
	$(VPY) -m pytest tests $(PYTEST_XDIST) $(PYTEST_ARGS)

## test-unit: tests/unit, in-process tests of one module or class each (no plugin, no Agent process), under a minute
test-unit: $(VENV_STAMP) $(ENGINE_SO)
	$(VPY) -m pytest tests/unit $(PYTEST_XDIST) $(PYTEST_ARGS)

## test-integration: tests/integration, the real plugin under the simulated NCCL, the CLI, the generators and packaging (no long-running Agent beside a job)
test-integration: $(VENV_STAMP) $(ENGINE_SO) build-profiler $(SIM_SO)
	$(VPY) -m pytest tests/integration $(PYTEST_XDIST) $(PYTEST_ARGS)

## test-e2e: tests/e2e, simulated jobs through the real plugin with a real Agent (and master, slaves) beside them
test-e2e: $(VENV_STAMP) $(ENGINE_SO) build-profiler $(SIM_SO)
	$(VPY) -m pytest tests/e2e $(PYTEST_XDIST) $(PYTEST_ARGS)

## check-deploy: promtool checks of deploy/prometheus (alert rules, their unit tests, the example config); make test also checks the dashboard against a real /metrics page
.PHONY: check-deploy
check-deploy: debian-packages
	promtool check rules deploy/prometheus/comminsight-alerts.yml
	promtool test rules deploy/prometheus/comminsight-alerts.test.yml
	promtool check config deploy/prometheus/prometheus.yml

## bench: CPU benchmarks, one JSON line per metric
bench: $(VENV_STAMP) build-profiler $(SIM_SO) $(ENGINE_SO)
	@for b in bench/*.py; do $(VPY) $$b || exit 1; done

## bench-agent: the Agent's SHM ingest on one core, real plugin producers (budget >= 2 M records/s, lag < 100 ms)
bench-agent: $(VENV_STAMP) build-profiler $(SIM_SO) $(ENGINE_SO)
	$(VPY) bench/agent_ingest.py

## bench-engine: the Semantic Engine's offline parse + step recovery on one core (budget >= 1 M records/s)
bench-engine: $(VENV_STAMP) build-profiler $(SIM_SO) $(ENGINE_SO)
	$(VPY) bench/engine_parse.py

## bench-engine-soak: 8 simulated ranks (TP 2 x PP 2 x DP 2) through a real Agent and the live engine for 10 simulated minutes: Agent RSS growth, engine lag, Steps recovered (SOAK_ARGS="--minutes 1" for a quick check)
bench-engine-soak: $(VENV_STAMP) build-profiler $(SIM_SO) $(ENGINE_SO)
	$(VPY) bench/engine_soak.py $(SOAK_ARGS)

## bench-accuracy: Steps recovered against ground truth over the accuracy suite (every family, NULL and Inject names)
bench-accuracy: $(VENV_STAMP) build-profiler $(SIM_SO) $(ENGINE_SO)
	$(VPY) bench/step_accuracy.py

## bench-faults: faults on real parts (Agent SIGKILL x5, rank SIGKILL, disk full, read-only home, forged hang events, 1,100 half-open connections): ops lost, Agent memory, health latency (root for the tmpfs cases)
bench-faults: $(VENV_STAMP) build-profiler $(SIM_SO)
	$(VPY) bench/faults.py $(FAULTS_ARGS)

## bench-master-scale: the live tree at scale: a master fed by simulated slaves (64, 256 nodes), a real relay fed by simulated slaves (250-500 nodes), a master fed by 17 simulated relays (100,000 ranks, 736 nodes each); CPU, memory, fault-to-verdict per tier, the full tree as a model
bench-master-scale: $(VENV_STAMP)
	$(VPY) bench/master_scale.py --tiers flat relay master --nodes 64 256 \
	  --relay-nodes 250 400 500 --tree-nodes 12500 --tree-relays 17 --workers 2 --seconds 10

## bench-relay-soak: a real relay under a real master, 250 simulated nodes, followed for RELAY_SOAK_S seconds (default 900): memory at start and end and its growth per hour
RELAY_SOAK_S ?= 900
bench-relay-soak: $(VENV_STAMP)
	$(VPY) bench/master_scale.py --tiers relay --relay-nodes 250 --workers 2 --seconds 10 \
	  --soak-s $(RELAY_SOAK_S)

## bench-metrics: /metrics series per rank at metrics level job (the default) and rank, simulated Megatron jobs of 64 and 8 ranks through the real plugin and the Agent's ingest; page bytes plain and gzip
bench-metrics: $(VENV_STAMP) build-profiler $(SIM_SO)
	$(VPY) bench/metrics_series.py

## bench-engine-distributed: offline Step recovery over Dask workers on a synthetic job of 1,024 ranks and 100 M records (generated once under build/), 1 and 2 workers: records/s, scaling, worker memory at two job sizes, reduce bytes per rank
bench-engine-distributed: $(VENV_STAMP) $(ENGINE_SO)
	$(VPY) bench/engine_distributed.py

## bench-log-bytes: inspector_logs bytes per op raw and sealed (zstd), simulated jobs through the real plugin and real H200 segments; compression speed
bench-log-bytes: $(VENV_STAMP) build-profiler $(SIM_SO)
	$(VPY) bench/log_bytes.py

## bench-profiler: the Profiler's hot path over an empty plugin (architecture §8: <= 1.25x, 150 ns on a fast core)
bench-profiler: $(VENV_STAMP) build-profiler $(SIM_SO)
	$(VPY) bench/profiler_hot_path.py

## bench-inject-markers: what Inject's optimizer-step marker (on by default) costs: the hook writing its line to disk, hot and right after a real optimizer step, and its share of a 10 ms, 100 ms and 1 s Step
bench-inject-markers: $(VENV_STAMP)
	$(VPY) bench/inject_step_markers.py

## demo: the main job on an embedded default
demo: debian-packages $(VENV_STAMP) build-profiler $(SIM_SO) $(ENGINE_SO)
	$(VENV)/bin/comminsight demo

## install: the Agent in its own venv under INSTALL_PREFIX (lib/comminsight/venv from requirements/runtime.txt, installed by the dev venv's pinned uv, else pip; bin/comminsight-agent, bin/comminsight), the plugin, headers, config, systemd unit, Inject's wheel (share/comminsight); TRAINING_PYTHON=/path/to/python also puts Inject, and nothing else, into that environment
install: $(WHEEL) headers build-profiler $(INJECT_WHEEL) LICENSE NOTICE
	$(PYTHON) scripts/prefix_install.py install --prefix "$(INSTALL_PREFIX)" --python "$(PYTHON)" \
	  --requirements requirements/runtime.txt --wheel $(WHEEL) --inject-wheel $(INJECT_WHEEL) \
	  --plugin $(PROFILER_SO) $(if $(TRAINING_PYTHON),--training-python "$(TRAINING_PYTHON)") \
	  $$(test -x $(VENV)/bin/uv && echo --uv $(VENV)/bin/uv)

## uninstall: remove exactly what `make install` put under INSTALL_PREFIX (its install-manifest.json), and Inject from the TRAINING_PYTHON install gave it
uninstall:
	$(PYTHON) scripts/prefix_install.py uninstall --prefix "$(INSTALL_PREFIX)"

## wheel-manylinux: dist/comminsight-<version>-py3-none-manylinux_2_<n>_<arch>.whl, the wheel repaired and retagged by auditwheel (its native engine needs only glibc)
# auditwheel writes into a temporary directory beside the wheels; the repaired wheel is renamed
# into $(DIST), then any manylinux wheel of this version with another tag is removed
wheel-manylinux: $(WHEEL)
	tmp="$(DIST)/manylinux.tmp.$$$$"; trap 'rm -rf "$$tmp"' EXIT; mkdir "$$tmp" && \
	  PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/auditwheel repair --wheel-dir "$$tmp" $(WHEEL) && \
	  new=$$(ls "$$tmp") && mv -f "$$tmp/$$new" $(DIST)/ && \
	  for w in $(DIST)/comminsight-$(VERSION)-py3-none-manylinux*.whl; do \
	    [ "$${w##*/}" = "$$new" ] || rm -f "$$w"; done

## clean: remove every build output (build/, dist/) and pytest's cache
clean:
	rm -rf $(BUILD) $(DIST) .pytest_cache
	rm -f $(ENGINE_SO_OLD)
