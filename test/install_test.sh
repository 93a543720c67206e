#!/usr/bin/env bash
# Installs into a temporary prefix (with DESTDIR staging) and builds an
# outside program against the installed headers through pkg-config.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
make --no-print-directory install PREFIX="$prefix" >/dev/null
make --no-print-directory install PREFIX=/usr/local DESTDIR="$tmp/stage" >/dev/null
test -f "$tmp/stage/usr/local/include/flextree.h"
test -f "$tmp/stage/usr/local/lib/pkgconfig/flextree.pc"
cat > "$tmp/prog.c" <<'C'
#include <flextree.h>
#include <stdio.h>
int main(void)
{
	struct flextree *t;
	if (flextree_open(NULL, NULL, &t))
		return 1;
	if (flextree_insert(t, 0, 100, 10) || flextree_insert(t, 5, 500, 3))
		return 1;
	uint64_t poff, run;
	if (flextree_lookup(t, 6, &poff, &run) || poff != 501 || run != 2)
		return 1;
	printf("installed flextree %s works: size %llu\n", flex_version(NULL, NULL, NULL),
	       (unsigned long long)flextree_size(t));
	return flextree_close(t);
}
C
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
for lib in flextree; do
	cc "$tmp/prog.c" -o "$tmp/prog-$lib" $(pkg-config --cflags --libs $lib)
	LD_LIBRARY_PATH="$prefix/lib" "$tmp/prog-$lib"
done
# Only the library's own namespaces are exported from the shared objects.
bad=$(nm -D --defined-only "$prefix"/lib/lib*.so | awk 'NF==3 && $2 ~ /[TDBR]/ {print $3}' |
	grep -Ev '^(flextree_|flexspace_|flexdb_|flex_)' || true)
if [ -n "$bad" ]; then
	echo "unexpected exported symbols:"; echo "$bad"; exit 1
fi
echo "install test: 1 passed, 0 failed"
