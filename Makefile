# meshtrain build, test and check targets. `make test` is what CI runs.
GO          ?= go
BIN         ?= bin/meshtrain
HOOKS_BIN   ?= bin/meshtrain-testhooks
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -s -w -X github.com/meshtrain/meshtrain/node.version=$(VERSION)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME    ?= 10s
FUZZLONG    ?= 1m
FUZZFLAGS   ?=
# The packages with files of their own for the testhooks build, found by
# grep so that a new one is never left out of test-unit.
HOOKS_PKGS   = $(sort $(dir $(shell grep -rl --include='*.go' --exclude-dir=testdata --exclude-dir=.git '^//go:build.*testhooks' .)))
# The tests of the testhooks build: those in its own test files. The rest
# run once, on the release build.
HOOKS_TESTS  = $(shell grep -rl --include='*_test.go' --exclude-dir=.git '^//go:build.*testhooks' . | \
	xargs grep -ho '^func \(Test\|Fuzz\)[A-Za-z0-9_]*' | sed 's/^func //' | sort -u | paste -sd'|')

COMPOSE     ?= docker-compose
COMPOSE_FILE := testnet/docker-compose.yml

# The interpreter that sees Debian's python3-torch and python3-numpy.
PYTHON      ?= /usr/bin/python3

.PHONY: all build build-testhooks image testnet testnet-down test test-unit test-python test-e2e check fmt vet tidy staticcheck bench fuzz fuzz-short clean

all: build

# Every build that is not under the race detector compiles as the release
# binary does: static (no cgo) and without the build machine's paths. vet,
# staticcheck and the e2e tier's test binary use the same settings, so on a
# clean machine the packages compile once for all of them.
NORACE      := CGO_ENABLED=0 GOFLAGS='-trimpath $(GOFLAGS)'

# A static binary: it runs on a machine with no Go toolchain and in a
# FROM scratch image (MNIST is embedded).
build:
	$(NORACE) $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/meshtrain

# The test binary: the release binary plus the test hooks behind the
# testhooks build tag (store crash points, adversary modes, frame tampering)
# for the crash-recovery and hostile-swarm tests and `testnet attack`.
# Never ship it: the release binary has none of them, so nothing in a
# volunteer's environment can make it kill itself or attack its peers.
build-testhooks:
	$(NORACE) $(GO) build -tags testhooks -ldflags '$(LDFLAGS)' -o $(HOOKS_BIN) ./cmd/meshtrain

# The node image: FROM scratch around the static binary (no registry needed).
image: build
	docker build -q -f testnet/Dockerfile -t meshtrain:local .

# A heterogeneous 4-node swarm in docker-compose; dashboards on
# http://127.0.0.1:8081 ... 8084.
testnet: image
	$(COMPOSE) -f $(COMPOSE_FILE) -p meshtrain down -v --remove-orphans >/dev/null 2>&1 || true
	$(COMPOSE) -f $(COMPOSE_FILE) -p meshtrain up -d
	@echo "dashboards: http://127.0.0.1:8081 http://127.0.0.1:8082 http://127.0.0.1:8083 http://127.0.0.1:8084"
	@echo "status:     bin/meshtrain status --api 127.0.0.1:8081; stop with: make testnet-down"

testnet-down:
	$(COMPOSE) -f $(COMPOSE_FILE) -p meshtrain down -v

# Tier 1: every package's unit tests under the race detector (synthetic data,
# seconds), as released, then the tests of the testhooks build's own files
# (HOOKS_TESTS in HOOKS_PKGS). Tier 2: end-to-end runs of the
# real binaries on MNIST, without -race, sharing the release binary that
# `build` made and the test binary of `build-testhooks`.
test: test-unit test-python test-e2e

# test-unit's last two commands: the vector loops must give the Go loops'
# bits in every build, without assembly and where Go fuses multiply-adds
# (GOAMD64=v3, as on arm64), which needs a CPU with AVX2 and FMA to run.
test-unit:
	$(GO) test -race -count=1 ./...
	$(GO) test -race -count=1 -tags testhooks -run '^($(HOOKS_TESTS))$$' $(HOOKS_PKGS)
	$(GO) test -count=1 -tags purego ./averaging/ ./train/
	if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then \
		GOAMD64=v3 $(GO) test -count=1 ./averaging/ ./train/; \
	else echo "no AVX2 and FMA here: the GOAMD64=v3 build is not tested"; fi

# The Python client of the local trainer API (python/), on the standard
# library's unittest against a fake node; the e2e tier runs it against real
# nodes.
test-python:
	$(PYTHON) -m unittest discover -s python/tests -t python

test-e2e: build build-testhooks
	MESHTRAIN_BIN=$(abspath $(BIN)) MESHTRAIN_TESTHOOKS_BIN=$(abspath $(HOOKS_BIN)) \
		$(NORACE) $(GO) test -tags e2e -count=1 -timeout 30m ./cmd/meshtrain/

check: fmt vet tidy staticcheck

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The e2e tag adds test files only (cmd/meshtrain's), so the e2e pass covers
# the release build too; the testhooks build has files of its own.
vet:
	$(NORACE) $(GO) vet -tags e2e ./...
	$(NORACE) $(GO) vet -tags testhooks ./...

tidy:
	$(GO) mod tidy -diff

staticcheck:
	$(NORACE) $(GO) run $(STATICCHECK) -tags e2e ./...
	$(NORACE) $(GO) run $(STATICCHECK) -tags testhooks ./...

# Benchmarks: one core, as the numbers in docs are quoted.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -cpu 1 ./...

# Every fuzz target in the repo, each for FUZZTIME (fuzz-short) or
# FUZZLONG (fuzz), one after another. Targets are found by grep, so
# a new one is never left out; a target that grep finds but go test does not
# run (a build tag, a typo) fails the pass too. The first failure stops it,
# naming the target; a crasher is left in that package's testdata/fuzz. A
# bare "context deadline exceeded" as the only failure line, with no input
# written, is Go 1.26's fuzz coordinator racing its own -fuzztime deadline
# (go.dev/issue/75804): it is reported, not failed.
# FUZZFLAGS go to each go test (e.g. -parallel=1).
fuzz-short:
	@$(call fuzz_all,$(FUZZTIME))

fuzz:
	@$(call fuzz_all,$(FUZZLONG))

define fuzz_all
targets=$$(grep -rHo --include='*_test.go' --exclude-dir=testdata --exclude-dir=.git '^func Fuzz[A-Za-z0-9_]*' . \
	| sed 's|^\(.*\)/[^/]*:func \(.*\)$$|\1:\2|' | sort); \
echo "fuzz: $$(echo "$$targets" | wc -w) targets, $(1) each"; \
log=$$(mktemp); trap 'rm -f "$$log" "$$log.rc"' EXIT; \
for t in $$targets; do \
	dir=$${t%%:*}; name=$${t#*:}; \
	echo "== $$name ($$dir)"; \
	{ $(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(1) $(FUZZFLAGS) $$dir 2>&1; echo $$? >"$$log.rc"; } | tee "$$log"; \
	if [ "$$(cat "$$log.rc")" != 0 ]; then \
		if grep -qx '    context deadline exceeded' "$$log" && [ "$$(grep -c '^    ' "$$log")" = 1 ] \
			&& ! grep -qE 'Failing input written|panic:|fuzzing process hung' "$$log"; then \
			echo "fuzz: $$name: the fuzz engine's own deadline race at -fuzztime's end (go.dev/issue/75804, fixed in Go 1.27); no input failed"; \
		else echo "fuzz: $$name in $$dir FAILED"; exit 1; fi; \
	fi; \
	if grep -q 'no fuzz tests to fuzz' "$$log"; then echo "fuzz: $$name in $$dir did not run"; exit 1; fi; \
done; \
echo "fuzz: all targets passed"
endef

clean:
	rm -rf bin
