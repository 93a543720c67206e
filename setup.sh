#!/usr/bin/env bash
# One-step set-up for a fresh Debian 12 machine: installs the build
# dependencies (needs root or sudo), builds everything, and runs the demo.
#   ./setup.sh               install packages, build, demo
#   ./setup.sh --no-install  build and demo only
set -euo pipefail
cd "$(dirname "$0")"

if [ "${1:-}" != "--no-install" ]; then
	SUDO=
	[ "$(id -u)" -eq 0 ] || SUDO=sudo
	$SUDO apt-get update
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
		build-essential pkg-config liburing-dev libjemalloc-dev libxxhash-dev libcriterion-dev libreadline-dev \
		librocksdb-dev libleveldb-dev liblmdb-dev gnuplot-nox clang libclang-rt-14-dev valgrind
fi

make -j"$(nproc)"
echo
echo "== demo: a FlexTree file built, edited and inspected"
tree_file="${FLEX_DEMO_DIR:-/tmp}/flextree-demo.ft"
rm -f "$tree_file"
build/release/bin/flextree-inspect --demo "$tree_file"
echo
echo "== demo: flexdb-cli on a default store in ${FLEX_DEMO_DIR:-/tmp}/flexdb-demo"
store="${FLEX_DEMO_DIR:-/tmp}/flexdb-demo"
rm -rf "$store"
build/release/bin/flexdb-cli "$store" -c 'put apple red; put banana yellow; put "key\x00with nul" 0x00ff; scan; get apple; count; check'
echo
echo "Try it:  build/release/bin/flexdb-cli $store     (type help)"
