# FlexDB build.  `make help` lists the targets.
#
# MODE=release (default): -O2 -DNDEBUG, what `make`, `make bench` and
#   `make install` build.
# MODE=debug: -O1 -g with assertions, what `make test` builds and runs.
# SANITIZE=address,undefined | thread: adds -fsanitize (implies MODE=debug).
# Objects go to build/<mode>[-<sanitizers>]/, never beside the sources.

PREFIX  ?= /usr/local
DESTDIR ?=
LIBDIR  ?= $(PREFIX)/lib
INCDIR  ?= $(PREFIX)/include
BINDIR  ?= $(PREFIX)/bin
MANDIR  ?= $(PREFIX)/share/man

CC      ?= cc
MODE    ?= release
ifneq ($(SANITIZE),)
MODE    := debug
endif
comma   := ,
BUILD   := build/$(MODE)$(if $(SANITIZE),-$(subst $(comma),-,$(SANITIZE)))

WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla -Wformat=2
BASEFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) -g -fPIC -fvisibility=hidden -Iinclude -pthread
ifeq ($(MODE),release)
OPTFLAGS := -O2 -DNDEBUG
else
OPTFLAGS := -O1 -fno-omit-frame-pointer
endif
ifneq ($(SANITIZE),)
OPTFLAGS += -fsanitize=$(SANITIZE) -fno-sanitize-recover=all
SANLDFLAGS := -fsanitize=$(SANITIZE)
endif
ALL_CFLAGS := $(BASEFLAGS) $(OPTFLAGS) $(CFLAGS)
# The libraries depend only on these and allocate with the C library's
# malloc: a shared library must never bring an allocator into its host
# program.  The project's own programs (tools, tests, benchmarks) link
# jemalloc, except in sanitizer builds, whose runtimes interpose malloc.
LDLIBS_LIB := -luring -lxxhash -pthread
LDLIBS_SYS := $(LDLIBS_LIB)
ifeq ($(SANITIZE),)
LDLIBS_SYS += -ljemalloc
endif
ALL_LDFLAGS := $(SANLDFLAGS) $(LDFLAGS)

# ---- sources ---------------------------------------------------------------
FLEXTREE_SRC  := $(wildcard flextree/*.c common/*.c)
FLEXSPACE_SRC := $(wildcard flexspace/*.c)
FLEXDB_SRC    := $(wildcard flexdb/*.c)
TEST_SRC      := $(wildcard test/test_*.c)
BENCH_SRC     := $(wildcard bench/*_bench.c)
CLI_SRC       := $(wildcard cli/*.c)

obj = $(patsubst %.c,$(BUILD)/%.o,$(1))

FLEXTREE_OBJ  := $(call obj,$(FLEXTREE_SRC))
FLEXSPACE_OBJ := $(call obj,$(FLEXSPACE_SRC))
FLEXDB_OBJ    := $(call obj,$(FLEXDB_SRC))

LIBS_A := $(BUILD)/lib/libflextree.a
LIBS_SO := $(BUILD)/lib/libflextree.so
HEADERS := include/flex_common.h include/flex_io.h include/flextree.h
PCS := flextree
ifneq ($(FLEXSPACE_SRC),)
LIBS_A += $(BUILD)/lib/libflexspace.a
LIBS_SO += $(BUILD)/lib/libflexspace.so
HEADERS += include/flexspace.h
PCS += flexspace
endif
ifneq ($(FLEXDB_SRC),)
LIBS_A += $(BUILD)/lib/libflexdb.a
LIBS_SO += $(BUILD)/lib/libflexdb.so
HEADERS += include/flexdb.h
PCS += flexdb
endif
# Static link order: upper layers first.
LINK_A := $(filter %/libflexdb.a,$(LIBS_A)) $(filter %/libflexspace.a,$(LIBS_A)) \
	  $(BUILD)/lib/libflextree.a

# The FlexTree suites also run against a tiny-capacity build of the tree.
TINY_SRC := $(wildcard test/test_flextree*.c)
TINY_TESTS := $(patsubst test/%.c,$(BUILD)/test/%_tiny,$(TINY_SRC))
TESTS   := $(patsubst test/%.c,$(BUILD)/test/%,$(TEST_SRC)) $(TINY_TESTS)
BENCHES := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))
TOOLS   := $(patsubst cli/%.c,$(BUILD)/bin/%,$(CLI_SRC))

.PHONY: all libs test test-run test-tinycache tsan helgrind fuzz fuzz-quick bench bench-quick bench-cgroup bench-mem stress install uninstall clean help format
all: libs $(TOOLS) $(BENCHES)
libs: $(LIBS_A) $(LIBS_SO)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

$(BUILD)/lib/libflextree.a: $(FLEXTREE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(BUILD)/lib/libflexspace.a: $(FLEXSPACE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(BUILD)/lib/libflexdb.a: $(FLEXDB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

SOVER := 0
$(BUILD)/lib/libflextree.so: $(FLEXTREE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,libflextree.so.$(SOVER) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS_LIB)
$(BUILD)/lib/libflexspace.so: $(FLEXSPACE_OBJ) $(BUILD)/lib/libflextree.so
	$(CC) -shared -Wl,-soname,libflexspace.so.$(SOVER) $(ALL_LDFLAGS) -o $@ $(FLEXSPACE_OBJ) \
		-L$(BUILD)/lib -lflextree $(LDLIBS_LIB)
$(BUILD)/lib/libflexdb.so: $(FLEXDB_OBJ) $(BUILD)/lib/libflexspace.so
	$(CC) -shared -Wl,-soname,libflexdb.so.$(SOVER) $(ALL_LDFLAGS) -o $@ $(FLEXDB_OBJ) \
		-L$(BUILD)/lib -lflexspace -lflextree $(LDLIBS_LIB)

# ---- code the tests share -----------------------------------------------------
# test/lib/: the crash-simulating I/O table, the FlexDB model and operation
# stream and the kill-point scheduler, compiled once into libtestsupport.a;
# the FlexTree model, whose seeds and model functions have the same names as
# crashio's, into libftmodel.a, which only the FlexTree suites link.
FTMODEL_SRC  := test/lib/flextree_model.c
TEST_LIB_SRC := $(filter-out $(FTMODEL_SRC),$(wildcard test/lib/*.c))
TEST_LIB     := $(BUILD)/test/libtestsupport.a
FTMODEL_LIB  := $(BUILD)/test/libftmodel.a
$(TEST_LIB): $(call obj,$(TEST_LIB_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(FTMODEL_LIB): $(call obj,$(FTMODEL_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
TEST_SUPPORT := $(TEST_LIB)
$(BUILD)/test/test_flextree $(BUILD)/test/test_flextree_file: $(FTMODEL_LIB)
$(BUILD)/test/test_flextree $(BUILD)/test/test_flextree_file: TEST_SUPPORT := $(FTMODEL_LIB)
# The concurrency programs of `make tsan` and `make helgrind` compile what
# they use of it with their own flags.
FLEXDB_CONC_SRC    := test/lib/crashio.c test/lib/flexdb_model.c
FLEXSPACE_CONC_SRC := test/lib/crashio.c

# ---- tests -------------------------------------------------------------------
# test_flextree_tiny is the FlexTree suite linked against a build of the tree
# with tiny node capacities, so that every split/merge/rebase path runs on a
# few hundred extents.
TINY_FLAGS := -DFT_LEAF_CAP=6 -DFT_INTERNAL_CAP=5
$(BUILD)/tiny/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(TINY_FLAGS) -MMD -MP -c $< -o $@
$(BUILD)/test/%_tiny: $(BUILD)/tiny/test/%.o $(patsubst %.c,$(BUILD)/tiny/%.o,$(FLEXTREE_SRC)) \
		$(FTMODEL_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ -lcriterion $(LDLIBS_SYS)

$(BUILD)/test/%: $(BUILD)/test/%.o $(TEST_SUPPORT) $(LIBS_A)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $< $(TEST_EXTRA) $(TEST_SUPPORT) $(LINK_A) -lcriterion \
		$(LDLIBS_SYS) -lm

# `make test`: debug build with assertions, every Criterion suite.
test:
	@$(MAKE) --no-print-directory MODE=debug test-run
# Tests that drive the command-line tools find them through FLEX_BIN_DIR.
# The shell runs with -e, so a suite's status is taken in an && || list
# (a plain failing command would end the brace group before its status
# is written).  Under ASan, LeakSanitizer reports from each test's
# process; Criterion ignores them, so the output is searched (test/lsan.supp says why the
# allocation stacks are cut to two frames).
test-run: $(TESTS) $(TOOLS) $(LIBS_SO)
	@set -e; mkdir -p $(BUILD)/test-logs; for t in $(TESTS); do echo "== $$t"; \
		log=$(BUILD)/test-logs/$$(basename $$t).log; rm -f $$log.rc; \
		{ FLEX_BIN_DIR=$(BUILD)/bin \
		  LSAN_OPTIONS=suppressions=$(CURDIR)/test/lsan.supp:print_suppressions=0:malloc_context_size=2 \
		  $$t --jobs 2 $(TESTFLAGS) 2>&1 && echo 0 > $$log.rc || echo $$? > $$log.rc; } | tee $$log; \
		rc=$$(cat $$log.rc); [ "$$rc" = 0 ] || exit $$rc; \
		if grep -q 'ERROR: LeakSanitizer' $$log; then echo "$$t: leaked memory"; exit 1; fi; done

# The concurrency tests as plain programs under ThreadSanitizer (the
# Criterion runner itself does not start under TSan on this platform):
# FlexDB's, FlexSpace's, and readers on a FlexTree with a two-leaf cache.
tsan:
	@$(MAKE) --no-print-directory SANITIZE=thread libs
	$(CC) -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=thread -Iinclude -DFLEXDB_TSAN_MAIN \
		test/test_flexdb.c $(FLEXDB_CONC_SRC) -o build/debug-thread/flexdb_tsan \
		build/debug-thread/lib/libflexdb.a build/debug-thread/lib/libflexspace.a \
		build/debug-thread/lib/libflextree.a -luring -lxxhash -pthread -lm
	$(CC) -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=thread -Iinclude -DFLEXSPACE_TSAN_MAIN \
		test/test_flexspace_sync.c $(FLEXSPACE_CONC_SRC) -o build/debug-thread/flexspace_tsan \
		build/debug-thread/lib/libflexspace.a build/debug-thread/lib/libflextree.a \
		-luring -lxxhash -pthread -lm
	TSAN_OPTIONS=halt_on_error=1 build/debug-thread/flexdb_tsan
	TSAN_OPTIONS=halt_on_error=1 build/debug-thread/flexspace_tsan
	$(CC) -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=thread -Iinclude test/flextree_tsan.c \
		-o build/debug-thread/flextree_tsan build/debug-thread/lib/libflextree.a \
		-luring -lxxhash -pthread
	TSAN_OPTIONS=halt_on_error=1 build/debug-thread/flextree_tsan

# The same program under Helgrind, valgrind's happens-before race and
# lock-order checker.  The libraries are built with -DFLEX_HELGRIND, which
# turns on the annotations of the C11 atomics Helgrind cannot see (the
# lock-free memtable, the CLOCK bits, reference counts: fdb_int.h).  One
# suppression beyond valgrind's own for glibc (test/helgrind.supp): a
# timed condvar wait handing a signal on from inside glibc.  No jemalloc:
# valgrind replaces malloc and must see every block.  FLEX_NO_IO_URING=1:
# valgrind does not see the kernel fill buffers through io_uring's rings.
# Helgrind runs one thread at a time (--fair-sched=yes: in turn, or a
# spinning reader can starve the thread that ends a run), so the program
# has one reader and one iterator thread (-DCR=1 -DCI=1), 64 KiB memtables
# and FLEX_TEST_SCALE=8, so that the committer runs under the readers
# (44 s of runs, about 50 s in all on 2 cores).
HG_BUILD := build/debug-helgrind
helgrind:
	@$(MAKE) --no-print-directory MODE=debug BUILD=$(HG_BUILD) CFLAGS=-DFLEX_HELGRIND libs
	$(CC) -std=c11 -D_GNU_SOURCE -g -O1 -Iinclude -DFLEXDB_TSAN_MAIN -DCR=1 -DCI=1 \
		-D'CONC_MEMTABLE=(64u << 10)' test/test_flexdb.c $(FLEXDB_CONC_SRC) \
		-o $(HG_BUILD)/flexdb_helgrind \
		$(HG_BUILD)/lib/libflexdb.a $(HG_BUILD)/lib/libflexspace.a \
		$(HG_BUILD)/lib/libflextree.a -luring -lxxhash -pthread -lm
	FLEX_NO_IO_URING=1 FLEX_TEST_SCALE=$${FLEX_TEST_SCALE:-8} \
		valgrind --tool=helgrind --fair-sched=yes --error-exitcode=1 \
		--suppressions=test/helgrind.supp $(HG_BUILD)/flexdb_helgrind

# ---- fuzzing (test/fuzz/README.md) ----------------------------------------
# clang + libFuzzer: test/fuzz/run.sh builds its own clang ASan/UBSan copy
# of the library sources in build/fuzz/ (gcc-built sanitizer objects do not
# link with clang's libFuzzer runtime).
FUZZ_SECONDS ?= 600
fuzz:
	test/fuzz/run.sh --all $(FUZZ_SECONDS)
fuzz-quick:
	test/fuzz/run.sh --quick 20

# Every suite with a one-leaf default FlexTree leaf cache, so that FlexSpace
# and FlexDB run with their tree's leaves read back from the file (not part
# of `make test`; about as long).  Not test_corruption: its stores must end
# with LOG batches after the last tree commit, and with one leaf of cache
# every change to a tree of two levels commits it.
TC_BUILD := build/debug-tinycache
test-tinycache:
	@$(MAKE) --no-print-directory MODE=debug BUILD=$(TC_BUILD) \
		CFLAGS="$(CFLAGS) -DFT_DEFAULT_CACHE=1" \
		TESTS="$(patsubst $(BUILD)/%,$(TC_BUILD)/%,$(filter-out %/test_corruption,$(TESTS)))" \
		test-run

# Long randomized runs (not part of `make test`).
stress:
	@$(MAKE) --no-print-directory MODE=debug test-run TESTFLAGS="$(TESTFLAGS)" \
		FLEX_TEST_SCALE=$${FLEX_TEST_SCALE:-50}

# ---- code the tools share -----------------------------------------------------
# The parser, escaping and REPL driver of the tools (cli/lib/), compiled once.
CLI_LIB_SRC := $(wildcard cli/lib/*.c)
CLI_LIB     := $(BUILD)/cli/libcli.a
$(CLI_LIB): $(call obj,$(CLI_LIB_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# ---- code the benchmarks share -----------------------------------------------
# bench_util.c (messages, clocks, histograms, /proc readings) and the YCSB
# generators, compiled once; test_ycsb_gen checks the generators.
BENCH_LIB_SRC := bench/bench_util.c bench/ycsb_gen.c
BENCH_LIB     := $(BUILD)/bench/libbench.a
$(BENCH_LIB): $(call obj,$(BENCH_LIB_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(BUILD)/test/test_ycsb_gen: $(BENCH_LIB)
$(BUILD)/test/test_ycsb_gen: TEST_EXTRA := $(BENCH_LIB)

# ---- benchmarks, tools -------------------------------------------------------
# The benchmarks that run peers share the engine adapters and the memory
# cgroups of their children (bench/kv_engines.c, bench/memcg.c, compiled
# once) and link the peers (Debian packages, see setup.sh).
BENCH_ENGINE_OBJ := $(BUILD)/bench/kv_engines.o $(BUILD)/bench/memcg.o
ENGINE_BENCHES := $(BUILD)/bench/flexdb_bench $(BUILD)/bench/ycsb_bench $(BUILD)/bench/delrange_bench
$(ENGINE_BENCHES): $(BENCH_ENGINE_OBJ)
$(ENGINE_BENCHES): BENCH_LDLIBS := -lrocksdb -lleveldb -llmdb
$(BUILD)/bench/%: $(BUILD)/bench/%.o $(BENCH_LIB) $(LIBS_A)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(BENCH_LIB) $(LINK_A) $(LDLIBS_SYS) -lm \
		$(BENCH_LDLIBS)
# The tools are thin clients of the public API; the REPLs use readline.
$(BUILD)/bin/%: $(BUILD)/cli/%.o $(CLI_LIB) $(LIBS_A)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $< $(CLI_LIB) $(LINK_A) $(LDLIBS_SYS) -lreadline -lm

# docs/BENCHMARKS.md describes each run.  flexdb_bench: FlexDB, RocksDB,
# LevelDB and LMDB, each in its own process, 2M pairs, 1 and 2 client
# threads, medians of 3: the default budget (64 MiB cache + 2 x 32 MiB
# memtables each), the paper's (1 GiB + 2 x 1 GiB), and the data beyond
# memory (bench-cgroup's first run; skipped with a message where memory
# cgroups are unavailable).
CGROUP_2M := --num 2000000 --cgroup-mb 128 --cache-mb 32 --memtable-mb 16 --cgroup-optional
bench: $(BENCHES)
	$(BUILD)/bench/flextree_bench
	$(BUILD)/bench/treemem_bench
	$(BUILD)/bench/flexspace_bench
	$(BUILD)/bench/flexdb_bench --threads 1,2
	$(BUILD)/bench/flexdb_bench --threads 1,2 --memtable-mb 1024 --cache-mb 1024
	$(BUILD)/bench/flexdb_bench --threads 1,2 $(CGROUP_2M) --timeout-s 1800
	$(BUILD)/bench/ycsb_bench --dataset udb --num 2000000 --threads 1,2 --reps 3
	$(BUILD)/bench/sync_latency_bench
	$(BUILD)/bench/delrange_bench --num 1000000
# CI: every program at a tiny scale; flexdb_bench's second run covers the
# other workloads, two client threads and one memory-cgroup run.
bench-quick: $(BENCHES)
	$(BUILD)/bench/flextree_bench --quick
	$(BUILD)/bench/treemem_bench --quick
	$(BUILD)/bench/flexspace_bench --quick
	$(BUILD)/bench/flexdb_bench --quick
	$(BUILD)/bench/flexdb_bench --quick --num 20000 --threads 2 --benchmarks all \
		--cgroup-mb 64 --cgroup-optional --timeout-s 120
	$(BUILD)/bench/ycsb_bench --quick
	$(BUILD)/bench/sync_latency_bench --quick
	$(BUILD)/bench/delrange_bench --quick
# Data larger than memory, every engine in a memory cgroup that counts its
# page cache: about 250 MB of pairs in 128 MiB, then about 3.7 GB in 1 GiB
# (the same cache : memtables : limit proportions; hours at most: each
# engine's process is stopped after --timeout-s).
bench-cgroup: $(BUILD)/bench/flexdb_bench
	$(BUILD)/bench/flexdb_bench $(CGROUP_2M) --threads 1,2 --timeout-s 1800
	$(BUILD)/bench/flexdb_bench --num 32000000 --cgroup-mb 1024 --cache-mb 256 \
		--memtable-mb 128 --reads 4000000 --seeks 1000000 --reps 1 --timeout-s 7200 \
		--cgroup-optional
# FlexDB's memory at 1M, 4M and 16M pairs (16M: about 1.9 GB of pairs),
# default options: RSS after load, reopen and 2M gets, and per pair.
bench-mem: $(BUILD)/bench/flexdb_bench
	set -e; for n in 1000000 4000000 16000000; do \
		$(BUILD)/bench/flexdb_bench --engines flexdb --num $$n --reps 1 \
			--benchmarks fillrandom,readrandom --reads 2000000; done

# ---- install -----------------------------------------------------------------
define PCFILE
prefix=$(PREFIX)
libdir=$(LIBDIR)
includedir=$(INCDIR)

Name: $(1)
Description: $(2)
Version: $(shell sed -n 's/^#define FLEX_VERSION_STRING "\(.*\)"/\1/p' include/flex_common.h)
$(3)
Libs: -L$${libdir} -l$(1)
Libs.private: -luring -lxxhash -pthread
Cflags: -I$${includedir}
endef
export PC_flextree  := $(call PCFILE,flextree,FlexTree shift-aware extent index,)
export PC_flexspace := $(call PCFILE,flexspace,FlexSpace persistent flexible address space,Requires: flextree)
export PC_flexdb    := $(call PCFILE,flexdb,FlexDB sorted key-value store,Requires: flexspace)

# Installs what users of the libraries and tools need: the benchmarks
# (and the peers they link) are not built.
MANPAGES := $(wildcard docs/man/*.1)
install: libs $(TOOLS)
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCDIR) $(DESTDIR)$(BINDIR) \
		$(DESTDIR)$(MANDIR)/man1
	install -m 644 $(HEADERS) $(DESTDIR)$(INCDIR)/
	install -m 644 $(LIBS_A) $(DESTDIR)$(LIBDIR)/
	set -e; for so in $(notdir $(LIBS_SO)); do \
		install -m 755 $(BUILD)/lib/$$so $(DESTDIR)$(LIBDIR)/$$so.$(SOVER); \
		ln -sf $$so.$(SOVER) $(DESTDIR)$(LIBDIR)/$$so; done
	set -e; for pc in $(PCS); do eval "printf '%s\n' \"\$$PC_$$pc\"" \
		> $(DESTDIR)$(LIBDIR)/pkgconfig/$$pc.pc; done
	$(if $(TOOLS),install -m 755 $(TOOLS) $(DESTDIR)$(BINDIR)/)
	install -m 644 $(MANPAGES) $(DESTDIR)$(MANDIR)/man1/

uninstall:
	rm -f $(addprefix $(DESTDIR)$(INCDIR)/,$(notdir $(HEADERS)))
	rm -f $(addprefix $(DESTDIR)$(LIBDIR)/,$(notdir $(LIBS_A)))
	rm -f $(addprefix $(DESTDIR)$(LIBDIR)/,$(notdir $(LIBS_SO)))
	rm -f $(addsuffix .$(SOVER),$(addprefix $(DESTDIR)$(LIBDIR)/,$(notdir $(LIBS_SO))))
	rm -f $(patsubst %,$(DESTDIR)$(LIBDIR)/pkgconfig/%.pc,$(PCS))
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(notdir $(TOOLS)))
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man1/,$(notdir $(MANPAGES)))

format:
	clang-format -i $(wildcard include/*.h */*.c */*.h)

clean:
	rm -rf build

help:
	@echo "make              build libraries, tools and benchmarks (build/release)"
	@echo "make test         build with assertions and run every Criterion suite"
	@echo "make stress       long randomized runs (FLEX_TEST_SCALE=50)"
	@echo "make test-tinycache  every suite with a one-leaf FlexTree leaf cache"
	@echo "make tsan         the FlexDB, FlexSpace and FlexTree concurrency tests under ThreadSanitizer"
	@echo "make helgrind     the same test under valgrind's Helgrind (needs valgrind)"
	@echo "make fuzz         every libFuzzer target for FUZZ_SECONDS (600) each"
	@echo "make fuzz-quick   replay the saved fuzz corpora, then 20 s per target (CI)"
	@echo "make bench        run the benchmark suite (-O2 -DNDEBUG)"
	@echo "make bench-quick  a short benchmark pass"
	@echo "make bench-cgroup the engines with data larger than memory (memory cgroups, root)"
	@echo "make bench-mem    FlexDB's RSS at 1M, 4M and 16M pairs"
	@echo "make install      PREFIX=$(PREFIX) DESTDIR= : headers, libs, tools, pkg-config, man pages"
	@echo "make uninstall    remove what make install installed"
	@echo "make libs         the libraries only (static and shared)"
	@echo "make format       clang-format every source file"
	@echo "make clean        remove build/"
	@echo "SANITIZE=address,undefined or SANITIZE=thread adds sanitizers"
	@echo "FLEX_TEST_SEED=N  replays a random test with seed N"
