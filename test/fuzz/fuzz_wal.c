/*
 * fuzz_wal.c - libFuzzer target: FlexDB recovery from hostile write-ahead
 * logs (docs/FORMAT.md "WAL", docs/DURABILITY.md "Torn tail").
 *
 * Once per process a small store (64 KiB segments, a few hundred pairs,
 * some deleted) is created and closed cleanly, leaving no WAL.  For each
 * input, a copy of it gets WAL-0000000000000001 (and maybe ...02) built
 * from the input, and is opened (which replays the WALs into the store),
 * checked, read with gets and iterated both ways.
 *
 * Input: byte 0 = flags, then
 *   flags & 1   raw: the rest is the WAL file, byte for byte
 *               (flags & 2: repair its header and record checksums)
 *   otherwise   framed: a valid header, then records made from
 *               (u16 payload length, [u8 seq step if flags & 4], payload)
 *               with correct magic, length, checksum and seq (1, 2, ...
 *               or the given steps); a length of 0xffff starts WAL ...02
 *               (flags & 32: format 2, records from 8 KiB; with flags & 64
 *               also a sync mark naming each file's last record)
 *   flags & 16  after the checks: put, delete, close, reopen, check again
 * Payload (FORMAT.md): u32 op count, then per op u8 op (1 put, 2 delete),
 * varint klen, varint vlen (put only), key, value.
 * An open that succeeds must give a store that passes flexdb_check, whose
 * iteration is strictly ordered both ways and agrees with flexdb_get.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flexdb.h"
#include "fuzz_common.h"

/* A format-1 header (32 bytes, records follow), or with format 2 the
 * first FZ_WAL2_RECORDS bytes: a 64-byte header naming the FlexSpace
 * point (0, 0), which any space has reached, and no sync mark. */
static size_t fz_wal_header(uint8_t *h, uint64_t gen, int format)
{
	size_t n = format == 2 ? FZ_WAL2_RECORDS : 32;
	memset(h, 0, n);
	memcpy(h, "FLEXWAL1", 8);
	fz_put32(h + 8, (uint32_t)format);
	fz_put64(h + 16, gen);
	if (format == 2)
		fz_put64(h + 56, XXH3_64bits(h, 56));
	else
		fz_put64(h + 24, XXH3_64bits(h, 24));
	return n;
}

/* Writes a format-2 sync mark naming seq into a whole WAL image. */
static void fz_wal_mark(uint8_t *w, uint64_t gen, uint64_t seq)
{
	uint8_t *m = w + FZ_WAL2_MARK;
	memset(m, 0, 32);
	fz_put32(m, 0x31535746u);
	fz_put64(m + 8, gen);
	fz_put64(m + 16, seq);
	fz_put64(m + 24, XXH3_64bits(m, 24));
}

/* Appends a record (header + payload) to a growing buffer. */
static int fz_wal_append(uint8_t **buf, size_t *len, uint64_t seq, const uint8_t *payload,
			 size_t plen)
{
	uint8_t *nb = realloc(*buf, *len + 24 + plen);
	if (!nb)
		return -1;
	uint8_t *r = nb + *len;
	fz_put32(r, FZ_WAL_REC_MAGIC);
	fz_put32(r + 4, (uint32_t)plen);
	fz_put64(r + 8, seq);
	fz_put64(r + 16, XXH3_64bits_withSeed(payload, plen, seq));
	if (plen)
		memcpy(r + 24, payload, plen);
	*buf = nb;
	*len += 24 + plen;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MUST(cond)                                                                                 \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_wal: %s:%d: %s\n", __FILE__, __LINE__, #cond);       \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

static char tpl[PATH_MAX], work[PATH_MAX];
static int have_tpl;

static struct flexdb_options db_opts(void)
{
	struct flexdb_options o = {.cache_size = 1u << 20, .memtable_size = 64u << 10};
	o.space.segment_size = 64u << 10;
	o.space.log_limit = 64u << 10;
	return o;
}

static void make_template(void)
{
	const char *root = fz_init_root("wal");
	fz_path(tpl, sizeof(tpl), root, "tpl");
	fz_path(work, sizeof(work), root, "work");
	struct flexdb_options o = db_opts();
	struct flexdb *db;
	MUST(flexdb_open(tpl, &o, &db) == 0);
	char k[32], v[64];
	for (int i = 0; i < 300; i++) {
		int kl = snprintf(k, sizeof(k), "key%04d", i * 3);
		int vl = snprintf(v, sizeof(v), "value-%d-%0*d", i, i % 40, 0);
		MUST(flexdb_put(db, k, (size_t)kl, v, (size_t)vl) == 0);
	}
	for (int i = 0; i < 300; i += 7) {
		int kl = snprintf(k, sizeof(k), "key%04d", i * 3);
		MUST(flexdb_delete(db, k, (size_t)kl) == 0);
	}
	MUST(flexdb_close(db) == 0);
	have_tpl = 1;
}

struct seen {
	uint8_t *key;
	size_t klen;
};

/* Walks the store forwards and backwards; returns the number of keys. */
static size_t probe(struct flexdb *db)
{
	MUST(flexdb_check(db) == 0);
	struct flexdb_stats st;
	MUST(flexdb_stats(db, &st) == 0);
	if (getenv("FLEX_FUZZ_DEBUG"))
		fprintf(stderr, "opened: %llu WAL operations replayed\n",
			(unsigned long long)st.recovered_ops);
	struct flexdb_iter *it;
	MUST(flexdb_iter_open(db, &it) == 0);
	static uint8_t prev[FLEXDB_MAX_KEY], vbuf[256];
	size_t plen = 0, n = 0;
	int rc = flexdb_iter_seek(it, NULL, 0);
	MUST(rc == 0 || rc == FLEX_ECORRUPT);
	while (rc == 0 && flexdb_iter_valid(it) && n < 20000) {
		size_t kl, vl;
		const void *k = flexdb_iter_key(it, &kl);
		const void *v = flexdb_iter_value(it, &vl);
		MUST(k && kl >= 1 && kl <= FLEXDB_MAX_KEY && vl <= FLEXDB_MAX_VALUE);
		MUST(vl == 0 || v);
		if (n)
			MUST(fz_keycmp(prev, plen, k, kl) < 0);
		memcpy(prev, k, kl);
		plen = kl;
		size_t gl = 0;
		int g = flexdb_get(db, k, kl, vbuf, sizeof(vbuf), &gl);
		MUST(g == 0 && gl == vl);
		MUST(memcmp(vbuf, v, vl < sizeof(vbuf) ? vl : sizeof(vbuf)) == 0);
		n++;
		rc = flexdb_iter_next(it);
	}
	size_t m = 0;
	rc = flexdb_iter_seek_for_prev(it, NULL, 0);
	MUST(rc == 0 || rc == FLEX_ECORRUPT);
	while (rc == 0 && flexdb_iter_valid(it) && m < 20000) {
		size_t kl;
		const void *k = flexdb_iter_key(it, &kl);
		if (m)
			MUST(fz_keycmp(k, kl, prev, plen) < 0);
		memcpy(prev, k, kl);
		plen = kl;
		m++;
		rc = flexdb_iter_prev(it);
	}
	MUST(m == n || n >= 20000);
	flexdb_iter_close(it);
	return n;
}

/* Builds the WAL files of a framed input. */
static void write_framed(struct fz_in *in, uint8_t flags)
{
	uint8_t *w[2] = {NULL, NULL};
	size_t wl[2];
	int format = flags & 32 ? 2 : 1;
	for (int i = 0; i < 2; i++) {
		w[i] = malloc(FZ_WAL2_RECORDS);
		MUST(w[i]);
		wl[i] = fz_wal_header(w[i], (uint64_t)i + 1, format);
	}
	int f = 0, used2 = 0;
	uint64_t seq = 0, last[2] = {0, 0};
	while (in->n >= 2) {
		size_t plen = fz_get16(in->p);
		in->p += 2;
		in->n -= 2;
		if (plen == 0xffff) {
			f = 1;
			used2 = 1;
			continue;
		}
		uint8_t step = 1;
		if (flags & 4)
			fz_u8(in, &step);
		seq += step;
		if (plen > in->n)
			plen = in->n;
		MUST(fz_wal_append(&w[f], &wl[f], seq, in->p, plen) == 0);
		last[f] = seq;
		in->p += plen;
		in->n -= plen;
	}
	for (int i = 0; i < 2 && format == 2 && (flags & 64); i++)
		if (last[i])
			fz_wal_mark(w[i], (uint64_t)i + 1, last[i]);
	char p[PATH_MAX];
	fz_path(p, sizeof(p), work, "WAL-0000000000000001");
	MUST(fz_write_file(p, w[0], wl[0]) == 0);
	if (used2) {
		fz_path(p, sizeof(p), work, "WAL-0000000000000002");
		MUST(fz_write_file(p, w[1], wl[1]) == 0);
	}
	free(w[0]);
	free(w[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!have_tpl)
		make_template();
	struct fz_in in = {data, size};
	uint8_t flags = 0;
	fz_u8(&in, &flags);
	fz_rmrf(work);
	MUST(fz_copy_tree(tpl, work) == 0);
	if (flags & 1) {
		uint8_t *w = malloc(in.n ? in.n : 1);
		MUST(w);
		memcpy(w, in.p, in.n);
		if (flags & 2)
			fz_wal_fixup(w, in.n);
		char p[PATH_MAX];
		fz_path(p, sizeof(p), work, "WAL-0000000000000001");
		MUST(fz_write_file(p, w, in.n) == 0);
		free(w);
	} else {
		write_framed(&in, flags);
	}

	struct flexdb_options o = db_opts();
	struct flexdb *db = NULL;
	int rc = flexdb_open(work, &o, &db);
	if (rc != 0) {
		MUST(db == NULL && rc < 0);
		return 0;
	}
	size_t n = probe(db);
	if (!(flags & 16)) {
		MUST(flexdb_close(db) == 0);
		return 0;
	}
	MUST(flexdb_put(db, "fuzz", 4, data, size < 100 ? size : 100) == 0);
	MUST(flexdb_delete(db, "key0003", 7) == 0);
	size_t n2 = probe(db);
	MUST(flexdb_close(db) == 0);
	db = NULL;
	MUST(flexdb_open(work, &o, &db) == 0);
	MUST(probe(db) == n2);
	(void)n;
	MUST(flexdb_close(db) == 0);
	return 0;
}
