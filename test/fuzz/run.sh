#!/bin/bash
# test/fuzz/run.sh - build and run the libFuzzer targets (see README.md).
#
#   test/fuzz/run.sh TARGET SECONDS   fuzz one target (fuzz_wal, or just wal)
#   test/fuzz/run.sh --all SECONDS    every target in turn, SECONDS each
#   test/fuzz/run.sh --replay         run every saved corpus file once
#   test/fuzz/run.sh --quick [SECS]   --replay, then --all SECS (default 20)
#   test/fuzz/run.sh --build          only build
#   test/fuzz/run.sh --seeds          rebuild the seed corpora (gen_corpus)
#
# The library sources are compiled here with clang (-fsanitize=
# fuzzer-no-link,address,undefined) into build/fuzz/, not taken from
# `make SANITIZE=...`: that build uses gcc's ASan runtime, which cannot be
# linked together with clang's libFuzzer and ASan runtimes.
#
# New inputs the fuzzer finds go to build/fuzz/corpus/TARGET (scratch);
# the saved corpus test/fuzz/corpus/TARGET is only read.  Crashes are
# written to build/fuzz/artifacts/.  Extra libFuzzer flags: FUZZ_FLAGS.
set -eu

cd "$(dirname "$0")/../.."
CC=${FUZZ_CC:-clang}
OUT=build/fuzz
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all"
CFLAGS="-std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -Iinclude -pthread"
WARN="-Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla -Wformat=2"
LIBS="-luring -lxxhash -lreadline -pthread -lm"
TARGETS="fuzz_tree_file fuzz_space_log fuzz_wal fuzz_store_image fuzz_cli_parser"

# Longest input per target: the tree and store images need a few slots.
max_len() {
	case $1 in
	fuzz_tree_file) echo 32768 ;;
	fuzz_space_log) echo 24576 ;;
	fuzz_store_image) echo 65536 ;;
	*) echo 8192 ;;
	esac
}

newer() { # newer OUT SRC... : true if OUT is missing or older than a SRC
	o=$1
	shift
	[ -e "$o" ] || return 0
	for s in "$@"; do [ "$s" -nt "$o" ] && return 0; done
	return 1
}

build_lib() {
	lib=$OUT/libflex_fuzz.a
	srcs=$(ls common/*.c flextree/*.c flexspace/*.c flexdb/*.c)
	# shellcheck disable=SC2086
	if newer "$lib" $srcs include/*.h common/*.h flextree/*.h flexspace/*.h flexdb/*.h; then
		echo "building $lib with $CC"
		mkdir -p "$OUT/obj"
		objs=""
		for s in $srcs; do
			o=$OUT/obj/$(echo "$s" | tr / _ | sed 's/\.c$/.o/')
			# shellcheck disable=SC2086
			$CC $CFLAGS $WARN $SAN -fsanitize=fuzzer-no-link -c "$s" -o "$o"
			objs="$objs $o"
		done
		rm -f "$lib"
		# shellcheck disable=SC2086
		ar rcs "$lib" $objs
	fi
}

# What the targets and gen_corpus share besides the library: the scratch
# directory and checksum fix-ups, and the tools' parser, which
# fuzz_cli_parser drives; compiled the same way.
SUPPORT_SRC="test/fuzz/fuzz_common.c cli/lib/cli_parse.c cli/lib/cli_run.c cli/lib/cli_main.c"
build_support() {
	lib=$OUT/libfuzz_support.a
	# shellcheck disable=SC2086
	if newer "$lib" $SUPPORT_SRC test/fuzz/*.h cli/lib/*.h include/*.h; then
		echo "building $lib with $CC"
		mkdir -p "$OUT/obj"
		objs=""
		for s in $SUPPORT_SRC; do
			o=$OUT/obj/$(echo "$s" | tr / _ | sed 's/\.c$/.o/')
			# shellcheck disable=SC2086
			$CC $CFLAGS $WARN $SAN -fsanitize=fuzzer-no-link -c "$s" -o "$o"
			objs="$objs $o"
		done
		rm -f "$lib"
		# shellcheck disable=SC2086
		ar rcs "$lib" $objs
	fi
}

build_target() {
	t=$1
	# shellcheck disable=SC2086
	if newer "$OUT/$t" "test/fuzz/$t.c" test/fuzz/*.h cli/lib/cli_common.h "$OUT/libflex_fuzz.a" \
		"$OUT/libfuzz_support.a"; then
		echo "building $OUT/$t"
		# shellcheck disable=SC2086
		$CC $CFLAGS $WARN $SAN -fsanitize=fuzzer -Icli/lib "test/fuzz/$t.c" -o "$OUT/$t" \
			"$OUT/libfuzz_support.a" "$OUT/libflex_fuzz.a" $LIBS
	fi
}

build_all() {
	mkdir -p "$OUT/artifacts"
	build_lib
	build_support
	for t in $TARGETS; do build_target "$t"; done
}

export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

run_target() {
	t=$1
	secs=$2
	case $t in fuzz_*) ;; *) t=fuzz_$t ;; esac
	[ -f "test/fuzz/$t.c" ] || { echo "no such target: $t" >&2; exit 2; }
	mkdir -p "$OUT/corpus/$t" "test/fuzz/corpus/$t"
	echo "== $t for ${secs}s"
	# Inputs that reach bugs already reported are skipped while fuzzing
	# (not in --replay, where they are the regression tests).
	FLEX_FUZZ_SKIP_KNOWN=${FLEX_FUZZ_SKIP_KNOWN:-0}
	export FLEX_FUZZ_SKIP_KNOWN
	FLEX_FUZZ_CLI_QUIET=${FLEX_FUZZ_CLI_QUIET:-1}
	export FLEX_FUZZ_CLI_QUIET
	# shellcheck disable=SC2086
	"$OUT/$t" -max_total_time="$secs" -max_len="$(max_len "$t")" -timeout=20 \
		-rss_limit_mb=4096 -print_final_stats=1 \
		-artifact_prefix="$OUT/artifacts/$t-" ${FUZZ_FLAGS:-} \
		"$OUT/corpus/$t" "test/fuzz/corpus/$t"
}

# Seeds run in one process per target; each crash-* / timeout-* input (a
# reported finding kept as a regression test) in its own, so that one
# failure does not hide the others.  Exits 1 if any input fails.
# FLEX_FUZZ_REPLAY_FINDINGS=0 leaves the findings out (while they are open).
replay() {
	failed=0
	for t in $TARGETS; do
		[ -d "test/fuzz/corpus/$t" ] || continue
		seeds=$(find "test/fuzz/corpus/$t" -type f ! -name 'crash-*' ! -name 'timeout-*' | sort)
		finds=$(find "test/fuzz/corpus/$t" -type f \( -name 'crash-*' -o -name 'timeout-*' \) | sort)
		echo "== replay $t ($(echo "$seeds" | grep -c .) inputs, $(echo "$finds" | grep -c .) findings)"
		if [ "${FLEX_FUZZ_REPLAY_FINDINGS:-1}" = 0 ] && [ -n "$finds" ]; then
			echo "   FLEX_FUZZ_REPLAY_FINDINGS=0: the findings are not replayed"
			finds=""
		fi
		for f in "" $finds; do
			if [ -z "$f" ]; then
				[ -n "$seeds" ] || continue
				files=$seeds
				log=$OUT/replay-$t.log
			else
				files=$f
				log=$OUT/replay-$t-$(basename "$f").log
			fi
			# shellcheck disable=SC2086
			if ! FLEX_FUZZ_SKIP_KNOWN=0 "$OUT/$t" -runs=1 -timeout=20 -rss_limit_mb=4096 \
				$files >"$log" 2>&1; then
				echo "FAIL $t: $(echo "$files" | tr '\n' ' ')(log: $log)"
				grep -E "^fuzz_[a-z_]+: |SUMMARY|ERROR:" "$log" | head -3 | sed 's/^/    /'
				failed=1
			fi
		done
	done
	[ $failed = 0 ] && echo "replay: every corpus input passes"
	return $failed
}

seeds() {
	echo "building $OUT/gen_corpus"
	# shellcheck disable=SC2086
	$CC $CFLAGS $WARN $SAN -fsanitize=fuzzer-no-link test/fuzz/gen_corpus.c -o "$OUT/gen_corpus" \
		"$OUT/libfuzz_support.a" "$OUT/libflex_fuzz.a" $LIBS
	"$OUT/gen_corpus" test/fuzz/corpus
}

[ $# -ge 1 ] || { sed -n '2,10p' "$0"; exit 2; }
case $1 in
--build) build_all ;;
--seeds) build_all; seeds ;;
--replay) build_all; replay ;;
--all)
	build_all
	for t in $TARGETS; do run_target "$t" "${2:-60}"; done
	;;
--quick)
	build_all
	replay
	for t in $TARGETS; do run_target "$t" "${2:-20}"; done
	;;
-*) sed -n '2,10p' "$0"; exit 2 ;;
*)
	build_all
	run_target "$1" "${2:-60}"
	;;
esac
