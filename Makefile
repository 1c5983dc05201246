# ferry's front door. Every target first installs what is missing
# (scripts/install-deps, idempotent), then configures and builds with the
# CMake presets in CMakePresets.json (build trees under build/<preset>).
#
#   make demo    build, then train the reference MLP on Fashion-MNIST with
#                two ranks (ferry-run + ferry-train) and draw its curves
#                (build/native/tools/ferry-codec-demo shows the codecs' speeds)
#   make test    every test: native, ASan+UBSan, aarch64/armhf/s390x under
#                qemu-user (each tree replays the fuzz corpora), TSan
#                over ferry-train and the torch backend, and the torch26
#                tree (in the Debian 13 root: everything that involves
#                torch or Python, on torch 2.6 and Python 3.13, the mixed
#                x86-64 + aarch64 + s390x DDP job among them); the next
#                tree builds (at nice 19) while one tree's tests run
#                (make native, make asan, make torch26, ... build and test
#                one tree)
#   make cross   only the cross-architecture tests
#   make bench   benchmarks; JSON in bench-results/, ratio tables at the end
#                (the message and checkpoint benchmarks again for s390x
#                under qemu), allreduce against Gloo and ferry-train
#                against PyTorch DDP on a simulated cluster
#                (bench/comm_cluster, bench/train_compare; need root);
#                on torch 2.6, ferry.load against torch.load(mmap=True)
#                (bench/torch26_load.py) and DDP on ferry against gloo
#   make fuzz    each libFuzzer harness for FUZZ_SECONDS (default 60) seconds
#                (clang; make fuzz-replay only builds them and replays)
#   make soak    the 2^32 sweeps (every f32 pattern through the byte-order
#                and f16/bf16 paths) in full; make test sweeps 1/10 of the
#                patterns, every sign and exponent among them. make bench
#                ends with it.

FUZZ_SECONDS ?= 60
CROSS_ARCHES := aarch64 armhf s390x
# make test's pipeline (below)
BUILD_ORDER := native $(CROSS_ARCHES) torch26 asan tsan
TEST_ORDER := native $(CROSS_ARCHES) mixed torch26 asan tsan
# The torch26 tree builds and runs inside the Debian 13 root (GCC 14,
# LibTorch 2.6, Python 3.13): what involves torch or Python, on torch 2.6.
# Its build also cross-builds the Python modules for the aarch64 and s390x
# roots (presets torch26-aarch64, torch26-s390x), whose ranks join its
# mixed DDP job.
IN_torch26 := scripts/in-debian13
PRESETS_torch26 := torch26 torch26-aarch64 torch26-s390x
presets = $(or $(PRESETS_$(1)),$(1))
FUZZERS := varint reader roundtrip graph_reader graph_roundtrip frame handshake \
  checkpoint_reader safetensors_reader checkpoint_roundtrip idx pickle pytorch_reader set_index hf_index \
  gguf npy_header npz

.PHONY: all deps debian13-roots sysroots bench-deps fuzz-deps demo test native asan tsan torch26 cross $(CROSS_ARCHES) fuzz-build fuzz-replay fuzz soak bench clean \
  $(addprefix build-,$(BUILD_ORDER)) $(addprefix test-,$(TEST_ORDER))

all: test

# make test installs LibTorch (the trainer and ferry::torch), Fashion-MNIST,
# llama.cpp's libggml (the GGUF oracle, from npm) and the Debian 13 roots
# with torch 2.6 (scripts/debian13-root);
# the peers' message formats, Boost.Serialization, cereal and Google
# Benchmark are only for make bench, clang only for make fuzz.
deps:
	@scripts/install-deps build test cross-tools oracle

# The Debian 13 roots (torch 2.6, Python 3.13; scripts/debian13-root): the
# torch26 tree runs in one, and the native tree reads the .pt files torch
# 2.6 writes in them.
debian13-roots: deps
	@scripts/install-deps debian13

# The cross trees' libraries (scripts/cross-sysroot): in make test, unpacked
# while the native tree builds.
sysroots: deps
	@scripts/cross-sysroot

fuzz-deps:
	@scripts/install-deps build fuzz

bench-deps:
	@scripts/install-deps build cross bench

define build_preset
	cmake --preset $(1) >/dev/null
	cmake --build --preset $(1)
endef

DEMO_DIR := build/demo
demo: deps
	$(call build_preset,native)
	@mkdir -p $(DEMO_DIR)
	build/native/launch/ferry-run -n 2 build/native/train/ferry-train \
	  --checkpoint $(DEMO_DIR)/ferry-train.ferry --metrics $(DEMO_DIR)/metrics.jsonl
	@build/native/tools/ferry plot $(DEMO_DIR)/metrics.jsonl -o $(DEMO_DIR)/curves.svg >/dev/null
	@echo "curves: $(DEMO_DIR)/curves.svg (open it in a browser); checkpoint: ferry inspect $(DEMO_DIR)/ferry-train.ferry"

# Each tree prints the time its build and its tests ended and the seconds
# since the tree started, so a slow make test shows where its minutes go.
STAMP = @echo "make: $@: $(1) at $$(date +%T) ($$(( $$(date +%s) - $$(cat build/.$@.start) )) s since the tree started)"

native: debian13-roots
	@mkdir -p build && date +%s > build/.$@.start
	$(call build_preset,native)
	$(call STAMP,built)
	ctest --preset native
	$(call STAMP,tested)

asan tsan: deps
	@mkdir -p build && date +%s > build/.$@.start
	$(call build_preset,$@)
	$(call STAMP,built)
	ctest --preset $@
	$(call STAMP,tested)

torch26: debian13-roots sysroots
	@mkdir -p build && date +%s > build/.$@.start
	@set -e; for p in $(call presets,$@); do $(IN_$@) cmake --preset $$p >/dev/null; $(IN_$@) cmake --build --preset $$p; done
	$(call STAMP,built)
	$(IN_$@) ctest --preset $@
	$(call STAMP,tested)

$(CROSS_ARCHES): sysroots
	@mkdir -p build && date +%s > build/.$@.start
	$(call build_preset,$@)
	$(call STAMP,built)
	ctest --preset $@
	$(call STAMP,tested)

# The mixed rings (x86-64 + armhf + s390x ranks for comm/ and checkpoints,
# s390x + x86-64 + aarch64 ranks for ferry-train and for a Python DDP job)
# run from the native tree with the programs the cross trees built.
cross: $(CROSS_ARCHES)
	@mkdir -p build && date +%s > build/.$@.start
	$(call build_preset,native)
	ctest --preset mixed
	$(call STAMP,tested)

fuzz-build: fuzz-deps
	$(call build_preset,fuzz)

fuzz-replay: fuzz-build
	ctest --preset fuzz

# make test runs every tree as a pipeline, two recipes at a time: the trees
# build one after another at the lowest CPU priority (nice 19), and each
# tree's tests start once it is built and the tests before them have ended.
# So while one tree's tests run at full priority, the next tree compiles on
# the cores they leave idle (ranks waiting on each other, processes
# starting). The cross trees build first, so that the mixed rings run while
# the torch26 tree builds, and the sanitizer trees build while the torch26
# tree's tests run (its qemu-user ranks and rendezvous timeouts leave a
# core idle for long stretches). A pipelined build writes
# build/<tree>.build.log and prints its tail if it fails.
#
# The corpora are replayed by every tree but tsan (fuzz_replay, label fuzz; under
# ASan+UBSan in the asan tree), so make test leaves the clang tree to
# make fuzz.
test:
	@mkdir -p build && date +%s > build/.test.start
	@$(MAKE) --no-print-directory -j2 test-$(lastword $(TEST_ORDER))
	@echo "make test: native, asan, tsan, torch26 and $(CROSS_ARCHES), fuzz corpora included, all passed in $$(( $$(date +%s) - $$(cat build/.test.start) )) s"

# build-<tree> follows the build before it in BUILD_ORDER; test-<tree>
# follows its own build and the tests before it in TEST_ORDER (the mixed
# rings follow the native build and, through the tests before them, every
# cross tree's). after(LIST) pairs each tree with the one before it,
# "native:- aarch64:native ...".
after = $(filter-out :%,$(join $(1),$(addprefix :,- $(1))))
tree = $(word 1,$(subst :, ,$(1)))
before = $(filter-out -,$(word 2,$(subst :, ,$(1))))

define pipelined_build
build-$(1): deps $(if $(filter $(CROSS_ARCHES) torch26,$(1)),sysroots) $(if $(filter native torch26,$(1)),debian13-roots) $(addprefix build-,$(2))
	@mkdir -p build && date +%s > build/.build-$(1).start
	@echo "make: $(1): building (build/$(1).build.log)"
	@if ! ( for p in $(call presets,$(1)); do \
	    $(IN_$(1)) cmake --preset $$$$p && $(IN_$(1)) nice -n 19 cmake --build --preset $$$$p || exit 1; \
	  done ) > build/$(1).build.log 2>&1; then \
	  tail -n 150 build/$(1).build.log; echo "make: $(1): the build failed (build/$(1).build.log)"; exit 1; fi
	@echo "make: $(1): built at $$$$(date +%T) in $$$$(( $$$$(date +%s) - $$$$(cat build/.build-$(1).start) )) s"
endef
define pipelined_test
test-$(1): build-$(if $(filter mixed,$(1)),native,$(1)) $(addprefix test-,$(2))
	@date +%s > build/.test-$(1).start
	$(IN_$(1)) ctest --preset $(1)
	@echo "make: $(1): tested at $$$$(date +%T) in $$$$(( $$$$(date +%s) - $$$$(cat build/.test-$(1).start) )) s"
endef
$(foreach p,$(call after,$(BUILD_ORDER)),$(eval $(call pipelined_build,$(call tree,$(p)),$(call before,$(p)))))
$(foreach p,$(call after,$(TEST_ORDER)),$(eval $(call pipelined_test,$(call tree,$(p)),$(call before,$(p)))))

# New inputs go to build/fuzz/new-corpus/<name>; copy the interesting ones
# into fuzz/corpus/<name> to keep them.
fuzz: fuzz-build
	@set -e; for f in $(FUZZERS); do \
	  mkdir -p build/fuzz/new-corpus/$$f; \
	  echo "== $$f: $(FUZZ_SECONDS) s"; \
	  build/fuzz/fuzz/$${f}_fuzzer -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    -dict=fuzz/$$f.dict -artifact_prefix=build/fuzz/ \
	    build/fuzz/new-corpus/$$f fuzz/corpus/$$f; \
	done

SWEEPS := wire_exhaustive_test codec_exhaustive_test
soak: deps
	cmake --preset native >/dev/null
	cmake --build --preset native --target $(SWEEPS)
	@set -e; for t in $(SWEEPS); do FERRY_SWEEP=full build/native/tests/$$t; done

bench: bench-deps
	$(call build_preset,bench)
	@mkdir -p bench-results
	build/bench/bench/wire_codec_bench --benchmark_out=bench-results/wire_codec.json
	build/bench/bench/graph_bench --benchmark_out=bench-results/graph.json
	build/bench/bench/message_bench --benchmark_out=bench-results/message.json
	build/bench/bench/comm_bench --benchmark_out=bench-results/comm.json
	bench/comm_cluster --out bench-results/comm_cluster.json
	bench/comm_cluster --layouts 8x1,4x4 --rate 1gbit,10gbit --delay 50us --delay-if-possible \
	  --sizes 4KB,64KB,1MB,16MB --contenders ferry,ferry-ring,ferry-doubling,ferry-rabenseifner,ferry-flat,gloo \
	  --out bench-results/comm_cluster_latency.json
	build/bench/bench/checkpoint_bench --benchmark_out=bench-results/checkpoint.json
	build/bench/bench/interop_bench --benchmark_out=bench-results/interop.json
	build/bench/bench/set_bench --benchmark_out=bench-results/set.json
	build/bench/bench/formats_bench --benchmark_out=bench-results/formats.json
	build/bench/bench/train_save_bench --benchmark_out=bench-results/train_save.json
	scripts/cross-sysroot --bench s390x
	$(call build_preset,bench-s390x)
	scripts/run-s390x-bench message
	scripts/run-s390x-bench checkpoint
	bench/train_compare --ferry-train build/bench/train/ferry-train --out bench-results/train_compare.json
	@# torch 2.6 (the Debian 13 root): .pt loads against torch.load(mmap=True), DDP on ferry against gloo
	scripts/install-deps debian13
	$(IN_torch26) cmake --preset torch26 >/dev/null
	$(IN_torch26) cmake --build build/torch26 --target ferry_python ferry_distributed
	PYTHONPATH=build/torch26/python scripts/debian13-python amd64 bench/torch26_load.py --out bench-results/torch26_load.json
	bench/train_compare --torch26 --skip-ferry --layouts 1x2,2x1,2x2 --out bench-results/train_compare_torch26.json
	bench/seed_experiments --ferry-train build/bench/train/ferry-train --keep bench-results/seed_metrics \
	  --out bench-results/seed_experiments.json
	$(MAKE) soak

clean:
	rm -rf build
