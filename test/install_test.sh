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
for m in flexdb-cli flexspace-cli flextree-inspect; do
	test -f "$tmp/stage/usr/local/share/man/man1/$m.1"
done
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
cat > "$tmp/prog-flexspace.c" <<'C'
#include <flexspace.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv)
{
	struct flexspace *fs;
	char buf[16] = {0};
	if (argc < 2 || flexspace_open(argv[1], NULL, &fs))
		return 1;
	if (flexspace_write(fs, "world", 0, 5) != 5 || flexspace_insert(fs, "hello ", 0, 6) != 6 ||
	    flexspace_read(fs, buf, 0, sizeof(buf)) != 11 || strcmp(buf, "hello world"))
		return 1;
	printf("installed flexspace works: %s\n", buf);
	return flexspace_close(fs);
}
C
cat > "$tmp/prog-flexdb.c" <<'C'
#include <flexdb.h>
#include <stdio.h>
int main(int argc, char **argv)
{
	struct flexdb *db;
	char v[8] = {0};
	size_t n;
	if (argc < 2 || flexdb_open(argv[1], NULL, &db))
		return 1;
	if (flexdb_put(db, "k", 1, "value", 5) || flexdb_get(db, "k", 1, v, sizeof(v), &n) || n != 5)
		return 1;
	printf("installed flexdb works: k=%s\n", v);
	return flexdb_close(db);
}
C
cp "$tmp/prog.c" "$tmp/prog-flextree.c"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
for lib in flextree flexspace flexdb; do
	cc "$tmp/prog-$lib.c" -o "$tmp/prog-$lib" $(pkg-config --cflags --libs $lib)
	LD_LIBRARY_PATH="$prefix/lib" "$tmp/prog-$lib" "$tmp/store-$lib"
done
# The libraries bring no allocator: a program linking them next to LevelDB
# and RocksDB (whose static initialisers free with the host's malloc) runs in
# every link order, shared and static.
for lib in flextree flexspace flexdb; do
	if ldd "$prefix/lib/lib$lib.so" | grep -q jemalloc; then
		echo "lib$lib.so depends on jemalloc"; exit 1
	fi
done
cat > "$tmp/prog-peers.c" <<'C'
#include <flexdb.h>
#include <leveldb/c.h>
#include <rocksdb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv)
{
	char path[4096], *err = NULL;
	struct flexdb *db;
	char v[8] = {0};
	size_t n;
	if (argc < 2)
		return 1;
	snprintf(path, sizeof(path), "%s/flexdb", argv[1]);
	if (flexdb_open(path, NULL, &db) || flexdb_put(db, "k", 1, "value", 5) ||
	    flexdb_get(db, "k", 1, v, sizeof(v), &n) || n != 5 || flexdb_close(db))
		return 1;
	leveldb_options_t *lo = leveldb_options_create();
	leveldb_options_set_create_if_missing(lo, 1);
	snprintf(path, sizeof(path), "%s/leveldb", argv[1]);
	leveldb_t *ldb = leveldb_open(lo, path, &err);
	if (err)
		return 1;
	leveldb_close(ldb);
	leveldb_options_destroy(lo);
	rocksdb_options_t *ro = rocksdb_options_create();
	rocksdb_options_set_create_if_missing(ro, 1);
	snprintf(path, sizeof(path), "%s/rocksdb", argv[1]);
	rocksdb_t *rdb = rocksdb_open(ro, path, &err);
	if (err)
		return 1;
	rocksdb_close(rdb);
	rocksdb_options_destroy(ro);
	char *p = malloc(100);
	free(p);
	printf("flexdb, leveldb and rocksdb in one program: ok\n");
	return 0;
}
C
flexdb_shared=$(pkg-config --libs flexdb)
flexdb_static=$(pkg-config --static --libs flexdb)
i=0
for flexdb_libs in "$flexdb_shared" "-Wl,-Bstatic $flexdb_static -Wl,-Bdynamic -luring -lxxhash"; do
	for order in "F L R" "F R L" "L F R" "L R F" "R F L" "R L F"; do
		libs=""
		for x in $order; do
			case $x in
			F) libs="$libs $flexdb_libs" ;;
			L) libs="$libs -lleveldb" ;;
			R) libs="$libs -lrocksdb" ;;
			esac
		done
		i=$((i + 1))
		cc $(pkg-config --cflags flexdb) "$tmp/prog-peers.c" -o "$tmp/prog-peers" $libs
		mkdir -p "$tmp/peers-$i"
		LD_LIBRARY_PATH="$prefix/lib" "$tmp/prog-peers" "$tmp/peers-$i" >/dev/null ||
			{ echo "flexdb with leveldb and rocksdb failed: link order: $libs"; exit 1; }
	done
done
# Only the library's own namespaces are exported from the shared objects.
bad=$(nm -D --defined-only "$prefix"/lib/lib*.so | awk 'NF==3 && $2 ~ /[TDBR]/ {print $3}' |
	grep -Ev '^(flextree_|flexspace_|flexdb_|flex_)' || true)
if [ -n "$bad" ]; then
	echo "unexpected exported symbols:"; echo "$bad"; exit 1
fi
echo "install test: 4 passed, 0 failed"
