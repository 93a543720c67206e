/*
 * fuzz_space_log.c - libFuzzer target: FlexSpace recovery from a hostile
 * LOG (docs/FORMAT.md "LOG" and "FlexSpace crash protocol").
 *
 * Once per process a small space (64 KiB segments) is made by
 * fz_space_scenario (fuzz_common.h): created, changed, closed, reopened,
 * changed and synced, and its files copied while open, as a crash would
 * leave them.  For each input, a copy of those TREE and DATA files gets a
 * LOG made from the input, and is opened (which replays the batches and
 * commits), checked and read.
 *
 * Input: byte 0 = flags, then the LOG bytes.
 *   flags & 1   keep the template's two header slots: the input is the
 *               log body from offset 8192 (else it is the whole file)
 *   flags & 2   repair the header slots' checksums
 *   flags & 4   repair batch checksums (nrec clipped to the file)
 *   flags & 8   also set batch magic, seq 1, 2, ... and base = header's
 *   flags & 16  after the checks: write, sync, close, reopen, check again
 * An open that succeeds must give a space that passes flexspace_check, and
 * reads must return what the extents say; errors are fine.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flexspace.h"
#include "fuzz_common.h"

/* Zeroes the seals in both LOG header slots (docs/FORMAT.md: 32 bytes at
 * 2048 of a slot), so that a log body other than the one sealed replays. */
static void fz_log_unseal(uint8_t *log, size_t len)
{
	for (size_t at = 2048; at < 2 * 4096; at += 4096)
		if (at + 32 <= len)
			memset(log + at, 0, 32);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MUST(cond)                                                                                 \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_space_log: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

static char tpl[PATH_MAX], work[PATH_MAX];
static uint8_t *tpl_log;
static uint64_t tpl_size; /* logical size of the template's committed tree */
static size_t tpl_log_len;

static void make_template(void)
{
	const char *root = fz_init_root("spacelog");
	char scratch[PATH_MAX];
	fz_path(scratch, sizeof(scratch), root, "scenario");
	fz_path(tpl, sizeof(tpl), root, "tpl");
	fz_path(work, sizeof(work), root, "work");
	MUST(fz_space_scenario(scratch, tpl) == 0);
	fz_rmrf(scratch);
	/* The snapshot's tree is the state before the batches: open a copy of
	 * it with an empty log body to learn its size. */
	char p0[PATH_MAX], q[PATH_MAX];
	fz_path(p0, sizeof(p0), root, "size");
	MUST(fz_copy_tree(tpl, p0) == 0);
	fz_path(q, sizeof(q), p0, "LOG");
	MUST(truncate(q, FZ_LOG_START) == 0);
	uint8_t *l0;
	size_t l0len;
	MUST(fz_read_file(q, &l0, &l0len) == 0);
	fz_log_unseal(l0, l0len);
	MUST(fz_write_file(q, l0, l0len) == 0);
	free(l0);
	struct flexspace_options o = fz_space_opts();
	struct flexspace *fs;
	MUST(flexspace_open(p0, &o, &fs) == 0);
	tpl_size = flexspace_size(fs);
	flexspace_close(fs);
	fz_rmrf(p0);
	char p[PATH_MAX];
	fz_path(p, sizeof(p), tpl, "LOG");
	MUST(fz_read_file(p, &tpl_log, &tpl_log_len) == 0 && tpl_log_len >= FZ_LOG_START);
	/* Inputs replace the batches: a seal promising the template's own
	 * would make nearly every one damage at open. */
	fz_log_unseal(tpl_log, tpl_log_len);
}

struct ext_walk {
	uint64_t next, n;
	int bad;
};

static int ext_cb(void *arg, const struct flextree_extent *e)
{
	struct ext_walk *w = arg;
	if (w->n && e->loff != w->next)
		w->bad = 1;
	if (e->len == 0)
		w->bad = 1;
	w->next = e->loff + e->len;
	return ++w->n >= 2048;
}

static void probe(struct flexspace *fs)
{
	MUST(flexspace_check(fs) == 0);
	struct flexspace_stats st;
	MUST(flexspace_stats(fs, &st) == 0);
	uint64_t size = flexspace_size(fs);
	MUST(st.size == size);
	MUST(size <= FLEXSPACE_MAX_SIZE); /* flexspace.h: the largest logical size */
	if (getenv("FLEX_FUZZ_DEBUG"))
		fprintf(stderr, "opened: size %llu, %llu log records replayed\n",
			(unsigned long long)size, (unsigned long long)st.recovered_records);
	struct ext_walk w = {0};
	int rc = flexspace_scan(fs, 0, size, ext_cb, &w);
	MUST(rc == 0 || rc == 1);
	MUST(!w.bad);
	static uint8_t buf[1 << 16];
	uint64_t at[] = {0, size / 3, size / 2, size > sizeof(buf) ? size - sizeof(buf) : 0};
	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
		ssize_t r = flexspace_read(fs, buf, at[i], sizeof(buf));
		MUST(r >= 0 || r == FLEX_ECORRUPT || r == -EIO);
		if (r >= 0)
			MUST((uint64_t)r ==
			     (at[i] >= size
				  ? 0
				  : (size - at[i] < sizeof(buf) ? size - at[i] : sizeof(buf))));
		uint64_t eo = 0, el = 0;
		r = flexspace_read_extent(fs, buf, at[i], 4096, &eo, &el);
		MUST(at[i] < size ? (r >= 0 || r == FLEX_ECORRUPT) : r == -ERANGE);
		uint16_t tag;
		rc = flexspace_tag_get(fs, at[i], &tag, &eo);
		MUST(at[i] < size ? rc == 0 : rc == -ERANGE);
	}
	MUST(flexspace_read(fs, buf, size, 10) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!tpl_log)
		make_template();
	struct fz_in in = {data, size};
	uint8_t flags = 0;
	fz_u8(&in, &flags);
	fz_rmrf(work);
	MUST(fz_copy_tree(tpl, work) == 0);

	size_t pre = (flags & 1) ? FZ_LOG_START : 0;
	size_t len = pre + in.n;
	uint8_t *log = malloc(len ? len : 1);
	MUST(log);
	memcpy(log, tpl_log, pre);
	memcpy(log + pre, in.p, in.n);
	fz_log_fixup(log, len,
		     ((flags & 2) ? FZ_LOG_FIX_HEADERS : 0) |
			 ((flags & 4) ? FZ_LOG_FIX_BATCHES : 0) |
			 ((flags & 8) ? FZ_LOG_FIX_SEQ : 0));
	if (fz_known_log_bug(log, len, FZ_SPACE_SEG / 32, tpl_size)) {
		free(log);
		return 0;
	}
	char p[PATH_MAX];
	fz_path(p, sizeof(p), work, "LOG");
	MUST(fz_write_file(p, log, len) == 0);
	free(log);

	struct flexspace_options o = fz_space_opts();
	o.no_create = 1;
	struct flexspace *fs = NULL;
	int rc = flexspace_open(work, &o, &fs);
	if (rc != 0) {
		MUST(fs == NULL);
		MUST(rc < 0);
		return 0;
	}
	probe(fs);
	if (!(flags & 16)) {
		flexspace_close(fs);
		return 0;
	}
	uint8_t buf[5000];
	memset(buf, 0xa5, sizeof(buf));
	uint64_t sz = flexspace_size(fs);
	ssize_t w = flexspace_write(fs, buf, sz / 2, sizeof(buf));
	MUST(w == (ssize_t)sizeof(buf) || w < 0);
	rc = flexspace_insert(fs, buf, sz / 3, 100);
	MUST(rc == 100 || rc < 0);
	rc = flexspace_sync(fs);
	probe(fs);
	uint64_t final_size = flexspace_size(fs);
	rc = flexspace_close(fs);
	if (rc != 0)
		return 0;
	fs = NULL;
	MUST(flexspace_open(work, &o, &fs) == 0);
	MUST(flexspace_size(fs) == final_size);
	probe(fs);
	flexspace_close(fs);
	return 0;
}
