# agentledger: `make demo` and `make test` are the two commands the README
# promises. Everything below works on a fresh clone; binaries go into .bin/
# and npm packages into .cache/ (both ignored by git).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO ?= go
BIN := $(abspath .bin)
COLLECTOR_BIN := $(BIN)/otelcol-agentledger
# The local distribution (-tags agentledger_local): only the components the
# demo's configs use (local.yaml, jaeger.yaml, view.yaml); see
# cmd/otelcol-agentledger/components_local.go.
LOCAL_COLLECTOR_BIN := $(BIN)/otelcol-agentledger-local
AGENTLEDGER_BIN := $(BIN)/agentledger
JAEGER_BIN := $(BIN)/jaeger
PROMETHEUS_BIN ?= $(or $(shell command -v prometheus 2>/dev/null),/usr/bin/prometheus)
CHROMIUM_BIN ?= $(or $(shell command -v chromium 2>/dev/null),/usr/bin/chromium)
OPENCODE_VERSION := 1.18.33
OPENCODE_PREFIX := $(abspath .cache/opencode)
OPENCODE_BIN := $(OPENCODE_PREFIX)/node_modules/opencode-linux-x64/bin/opencode
CLAUDE_VERSION := 2.1.328
CLAUDE_PREFIX := $(abspath .cache/claude)
CLAUDE_BIN := $(CLAUDE_PREFIX)/node_modules/@anthropic-ai/claude-code-linux-x64/claude
CODEX_VERSION := 0.169.0
CODEX_PREFIX := $(abspath .cache/codex)
CODEX_BIN := $(CODEX_PREFIX)/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex
# The official TypeScript SDKs the drop-ins' host tests run (cmd/agentledger/hosttest,
# pinned in its package.json).
SDK_HOSTS_PREFIX := $(abspath .cache/sdk-hosts)
SDK_HOSTS_PKG := cmd/agentledger/hosttest/package.json

# The long builds and installs (collector, Jaeger, demo, npm) run through
# buildprogress (tests/demo/buildprogress, standard library only): it prints
# packages compiled of the total, elapsed time and what comes next, or one
# line per npm step, and writes the commands' whole output to out/logs/.
LOGS := $(abspath out/logs)
PROGRESS := $(BIN)/buildprogress
PROGRESS_SRC := $(wildcard tests/demo/buildprogress/*.go)

# AGENTLEDGER_E2E=1 turns a missing binary in an integration test into a
# failure instead of a skip; `make test E2E=0` lets them skip.
E2E ?= 1
# go test flags; `make test TESTFLAGS=-v` for detail.
TESTFLAGS ?=
FUZZTIME ?= 15s
BENCHCOUNT ?= 6

TEST_ENV := AGENTLEDGER_E2E=$(E2E) \
	AGENTLEDGER_COLLECTOR_BIN=$(COLLECTOR_BIN) \
	JAEGER_BIN=$(JAEGER_BIN) \
	PROMETHEUS_BIN=$(PROMETHEUS_BIN) \
	CHROMIUM_BIN=$(CHROMIUM_BIN) \
	OPENCODE_BIN=$(OPENCODE_BIN) \
	CLAUDE_BIN=$(CLAUDE_BIN) \
	CODEX_BIN=$(CODEX_BIN) \
	AGENTLEDGER_SDK_MODULES=$(SDK_HOSTS_PREFIX)/node_modules

# Every Go module of the repository but the tools: the root (instrument and
# contract), the client adapters, the processor, the extension, the
# distribution, dashboards, internal/testbin, examples, and tests (the demo,
# the end-to-end tests and the load generator). Each is tested in its own directory; they share the
# Go build cache.
MODULES := $(shell find . -name go.mod -not -path './tools/*' -not -path './.*/*' -printf '%h\n' | sort)

.PHONY: help build build-local agentledger jaeger prometheus chromium opencode claude codex sdk-hosts host-example test tidy-check consumer-check ocb-check demo dashboards fuzz bench vet clean

help:
	@echo "make demo          run the reference agent through the collector and print each invocation's ledger"
	@echo "make demo VIEW=1   also start Prometheus and leave it and the collector running (status page, timeline, metrics)"
	@echo "make demo VIEW=1 JAEGER=1  also build and start Jaeger (API only: a source build has no UI; see the README)"
	@echo "make test          build what the tests need, check every go.mod is tidy, the consumer and OCB checks, then go test -race ./... in every module"
	@echo "make build         the full collector distribution into .bin/otelcol-agentledger (what the tests and the shared and scale-out configs use)"
	@echo "make build-local   the demo's distribution (local.yaml's components and the metrics) into .bin/otelcol-agentledger-local"
	@echo "make agentledger   the drop-ins for the TypeScript and Python SDKs into .bin/agentledger (link it as agentledger-claude, -codex)"
	@echo "make jaeger        Jaeger v1.76.0 into .bin/jaeger (skipped when present)"
	@echo "make prometheus    apt-get install prometheus when missing (needs root)"
	@echo "make chromium      apt-get install chromium when missing (headless, for the status page test; needs root)"
	@echo "make opencode      npm install opencode-ai@$(OPENCODE_VERSION) into .cache/opencode"
	@echo "make claude        npm install @anthropic-ai/claude-code@$(CLAUDE_VERSION) into .cache/claude"
	@echo "make codex         npm install @openai/codex@$(CODEX_VERSION) into .cache/codex"
	@echo "make sdk-hosts     npm install the TypeScript SDKs the drop-ins' host tests drive ($(SDK_HOSTS_PKG)) into .cache/sdk-hosts"
	@echo "make host-example  the README's TypeScript host (examples/host/host.mjs, Claude Agent SDK through the drop-in) against the collector and a scripted model"
	@echo "make dashboards    regenerate the Grafana dashboards"
	@echo "make fuzz          short fuzz runs (FUZZTIME=$(FUZZTIME) each)"
	@echo "make bench         benchmarks, BENCHCOUNT=$(BENCHCOUNT) interleaved rounds, into out/bench.txt; benchstat compares modes (-col /mode)"

# Compiling it needs nothing but the standard library (no module download).
$(PROGRESS): $(PROGRESS_SRC)
	@mkdir -p $(BIN)
	@echo ">> compiling tests/demo/buildprogress (progress display for the long builds)"
	@$(GO) -C tests build -o $@ ./demo/buildprogress

# The Go build cache makes this a no-op when nothing changed; the first build
# compiles about 1,500 packages (several minutes): buildprogress shows how
# many are done, go build -v's package list goes to out/logs/collector-build.log.
# -trimpath and CGO_ENABLED=0 are what the collector builder uses, so the
# OCB check (.ci/ocb-check) finds these packages in the build cache.
build: $(PROGRESS)
	@mkdir -p $(BIN)
	@echo ">> building $(COLLECTOR_BIN) (the first build takes several minutes)"
	@cd cmd/otelcol-agentledger && CGO_ENABLED=0 $(PROGRESS) -name collector -log $(LOGS)/collector-build.log -- \
		$(GO) build -trimpath -v -o $(COLLECTOR_BIN) .

# The same main package with -tags agentledger_local: the components of
# local.yaml, jaeger.yaml and view.yaml only (no load balancing, auth or
# pprof, hence no Kubernetes client), a cold build about a third of the full
# one's (figures in the README). make demo runs it.
build-local: $(PROGRESS)
	@mkdir -p $(BIN)
	@echo ">> building $(LOCAL_COLLECTOR_BIN), the demo's distribution (the first build takes a few minutes)"
	@cd cmd/otelcol-agentledger && CGO_ENABLED=0 $(PROGRESS) -name collector -log $(LOGS)/collector-local-build.log -- \
		$(GO) build -trimpath -tags agentledger_local -v -o $(LOCAL_COLLECTOR_BIN) .

# The drop-ins (cmd/agentledger). Called through a link named claude,
# agentledger-claude, codex or agentledger-codex, it is that subcommand:
#   ln -s $(AGENTLEDGER_BIN) /usr/local/bin/agentledger-claude
agentledger: $(PROGRESS)
	@mkdir -p $(BIN)
	@cd cmd/agentledger && $(PROGRESS) -name agentledger -log $(LOGS)/agentledger-build.log -- \
		$(GO) build -v -o $(AGENTLEDGER_BIN) .

# The README's "From TypeScript or Python" loop, runnable: tests/hostexample
# starts the collector and a scripted model, builds the drop-in and runs
# host.mjs (prompt, result, ask once, release and watch, reattach, final
# summary), then checks the summary against what the model served.
host-example: build claude sdk-hosts
	@AGENTLEDGER_COLLECTOR_BIN=$(COLLECTOR_BIN) CLAUDE_BIN=$(CLAUDE_BIN) AGENTLEDGER_SDK_MODULES=$(SDK_HOSTS_PREFIX)/node_modules \
		$(GO) -C tests run ./hostexample

# Jaeger's module has replace directives, so `go install ...@v1.76.0` cannot
# build it; tools/jaeger pins it as a Go tool instead.
jaeger: | $(PROGRESS)
	@if [ -x $(JAEGER_BIN) ]; then echo ">> $(JAEGER_BIN) present"; else \
		mkdir -p $(BIN); \
		echo ">> building Jaeger v1.76.0 into $(JAEGER_BIN) (cold build takes ~15 minutes)"; \
		cd tools/jaeger && GOBIN=$(BIN) $(PROGRESS) -name jaeger -log $(LOGS)/jaeger-build.log -- \
			$(GO) install -v tool; \
	fi

prometheus:
	@if [ -x $(PROMETHEUS_BIN) ]; then echo ">> $(PROMETHEUS_BIN) present"; else \
		echo ">> installing prometheus with apt-get"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends prometheus; \
	fi

# Headless Chromium from Debian loads the invocation status page in the
# browser test (tests/demo); its fontconfig brings DejaVu for the text.
chromium:
	@if [ -x $(CHROMIUM_BIN) ]; then echo ">> $(CHROMIUM_BIN) present"; else \
		echo ">> installing chromium with apt-get"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends chromium; \
	fi

# npm runs with --loglevel info so that buildprogress can print a line per
# step (metadata, tarballs, install scripts); all of it goes to out/logs/.
opencode: | $(PROGRESS)
	@if [ -x $(OPENCODE_BIN) ]; then echo ">> $(OPENCODE_BIN) present"; else \
		echo ">> npm install opencode-ai@$(OPENCODE_VERSION) into $(OPENCODE_PREFIX)"; \
		mkdir -p $(OPENCODE_PREFIX); \
		$(PROGRESS) -name opencode -log $(LOGS)/opencode-npm.log -- \
			npm install --no-audit --no-fund --loglevel info --prefix $(OPENCODE_PREFIX) opencode-ai@$(OPENCODE_VERSION); \
	fi

# The npm package ships the CLI as a self-contained native binary in a
# platform package (@anthropic-ai/claude-code-linux-x64); npm warns that it
# wants Node >= 22, which only matters to npm, not to the binary.
claude: | $(PROGRESS)
	@if [ -x $(CLAUDE_BIN) ]; then echo ">> $(CLAUDE_BIN) present"; else \
		echo ">> npm install @anthropic-ai/claude-code@$(CLAUDE_VERSION) into $(CLAUDE_PREFIX)"; \
		mkdir -p $(CLAUDE_PREFIX); \
		$(PROGRESS) -name claude -log $(LOGS)/claude-npm.log -- \
			npm install --no-audit --no-fund --loglevel info --prefix $(CLAUDE_PREFIX) @anthropic-ai/claude-code@$(CLAUDE_VERSION); \
	fi

codex: | $(PROGRESS)
	@if [ -x $(CODEX_BIN) ]; then echo ">> $(CODEX_BIN) present"; else \
		echo ">> npm install @openai/codex@$(CODEX_VERSION) into $(CODEX_PREFIX)"; \
		mkdir -p $(CODEX_PREFIX); \
		$(PROGRESS) -name codex -log $(LOGS)/codex-npm.log -- \
			npm install --no-audit --no-fund --loglevel info --prefix $(CODEX_PREFIX) @openai/codex@$(CODEX_VERSION); \
	fi

# The host tests of cmd/agentledger import the SDKs from here; reinstalled
# when the pinned package.json changes.
sdk-hosts: | $(PROGRESS)
	@if cmp -s $(SDK_HOSTS_PKG) $(SDK_HOSTS_PREFIX)/package.json && [ -d $(SDK_HOSTS_PREFIX)/node_modules/@opencode-ai/sdk ]; then \
		echo ">> $(SDK_HOSTS_PREFIX) present"; else \
		echo ">> npm install $(SDK_HOSTS_PKG) into $(SDK_HOSTS_PREFIX)"; \
		mkdir -p $(SDK_HOSTS_PREFIX); cp $(SDK_HOSTS_PKG) $(SDK_HOSTS_PREFIX)/package.json; \
		$(PROGRESS) -name sdk-hosts -log $(LOGS)/sdk-hosts-npm.log -- \
			npm install --no-audit --no-fund --loglevel info --prefix $(SDK_HOSTS_PREFIX); \
	fi

test: build jaeger prometheus chromium opencode claude codex sdk-hosts tidy-check consumer-check ocb-check
	@echo ">> go test -race ./... in each module (AGENTLEDGER_E2E=$(E2E))"
	@failed=; for m in $(MODULES); do \
		echo ">> $$m"; \
		(cd $$m && $(TEST_ENV) $(GO) test -race -timeout 40m $(TESTFLAGS) ./...) || failed="$$failed $$m"; \
	done; \
	if [ -n "$$failed" ]; then echo ">> FAIL in:$$failed"; exit 1; fi

# Fails when any module's go.mod or go.sum is not what go mod tidy writes
# (our modules and tools/builder; tools/jaeger and tools/mdatagen lack go.sum
# lines of their dependencies' tests, which tidy would download).
tidy-check:
	@failed=; for m in $(MODULES) tools/builder; do \
		(cd $$m && $(GO) mod tidy -diff) || failed="$$failed $$m"; \
	done; \
	if [ -n "$$failed" ]; then echo ">> go mod tidy -diff: not tidy:$$failed"; exit 1; fi; \
	echo ">> every go.mod is tidy: $(MODULES) tools/builder"

# A module of a user's own that imports instrument and instrument/otelopenai
# finds no collector module and at most 100 modules, and keeps its pins.
consumer-check:
	./.ci/consumer-check

# ocb with collector-config/builder-config.yaml from a temporary directory
# outside the checkout, then the built collector on local.yaml.
ocb-check: build
	./.ci/ocb-check

vet:
	@for m in $(MODULES); do (cd $$m && $(GO) vet ./...); done

# VIEW=1 also starts Prometheus (collector-config/view.yaml over
# jaeger.yaml: metrics, and the spans to a file) and leaves it and the
# collector running; JAEGER=1 with it builds and starts Jaeger too
# (jaeger.yaml as is).
VIEW ?=
JAEGER ?=
view := $(filter 1 true yes,$(VIEW))
jaegerview := $(if $(view),$(filter 1 true yes,$(JAEGER)))
# The demo runs the local distribution; the demo and the reference agent
# are built like the collector (progress shown, go build -v output in
# out/logs/), then the demo runs from .bin/.
demo: build-local $(PROGRESS) $(if $(view),prometheus) $(if $(jaegerview),jaeger)
	@cd tests && $(PROGRESS) -name demo -log $(LOGS)/demo-build.log -- $(GO) build -v -o $(BIN)/demo ./demo
	@cd examples && $(PROGRESS) -name shellagent -log $(LOGS)/shellagent-build.log -- \
		$(GO) build -v -o $(BIN)/shellagent ./shellagent
	$(BIN)/demo -collector $(LOCAL_COLLECTOR_BIN) -agent $(BIN)/shellagent$(if $(view), -view -prometheus $(PROMETHEUS_BIN))$(if $(jaegerview), -jaeger $(JAEGER_BIN))

dashboards:
	$(GO) -C dashboards generate ./...

# Every FuzzXxx in every package, FUZZTIME each (go test -fuzz takes one
# target per run).
fuzz:
	@for m in $(MODULES); do \
		for pkg in $$($(GO) -C $$m list ./...); do \
			for f in $$($(GO) -C $$m test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
				echo ">> $$pkg $$f"; \
				$(GO) -C $$m test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 5s $$pkg; \
			done; \
		done; \
	done

# Each benchmark runs its baseline and variants as sub-benchmarks keyed by
# mode (mode=unwrapped|wrapped, sdk|ledger, passthrough|scan|invocation) in
# the same run; benchstat (pinned in tools/benchstat) puts the modes side by
# side, the first as the base. The BENCHCOUNT samples are taken in rounds of
# one run of every benchmark (interleaved), so that a base and its variants
# share the machine's load; the load averages go to out/bench-load.txt. See
# docs/performance.md.
# Module directory:packages, one module after the other in each round.
BENCHPKGS := .:./instrument,./instrument/internal/ledger,./instrument/internal/genaicall,./instrument/internal/wireproxy instrument/otelopenai:. instrument/otelanthropic:. processor/invocationprocessor:.
bench:
	@mkdir -p out
	@rm -f out/bench.txt
	@echo "start $$(date -u +%FT%TZ) load $$(cut -d' ' -f1-3 /proc/loadavg)" > out/bench-load.txt
	@for i in $$(seq $(BENCHCOUNT)); do \
		echo ">> round $$i of $(BENCHCOUNT)"; \
		for mp in $(BENCHPKGS); do \
			$(GO) -C $${mp%%:*} test -run '^$$' -bench . -benchmem -count 1 $$(echo $${mp#*:} | tr , ' ') | tee -a out/bench.txt; \
		done; \
	done
	@echo "end   $$(date -u +%FT%TZ) load $$(cut -d' ' -f1-3 /proc/loadavg)" >> out/bench-load.txt
	@cat out/bench-load.txt
	@echo ">> modes side by side (first column is the base)"
	$(GO) -C tools/benchstat tool benchstat -col /mode -filter '/mode:/./' $(CURDIR)/out/bench.txt
	@echo ">> benchmarks without a mode"
	$(GO) -C tools/benchstat tool benchstat -filter '-/mode:/./' $(CURDIR)/out/bench.txt

clean:
	rm -rf $(BIN)/otelcol-agentledger $(LOCAL_COLLECTOR_BIN) $(AGENTLEDGER_BIN) $(BIN)/buildprogress $(BIN)/demo $(BIN)/shellagent out
