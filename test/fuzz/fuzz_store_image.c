/*
 * fuzz_store_image.c - libFuzzer target: a whole FlexDB store directory
 * made from the input (docs/FORMAT.md: FlexTree file, FlexSpace
 * directory, FlexDB store), opened with flexdb_open, checked, iterated
 * and read.
 *
 * Input: a container of entries (u8 id, u32 length, bytes); a later entry
 * with the same id replaces an earlier one; files without an entry are
 * absent (LOCK and space/LOCK are always created empty, and both
 * IDENTITY files sound).
 *   id 0  space/TREE          id 3  WAL-0000000000000001
 *   id 1  space/LOG           id 4  WAL-0000000000000002
 *   id 2  space/DATA          id 5  space/TREE in fz_tree_expand form
 *   id 6  fix-up flags (first byte): 1 tree checksums (+ node slots),
 *         2 tree header counts, 4 LOG header checksums, 8 LOG batch
 *         checksums and sequence, 16 WAL checksums
 * Open may fail in any documented way.  The pairs in DATA are protected
 * only by their own 32-bit checksums and open reads one key per interval,
 * so flexdb_check and reads may report FLEX_ECORRUPT after a successful
 * open; what must hold is no crash, and when flexdb_check passes, an
 * iteration that is strictly ordered both ways and agrees with flexdb_get.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/flex_ident.h"
#include "flexdb.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MUST(cond)                                                                                 \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_store_image: %s:%d: %s\n", __FILE__, __LINE__,       \
				#cond);                                                            \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

static char work[PATH_MAX];

enum { F_TREE, F_LOG, F_DATA, F_WAL1, F_WAL2, F_TREE_COMPACT, F_FLAGS, F_N };
static const char *const names[] = {"space/TREE", "space/LOG", "space/DATA", "WAL-0000000000000001",
				    "WAL-0000000000000002"};

static int is_corrupt(int rc)
{
	return rc == FLEX_ECORRUPT || rc == -EIO;
}

static void probe(struct flexdb *db)
{
	int checked = flexdb_check(db);
	MUST(checked == 0 || is_corrupt(checked));
	struct flexdb_stats st;
	MUST(flexdb_stats(db, &st) == 0);
	struct flexdb_iter *it;
	MUST(flexdb_iter_open(db, &it) == 0);
	static uint8_t prev[FLEXDB_MAX_KEY], vbuf[256];
	size_t plen = 0, n = 0, m = 0;
	int rc = flexdb_iter_seek(it, NULL, 0);
	while (rc == 0 && flexdb_iter_valid(it) && n < 20000) {
		size_t kl, vl;
		const void *k = flexdb_iter_key(it, &kl);
		const void *v = flexdb_iter_value(it, &vl);
		MUST(k && kl >= 1 && kl <= FLEXDB_MAX_KEY && vl <= FLEXDB_MAX_VALUE);
		if (checked == 0) {
			if (n)
				MUST(fz_keycmp(prev, plen, k, kl) < 0);
			size_t gl = 0;
			int g = flexdb_get(db, k, kl, vbuf, sizeof(vbuf), &gl);
			MUST(g == 0 && gl == vl);
			MUST(vl == 0 ||
			     memcmp(vbuf, v, vl < sizeof(vbuf) ? vl : sizeof(vbuf)) == 0);
		} else {
			(void)flexdb_get(db, k, kl, vbuf, sizeof(vbuf), NULL);
		}
		memcpy(prev, k, kl);
		plen = kl;
		n++;
		rc = flexdb_iter_next(it);
	}
	MUST(rc == 0 || is_corrupt(rc));
	int frc = rc;
	rc = flexdb_iter_seek_for_prev(it, NULL, 0);
	while (rc == 0 && flexdb_iter_valid(it) && m < 20000) {
		size_t kl;
		const void *k = flexdb_iter_key(it, &kl);
		if (checked == 0 && m)
			MUST(fz_keycmp(k, kl, prev, plen) < 0);
		memcpy(prev, k, kl);
		plen = kl;
		m++;
		rc = flexdb_iter_prev(it);
	}
	MUST(rc == 0 || is_corrupt(rc));
	if (checked == 0 && frc == 0 && rc == 0)
		MUST(m == n || n >= 20000);
	flexdb_iter_close(it);
	(void)flexdb_get(db, "key0003", 7, vbuf, sizeof(vbuf), NULL);
	(void)flexdb_get(db, "\xff", 1, NULL, 0, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!work[0])
		fz_path(work, sizeof(work), fz_init_root("store"), "db");
	const uint8_t *file[F_N] = {0};
	size_t flen[F_N] = {0};
	int have[F_N] = {0};
	struct fz_in in = {data, size};
	while (in.n >= 5) {
		unsigned id = in.p[0] % 8;
		size_t len = fz_get32(in.p + 1);
		in.p += 5;
		in.n -= 5;
		if (len > in.n)
			len = in.n;
		if (id < F_N) {
			file[id] = in.p;
			flen[id] = len;
			have[id] = 1;
		}
		in.p += len;
		in.n -= len;
	}
	unsigned fix = have[F_FLAGS] && flen[F_FLAGS] ? file[F_FLAGS][0] : 0;

	fz_rmrf(work);
	char p[PATH_MAX];
	MUST(mkdir(work, 0755) == 0);
	fz_path(p, sizeof(p), work, "space");
	MUST(mkdir(p, 0755) == 0);
	fz_path(p, sizeof(p), work, "LOCK");
	MUST(fz_write_file(p, "", 0) == 0);
	fz_path(p, sizeof(p), work, "space/LOCK");
	MUST(fz_write_file(p, "", 0) == 0);
	/* Sound identities, so that the images reach the layers' own checks. */
	uint8_t id[FLEX_IDENT_BYTES];
	flex_ident_encode(id, FLEX_KIND_DB);
	fz_path(p, sizeof(p), work, FLEX_IDENT_NAME);
	MUST(fz_write_file(p, id, sizeof(id)) == 0);
	flex_ident_encode(id, FLEX_KIND_SPACE);
	fz_path(p, sizeof(p), work, "space/" FLEX_IDENT_NAME);
	MUST(fz_write_file(p, id, sizeof(id)) == 0);
	for (int f = F_TREE; f <= F_WAL2; f++) {
		uint8_t *img = NULL;
		size_t len = flen[f];
		if (f == F_TREE && have[F_TREE_COMPACT]) {
			struct fz_in t = {file[F_TREE_COMPACT], flen[F_TREE_COMPACT]};
			len = (size_t)fz_tree_expand(&t, &img) * FZ_SLOT;
		} else if (have[f]) {
			img = malloc(len ? len : 1);
			MUST(img);
			memcpy(img, file[f], len);
		} else {
			continue;
		}
		if (f == F_TREE && (fix & 3))
			fz_tree_fixup(img, (uint32_t)(len / FZ_SLOT),
				      FZ_TREE_FIX_SLOT | ((fix & 2) ? FZ_TREE_FIX_COUNTS : 0));
		if (f == F_LOG && (fix & 12))
			fz_log_fixup(img, len,
				     ((fix & 4) ? FZ_LOG_FIX_HEADERS : 0) |
					 ((fix & 8) ? FZ_LOG_FIX_BATCHES | FZ_LOG_FIX_SEQ : 0));
		if ((f == F_WAL1 || f == F_WAL2) && (fix & 16))
			fz_wal_fixup(img, len);
		if (f == F_LOG) {
			/* the larger segment size of the two header slots */
			uint64_t seg = 0;
			for (size_t h = 0; h < 2; h++)
				if (h * 4096 + 16 <= len && fz_get32(img + h * 4096 + 12) > seg)
					seg = fz_get32(img + h * 4096 + 12);
			if (fz_known_log_bug(img, len, seg / 32, 0)) {
				free(img);
				return 0;
			}
		}
		fz_path(p, sizeof(p), work, names[f]);
		MUST(fz_write_file(p, img, len) == 0);
		free(img);
	}

	struct flexdb_options o = {.cache_size = 1u << 20, .memtable_size = 64u << 10};
	o.space.log_limit = 64u << 10;
	struct flexdb *db = NULL;
	int rc = flexdb_open(work, &o, &db);
	if (rc != 0) {
		MUST(db == NULL && rc < 0);
		return 0;
	}
	probe(db);
	flexdb_close(db);
	return 0;
}
