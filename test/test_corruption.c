/*
 * test_corruption.c - a systematic corruption sweep over every file of a
 * FlexDB store and of a FlexSpace.
 *
 * Each sweep builds a small store with known contents and leaves it at
 * rest the way a crashed process leaves it: a FlexSpace LOG with batches,
 * and for FlexDB two WAL files (one complete immutable memtable's, one
 * active).  Then, for every file and every metadata kind -- FlexTree
 * header (both copies) and nodes, FlexSpace LOG header and batches, FlexDB
 * WAL header, sync mark and records, pairs in DATA -- a fresh copy gets
 * one piece of damage:
 *   flip   one bit (all bits of small regions, a sample of large ones)
 *   zero   one 4 KiB page set to zeros
 *   trunc  the file cut at one of several lengths
 *   stale  a region (a tree slot, a header, a LOG batch, a WAL record, a
 *          DATA page) or a whole file put back from an earlier state of
 *          the same store
 * and is opened.  The property: open fails with an error, or it succeeds
 * and every get, a forward and a backward scan return exactly the synced
 * contents or report an error -- never a wrong value, never a crash.  The
 * deep check (flexdb_check / flexspace_check) must report any damage that
 * a read saw, and `flexdb-cli DIR -c check` (`flexspace-cli`) must exit
 * non-zero exactly when the damage is visible to the library (it runs on
 * a sample of the cases, on its own copy).  Outcomes are counted by where
 * the damage was caught (open, read, check) or as harmless (every value
 * exact and the check clean: the region was not in use, e.g. the older
 * header copy or a free slot); the totals are printed.  A flip in a
 * region the synced state depends on must always be caught.
 *
 * Damage the design cannot see is listed in docs/DURABILITY.md; its cases
 * are counted as "blind spot" rather than failed: FlexSpace DATA bytes
 * (not checksummed by FlexSpace; FlexDB's pairs protect them), the newest
 * WAL cut back to its header (a crash just after it was created, as far
 * as anything can tell), and a FlexSpace's whole LOG replaced by an older
 * copy of itself (a crash before its later batches).
 *
 * Each hole the sweep found has its own test in test_flexdb_crash.c or
 * test_flexspace_crash.c.  The positions sampled come from a printed seed
 * (FLEX_TEST_SEED replays it); FLEX_TEST_SCALE multiplies the number of
 * sampled bits (up to 8 times); FLEX_CORRUPT_VERBOSE=1 prints every case
 * not caught.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "flexdb.h"
#include "lib/crashio.h"
#include "lib/flexdb_model.h"

TestSuite(corruption, .timeout = 600, .fini = fdb_tmp_cleanup);

/* ---- files --------------------------------------------------------------------- */

static uint64_t file_size(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 ? (uint64_t)st.st_size : 0;
}

static int file_exists(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0;
}

/* The whole file (malloc'd, NUL-terminated for convenience). */
static uint8_t *file_load(const char *p, size_t *n)
{
	int fd = open(p, O_RDONLY);
	cr_assert(fd >= 0, "open %s: %s", p, strerror(errno));
	struct stat st;
	cr_assert_eq(fstat(fd, &st), 0);
	uint8_t *b = malloc((size_t)st.st_size + 1);
	cr_assert(b);
	size_t done = 0;
	while (done < (size_t)st.st_size) {
		ssize_t k = pread(fd, b + done, (size_t)st.st_size - done, (off_t)done);
		cr_assert(k > 0, "read %s", p);
		done += (size_t)k;
	}
	close(fd);
	b[done] = 0;
	*n = done;
	return b;
}

static void file_store(const char *p, const void *b, size_t n)
{
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert(fd >= 0, "create %s: %s", p, strerror(errno));
	cr_assert_eq(write(fd, b, n), (ssize_t)n);
	close(fd);
}

static void file_pwrite(const char *p, uint64_t off, const void *b, size_t n)
{
	int fd = open(p, O_WRONLY);
	cr_assert(fd >= 0, "open %s: %s", p, strerror(errno));
	cr_assert_eq(pwrite(fd, b, n, (off_t)off), (ssize_t)n);
	close(fd);
}

static void file_pread(const char *p, uint64_t off, void *b, size_t n)
{
	int fd = open(p, O_RDONLY);
	cr_assert(fd >= 0, "open %s: %s", p, strerror(errno));
	cr_assert_eq(pread(fd, b, n, (off_t)off), (ssize_t)n, "read %zu bytes at %" PRIu64 " of %s",
		     n, off, p);
	close(fd);
}

/* Copies the regular files of src into dst (created), recursing into
 * directories; a file that goes away meanwhile (a WAL the committer has
 * just retired) is skipped.  Returns 0 or -errno.  No Criterion asserts:
 * the crashed sessions call it in a forked child, where a failed assert
 * would wait forever on the runner's socket. */
static int copy_dir(const char *src, const char *dst)
{
	if (mkdir(dst, 0755) && errno != EEXIST)
		return -errno;
	DIR *d = opendir(src);
	if (!d)
		return -errno;
	struct dirent *e;
	int rc = 0;
	uint8_t buf[65536];
	while (!rc && (e = readdir(d)) != NULL) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char s[PATH_MAX], t[PATH_MAX];
		snprintf(s, sizeof(s), "%s/%s", src, e->d_name);
		snprintf(t, sizeof(t), "%s/%s", dst, e->d_name);
		struct stat st;
		if (lstat(s, &st)) {
			rc = errno == ENOENT ? 0 : -errno;
			continue;
		}
		if (S_ISDIR(st.st_mode)) {
			rc = copy_dir(s, t);
			continue;
		}
		if (!S_ISREG(st.st_mode))
			continue;
		int in = open(s, O_RDONLY);
		if (in < 0) {
			rc = errno == ENOENT ? 0 : -errno;
			continue;
		}
		int out = open(t, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (out < 0)
			rc = -errno;
		while (!rc) {
			ssize_t k = read(in, buf, sizeof(buf));
			if (k <= 0) {
				rc = k < 0 ? -errno : 0;
				break;
			}
			if (write(out, buf, (size_t)k) != k)
				rc = -EIO;
		}
		close(in);
		if (out >= 0)
			close(out);
	}
	closedir(d);
	return rc;
}

static void fresh_copy(const char *src, const char *dst)
{
	tmp_remove(dst);
	cr_assert_eq(copy_dir(src, dst), 0, "copy %s to %s", src, dst);
}

static uint64_t le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* ---- damage -------------------------------------------------------------------- */

enum { D_FLIP, D_ZERO, D_TRUNC, D_STALE, D_NKIND };
static const char *const dkind_name[D_NKIND] = {"flip", "zero", "trunc", "stale"};

struct damage {
	int kind;
	const char *file;   /* relative to the store: "space/TREE", "WAL-..." */
	uint64_t off, len;  /* flip: bit number in off; zero, stale: byte range
			     * (stale with len 0: the whole file); trunc: new
			     * size in off */
	const char *stale;  /* stale: the directory holding the older copy */
	const char *from;   /* stale: its name there, when not `file` */
	const char *region; /* for the report */
	int live;	    /* the synced state depends on the region */
	int limit;	    /* a documented blind spot: a wrong result is
			     * counted apart, not failed */
	int must;	    /* must be caught (open, read or check) */
};

static void damage_apply(const char *dir, const struct damage *d)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", dir, d->file);
	switch (d->kind) {
	case D_FLIP: {
		uint8_t b;
		file_pread(p, d->off / 8, &b, 1);
		b ^= (uint8_t)(1u << (d->off % 8));
		file_pwrite(p, d->off / 8, &b, 1);
		break;
	}
	case D_ZERO: {
		uint64_t size = file_size(p);
		uint64_t n = d->off + d->len > size ? size - d->off : d->len;
		uint8_t *z = calloc(1, n + 1);
		file_pwrite(p, d->off, z, n);
		free(z);
		break;
	}
	case D_TRUNC:
		cr_assert_eq(truncate(p, (off_t)d->off), 0);
		break;
	case D_STALE: {
		char s[PATH_MAX];
		snprintf(s, sizeof(s), "%s/%s", d->stale, d->from ? d->from : d->file);
		size_t n;
		uint8_t *b = file_load(s, &n);
		if (d->len == 0) {
			file_store(p, b, n);
		} else {
			uint8_t *z = calloc(1, d->len);
			if (d->off < n)
				memcpy(z, b + d->off, n - d->off < d->len ? n - d->off : d->len);
			file_pwrite(p, d->off, z, d->len);
			free(z);
		}
		free(b);
		break;
	}
	}
}

/* Whether the stale region differs from the current one (an identical
 * region is no damage at all). */
static int stale_differs(const char *dir, const struct damage *d)
{
	char p[PATH_MAX], s[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", dir, d->file);
	snprintf(s, sizeof(s), "%s/%s", d->stale, d->from ? d->from : d->file);
	if (!file_exists(s))
		return 0;
	size_t n1, n2;
	uint8_t *a = file_load(p, &n1), *b = file_load(s, &n2);
	int diff;
	if (d->len == 0) {
		diff = n1 != n2 || memcmp(a, b, n1);
	} else {
		diff = 0;
		for (uint64_t i = d->off; i < d->off + d->len && !diff; i++)
			diff = (i < n1 ? a[i] : 0) != (i < n2 ? b[i] : 0);
	}
	free(a);
	free(b);
	return diff;
}

/* ---- outcomes ------------------------------------------------------------------- */

enum { O_OPEN, O_READ, O_CHECK, O_HARMLESS, O_WRONG, O_LIMIT, O_NOUT };
static const char *const out_name[O_NOUT] = {"open",	 "read",  "check",
					     "harmless", "WRONG", "blind spot"};

struct tally {
	const char *what;
	long n[D_NKIND][O_NOUT];
	long live_missed[D_NKIND]; /* live region, damage not seen, data exact */
	long read_not_checked;	   /* a read saw damage the check did not */
	long must_missed;	   /* damage marked `must` that was not caught */
	long cli_runs, cli_mismatch;
	int failures; /* messages printed */
	struct {
		const char *region;
		int kind;
		long n;
	} wrong[64]; /* wrong outcomes by region and kind */
	int nwrong;
};

static void tally_wrong(struct tally *t, const struct damage *d)
{
	int i;
	for (i = 0; i < t->nwrong; i++)
		if (t->wrong[i].kind == d->kind && !strcmp(t->wrong[i].region, d->region))
			break;
	if (i == t->nwrong) {
		if (i == 64)
			return;
		t->wrong[t->nwrong++].region = d->region;
		t->wrong[i].kind = d->kind;
	}
	t->wrong[i].n++;
}

static void tally_print(const struct tally *t)
{
	fprintf(stderr, "%s: damage tried, and where it was caught\n", t->what);
	long tot[O_NOUT] = {0};
	for (int k = 0; k < D_NKIND; k++) {
		long all = 0;
		for (int o = 0; o < O_NOUT; o++)
			all += t->n[k][o], tot[o] += t->n[k][o];
		fprintf(stderr,
			"  %-6s %6ld tried: open %ld, read %ld, check %ld, harmless %ld "
			"(live region: %ld), WRONG %ld, blind spot %ld\n",
			dkind_name[k], all, t->n[k][O_OPEN], t->n[k][O_READ], t->n[k][O_CHECK],
			t->n[k][O_HARMLESS], t->live_missed[k], t->n[k][O_WRONG], t->n[k][O_LIMIT]);
	}
	for (int i = 0; i < t->nwrong; i++)
		fprintf(stderr, "  WRONG after %s of %s: %ld\n", dkind_name[t->wrong[i].kind],
			t->wrong[i].region, t->wrong[i].n);
	fprintf(stderr,
		"  read errors the check missed: %ld; damage that must be caught but was not: "
		"%ld; cli check runs %ld, mismatches %ld\n",
		t->read_not_checked, t->must_missed, t->cli_runs, t->cli_mismatch);
}

/* ---- the command-line tools ------------------------------------------------------ */

/* `tool DIR -c check`: its exit status, or -1 when the tools are not
 * available (FLEX_BIN_DIR unset). */
static int cli_check(const char *tool, const char *dir)
{
	const char *bin = getenv("FLEX_BIN_DIR");
	if (!bin || !*bin)
		return -1;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", bin, tool);
	fflush(NULL);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		int nul = open("/dev/null", O_RDWR);
		dup2(nul, 0);
		dup2(nul, 1);
		dup2(nul, 2);
		alarm(60); /* kept across exec: a hung check dies of SIGALRM */
		execl(path, path, dir, "-c", "check", (char *)NULL);
		_exit(127);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(!WIFSIGNALED(status), "%s %s -c check: killed by signal %d", tool, dir,
		  WTERMSIG(status));
	cr_assert(WEXITSTATUS(status) != 127, "cannot run %s", path);
	return WEXITSTATUS(status);
}

/* ---- sampling ------------------------------------------------------------------- */

static uint64_t g_rnd;

/* Flips: every bit of [off, off+len) when it is at most `all` bytes,
 * else `sample` random bits of it (times FLEX_TEST_SCALE). */
static int add_flips(struct damage *d, int n, int cap, const char *file, uint64_t off, uint64_t len,
		     uint64_t all, long sample, const char *region, int live)
{
	if (!len)
		return n;
	if (len <= all) {
		for (uint64_t b = 0; b < len * 8 && n < cap; b++)
			d[n++] = (struct damage){.kind = D_FLIP,
						 .file = file,
						 .off = off * 8 + b,
						 .region = region,
						 .live = live};
		return n;
	}
	/* At most 8 times as many under `make stress`: the suite stays
	 * within its timeout. */
	double scale = test_scale() < 8 ? test_scale() : 8;
	long k = (long)((double)sample * scale + 0.5);
	for (long i = 0; i < k && n < cap; i++)
		d[n++] = (struct damage){.kind = D_FLIP,
					 .file = file,
					 .off = off * 8 + rnd_below(&g_rnd, len * 8),
					 .region = region,
					 .live = live};
	return n;
}

/* Zeroed pages: every 4 KiB page of the file. */
static int add_zero_pages(struct damage *d, int n, int cap, const char *dir, const char *file,
			  const char *region)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", dir, file);
	uint64_t size = file_size(p);
	for (uint64_t off = 0; off < size && n < cap; off += 4096)
		d[n++] = (struct damage){.kind = D_ZERO,
					 .file = file,
					 .off = off,
					 .len = 4096,
					 .region = region,
					 .live = 1};
	return n;
}

/* Truncations: empty, one byte, inside the first header, at and inside
 * every 4 KiB boundary of the first 16 KiB, half, and one byte short. */
static int add_truncations(struct damage *d, int n, int cap, const char *dir, const char *file,
			   const char *region)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", dir, file);
	uint64_t size = file_size(p);
	uint64_t at[] = {0,    1,    16,   31,	  32,	 100,	   4095,      4096,
			 4100, 8192, 8200, 12288, 16384, size / 2, size - 33, size - 1};
	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]) && n < cap; i++) {
		if (at[i] >= size || (i && at[i] == at[i - 1]))
			continue;
		d[n++] = (struct damage){
		    .kind = D_TRUNC, .file = file, .off = at[i], .region = region, .live = 1};
	}
	return n;
}

/* ---- reading the formats (docs/FORMAT.md) ----------------------------------------- */

#define SLOT 4096u

struct tree_slot {
	uint32_t slot;
	unsigned level;
	uint32_t used; /* bytes of the slot holding header and entries */
};

struct tree_info {
	int cur;	  /* header copy holding the newest version */
	uint64_t version; /* of that copy */
	uint32_t nslots;  /* slots in the file */
	struct tree_slot live[512];
	int nlive;
	uint32_t free_slots[512]; /* slots >= 2 the tree does not reach */
	int nfree;
};

static void tree_walk(const uint8_t *f, uint32_t slot, unsigned level, struct tree_info *ti)
{
	const uint8_t *n = f + (size_t)slot * SLOT;
	unsigned count = (unsigned)le(n + 4, 2);
	/* Leaves: "FTL2" (12-byte entries after the first offset) or "FTL1". */
	uint32_t used = level > 0			 ? 32 + count * 8 + (count + 1) * 20
			: memcmp(n, "FTL2", 4) == 0 ? 40 + count * 12
						 : 32 + count * 20;
	cr_assert(ti->nlive < 512);
	ti->live[ti->nlive++] = (struct tree_slot){slot, level, used};
	if (level == 0)
		return;
	const uint8_t *c = n + 32 + count * 8;
	for (unsigned j = 0; j <= count; j++, c += 20)
		tree_walk(f, (uint32_t)le(c + 8, 4), level - 1, ti);
}

static void tree_parse(const char *path, struct tree_info *ti)
{
	memset(ti, 0, sizeof(*ti));
	size_t n;
	uint8_t *f = file_load(path, &n);
	ti->nslots = (uint32_t)(n / SLOT);
	ti->cur = -1;
	for (int i = 0; i < 2; i++) {
		const uint8_t *h = f + (size_t)i * SLOT;
		if (memcmp(h, "FLEXTREE", 8))
			continue;
		if (ti->cur < 0 || le(h + 16, 8) > ti->version) {
			ti->cur = i;
			ti->version = le(h + 16, 8);
		}
	}
	cr_assert(ti->cur >= 0, "no tree header in %s", path);
	const uint8_t *h = f + (size_t)ti->cur * SLOT;
	tree_walk(f, (uint32_t)le(h + 24, 4), (unsigned)le(h + 28, 4) - 1, ti);
	for (uint32_t s = 2; s < ti->nslots && ti->nfree < 512; s++) {
		int used = 0;
		for (int i = 0; i < ti->nlive; i++)
			used |= ti->live[i].slot == s;
		if (!used)
			ti->free_slots[ti->nfree++] = s;
	}
	free(f);
}

struct log_info {
	int cur; /* header slot of the current base */
	uint64_t base;
	uint64_t boff[256]; /* batches that replay */
	uint64_t blen[256];
	int nb;
	uint64_t end; /* end of the last batch */
};

static void log_parse(const char *path, struct log_info *li)
{
	memset(li, 0, sizeof(*li));
	size_t n;
	uint8_t *f = file_load(path, &n);
	li->cur = -1;
	for (int i = 0; i < 2 && (size_t)(i + 1) * SLOT <= n; i++) {
		const uint8_t *h = f + (size_t)i * SLOT;
		if (memcmp(h, "FLEXLOG1", 8) || le(h + 24, 8) != XXH3_64bits(h, 24))
			continue;
		if (li->cur < 0 || le(h + 16, 8) > li->base) {
			li->cur = i;
			li->base = le(h + 16, 8);
		}
	}
	cr_assert(li->cur >= 0, "no log header in %s", path);
	uint64_t off = 2 * SLOT;
	while (off + 32 <= n && li->nb < 256) {
		const uint8_t *b = f + off;
		uint64_t len = 32 + 24 * le(b + 4, 4);
		if (le(b, 4) != 0x31424c46u || le(b + 16, 8) != li->base || le(b + 4, 4) == 0 ||
		    off + len > n)
			break;
		li->boff[li->nb] = off;
		li->blen[li->nb++] = len;
		off += len;
	}
	li->end = off;
	free(f);
}

struct wal_info {
	int format;
	uint64_t start;	     /* first record */
	uint64_t roff[4096]; /* records */
	uint32_t rlen[4096]; /* whole record: header and payload */
	int nr;
	uint64_t end;
};

static void wal_parse(const char *path, struct wal_info *wi)
{
	memset(wi, 0, sizeof(*wi));
	size_t n;
	uint8_t *f = file_load(path, &n);
	cr_assert(n >= 32 && !memcmp(f, "FLEXWAL1", 8), "bad WAL %s", path);
	wi->format = (int)le(f + 8, 4);
	wi->start = wi->format >= 2 ? 2 * SLOT : 32;
	uint64_t off = wi->start;
	while (off + 24 <= n && wi->nr < 4096) {
		uint32_t len = (uint32_t)le(f + off + 4, 4);
		if (le(f + off, 4) != 0x31525746u || off + 24 + len > n)
			break;
		wi->roff[wi->nr] = off;
		wi->rlen[wi->nr++] = 24 + len;
		off += 24 + len;
	}
	wi->end = off;
	free(f);
}

/* ======================================================================
 * FlexDB
 * ====================================================================== */

#define DB_KEYS 600u
#define DB_VMAX 256u

static int db_key(char *b, uint32_t i)
{
	return snprintf(b, 32, "key-%05u", i);
}

/* The value of key i at version ver: 8..DB_VMAX bytes. */
static uint32_t db_val(uint8_t *b, uint32_t i, uint32_t ver)
{
	uint64_t r = ((uint64_t)i << 32) ^ ver ^ 0x5eedf00dull;
	uint32_t n = 8 + (uint32_t)rnd_below(&r, DB_VMAX - 8);
	val_fill(rnd(&r), b, n);
	memcpy(b, &i, 4);
	memcpy(b + 4, &ver, 4);
	return n;
}

static struct flexdb_options db_opts(const struct flex_io *io)
{
	struct flexdb_options o = fdb_tiny_opts(); /* 64 KiB memtables and segments */
	o.space.log_limit = 1u << 20;		   /* the LOG keeps its batches */
	o.space.io = io;
	return o;
}

/* Operation i of the crashed session: one put or delete, or (one in ten)
 * a batch of three.  Returns how many of k/ver/del it filled. */
static int db_op(uint64_t seed, long i, uint32_t *k, uint32_t *ver, int *del)
{
	uint64_t r = seed ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull);
	rnd(&r);
	int n = i % 10 == 5 ? 3 : 1;
	for (int j = 0; j < n; j++) {
		k[j] = (uint32_t)rnd_below(&r, DB_KEYS);
		ver[j] = 1000 + (uint32_t)i * 4 + (uint32_t)j;
		del[j] = rnd_below(&r, 100) < 20;
	}
	/* Now and then a range delete of four keys from k[0] (del 2). */
	if (n == 1 && i % 25 == 12)
		del[0] = 2;
	return n;
}

static void model_op(struct fmodel *m, uint64_t seed, long i)
{
	uint32_t k[3], ver[3];
	int del[3];
	int n = db_op(seed, i, k, ver, del);
	if (del[0] == 2) {
		char kb[32], eb[32];
		int kl = db_key(kb, k[0]), el = db_key(eb, k[0] + 4);
		fm_del_range(m, kb, (uint32_t)kl, eb, (uint32_t)el);
		return;
	}
	for (int j = 0; j < n; j++) {
		char kb[32];
		uint8_t vb[DB_VMAX];
		int kl = db_key(kb, k[j]);
		if (del[j])
			fm_del(m, kb, (uint32_t)kl);
		else
			fm_put(m, kb, (uint32_t)kl, vb, db_val(vb, k[j], ver[j]));
	}
}

static int db_run_op(struct flexdb *db, struct flexdb_batch *b, uint64_t seed, long i)
{
	uint32_t k[3], ver[3];
	int del[3];
	int n = db_op(seed, i, k, ver, del);
	flexdb_batch_clear(b);
	if (del[0] == 2) {
		char kb[32], eb[32];
		int kl = db_key(kb, k[0]), el = db_key(eb, k[0] + 4);
		return flexdb_delete_range(db, kb, (size_t)kl, eb, (size_t)el);
	}
	int rc = 0;
	for (int j = 0; j < n && !rc; j++) {
		char kb[32];
		uint8_t vb[DB_VMAX];
		int kl = db_key(kb, k[j]);
		uint32_t vl = del[j] ? 0 : db_val(vb, k[j], ver[j]);
		if (n == 1)
			rc = del[j] ? flexdb_delete(db, kb, (size_t)kl)
				    : flexdb_put(db, kb, (size_t)kl, vb, vl);
		else
			rc = del[j] ? flexdb_batch_delete(b, kb, (size_t)kl)
				    : flexdb_batch_put(b, kb, (size_t)kl, vb, vl);
	}
	if (!rc && n > 1)
		rc = flexdb_write(db, b);
	return rc;
}

/* The first two sessions, closed cleanly: all keys, then overwrites and
 * deletes (snapshot s1 is taken between them). */
static void db_phase(struct flexdb *db, struct fmodel *m, int phase)
{
	char kb[32];
	uint8_t vb[DB_VMAX];
	for (uint32_t i = 0; i < DB_KEYS; i++) {
		int kl = db_key(kb, i);
		if (phase == 1 && i < 400) {
			uint32_t vl = db_val(vb, i, 1);
			cr_assert_eq(flexdb_put(db, kb, (size_t)kl, vb, vl), 0);
			fm_put(m, kb, (uint32_t)kl, vb, vl);
		} else if (phase == 2 && (i >= 400 || i % 3 == 0)) {
			uint32_t vl = db_val(vb, i, 2);
			cr_assert_eq(flexdb_put(db, kb, (size_t)kl, vb, vl), 0);
			fm_put(m, kb, (uint32_t)kl, vb, vl);
		} else if (phase == 2 && i % 7 == 1) {
			cr_assert_eq(flexdb_delete(db, kb, (size_t)kl), 0);
			fm_del(m, kb, (uint32_t)kl);
		}
	}
	if (phase == 2) {
		/* A range delete over several intervals, committed with the
		 * session. */
		char eb[32];
		int kl = db_key(kb, 300), el = db_key(eb, 340);
		cr_assert_eq(flexdb_delete_range(db, kb, (size_t)kl, eb, (size_t)el), 0);
		fm_del_range(m, kb, (uint32_t)kl, eb, (uint32_t)el);
	}
}

/* The crashed session's I/O: once `stall_space` is set, a sync of any
 * FlexSpace file blocks forever, so the committer hangs in the middle of a
 * memtable and its WAL stays behind. */
static volatile sig_atomic_t stall_space;
static uint8_t stall_fd[CIO_MAXFD];

static int st_open(const struct flex_io *io, const char *path, int flags, mode_t mode)
{
	(void)io;
	const struct flex_io *p = flex_io_posix();
	int fd = p->open(p, path, flags, mode);
	if (fd >= 0 && fd < CIO_MAXFD)
		stall_fd[fd] = strstr(path, "/space") != NULL;
	return fd;
}

static int st_sync(const struct flex_io *io, int fd)
{
	(void)io;
	while (stall_space && fd >= 0 && fd < CIO_MAXFD && stall_fd[fd])
		pause();
	const struct flex_io *p = flex_io_posix();
	return p->fdatasync(p, fd);
}

static int count_wals(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		n += !strncmp(e->d_name, "WAL-", 4);
	closedir(d);
	return n;
}

static uint64_t committer_runs(struct flexdb *db)
{
	struct flexdb_stats st;
	return flexdb_stats(db, &st) == 0 ? st.committer_runs : 0;
}

/* The crashed session (in a child): runs operations until the committer
 * has put two memtables into the FlexSpace (so LOG holds batches),
 * snapshots the store into `mid` once after the first, then stalls the
 * FlexSpace's syncs, goes on until a memtable is stuck with the committer
 * (two WAL files), writes 40 more operations, syncs, reports how many
 * operations it ran and kills itself. */
static void db_crashed_session(const char *rest, const char *mid, uint64_t seed, int fd)
{
	/* The stalled committer never returns: should this thread block
	 * behind it, the session dies of SIGALRM instead of outliving the
	 * test (and the parent's read on the pipe). */
	alarm(120);
	struct flex_io io = *flex_io_posix();
	io.open = st_open;
	io.fsync = st_sync;
	io.fdatasync = st_sync;
	struct flexdb_options o = db_opts(&io);
	struct flexdb *db;
	if (flexdb_open(rest, &o, &db))
		_exit(2);
	struct flexdb_batch *b = flexdb_batch_new();
	long i = 0, extra = -1;
	int state = 0;
	for (; i < 20000; i++) {
		if (db_run_op(db, b, seed, i))
			_exit(3);
		if (state == 0 && committer_runs(db) >= 1) {
			/* The committer is idle until this thread's next switch. */
			if (copy_dir(rest, mid))
				_exit(7);
			state = 1;
		} else if (state == 1 && committer_runs(db) >= 2) {
			stall_space = 1;
			state = 2;
		} else if (state == 2 && count_wals(rest) >= 2) {
			extra = 40;
			state = 3;
		}
		if (state == 3 && extra-- == 0)
			break;
	}
	if (state != 3 || flexdb_sync(db))
		_exit(4);
	long n = i + 1;
	if (write(fd, &n, sizeof(n)) != sizeof(n))
		_exit(5);
	kill(getpid(), SIGKILL);
	_exit(6);
}

struct dbfix {
	char root[300];
	char rest[320], s1[320], mid[320], work[320], cliw[320];
	struct fmodel m;
	char wal[2][64]; /* the two WAL files: older, newer */
	char midwal[2][64]; /* the WAL files in the snapshot `mid` */
	int nmidwal;
	uint64_t seed;
	long nops;
};

static void dbfix_build(struct dbfix *f, const char *name)
{
	memset(f, 0, sizeof(*f));
	f->seed = test_seed(name);
	g_rnd = f->seed;
	fdb_tmpdir(f->root, sizeof(f->root), "corrupt");
	snprintf(f->rest, sizeof(f->rest), "%s/rest", f->root);
	snprintf(f->s1, sizeof(f->s1), "%s/s1", f->root);
	snprintf(f->mid, sizeof(f->mid), "%s/mid", f->root);
	snprintf(f->work, sizeof(f->work), "%s/work", f->root);
	snprintf(f->cliw, sizeof(f->cliw), "%s/cli", f->root);
	struct flexdb_options o = db_opts(NULL);
	struct flexdb *db;
	cr_assert_eq(flexdb_open(f->rest, &o, &db), 0);
	db_phase(db, &f->m, 1);
	cr_assert_eq(flexdb_close(db), 0);
	cr_assert_eq(copy_dir(f->rest, f->s1), 0);
	cr_assert_eq(flexdb_open(f->rest, &o, &db), 0);
	db_phase(db, &f->m, 2);
	cr_assert_eq(flexdb_close(db), 0);

	int p[2];
	cr_assert_eq(pipe(p), 0);
	fflush(NULL);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		db_crashed_session(f->rest, f->mid, f->seed, p[1]);
	}
	close(p[1]);
	long n = 0;
	ssize_t got = read(p[0], &n, sizeof(n));
	close(p[0]);
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(got == sizeof(n) && WIFSIGNALED(status), "the crashed session failed (status %d)",
		  status);
	f->nops = n;
	for (long i = 0; i < n; i++)
		model_op(&f->m, f->seed, i);

	/* The WAL files left, in generation order. */
	DIR *d = opendir(f->rest);
	cr_assert(d);
	struct dirent *e;
	int nw = 0;
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, "WAL-", 4))
			continue;
		cr_assert(nw < 2, "more than two WAL files");
		cr_assert(strlen(e->d_name) < sizeof(f->wal[0]));
		strcpy(f->wal[nw++], e->d_name);
	}
	closedir(d);
	cr_assert_eq(nw, 2, "expected two WAL files, found %d", nw);
	if (strcmp(f->wal[0], f->wal[1]) > 0) {
		char t[64];
		memcpy(t, f->wal[0], 64);
		memcpy(f->wal[0], f->wal[1], 64);
		memcpy(f->wal[1], t, 64);
	}
	d = opendir(f->mid);
	cr_assert(d);
	while ((e = readdir(d)) != NULL)
		if (!strncmp(e->d_name, "WAL-", 4) && f->nmidwal < 2 &&
		    strlen(e->d_name) < sizeof(f->midwal[0]))
			strcpy(f->midwal[f->nmidwal++], e->d_name);
	closedir(d);
	fprintf(stderr, "%s: %ld operations in the crashed session, %zu pairs synced\n", name, n,
		f->m.n);
}

static void dbfix_free(struct dbfix *f)
{
	fm_free(&f->m);
	tmp_remove(f->root);
}

/* Opens the damaged store and reads everything.  Returns the outcome; a
 * wrong value or a check that missed a read error is described in why. */
static int db_verify(const char *dir, const void *arg, char *why, size_t cap, int *read_not_checked)
{
	const struct fmodel *m = arg;
	*read_not_checked = 0;
	struct flexdb_options o = db_opts(NULL);
	struct flexdb *db;
	int rc = flexdb_open(dir, &o, &db);
	if (rc) {
		if (rc > 0) {
			snprintf(why, cap, "open returned %d", rc);
			return O_WRONG;
		}
		return O_OPEN;
	}
	int read_err = 0, wrong = 0;
	uint8_t *buf = malloc(FLEXDB_MAX_VALUE);
	char kb[32];
	for (uint32_t i = 0; i < DB_KEYS && !wrong; i++) {
		int kl = db_key(kb, i);
		size_t vn = 0;
		rc = flexdb_get(db, kb, (size_t)kl, buf, FLEXDB_MAX_VALUE, &vn);
		const struct ment *e = fm_get(m, kb, (uint32_t)kl);
		if (rc < 0) {
			read_err = 1;
		} else if (rc == FLEXDB_NOTFOUND) {
			if (e)
				wrong = snprintf(why, cap, "get %s: not found", kb);
		} else if (rc != 0) {
			wrong = snprintf(why, cap, "get %s: status %d", kb, rc);
		} else if (!e) {
			wrong = snprintf(why, cap, "get %s: found a deleted key", kb);
		} else if (vn != e->vn || memcmp(buf, e->v, vn)) {
			wrong = snprintf(why, cap, "get %s: wrong value (%zu bytes, want %u)", kb,
					 vn, e->vn);
		}
	}
	/* Both directions through the iterator. */
	for (int rev = 0; rev < 2 && !wrong; rev++) {
		struct flexdb_iter *it;
		cr_assert_eq(flexdb_iter_open(db, &it), 0);
		rc = rev ? flexdb_iter_seek_for_prev(it, NULL, 0) : flexdb_iter_seek(it, NULL, 0);
		size_t pos = 0;
		while (!rc && flexdb_iter_valid(it) && !wrong) {
			size_t kn, vn;
			const uint8_t *k = flexdb_iter_key(it, &kn);
			const uint8_t *v = flexdb_iter_value(it, &vn);
			const struct ment *e =
			    pos < m->n ? &m->e[rev ? m->n - 1 - pos : pos] : NULL;
			if (!e || kn != e->kn || memcmp(k, e->k, kn))
				wrong = snprintf(why, cap, "%s scan: pair %zu has the wrong key",
						 rev ? "backward" : "forward", pos);
			else if (vn != e->vn || memcmp(v, e->v, vn))
				wrong = snprintf(why, cap, "%s scan: pair %zu has a wrong value",
						 rev ? "backward" : "forward", pos);
			pos++;
			rc = rev ? flexdb_iter_prev(it) : flexdb_iter_next(it);
		}
		if (rc < 0)
			read_err = 1;
		else if (!wrong && pos != m->n)
			wrong = snprintf(why, cap, "%s scan: %zu pairs, want %zu",
					 rev ? "backward" : "forward", pos, m->n);
		flexdb_iter_close(it);
	}
	/* Seeks with a few steps, both ways, some within bounds: where a
	 * scan starts and where it stops are decided on keys it reads. */
	for (uint32_t i = 0; i < DB_KEYS + 8 && !wrong; i += 7) {
		int rev = (i / 7) % 2, bounded = (i / 7) % 3 == 0;
		int steps = 1 + (int)(i % 5);
		char lb[32], ub[32];
		int kl = db_key(kb, i);
		int ll = db_key(lb, i >= 4 ? i - 4 : 0), ul = db_key(ub, i + 4);
		struct flexdb_iter *it;
		cr_assert_eq(flexdb_iter_open(db, &it), 0);
		if (bounded)
			cr_assert_eq(flexdb_iter_set_bounds(it, rev ? lb : NULL, rev ? (size_t)ll : 0,
							    rev ? NULL : ub, rev ? 0 : (size_t)ul),
				     0);
		/* The model's position: the first key >= kb, or with rev the
		 * last key <= kb. */
		size_t at = fm_lower(m, kb, (uint32_t)kl);
		int64_t want = (int64_t)at;
		if (rev && !(at < m->n && m->e[at].kn == (uint32_t)kl && !memcmp(m->e[at].k, kb, (size_t)kl)))
			want--;
		rc = rev ? flexdb_iter_seek_for_prev(it, kb, (size_t)kl)
			 : flexdb_iter_seek(it, kb, (size_t)kl);
		for (int st = 0; st < steps && !rc && !wrong; st++) {
			const struct ment *e = want >= 0 && want < (int64_t)m->n ? &m->e[want] : NULL;
			if (e && bounded) {
				const char *b = rev ? lb : ub;
				uint32_t bl = (uint32_t)(rev ? ll : ul);
				int c = memcmp(e->k, b, e->kn < bl ? e->kn : bl);
				c = c ? c : (e->kn > bl) - (e->kn < bl);
				int out = rev ? c < 0 : c >= 0;
				e = out ? NULL : e;
			}
			if (!flexdb_iter_valid(it)) {
				if (e)
					wrong = snprintf(why, cap, "seek %s: ended early at step %d", kb,
							 st);
				break;
			}
			size_t kn, vn;
			const uint8_t *k = flexdb_iter_key(it, &kn);
			const uint8_t *v = flexdb_iter_value(it, &vn);
			if (!e || kn != e->kn || memcmp(k, e->k, kn) || vn != e->vn ||
			    memcmp(v, e->v, vn))
				wrong = snprintf(why, cap, "seek %s%s: step %d has the wrong pair", kb,
						 rev ? " backwards" : "", st);
			want += rev ? -1 : 1;
			rc = rev ? flexdb_iter_prev(it) : flexdb_iter_next(it);
		}
		if (rc < 0)
			read_err = 1;
		flexdb_iter_close(it);
	}
	free(buf);
	int crc = wrong ? 0 : flexdb_check(db);
	flexdb_close(db);
	if (wrong)
		return O_WRONG;
	if (read_err && crc == 0)
		*read_not_checked = 1;
	return read_err ? O_READ : crc ? O_CHECK : O_HARMLESS;
}

/* ---- the FlexDB sweep ------------------------------------------------------------- */

#define MAXD 40000

static char g_names[64][PATH_MAX]; /* file names that damages point at */
static int g_nnames;

static const char *keep_name(const char *s)
{
	cr_assert(g_nnames < 64 && strlen(s) < PATH_MAX);
	strcpy(g_names[g_nnames], s);
	return g_names[g_nnames++];
}

/* Flips in TREE and LOG of the space in directory `space` (names
 * relative to the store: prefix "space/" for FlexDB, "" for a FlexSpace).
 * Every bit of the regions everything hangs on (the newest tree header's
 * fields and checksum, the root, the current log header, the first and
 * last log batch headers); a sample elsewhere. */
static int space_flips(struct damage *d, int n, int cap, const char *space, const char *tree,
		       const char *logf, struct tree_info *ti, struct log_info *li)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/TREE", space);
	tree_parse(p, ti);
	for (int h = 0; h < 2; h++) {
		int live = h == ti->cur;
		const char *r = live ? "tree header (newest)" : "tree header (older)";
		uint64_t base = (uint64_t)h * SLOT;
		n = add_flips(d, n, cap, tree, base, 80, live ? 80 : 0, 32, r, live);
		n = add_flips(d, n, cap, tree, base + SLOT - 8, 8, live ? 8 : 0, 8, r, live);
		n = add_flips(d, n, cap, tree, base + 80, SLOT - 88, 0, 8, r, live);
	}
	for (int i = 0; i < ti->nlive && i < 24; i++) {
		uint64_t base = (uint64_t)ti->live[i].slot * SLOT;
		const char *r = ti->live[i].level ? "tree internal node" : "tree leaf";
		uint32_t used = ti->live[i].used;
		n = add_flips(d, n, cap, tree, base, 32, i ? 0 : 32, 16, r, 1);
		n = add_flips(d, n, cap, tree, base + 32, used - 32, 0, 16, r, 1);
		n = add_flips(d, n, cap, tree, base + used, SLOT - used, 0, 2, r, 1);
	}
	for (int i = 0; i < ti->nfree && i < 8; i++)
		n = add_flips(d, n, cap, tree, (uint64_t)ti->free_slots[i] * SLOT, SLOT, 0, 4,
			      "tree free slot", 0);
	snprintf(p, sizeof(p), "%s/LOG", space);
	log_parse(p, li);
	cr_assert(li->nb >= 2, "the LOG holds %d batches", li->nb);
	for (int h = 0; h < 2; h++)
		n = add_flips(d, n, cap, logf, (uint64_t)h * SLOT, 32, h == li->cur ? 32 : 0, 16,
			      h == li->cur ? "log header (current)" : "log header (older)",
			      h == li->cur);
	n = add_flips(d, n, cap, logf, (uint64_t)(1 - li->cur) * SLOT + 2048, 32, 0, 24, "log seal",
		      0);
	for (int i = 0; i < li->nb; i++) {
		int edge = i == 0 || i == li->nb - 1;
		n = add_flips(d, n, cap, logf, li->boff[i], 32, edge ? 32 : 0, 24,
			      "log batch header", 1);
		n = add_flips(d, n, cap, logf, li->boff[i] + 32, li->blen[i] - 32, 0, 32,
			      "log batch records", 1);
	}
	return n;
}

/* Stale regions of TREE and LOG from the store in `old`. */
static int space_stale(struct damage *d, int n, int cap, const char *old, const char *tree,
		       const char *logf, const struct tree_info *ti, const struct log_info *li)
{
	for (uint32_t sl = 0; sl < ti->nslots && n < cap; sl++)
		d[n++] = (struct damage){.kind = D_STALE,
					 .file = tree,
					 .off = (uint64_t)sl * SLOT,
					 .len = SLOT,
					 .stale = old,
					 .region = sl < 2 ? "tree header slot" : "tree node slot",
					 .live = 1};
	for (int h = 0; h < 2 && n < cap; h++)
		d[n++] = (struct damage){.kind = D_STALE,
					 .file = logf,
					 .off = (uint64_t)h * SLOT,
					 .len = SLOT,
					 .stale = old,
					 .region = "log header slot",
					 .live = 1};
	for (int i = 0; i < li->nb && n < cap; i++)
		d[n++] = (struct damage){.kind = D_STALE,
					 .file = logf,
					 .off = li->boff[i],
					 .len = li->blen[i],
					 .stale = old,
					 .region = "log batch",
					 .live = 1};
	return n;
}

/* Every damage of the FlexDB store at f->rest. */
static int db_damages(struct dbfix *f, struct damage *d, int cap)
{
	char p[PATH_MAX];
	const char *tree = "space/TREE", *logf = "space/LOG";
	struct tree_info ti;
	struct log_info li;
	snprintf(p, sizeof(p), "%s/space", f->rest);
	int n = space_flips(d, 0, cap, p, tree, logf, &ti, &li);
	/* WALs */
	for (int w = 0; w < 2; w++) {
		const char *wf = keep_name(f->wal[w]);
		struct wal_info wi;
		snprintf(p, sizeof(p), "%s/%s", f->rest, wf);
		wal_parse(p, &wi);
		cr_assert(wi.nr >= 2, "%s holds %d records", wf, wi.nr);
		n = add_flips(d, n, cap, wf, 0, 64, w ? 64 : 0, 48, "WAL header", 1);
		n = add_flips(d, n, cap, wf, 4096, 32, 0, 16, "WAL sync mark", 0);
		/* Stale WAL records: the same bytes of a WAL of the earlier
		 * state `mid` (an older generation), over the first, a middle
		 * and the last record, and that whole file in place of this. */
		for (int m = 0; m < f->nmidwal && n + 4 < cap; m++) {
			int at[3] = {0, wi.nr / 2, wi.nr - 1};
			for (int j = 0; j < 3; j++)
				d[n++] = (struct damage){.kind = D_STALE,
							 .file = wf,
							 .off = wi.roff[at[j]],
							 .len = wi.rlen[at[j]],
							 .stale = f->mid,
							 .from = f->midwal[m],
							 .region = "WAL record",
							 .live = 1,
							 .must = 1};
			d[n++] = (struct damage){.kind = D_STALE,
						 .file = wf,
						 .stale = f->mid,
						 .from = f->midwal[m],
						 .region = "whole WAL (an older one)",
						 .live = 1,
						 .must = 1};
		}
		for (int i = 0; i < wi.nr; i++) {
			int edge = i == 0 || i == wi.nr - 1;
			if (!edge && rnd_below(&g_rnd, wi.nr) >= 6)
				continue;
			n = add_flips(d, n, cap, wf, wi.roff[i], 24, edge && w ? 24 : 0, 16,
				      "WAL record header", 1);
			n = add_flips(d, n, cap, wf, wi.roff[i] + 24, wi.rlen[i] - 24, 0, 16,
				      "WAL record payload", 1);
		}
	}
	/* Pairs in DATA: some synced pairs wherever they are (live or dead
	 * copies), and random bits. */
	const char *data = "space/DATA";
	snprintf(p, sizeof(p), "%s/space/DATA", f->rest);
	size_t dn;
	uint8_t *db = file_load(p, &dn);
	for (int s = 0; s < 12; s++) {
		const struct ment *e = &f->m.e[rnd_below(&g_rnd, f->m.n)];
		uint8_t rec[16 + 32 + DB_VMAX + 4];
		size_t rl = 0;
		rec[rl++] = (uint8_t)e->kn;
		if (e->vn >= 128) {
			rec[rl++] = (uint8_t)(e->vn | 0x80);
			rec[rl++] = (uint8_t)(e->vn >> 7);
		} else {
			rec[rl++] = (uint8_t)e->vn;
		}
		memcpy(rec + rl, e->k, e->kn);
		rl += e->kn;
		memcpy(rec + rl, e->v, e->vn);
		rl += e->vn;
		for (size_t at = 0; at + rl <= dn; at++) {
			if (db[at] != rec[0] || memcmp(db + at, rec, rl))
				continue;
			n = add_flips(d, n, cap, data, at, rl + 4, 0, 24, "pair", 0);
			n = add_flips(d, n, cap, data, at, 3, 3, 0, "pair header", 0);
		}
	}
	free(db);
	n = add_flips(d, n, cap, data, 0, dn, 0, 96, "DATA", 0);

	/* Zeroed pages, truncations. */
	const char *files[] = {tree, logf, f->wal[0], f->wal[1], data};
	for (size_t i = 0; i < 5; i++) {
		n = add_zero_pages(d, n, cap, f->rest, files[i], files[i]);
		int from = n;
		n = add_truncations(d, n, cap, f->rest, files[i], files[i]);
		/* The newest WAL cut back to its header (64 bytes) is a crash
		 * just after it was created, as far as anything can tell. */
		for (int j = from; i == 3 && j < n; j++)
			if (d[j].off < 64) {
				d[j].limit = 1;
				d[j].region = "newest WAL cut to its header";
			}
	}

	/* Stale: whole files and regions from the two earlier states. */
	const char *olds[] = {f->s1, f->mid};
	for (int s = 0; s < 2; s++) {
		/* An older LOG (or TREE) is caught through the durable point
		 * in the WAL headers (or the tree version). */
		for (size_t i = 0; i < 5; i++)
			if (cap > n)
				d[n++] = (struct damage){.kind = D_STALE,
							 .file = files[i],
							 .off = 0,
							 .stale = olds[s],
							 .region = "whole file",
							 .live = 1,
							 .must = i < 2};
		n = space_stale(d, n, cap, olds[s], tree, logf, &ti, &li);
		for (uint64_t off = 0; off < dn && n < cap; off += SLOT)
			d[n++] = (struct damage){.kind = D_STALE,
						 .file = data,
						 .off = off,
						 .len = SLOT,
						 .stale = olds[s],
						 .region = "DATA page",
						 .live = 0};
	}
	return n;
}

static void describe(const struct damage *d, char *out, size_t cap)
{
	switch (d->kind) {
	case D_FLIP:
		snprintf(out, cap, "flip bit %" PRIu64 " of byte %" PRIu64 " of %s (%s)",
			 d->off % 8, d->off / 8, d->file, d->region);
		break;
	case D_ZERO:
		snprintf(out, cap, "zero bytes %" PRIu64 "+4096 of %s", d->off, d->file);
		break;
	case D_TRUNC:
		snprintf(out, cap, "truncate %s to %" PRIu64 " bytes", d->file, d->off);
		break;
	default:
		snprintf(out, cap, "stale %s of %s from %s/%s (bytes %" PRIu64 "+%" PRIu64 ")",
			 d->region, d->file, strrchr(d->stale, '/') + 1,
			 d->from ? d->from : d->file, d->off, d->len);
	}
}

/* Runs every damage against fresh copies of `rest`; verify() gives the
 * outcome.  The CLI tool runs on its own copy for every truncation and
 * stale region, one zeroed page in 4 and one flip in 64.  With
 * FLEX_CORRUPT_VERBOSE set, every case not caught is printed. */
static void sweep(const char *rest, const char *work, const char *cliw, struct damage *d, int n,
		  int (*verify)(const char *dir, const void *arg, char *why, size_t cap, int *rnc),
		  const void *arg, const char *tool, struct tally *t)
{
	const char *verbose = getenv("FLEX_CORRUPT_VERBOSE");
	long sampled[D_NKIND] = {0};
	for (int i = 0; i < n; i++) {
		if (d[i].kind == D_STALE && !stale_differs(rest, &d[i]))
			continue; /* the earlier state had the same bytes there */
		fresh_copy(rest, work);
		damage_apply(work, &d[i]);
		char why[256] = "", what[512];
		int rnc = 0;
		int o = verify(work, arg, why, sizeof(why), &rnc);
		if (o == O_WRONG && d[i].limit)
			o = O_LIMIT;
		t->n[d[i].kind][o]++;
		t->live_missed[d[i].kind] += o == O_HARMLESS && d[i].live;
		t->read_not_checked += rnc;
		if (o == O_WRONG)
			tally_wrong(t, &d[i]);
		/* A flip in a region the synced state depends on is always
		 * caught: everything there is checksummed. */
		int missed = (d[i].must || (d[i].kind == D_FLIP && d[i].live)) && o >= O_HARMLESS;
		t->must_missed += missed;
		if (o == O_WRONG || rnc || missed || (verbose && o >= O_HARMLESS)) {
			describe(&d[i], what, sizeof(what));
			if (verbose || t->failures++ < 40)
				fprintf(stderr, "  %s: %s: %s\n", t->what, what,
					o == O_WRONG ? why
					: rnc	     ? "a read failed but the check passed"
						     : out_name[o]);
		}
		int every = d[i].kind == D_FLIP ? 64 : d[i].kind == D_ZERO ? 4 : 1;
		if (o == O_WRONG || o == O_LIMIT || sampled[d[i].kind]++ % every)
			continue;
		fresh_copy(rest, cliw);
		damage_apply(cliw, &d[i]);
		int code = cli_check(tool, cliw);
		if (code < 0)
			continue;
		t->cli_runs++;
		if ((code != 0) != (o != O_HARMLESS)) {
			t->cli_mismatch++;
			describe(&d[i], what, sizeof(what));
			if (t->failures++ < 40)
				fprintf(stderr,
					"  %s: %s: %s check exits %d, the library says %s\n",
					t->what, what, tool, code, out_name[o]);
		}
	}
}

Test(corruption, flexdb_store_every_file_and_metadata_kind)
{
	struct dbfix *f = calloc(1, sizeof(*f));
	dbfix_build(f, "corruption flexdb");
	struct damage *d = calloc(MAXD, sizeof(*d));
	int n = db_damages(f, d, MAXD);
	struct tally t = {.what = "flexdb sweep"};
	double t0 = now_sec();
	sweep(f->rest, f->work, f->cliw, d, n, db_verify, &f->m, "flexdb-cli", &t);
	tally_print(&t);
	fprintf(stderr, "  %.1f s\n", now_sec() - t0);
	long wrong = 0;
	for (int k = 0; k < D_NKIND; k++)
		wrong += t.n[k][O_WRONG];
	cr_expect_eq(wrong, 0, "%ld damaged stores returned wrong data", wrong);
	cr_expect_eq(t.read_not_checked, 0, "the deep check missed damage that reads saw");
	cr_expect_eq(t.must_missed, 0, "damage that must be caught was not");
	cr_expect_eq(t.cli_mismatch, 0, "flexdb-cli check disagreed with the library");
	free(d);
	dbfix_free(f);
	free(f);
}

/* ======================================================================
 * FlexSpace
 * ====================================================================== */

static const struct gen_cfg fs_gen = {.target_size = 256u << 10,
				      .big_len = 64u << 10,
				      .insert_pct = 25,
				      .collapse_pct = 12,
				      .truncate_pct = 2,
				      .defrag_pct = 4,
				      .apply_pct = 6,
				      .sync_pct = 10};

static struct flexspace_options fs_opts(void)
{
	struct flexspace_options o = tiny_options(); /* 64 KiB segments: GC runs */
	o.log_limit = 1u << 20;			     /* the LOG keeps its batches */
	return o;
}

/* Runs ops [0, n) of the stream seeded with seed on the space (size from
 * the space itself, as the model does); snapshots the directory into
 * `mid` at the first sync from op n/3 on, when mid is not NULL. */
static void fs_run(struct flexspace *fs, const char *dir, const char *mid, uint64_t seed, long n)
{
	uint64_t r = seed;
	uint8_t *buf = malloc(fs_gen.big_len + 65536);
	int snap = mid == NULL;
	for (long i = 0; i < n; i++) {
		struct op op;
		gen_op(&r, flexspace_size(fs), &fs_gen, &op);
		if (space_apply(fs, &op, buf))
			_exit(3);
		if (op.type == OP_SYNC && !snap && i >= n / 3) {
			if (copy_dir(dir, mid))
				_exit(7);
			snap = 1;
		}
	}
	free(buf);
}

static void fs_model(struct model *m, uint64_t seed, long n)
{
	uint64_t r = seed;
	uint8_t *buf = malloc(fs_gen.big_len + 65536);
	for (long i = 0; i < n; i++) {
		struct op op;
		gen_op(&r, m->size, &fs_gen, &op);
		model_apply(m, &op, buf);
	}
	free(buf);
}

static int fs_verify(const char *dir, const void *arg, char *why, size_t cap, int *rnc)
{
	const struct model *m = arg;
	*rnc = 0;
	struct flexspace_options o = fs_opts();
	struct flexspace *fs;
	int rc = flexspace_open(dir, &o, &fs);
	if (rc) {
		if (rc > 0) {
			snprintf(why, cap, "open returned %d", rc);
			return O_WRONG;
		}
		return O_OPEN;
	}
	uint8_t *b = NULL;
	uint64_t sz = 0;
	int read_err = space_read_all(fs, &b, &sz) < 0, wrong = 0;
	if (!read_err && sz != m->size)
		wrong = snprintf(why, cap, "size %" PRIu64 ", want %" PRIu64, sz, m->size);
	for (uint64_t i = 0; !read_err && !wrong && i < sz; i++)
		if (b[i] != m->b[i])
			wrong = snprintf(why, cap, "byte %" PRIu64 " differs", i);
	free(b);
	int crc = wrong ? 0 : flexspace_check(fs);
	flexspace_close(fs);
	if (wrong)
		return O_WRONG;
	if (read_err && crc == 0)
		*rnc = 1;
	return read_err ? O_READ : crc ? O_CHECK : O_HARMLESS;
}

Test(corruption, flexspace_every_file_and_metadata_kind)
{
	uint64_t seed = test_seed("corruption flexspace");
	g_rnd = seed ^ 0xf1f1;
	char root[300], rest[PATH_MAX], s1[PATH_MAX], mid[PATH_MAX], work[PATH_MAX], cliw[PATH_MAX];
	fdb_tmpdir(root, sizeof(root), "corrupt_fs");
	snprintf(rest, sizeof(rest), "%s/rest", root);
	snprintf(s1, sizeof(s1), "%s/s1", root);
	snprintf(mid, sizeof(mid), "%s/mid", root);
	snprintf(work, sizeof(work), "%s/work", root);
	snprintf(cliw, sizeof(cliw), "%s/cli", root);
	struct flexspace_options o = fs_opts();
	struct flexspace *fs;
	cr_assert_eq(flexspace_open(rest, &o, &fs), 0);
	fs_run(fs, rest, NULL, seed, 80);
	cr_assert_eq(flexspace_close(fs), 0);
	cr_assert_eq(copy_dir(rest, s1), 0);
	/* The crashed session: synced changes in LOG batches, no close. */
	fflush(NULL);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		if (flexspace_open(rest, &o, &fs))
			_exit(2);
		fs_run(fs, rest, mid, seed ^ 0x2222, 90);
		if (flexspace_sync(fs))
			_exit(4);
		_exit(0);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the crashed session failed");
	struct model m = {0};
	fs_model(&m, seed, 80);
	fs_model(&m, seed ^ 0x2222, 90);

	struct damage *d = calloc(MAXD, sizeof(*d));
	struct tree_info ti;
	struct log_info li;
	int n = space_flips(d, 0, MAXD, rest, "TREE", "LOG", &ti, &li);
	const char *files[] = {"TREE", "LOG", "DATA"};
	for (int i = 0; i < 3; i++) {
		if (i < 2)
			n = add_zero_pages(d, n, MAXD, rest, files[i], files[i]);
		n = add_truncations(d, n, MAXD, rest, files[i], files[i]);
	}
	const char *olds[] = {s1, mid};
	for (int s = 0; s < 2; s++) {
		/* Blind spots: DATA bytes are not checksummed, and an older copy
		 * of the whole LOG is the state of a crash before its later
		 * batches (FlexDB sees it through its WAL headers). */
		for (int i = 0; i < 3; i++)
			d[n++] = (struct damage){.kind = D_STALE,
						 .file = files[i],
						 .off = 0,
						 .stale = olds[s],
						 .region = i ? "whole file (an older copy)"
							     : "whole file",
						 .live = 1,
						 .limit = i > 0};
		n = space_stale(d, n, MAXD, olds[s], "TREE", "LOG", &ti, &li);
	}
	struct tally t = {.what = "flexspace sweep"};
	double t0 = now_sec();
	sweep(rest, work, cliw, d, n, fs_verify, &m, "flexspace-cli", &t);
	tally_print(&t);
	fprintf(stderr, "  %.1f s\n", now_sec() - t0);
	long wrong = 0;
	for (int k = 0; k < D_NKIND; k++)
		wrong += t.n[k][O_WRONG];
	cr_expect_eq(wrong, 0, "%ld damaged spaces returned wrong data", wrong);
	cr_expect_eq(t.read_not_checked, 0, "the deep check missed damage that reads saw");
	cr_expect_eq(t.must_missed, 0, "damage that must be caught was not");
	cr_expect_eq(t.cli_mismatch, 0, "flexspace-cli check disagreed with the library");
	free(d);
	model_free(&m);
	tmp_remove(root);
}
