/*
 * fuzz_common.c - the scratch directory, file helpers and checksum
 * fix-ups the fuzz targets share (fuzz_common.h).
 */
#include "fuzz_common.h"

static char fz_root[256];

static int fz_rm_cb(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	remove(path);
	return 0;
}

void fz_rmrf(const char *path)
{
	nftw(path, fz_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void fz_cleanup(void)
{
	if (fz_root[0])
		fz_rmrf(fz_root);
	fz_root[0] = '\0';
}

/* Directories of earlier runs that crashed (their process is gone). */
static void fz_remove_stale(const char *base)
{
	DIR *d = opendir(base);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		long pid;
		char tag[64];
		if (sscanf(e->d_name, "flexfuzz.%ld.%63s", &pid, tag) != 2 || pid <= 0)
			continue;
		if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		char p[512];
		snprintf(p, sizeof(p), "%s/%s", base, e->d_name);
		fz_rmrf(p);
	}
	closedir(d);
}

const char *fz_init_root(const char *tag)
{
	if (fz_root[0])
		return fz_root;
	const char *base = getenv("FLEX_FUZZ_DIR");
	struct stat st;
	if (!base || !*base)
		base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
	fz_remove_stale(base);
	snprintf(fz_root, sizeof(fz_root), "%s/flexfuzz.%ld.%s", base, (long)getpid(), tag);
	fz_rmrf(fz_root);
	if (mkdir(fz_root, 0700) != 0) {
		perror(fz_root);
		abort();
	}
	atexit(fz_cleanup);
	return fz_root;
}

void fz_path(char *out, size_t n, const char *a, const char *b)
{
	snprintf(out, n, "%s/%s", a, b);
}

int fz_write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	const uint8_t *p = buf;
	while (len) {
		ssize_t w = write(fd, p, len);
		if (w <= 0) {
			int e = errno;
			close(fd);
			return -e;
		}
		p += w;
		len -= (size_t)w;
	}
	close(fd);
	return 0;
}

int fz_read_file(const char *path, uint8_t **buf, size_t *len)
{
	*buf = NULL;
	*len = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) != 0) {
		close(fd);
		return -errno;
	}
	size_t n = (size_t)st.st_size;
	uint8_t *b = malloc(n ? n : 1);
	size_t got = 0;
	while (b && got < n) {
		ssize_t r = read(fd, b + got, n - got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	if (!b)
		return -ENOMEM;
	*buf = b;
	*len = got;
	return 0;
}

static int fz_copy_file(const char *from, const char *to)
{
	uint8_t *b;
	size_t n;
	int rc = fz_read_file(from, &b, &n);
	if (rc)
		return rc;
	rc = fz_write_file(to, b, n);
	free(b);
	return rc;
}

int fz_copy_tree(const char *from, const char *to)
{
	if (mkdir(to, 0755) != 0 && errno != EEXIST)
		return -errno;
	DIR *d = opendir(from);
	if (!d)
		return -errno;
	struct dirent *e;
	int rc = 0;
	while (!rc && (e = readdir(d)) != NULL) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char a[PATH_MAX], b[PATH_MAX];
		fz_path(a, sizeof(a), from, e->d_name);
		fz_path(b, sizeof(b), to, e->d_name);
		struct stat st;
		if (lstat(a, &st) != 0)
			rc = -errno;
		else if (S_ISDIR(st.st_mode))
			rc = fz_copy_tree(a, b);
		else if (S_ISREG(st.st_mode))
			rc = fz_copy_file(a, b);
	}
	closedir(d);
	return rc;
}

int fz_u8(struct fz_in *in, uint8_t *v)
{
	if (!in->n)
		return 0;
	*v = *in->p++;
	in->n--;
	return 1;
}

static uint64_t fz_slot_csum(uint8_t *slot, unsigned at)
{
	uint8_t saved[8];
	memcpy(saved, slot + at, 8);
	memset(slot + at, 0, 8);
	uint64_t h = XXH3_64bits(slot, FZ_SLOT);
	memcpy(slot + at, saved, 8);
	return h;
}

/* Child entries of an internal node image that fit in its slot. */
static unsigned fz_internal_children(const uint8_t *s)
{
	unsigned count = fz_get16(s + 4);
	if (32u + count * 8u + (count + 1u) * 20u > FZ_SLOT)
		return 0;
	return count + 1;
}

static void fz_tree_count(const uint8_t *img, uint32_t nslots, uint32_t slot, unsigned depth,
			  uint8_t *seen, struct fz_tree_counts *c)
{
	if (slot < 2 || slot >= nslots || depth > FZ_TREE_MAX_HEIGHT ||
	    (seen[slot / 8] & (1u << (slot % 8))))
		return;
	seen[slot / 8] |= (uint8_t)(1u << (slot % 8));
	const uint8_t *s = img + (size_t)slot * FZ_SLOT;
	uint32_t magic = fz_get32(s);
	if (magic == FZ_LEAF_MAGIC || magic == FZ_PACKED_MAGIC) {
		/* "FTL2": the first offset, then 12-byte entries, the length
		 * at 8; "FTL1": 20-byte entries, the length at 16. */
		int packed = magic == FZ_PACKED_MAGIC;
		unsigned count = fz_get16(s + 4), at = packed ? 40u : 32u, esz = packed ? 12u : 20u;
		if (at + count * esz > FZ_SLOT)
			return;
		c->leaves++;
		c->extents += count;
		for (unsigned j = 0; j < count; j++)
			c->size += fz_get32(s + at + j * esz + esz - 4);
	} else if (magic == FZ_INTERNAL_MAGIC) {
		unsigned nc = fz_internal_children(s);
		c->internals++;
		const uint8_t *e = s + 32 + (nc ? nc - 1 : 0) * 8u;
		for (unsigned j = 0; j < nc; j++)
			fz_tree_count(img, nslots, fz_get32(e + j * 20 + 8), depth + 1, seen, c);
	}
}

void fz_tree_fixup(uint8_t *img, uint32_t nslots, unsigned flags)
{
	uint64_t *csum = calloc(nslots ? nslots : 1, sizeof(*csum));
	uint8_t *done = calloc(nslots / 8 + 1, 1);
	if (!csum || !done) {
		free(csum);
		free(done);
		return;
	}
	for (unsigned lvl = 0; lvl <= 255; lvl++) {
		int any = 0;
		for (uint32_t s = 2; s < nslots; s++) {
			uint8_t *n = img + (size_t)s * FZ_SLOT;
			uint32_t magic = fz_get32(n);
			if ((magic != FZ_LEAF_MAGIC && magic != FZ_PACKED_MAGIC &&
			     magic != FZ_INTERNAL_MAGIC) ||
			    n[6] != lvl)
				continue;
			any = 1;
			if (magic == FZ_INTERNAL_MAGIC) {
				unsigned nc = fz_internal_children(n);
				uint8_t *e = n + 32 + (nc ? nc - 1 : 0) * 8u;
				for (unsigned j = 0; j < nc; j++) {
					uint32_t c = fz_get32(e + j * 20 + 8);
					if (c >= 2 && c < nslots && (done[c / 8] & (1u << (c % 8))))
						fz_put64(e + j * 20 + 12, csum[c]);
				}
			}
			if (flags & FZ_TREE_FIX_SLOT)
				fz_put32(n + 8, s);
			csum[s] = fz_slot_csum(n, 24);
			fz_put64(n + 24, csum[s]);
			done[s / 8] |= (uint8_t)(1u << (s % 8));
		}
		if (!any && lvl > FZ_TREE_MAX_HEIGHT)
			break;
	}
	for (int h = 0; h < 2 && (uint32_t)h < nslots; h++) {
		uint8_t *hd = img + (size_t)h * FZ_SLOT;
		if (memcmp(hd, "FLEXTREE", 8) != 0)
			continue;
		uint32_t root = fz_get32(hd + 24);
		if (root >= 2 && root < nslots && (done[root / 8] & (1u << (root % 8))))
			fz_put64(hd + 32, csum[root]);
		if (flags & FZ_TREE_FIX_COUNTS) {
			struct fz_tree_counts c = {0};
			uint8_t *seen = calloc(nslots / 8 + 1, 1);
			if (seen) {
				fz_tree_count(img, nslots, root, 0, seen, &c);
				free(seen);
				fz_put64(hd + 40, c.size);
				fz_put64(hd + 48, c.extents);
				fz_put32(hd + 56, nslots);
				fz_put64(hd + 64, c.leaves);
				fz_put64(hd + 72, c.internals);
			}
		}
		fz_put64(hd + FZ_SLOT - 8, fz_slot_csum(hd, FZ_SLOT - 8));
	}
	free(csum);
	free(done);
}

uint32_t fz_tree_expand(struct fz_in *in, uint8_t **img)
{
	/* Count first: one allocation, not a realloc per slot. */
	uint32_t n = 0;
	for (struct fz_in c = *in; c.n >= 2 && n < FZ_TREE_MAX_SLOTS; n++) {
		size_t len = fz_get16(c.p);
		len = len > FZ_SLOT ? FZ_SLOT : len;
		len = len > c.n - 2 ? c.n - 2 : len;
		c.p += 2 + len;
		c.n -= 2 + len;
	}
	uint8_t *b = calloc(n ? n : 1, FZ_SLOT);
	if (!b)
		abort();
	for (uint32_t i = 0; i < n; i++) {
		size_t len = fz_get16(in->p);
		in->p += 2;
		in->n -= 2;
		len = len > FZ_SLOT ? FZ_SLOT : len;
		len = len > in->n ? in->n : len;
		memcpy(b + (size_t)i * FZ_SLOT, in->p, len);
		in->p += len;
		in->n -= len;
	}
	*img = b;
	return n;
}

void fz_log_fixup(uint8_t *log, size_t len, unsigned flags)
{
	uint64_t base = 0;
	int have = 0;
	for (int h = 0; h < 2; h++) {
		uint8_t *hd = log + (size_t)h * 4096;
		if ((size_t)h * 4096 + 32 > len || memcmp(hd, "FLEXLOG1", 8) != 0)
			continue;
		if (flags & FZ_LOG_FIX_HEADERS)
			fz_put64(hd + 24, XXH3_64bits(hd, 24));
		if (fz_get64(hd + 24) == XXH3_64bits(hd, 24) &&
		    (!have || fz_get64(hd + 16) > base)) {
			base = fz_get64(hd + 16);
			have = 1;
		}
	}
	if (!(flags & (FZ_LOG_FIX_BATCHES | FZ_LOG_FIX_SEQ)))
		return;
	uint64_t seq = 1;
	for (size_t off = FZ_LOG_START; off + 32 <= len; seq++) {
		uint8_t *b = log + off;
		uint64_t n = fz_get32(b + 4);
		uint64_t room = (len - off - 32) / 24;
		if (n > room)
			n = room;
		if (n == 0)
			n = room ? 1 : 0;
		if (n == 0)
			break;
		fz_put32(b + 4, (uint32_t)n);
		if (flags & FZ_LOG_FIX_SEQ) {
			fz_put32(b, FZ_BATCH_MAGIC);
			fz_put64(b + 8, seq);
			fz_put64(b + 16, base);
		}
		size_t bytes = 32 + (size_t)n * 24;
		fz_put64(b + 24, 0);
		fz_put64(b + 24, XXH3_64bits(b, bytes));
		off += bytes;
	}
}

void fz_wal_fixup(uint8_t *w, size_t len)
{
	int f2 = len >= 64 && fz_get32(w + 8) == 2;
	if (f2)
		fz_put64(w + 56, XXH3_64bits(w, 56));
	else if (len >= 32 && memcmp(w, "FLEXWAL1", 8) == 0)
		fz_put64(w + 24, XXH3_64bits(w, 24));
	if (f2 && len >= FZ_WAL2_MARK + 32)
		fz_put64(w + FZ_WAL2_MARK + 24, XXH3_64bits(w + FZ_WAL2_MARK, 24));
	for (size_t off = f2 ? FZ_WAL2_RECORDS : 32; off + 24 <= len;) {
		uint32_t plen = fz_get32(w + off + 4);
		if (plen > len - off - 24)
			break;
		fz_put64(w + off + 16,
			 XXH3_64bits_withSeed(w + off + 24, plen, fz_get64(w + off + 8)));
		off += 24 + (size_t)plen;
	}
}

int fz_keycmp(const void *a, size_t alen, const void *b, size_t blen)
{
	size_t n = alen < blen ? alen : blen;
	int c = n ? memcmp(a, b, n) : 0;
	if (c)
		return c;
	return alen < blen ? -1 : alen > blen;
}

int fz_known_log_bug(const uint8_t *log, size_t len, uint64_t max_extent, uint64_t size)
{
	static int skip = -1;
	if (skip < 0) {
		const char *e = getenv("FLEX_FUZZ_SKIP_KNOWN");
		skip = e && *e == '1';
	}
	if (!skip)
		return 0;
	for (size_t off = FZ_LOG_START; off + 32 <= len;) {
		uint64_t n = fz_get32(log + off + 4);
		if (n == 0 || n > (len - off - 32) / 24)
			break;
		for (uint64_t i = 0; i < n; i++) {
			const uint8_t *r = log + off + 32 + i * 24;
			uint64_t w0 = fz_get64(r), rl = fz_get64(r + 8);
			uint64_t lo = w0 & (((uint64_t)1 << 56) - 1);
			uint64_t op = w0 >> 56, arg = fz_get64(r + 16);
			/* the size as replay changes it: an insert past the end
			 * first fills the gap with a hole */
			if (op == 1) {
				uint64_t from = lo > size ? lo : size;
				if (from + rl < from || from + rl > FLEXSPACE_MAX_SIZE)
					return 1;
				size = from + rl;
			} else if (op == 2) {
				size = rl < size ? size - rl : 0;
			}
			if ((op == 1 || op == 3) && arg != FLEXTREE_HOLE && rl > max_extent)
				return 1;
		}
		off += 32 + (size_t)n * 24;
	}
	return 0;
}

struct flexspace_options fz_space_opts(void)
{
	struct flexspace_options o = {.segment_size = FZ_SPACE_SEG, .log_limit = 64u << 10};
	return o;
}

int fz_space_scenario(const char *dir, const char *snap)
{
	struct flexspace_options o = fz_space_opts();
	struct flexspace *fs;
	uint8_t buf[30000];
	int ok = 1;
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 7 + 1);
	if (flexspace_open(dir, &o, &fs) != 0)
		return -1;
	ok &= flexspace_write(fs, buf, 0, sizeof(buf)) == (ssize_t)sizeof(buf);
	ok &= flexspace_insert(fs, buf, 1000, 5000) == 5000;
	ok &= flexspace_collapse(fs, 200, 100) == 0;
	ok &= flexspace_tag_set(fs, 4000, 7) == 0;
	ok &= flexspace_write(fs, buf, 100000, 3000) == 3000;
	ok &= flexspace_close(fs) == 0;
	if (!ok || flexspace_open(dir, &o, &fs) != 0)
		return -1;
	memset(buf, 0x3c, 1500);
	ok &= flexspace_write(fs, buf, 300, 1500) == 1500;
	ok &= flexspace_sync(fs) == 0;
	ok &= flexspace_insert(fs, buf, 20000, 700) == 700;
	ok &= flexspace_collapse(fs, 5000, 1234) == 0;
	ok &= flexspace_tag_set(fs, 9000, 2) == 0;
	ok &= flexspace_sync(fs) == 0;
	ok &= flexspace_truncate(fs, 150000) == 0;
	ok &= flexspace_defrag(fs, 0, 8000) == 0;
	ok &= flexspace_sync(fs) == 0;
	ok &= fz_copy_tree(dir, snap) == 0;
	flexspace_close(fs);
	return ok ? 0 : -1;
}
