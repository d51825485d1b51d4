# colibri build. `make` builds ./colibri; `make test` runs the suite
# (tools/test_all.sh): every test optimised, then under AddressSanitizer +
# UBSan in build-asan/ (unit-level tests and one family per kind of block,
# tests/asan_subset.txt), then each libFuzzer harness of tests/fuzz/ over
# its corpus and a fixed number of runs from a fixed seed (build-fuzz/).
# Never -march=native: AMX faults in some VMs. The baseline is x86-64-v3
# (AVX2, FMA, F16C); AVX-512 code lives in *_avx512.c files, AVX-VNNI and
# AVX512-VNNI code in *_avxvnni.c and *_avx512vnni.c, each compiled with its
# own flags and chosen at run time from CPUID.

CC      ?= cc
BUILD   ?= build
OPT     ?= -O2
# Debug information: full by default; make test's ASan build takes -g1 (line
# tables, all its reports need), which compiles a fifth faster.
DBG     ?= -g
SAN     ?=
# -Wformat-truncation is gcc's; clang (make fuzz) does not know the flag.
CC_IS_CLANG := $(findstring clang,$(shell $(CC) --version 2>/dev/null | head -1))
WARN     = -Wall -Wextra -Werror -Wno-unused-parameter $(if $(CC_IS_CLANG),,-Wno-format-truncation)
ARCH     = -march=x86-64-v3 -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
# -ffile-prefix-map: the checkout's path stays out of the binaries (debug
# information, __FILE__), so one tree builds the same bytes wherever it
# lies; the fuzz step's determinism needs that (tests/fuzz/README.md).
CFLAGS_ALL = -std=c11 -D_GNU_SOURCE $(OPT) $(DBG) $(WARN) $(ARCH) -ffp-contract=off \
             -ffile-prefix-map=$(CURDIR)=. -pthread -I. $(SAN) $(shell pkg-config --cflags libcjson 2>/dev/null)
AVX512   = -mavx512f -mavx512bw -mavx512vl -mavx512dq
AVX512VNNI = $(AVX512) -mavx512vnni
AVXVNNI  = -mavxvnni
# Open MPI (engine/dist, colibri across hosts): only engine/dist includes mpi.h.
MPI_CFLAGS = $(shell pkg-config --cflags ompi-c 2>/dev/null)
MPI_LIBS   = $(shell pkg-config --libs ompi-c 2>/dev/null || echo -lmpi)
LIBS     = -luring -lnuma -lhwloc -lcjson -lpcre2-8 -lxxhash -lmicrohttpd -ledit $(MPI_LIBS) -lm -pthread

LIB_SRC  = $(sort $(wildcard base/*.c storage/*.c compute/*.c planner/*.c engine/*/*.c))
LIB_SRC := $(filter-out engine/cli/main.c,$(LIB_SRC))
LIB_OBJ  = $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/engine/serve/web_files.o
# The dashboard's files, compiled into the binary (engine/serve/serve_ui.c).
WEB_FILES = $(sort $(wildcard engine/serve/web/*.html engine/serve/web/*.css engine/serve/web/*.js \
                              engine/serve/web/*.svg engine/serve/web/*.png))
TEST_SRC = $(sort $(wildcard tests/test_*.c))
TEST_BIN = $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
FUZZ_SRC = $(sort $(wildcard tests/fuzz/fuzz_*.c))

# Fuzzing (tests/fuzz/README.md): clang's libFuzzer with ASan and UBSan; the
# library is instrumented for coverage, the harnesses link the fuzzer main.
# UBSan stays recoverable so that tools/fuzz.sh can suppress known findings
# (tests/fuzz/ubsan.supp); halt_on_error makes every other report fatal.
FUZZ_CC      ?= clang
FUZZ_SAN      = -fsanitize=fuzzer-no-link,address,undefined -fsanitize=float-cast-overflow \
                -fno-omit-frame-pointer
FUZZ_SECONDS ?= 60

# all: build ./colibri (optimised)
all: colibri

colibri: $(BUILD)/colibri
	cp $< $@

$(BUILD)/colibri: $(BUILD)/engine/cli/main.o $(BUILD)/libcolibri.a
	$(CC) $(SAN) -o $@ $^ $(LIBS)

$(BUILD)/libcolibri.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/engine/dist/%.o: CFLAGS_ALL += $(MPI_CFLAGS)

$(BUILD)/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(AVX512) -MMD -MP -c -o $@ $<

$(BUILD)/%_avx512vnni.o: %_avx512vnni.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(AVX512VNNI) -MMD -MP -c -o $@ $<

$(BUILD)/%_avxvnni.o: %_avxvnni.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(AVXVNNI) -MMD -MP -c -o $@ $<

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c -o $@ $<

$(BUILD)/engine/serve/web_files.S: $(WEB_FILES) tools/web_embed.sh
	@mkdir -p $(dir $@)
	sh tools/web_embed.sh $(WEB_FILES) > $@.tmp && mv $@.tmp $@

$(BUILD)/engine/serve/web_files.o: $(BUILD)/engine/serve/web_files.S
	$(CC) -c -o $@ $<

$(BUILD)/tests/%: tests/%.c $(BUILD)/libcolibri.a $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(BUILD)/libcolibri.a -lcriterion $(LIBS)

# No harness feeds its input to the kernels (but for quant.c's conversions
# of tensor data), the store, the planner (but for the shard placement a
# manifest names), the forward pass, MPI, the command line, decoding (but
# for generate.c's generation_config.json parser) or the server (but for
# the request, text and constraint parsers): the harnesses link them
# (through generate.o and the serve objects) without running them, so they
# build without sanitizers and coverage, which takes clang three times as
# long (the matvec kernels alone 50 s). A parser added to one of these
# folders belongs in FUZZ_KEEP when a harness reaches it.
FUZZ_KEEP  = engine/decode/generate.c engine/decode/constrain.c engine/serve/serve_request.c \
             planner/placement.c compute/quant.c \
             engine/serve/serve_text.c engine/serve/serve_constraint.c engine/serve/serve_prompt.c \
             engine/serve/serve_llama.c engine/serve/serve_ollama.c
FUZZ_PLAIN = $(patsubst %.c,build-fuzz/%.o,$(filter-out $(FUZZ_KEEP),$(wildcard compute/*.c storage/*.c \
             planner/*.c engine/forward/*.c engine/dist/*.c engine/cli/*.c engine/decode/*.c engine/serve/*.c)))
$(FUZZ_PLAIN): override SAN =

$(BUILD)/fuzz/%: tests/fuzz/%.c $(BUILD)/libcolibri.a $(wildcard tests/fuzz/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -fsanitize=fuzzer -o $@ $< $(BUILD)/libcolibri.a $(LIBS)

# tests-bin: build the test binaries and the colibri binary into $(BUILD)
tests-bin: $(BUILD)/colibri $(TEST_BIN)

# fuzz-bin: build the fuzz harnesses and colibri with clang + sanitizers in build-fuzz/
fuzz-bin:
	$(MAKE) --no-print-directory BUILD=build-fuzz CC=$(FUZZ_CC) OPT=-O1 SAN="$(FUZZ_SAN)" \
	  build-fuzz/colibri $(FUZZ_SRC:tests/fuzz/%.c=build-fuzz/fuzz/%)

# fuzz: run each fuzz harness for FUZZ_SECONDS (default 60) on its corpus
fuzz: fuzz-bin
	tools/fuzz.sh --seconds $(FUZZ_SECONDS)

# deps: install missing Debian packages (apt-get as root, else print the line)
deps:
	@./setup.sh --deps

# test: the full suite: optimised, ASan/UBSan, fuzz harnesses' fixed runs (tools/test_all.sh)
test: deps
	tools/test_all.sh

# test-opt: build and run the optimised tests only (T="test_x test_y" for some binaries)
test-opt: tests-bin
	/usr/bin/python3 tools/run_tests.py $(BUILD) $(T)

# asan-bin: build colibri and tests with AddressSanitizer + UBSan in build-asan/ (GCC's
# -fsanitize=undefined leaves out float-cast-overflow: out-of-range double->int casts)
asan-bin:
	$(MAKE) --no-print-directory BUILD=build-asan OPT=-O1 \
	  SAN="-fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer" tests-bin

# debug: unoptimised build with sanitizers, binary in build-asan/colibri
debug: asan-bin

# demo: the main job: convert the default model (models/kjv-moe-hf) and run it
demo: deps colibri
	tools/demo.sh

# bench: reproducible benchmarks (see bench/README.md)
bench: colibri
	bench/run_all.sh

# bench-kernels: build/bench/kernels, matvec GB/s per format against memory bandwidth
bench-kernels: $(BUILD)/bench/kernels

$(BUILD)/bench/%: bench/%.c $(BUILD)/libcolibri.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(BUILD)/libcolibri.a $(LIBS)

# install: copy ./colibri to $(PREFIX)/bin and the default model's checkpoint
# to $(PREFIX)/share/colibri (converted into the user's cache on first use)
PREFIX ?= /usr/local
install: colibri
	install -D -m 755 colibri $(DESTDIR)$(PREFIX)/bin/colibri
	install -d $(DESTDIR)$(PREFIX)/share/colibri/kjv-moe-hf
	install -m 644 models/kjv-moe-hf/* $(DESTDIR)$(PREFIX)/share/colibri/kjv-moe-hf/

# clean: remove build outputs
clean:
	rm -rf build build-asan build-fuzz colibri

.PHONY: all deps test test-opt tests-bin asan-bin fuzz-bin fuzz debug demo bench bench-kernels install clean

-include $(LIB_OBJ:.o=.d) $(BUILD)/engine/cli/main.d
