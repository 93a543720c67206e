/*
 * fs_read.c - FlexSpace's reads: a logical range is mapped through the
 * extent tree, then its pieces are copied from the read-only mapping of
 * DATA when it is in memory, from the open segment's buffer when they are
 * not yet in DATA, and otherwise read in one batch, neighbouring pieces
 * coalesced into spans.  flexspace_read_many reads many ranges at once in
 * DATA's order, past the page cache (O_DIRECT), and can be begun and
 * ended apart (its own io_uring ring).
 */
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "flexspace_int.h"

#define FS_READ_BATCH FLEXSPACE_LOCATE_MAX
/* Pieces of DATA closer than this are read as one span: a few hundred
 * bytes more of a cached page costs far less than another system call or
 * submission.  The pieces a commit appended in key order lie back to back
 * in DATA even when other pairs separate them logically, so a read of a
 * randomly built range needs about one span per commit, not one per
 * extent. */
#define FS_READ_GAP 2048
#define FS_READ_SPAN (256u << 10)

/* Reads pieces v[0..n) of DATA (destinations disjoint), coalescing pieces
 * that lie close together.  The pieces come in logical order; those of one
 * commit come in rising address order, so a piece extends the span that
 * ends just before it, found through a small table by end address (a
 * span's slot is rewritten as it grows; a stale or colliding slot only
 * costs a separate span). */
/* A span at least this long is announced to the kernel before it is
 * copied from the mapping (MADV_WILLNEED), so that a cold scan reads it in
 * a few large requests instead of one page fault at a time. */
#define FS_MAP_WILLNEED (32u << 10)
/* A read of at least this many pieces copies from the mapping only while
 * DATA seems to be in memory: otherwise each piece would be a page fault,
 * waited for one after the other, where a batch of reads (io_uring) waits
 * for them together.  One such read in FS_PROBE_EVERY asks the kernel
 * (mincore) whether its first, middle and last pieces are in memory, and
 * the answer holds for the next ones (a probe per read cost in-memory
 * scans 15 %). */
#define FS_PROBE_PIECES 2
#define FS_PROBE_EVERY 16

/* Whether the page of DATA holding offset off is in memory (1 when the
 * kernel does not say). */
static int fs_map_resident(const struct flexspace *fs, uint64_t off)
{
	unsigned char vec = 1;
	uintptr_t mask = (uintptr_t)sysconf(_SC_PAGESIZE) - 1;
	uintptr_t page = ((uintptr_t)fs->map + off) & ~mask;
	return mincore((void *)page, 1, &vec) != 0 || (vec & 1);
}

int fs_data_resident(const struct flexspace *fs, uint64_t poff, uint64_t len)
{
	/* Bytes of the open segment not yet flushed are in its buffer. */
	uint64_t open_base = (uint64_t)fs->open_seg * fs->seg_size;
	if (fs->open_seg != UINT32_MAX && poff >= open_base && poff < open_base + fs->seg_size &&
	    poff + len > open_base + fs->flushed)
		len = poff < open_base + fs->flushed ? open_base + fs->flushed - poff : 0;
	if (!len)
		return 1;
	if (!fs->resident || poff + len > fs->map_end)
		return 0;
	uintptr_t ps = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = ((uintptr_t)fs->resident + poff) & ~(ps - 1);
	uintptr_t b = (uintptr_t)fs->resident + poff + len;
	unsigned char vec[64];
	while (a < b) {
		size_t pages = (b - a + ps - 1) / ps;
		if (pages > sizeof(vec))
			pages = sizeof(vec);
		if (mincore((void *)a, pages * ps, vec) != 0)
			return 0;
		for (size_t i = 0; i < pages; i++)
			if (!(vec[i] & 1))
				return 0;
		a += pages * ps;
	}
	return 1;
}

/* Whether a read of pieces v[0..n) should copy from the mapping: a probe
 * looks at the first, middle and last pieces.  Each thread counts its own
 * reads, so that readers on different CPUs write no shared line. */
static int fs_map_warm(struct flexspace *fs, const struct flex_iovec *v, int n)
{
	static _Thread_local unsigned reads;
	if (reads++ % FS_PROBE_EVERY == 0) {
		int cold = !fs_map_resident(fs, v[0].off) ||
			   (n > 2 && !fs_map_resident(fs, v[n / 2].off)) ||
			   !fs_map_resident(fs, v[n - 1].off);
		__atomic_store_n(&fs->map_cold, cold, __ATOMIC_RELAXED);
		return !cold;
	}
	return !__atomic_load_n(&fs->map_cold, __ATOMIC_RELAXED);
}

static int fs_read_pieces(struct flexspace *fs, const struct flex_iovec *v, int n)
{
	if (fs->map && (n < FS_PROBE_PIECES || fs_map_warm(fs, v, n))) {
		int i = 0;
		while (i < n && v[i].off + v[i].len <= fs->map_end)
			i++;
		if (i == n) {
			for (i = 0; i < n; i++) {
				const uint8_t *src = fs->map + v[i].off;
				if (v[i].len >= FS_MAP_WILLNEED) {
					uintptr_t a = (uintptr_t)src & ~(uintptr_t)4095;
					madvise((void *)a, (uintptr_t)src + v[i].len - a,
						MADV_WILLNEED);
				}
				memcpy(v[i].buf, src, v[i].len);
			}
			return 0;
		}
		/* Past what DATA is known to hold: only a damaged tree points
		 * there, and pread reports it (-ENODATA). */
	}
	if (n == 1)
		return flex_io_read_full(fs->io, fs->data_fd, v[0].buf, v[0].len, v[0].off);
	struct flex_iovec span[FS_READ_BATCH];
	uint8_t owner[FS_READ_BATCH]; /* the span of each piece */
	uint8_t count[FS_READ_BATCH]; /* pieces per span */
	int8_t byend[256];	      /* span by (end / FS_READ_GAP) % 256, or -1 */
	memset(byend, -1, sizeof(byend));
	int ns = 0;
	for (int i = 0; i < n; i++) {
		uint64_t lo = v[i].off, hi = v[i].off + v[i].len;
		/* A span ending within FS_READ_GAP of lo has its end in one of
		 * three buckets. */
		int k = -1;
		for (int d = 0; d < 3 && k < 0; d++) {
			int c = byend[(lo / FS_READ_GAP + 2 - d) % 256];
			if (c < 0)
				continue;
			uint64_t slo = span[c].off, shi = span[c].off + span[c].len;
			uint64_t nlo = lo < slo ? lo : slo, nhi = hi > shi ? hi : shi;
			if (lo <= shi + FS_READ_GAP && hi + FS_READ_GAP >= slo &&
			    nhi - nlo <= FS_READ_SPAN) {
				span[c].off = nlo;
				span[c].len = nhi - nlo;
				k = c;
			}
		}
		if (k < 0) {
			k = ns++;
			span[k] = (struct flex_iovec){.buf = NULL, .len = hi - lo, .off = lo};
			count[k] = 0;
		}
		byend[(span[k].off + span[k].len) / FS_READ_GAP % 256] = (int8_t)k;
		owner[i] = (uint8_t)k;
		count[k]++;
	}
	size_t scratch = 0;
	for (int k = 0; k < ns; k++)
		if (count[k] > 1)
			scratch += span[k].len;
	uint8_t stackbuf[8192];
	uint8_t *tmp = scratch <= sizeof(stackbuf) ? stackbuf : malloc(scratch);
	if (!tmp)
		return -ENOMEM;
	size_t at = 0;
	for (int k = 0; k < ns; k++) {
		if (count[k] > 1) {
			span[k].buf = tmp + at;
			at += span[k].len;
		}
	}
	for (int i = 0; i < n; i++)
		if (count[owner[i]] == 1)
			span[owner[i]].buf = v[i].buf; /* alone: straight to its place */
	int rc = ns == 1 ? flex_io_read_full(fs->io, fs->data_fd, span[0].buf, span[0].len,
					     span[0].off)
			 : fs->io->read_batch(fs->io, fs->data_fd, span, ns);
	for (int i = 0; !rc && i < n; i++) {
		const struct flex_iovec *sp = &span[owner[i]];
		if (count[owner[i]] > 1)
			memcpy(v[i].buf, (const uint8_t *)sp->buf + (v[i].off - sp->off), v[i].len);
	}
	if (tmp != stackbuf)
		free(tmp);
	return rc;
}

/* A piece not yet all in DATA, in the open segment: copies to dst the
 * bytes the segment buffer holds and returns how many of its first bytes
 * are in DATA already (the buffer's bytes before `flushed` may never have
 * been copied into it, so a piece is split there).  UINT64_MAX for a
 * piece all in DATA, UINT64_MAX - 1 for one past the buffer's fill. */
static uint64_t fs_unflushed(const struct flexspace *fs, const struct flextree_mapping *m,
			     uint8_t *dst)
{
	uint64_t open_base = (uint64_t)fs->open_seg * fs->seg_size;
	if (fs->open_seg == UINT32_MAX || m->poff < open_base ||
	    m->poff >= open_base + fs->seg_size || m->poff + m->len <= open_base + fs->flushed)
		return UINT64_MAX;
	uint64_t at = m->poff - open_base;
	if (at + m->len > fs->fill)
		return UINT64_MAX - 1;
	uint64_t head = at < fs->flushed ? fs->flushed - at : 0;
	memcpy(dst + head, fs->buf + at + head, m->len - head);
	return head;
}

/* Reads the pieces m[0..n) (a mapping of consecutive logical bytes) into
 * buf: holes as zeros, the open segment from its buffer, everything else
 * in one batch (fs_read_pieces). */
static int fs_read_mappings(struct flexspace *fs, uint8_t *buf, const struct flextree_mapping *m,
			    size_t n)
{
	struct flex_iovec v[FS_READ_BATCH];
	int nv = 0;
	uint64_t done = 0, head;
	for (size_t i = 0; i < n; i++) {
		uint8_t *dst = buf + done;
		if (m[i].poff == FLEXTREE_HOLE) {
			memset(dst, 0, m[i].len);
		} else if ((head = fs_unflushed(fs, &m[i], dst)) != UINT64_MAX) {
			if (head == UINT64_MAX - 1)
				return FLEX_ECORRUPT;
			if (head)
				v[nv++] = (struct flex_iovec){.buf = dst, .len = head, .off = m[i].poff};
		} else {
			v[nv++] = (struct flex_iovec){.buf = dst, .len = m[i].len, .off = m[i].poff};
		}
		done += m[i].len;
	}
	int rc = nv ? fs_read_pieces(fs, v, nv) : 0;
	return rc == -ENODATA ? FLEX_ECORRUPT : rc;
}

/* The first FS_READ_BATCH pieces of [off, off+len) (inside the space),
 * into m: their number, FLEX_ECORRUPT for none, or an error. */
static ssize_t fs_query(const struct flexspace *fs, uint64_t off, uint64_t len,
			struct flextree_mapping *m)
{
	ssize_t n = flextree_query(fs->tree, off, len, m, FS_READ_BATCH);
	if (n == 0)
		return FLEX_ECORRUPT;
	return n > FS_READ_BATCH ? FS_READ_BATCH : n;
}

/* Reads [off, off+len) (inside the space) into buf, in batches of
 * FS_READ_BATCH pieces.  With `loc`, the first batch's pieces are also
 * copied there (at most FS_READ_BATCH) and *nloc says how many: 0 when
 * the range needed more than one batch. */
int fs_read_mapped(struct flexspace *fs, uint8_t *buf, uint64_t off, uint64_t len,
		   struct flextree_mapping *loc, size_t *nloc)
{
	struct flextree_mapping m[FS_READ_BATCH];
	if (nloc)
		*nloc = 0;
	for (int first = 1; len; first = 0) {
		ssize_t n = fs_query(fs, off, len, m);
		if (n < 0)
			return (int)n;
		uint64_t done = 0;
		for (ssize_t i = 0; i < n; i++)
			done += m[i].len;
		int rc = fs_read_mappings(fs, buf, m, (size_t)n);
		if (rc)
			return rc;
		if (loc && first && done == len) {
			memcpy(loc, m, (size_t)n * sizeof(*m));
			*nloc = (size_t)n;
		}
		buf += done;
		off += done;
		len -= done;
	}
	return 0;
}

/* Reads pieces whose places a read reported (fs_read_mapped's loc), unless
 * a segment they lie in was freed since (its freed_at is after stamp). */
int fs_read_located(struct flexspace *fs, uint8_t *buf, const struct flextree_mapping *m,
		    size_t n, uint64_t stamp)
{
	if (n > FS_READ_BATCH)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (m[i].poff == FLEXTREE_HOLE)
			continue;
		uint64_t s = m[i].poff / fs->seg_size;
		if (!m[i].len || s >= fs->nsegs || fs->freed_at[s] > stamp ||
		    (m[i].poff + m[i].len - 1) / fs->seg_size != s)
			return -ESTALE;
	}
	return fs_read_mappings(fs, buf, m, n);
}

/* ---- reads of many ranges -------------------------------------------------- */

/* flexspace_read_many: the pieces of DATA the ranges lie in, sorted by
 * place; pieces at most FS_MANY_GAP apart are read as one span of at most
 * FS_MANY_SPAN into a staging buffer, then copied to their places.  A
 * span the page cache holds is copied from the mapping; the others are
 * read with O_DIRECT, aligned to FS_DIRECT_ALIGN. */
#define FS_MANY_GAP (16u << 10)
#define FS_MANY_SPAN (512u << 10)
#define FS_DIRECT_ALIGN 4096u
/* A span's bytes, aligned. */
#define FS_MANY_ROOM (FS_MANY_SPAN + 2 * FS_DIRECT_ALIGN)

struct fs_piece {
	uint64_t poff;
	uint64_t len;
	uint8_t *dst;
};

struct fs_pieces {
	struct fs_piece *p;
	size_t n, cap;
};

static int pieces_push(struct fs_pieces *ps, uint64_t poff, uint64_t len, uint8_t *dst)
{
	if (ps->n == ps->cap) {
		size_t cap = ps->cap ? ps->cap * 2 : 256;
		struct fs_piece *p = realloc(ps->p, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		ps->p = p;
		ps->cap = cap;
	}
	ps->p[ps->n++] = (struct fs_piece){.poff = poff, .len = len, .dst = dst};
	return 0;
}

/* Sorts p[0..n) by place, with tmp for n pieces: a bottom-up merge sort
 * (the pieces of one range come in runs that a commit wrote in order). */
static void pieces_sort(struct fs_piece *p, struct fs_piece *tmp, size_t n)
{
	struct fs_piece *a = p, *b = tmp;
	for (size_t w = 1; w < n; w *= 2) {
		for (size_t lo = 0; lo < n; lo += 2 * w) {
			size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
			size_t i = lo, j = mid, k = lo;
			while (i < mid && j < hi)
				b[k++] = a[j].poff < a[i].poff ? a[j++] : a[i++];
			while (i < mid)
				b[k++] = a[i++];
			while (j < hi)
				b[k++] = a[j++];
		}
		struct fs_piece *t = a;
		a = b;
		b = t;
	}
	if (a != p)
		memcpy(p, a, n * sizeof(*p));
}

/* The pieces of DATA range [off, off + len) lies in, into ps; holes and
 * the open segment's unflushed bytes are filled at once. */
static int many_collect(struct flexspace *fs, uint8_t *buf, uint64_t off, uint64_t len,
			struct fs_pieces *ps)
{
	struct flextree_mapping m[FS_READ_BATCH];
	uint64_t head;
	while (len) {
		ssize_t n = fs_query(fs, off, len, m);
		if (n < 0)
			return (int)n;
		for (ssize_t i = 0; i < n; i++) {
			int rc = 0;
			if (m[i].poff == FLEXTREE_HOLE) {
				memset(buf, 0, m[i].len);
			} else if ((head = fs_unflushed(fs, &m[i], buf)) != UINT64_MAX) {
				if (head == UINT64_MAX - 1)
					return FLEX_ECORRUPT;
				if (head)
					rc = pieces_push(ps, m[i].poff, head, buf);
			} else {
				rc = pieces_push(ps, m[i].poff, m[i].len, buf);
			}
			if (rc)
				return rc;
			buf += m[i].len;
			off += m[i].len;
			len -= m[i].len;
		}
	}
	return 0;
}

/* The reads a flexspace_read_many still owes once what the page cache
 * holds is copied: spans sp[0..ns) of DATA, span k into stage at
 * sp[k].buf and owed to pieces p[first[k]..last[k]). */
struct flexspace_reads {
	struct flexspace *fs;
	struct fs_stage *st; /* holds stage */
	struct fs_piece *p;
	struct flex_iovec *sp;
	size_t *first, *last;
	int ns;
	int nsub;   /* spans [0, nsub) went to the ring (flexspace_read_many_begin) */
	int direct; /* spans aligned, read through direct_fd */
	uint8_t *stage;
	uint64_t stamp; /* fs->free_seq when the places were taken */
};

/* A stage: page-aligned for O_DIRECT, and mapped, not allocated, so that
 * megabytes each commit do not leave the allocator's heaps fragmented.
 * The space keeps the last one dropped (stage_keep) if at most
 * FS_STAGE_KEEP, its pages given to the kernel to take back when memory
 * runs short (MADV_FREE): the next read of about the same size reuses
 * them without faulting them in. */
struct fs_stage {
	uint8_t *buf;
	size_t len;
};

#define FS_STAGE_UNIT (1u << 20)
/* A larger stage is not kept. */
#define FS_STAGE_KEEP (8u << 20)

static void stage_unmap(struct fs_stage *st)
{
	if (st) {
		munmap(st->buf, st->len);
		free(st);
	}
}

static struct fs_stage *stage_get(struct flexspace *fs, size_t len)
{
	struct fs_stage *st = __atomic_exchange_n(&fs->stage_keep, NULL, __ATOMIC_ACQUIRE);
	if (st && st->len >= len)
		return st;
	stage_unmap(st);
	if (!(st = malloc(sizeof(*st))))
		return NULL;
	st->len = (len + FS_STAGE_UNIT - 1) / FS_STAGE_UNIT * FS_STAGE_UNIT;
	void *m = mmap(NULL, st->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		free(st);
		return NULL;
	}
	st->buf = m;
	/* A child forked meanwhile does not share pages reads go into. */
	(void)madvise(m, st->len, MADV_DONTFORK);
	return st;
}

static void stage_put(struct flexspace *fs, struct fs_stage *st)
{
	if (!st)
		return;
	if (st->len > FS_STAGE_KEEP) {
		stage_unmap(st);
		return;
	}
	(void)madvise(st->buf, st->len, MADV_FREE);
	stage_unmap(__atomic_exchange_n(&fs->stage_keep, st, __ATOMIC_RELEASE));
}

void fs_stage_exit(struct flexspace *fs)
{
	stage_unmap(fs->stage_keep);
	fs->stage_keep = NULL;
}

static void reads_free(struct flexspace_reads *r)
{
	if (!r)
		return;
	free(r->p);
	free(r->sp);
	free(r->first);
	free(r->last);
	stage_put(r->fs, r->st);
	free(r);
}

/* Reads spans sp[0..ns) of r (with O_DIRECT if r->direct) into the stage.
 * A file system that takes O_DIRECT at open and refuses the read gets it
 * through the page cache, then and from then on. */
static int reads_sync(struct flexspace_reads *r, int from, int to)
{
	struct flexspace *fs = r->fs;
	int rc = 0;
	for (int a = from; a < to && !rc; a += FS_READ_BATCH) {
		int n = to - a < FS_READ_BATCH ? to - a : FS_READ_BATCH;
		rc = fs->io->read_batch(fs->io, r->direct ? fs->direct_fd : fs->data_fd, r->sp + a,
					n);
		if (r->direct && rc == -EINVAL) {
			__atomic_store_n(&fs->direct_refused, 1, __ATOMIC_RELAXED);
			rc = fs->io->read_batch(fs->io, fs->data_fd, r->sp + a, n);
		}
	}
	return rc == -ENODATA ? FLEX_ECORRUPT : rc;
}

/* Copies every piece from the stage to its place. */
static void reads_scatter(const struct flexspace_reads *r)
{
	for (int k = 0; k < r->ns; k++)
		for (size_t i = r->first[k]; i < r->last[k]; i++)
			memcpy(r->p[i].dst,
			       (const uint8_t *)r->sp[k].buf + (r->p[i].poff - r->sp[k].off),
			       r->p[i].len);
}

/* Reads [a, b) of DATA, which ends before b, into buf with O_DIRECT (a
 * read there stops at the end of the file), and copies pieces p[0..n)
 * to their places. */
static int many_tail(struct flexspace *fs, uint8_t *buf, uint64_t a, uint64_t b,
		     const struct fs_piece *p, size_t n)
{
	uint64_t need = 0, done = 0;
	for (size_t k = 0; k < n; k++)
		if (p[k].poff + p[k].len - a > need)
			need = p[k].poff + p[k].len - a;
	while (done < need) {
		ssize_t r = fs->io->pread(fs->io, fs->direct_fd, buf + done, b - a - done, a + done);
		if (r == -EINVAL && !done) {
			/* As reads_sync: through the page cache from now on. */
			__atomic_store_n(&fs->direct_refused, 1, __ATOMIC_RELAXED);
			int rc = 0;
			for (size_t k = 0; k < n && !rc; k++)
				rc = flex_io_read_full(fs->io, fs->data_fd, p[k].dst, p[k].len,
						       p[k].poff);
			return rc;
		}
		if (r < 0 && r != -EINTR)
			return (int)r;
		if (r == 0 || (r > 0 && done + (uint64_t)r < need && r % FS_DIRECT_ALIGN))
			return FLEX_ECORRUPT; /* the file ends before the pieces */
		done += r > 0 ? (uint64_t)r : 0;
	}
	for (size_t k = 0; k < n; k++)
		memcpy(p[k].dst, buf + (p[k].poff - a), p[k].len);
	return 0;
}

/* Lock held: maps the ranges v[0..n) to pieces of DATA, copies at once
 * what needs no read (holes, the open segment's buffer, spans the page
 * cache holds, and reads the rare spans that do not fit a batch), and
 * leaves the other spans in *out, with a stage for them. */
static int many_plan(struct flexspace *fs, const struct flex_iovec *v, int n,
		     struct flexspace_reads **out)
{
	struct flexspace_reads *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	*out = r;
	r->fs = fs;
	r->stamp = fs->free_seq;
	/* Without the mapping (no_mmap) what the page cache holds would be
	 * read from the disk: through the page cache then. */
	r->direct = fs->map && fs->direct_fd >= 0 &&
		    !__atomic_load_n(&fs->direct_refused, __ATOMIC_RELAXED);
	struct fs_pieces ps = {0};
	uint64_t size = flextree_size(fs->tree);
	int rc = 0;
	for (int i = 0; i < n && !rc; i++) {
		if ((!v[i].buf && v[i].len) || v[i].off > size || v[i].len > size - v[i].off)
			rc = -EINVAL;
		else
			rc = many_collect(fs, v[i].buf, v[i].off, v[i].len, &ps);
	}
	r->p = ps.p;
	if (rc || !ps.n)
		return rc;
	struct fs_piece *p = ps.p;
	size_t np = ps.n;
	struct fs_piece *tmp = malloc(np * sizeof(*tmp));
	r->sp = malloc(np * sizeof(*r->sp));
	r->first = malloc(np * sizeof(*r->first));
	r->last = malloc(np * sizeof(*r->last));
	if (!tmp || !r->sp || !r->first || !r->last) {
		free(tmp);
		return -ENOMEM;
	}
	pieces_sort(p, tmp, np);
	free(tmp);
	struct fs_stage *one = NULL; /* for a tail: one span's room */
	size_t used = 0;
	for (size_t i = 0; i < np && !rc;) {
		uint64_t lo = p[i].poff, hi = lo + p[i].len;
		size_t j = i + 1;
		for (; j < np && p[j].poff <= hi + FS_MANY_GAP; j++) {
			uint64_t e = p[j].poff + p[j].len > hi ? p[j].poff + p[j].len : hi;
			if (e - lo > FS_MANY_SPAN)
				break;
			hi = e;
		}
		uint64_t a = lo, b = hi;
		if (r->direct) {
			a &= ~(uint64_t)(FS_DIRECT_ALIGN - 1);
			b = (b + FS_DIRECT_ALIGN - 1) & ~(uint64_t)(FS_DIRECT_ALIGN - 1);
		}
		if (fs->map && hi <= fs->map_end && fs_data_resident(fs, lo, hi - lo)) {
			for (size_t k = i; k < j; k++)
				memcpy(p[k].dst, fs->map + p[k].poff, p[k].len);
		} else if (b - a > FS_MANY_ROOM) {
			/* A piece longer than a span: straight to its place. */
			for (size_t k = i; k < j && !rc; k++)
				rc = flex_io_read_full(fs->io, fs->data_fd, p[k].dst, p[k].len,
						       p[k].poff);
		} else if (r->direct && b > fs->map_end) {
			/* The file's last page, read up to the end of the file. */
			if (!one)
				one = stage_get(fs, FS_MANY_ROOM);
			rc = one ? many_tail(fs, one->buf, a, b, p + i, j - i) : -ENOMEM;
		} else {
			r->sp[r->ns] = (struct flex_iovec){.buf = (void *)(uintptr_t)used,
							   .len = b - a, .off = a};
			r->first[r->ns] = i;
			r->last[r->ns++] = j;
			used += b - a;
		}
		i = j;
	}
	stage_put(fs, one);
	if (!rc && used) {
		if (!(r->st = stage_get(fs, used)))
			return -ENOMEM;
		r->stage = r->st->buf;
		for (int k = 0; k < r->ns; k++)
			r->sp[k].buf = r->stage + (uintptr_t)r->sp[k].buf;
	}
	return rc;
}

/* Lock held: whether a segment r's spans lie in was freed since its plan
 * (the bytes read there may not be the ones the plan found). */
static int reads_stale(const struct flexspace_reads *r)
{
	const struct flexspace *fs = r->fs;
	for (int k = 0; k < r->ns; k++) {
		uint64_t s0 = r->sp[k].off / fs->seg_size;
		uint64_t s1 = (r->sp[k].off + r->sp[k].len - 1) / fs->seg_size;
		for (uint64_t s = s0; s <= s1; s++)
			if (s >= fs->nsegs || fs->freed_at[s] > r->stamp)
				return 1;
	}
	return 0;
}

/* The lock is held to plan and to check, not while the disk reads (a
 * writer waiting for it would hold up every reader meanwhile); a read
 * that a freed segment made stale is planned again, and the last try
 * keeps the lock throughout. */
#define FS_MANY_TRIES 3
int flexspace_read_many(const struct flexspace *cfs, const struct flex_iovec *v, int n)
{
	struct flexspace *fs = (struct flexspace *)cfs;
	if (!fs || n < 0 || (n && !v))
		return -EINVAL;
	int rc = -ESTALE;
	for (int try = 1; rc == -ESTALE; try++) {
		struct flexspace_reads *r = NULL;
		int last = try == FS_MANY_TRIES;
		flex_brlock_rdlock(&fs->lock);
		rc = many_plan(fs, v, n, &r);
		if (!last)
			flex_brlock_rdunlock(&fs->lock);
		if (!rc)
			rc = reads_sync(r, 0, r->ns);
		if (!last)
			flex_brlock_rdlock(&fs->lock);
		if (r && !last && rc != -ENOMEM && reads_stale(r))
			rc = -ESTALE;
		flex_brlock_rdunlock(&fs->lock);
		if (!rc)
			reads_scatter(r);
		reads_free(r);
	}
	return rc;
}

/* ---- reads begun now and ended later ---------------------------------------- */

/* flexspace_read_many_begin's spans go to a ring of the space's own (set
 * up on first use, by one job at a time: aring_busy), so that the caller
 * does other work while the disk reads them.  Only with the POSIX table
 * (a test's table must see every read) and where io_uring is allowed. */
#define FS_ARING_DEPTH 128

static int aring_take(struct flexspace *fs)
{
	if (fs->io != flex_io_posix() || __atomic_load_n(&fs->aring_state, __ATOMIC_RELAXED) < 0)
		return 0;
	int idle = 0;
	if (!__atomic_compare_exchange_n(&fs->aring_busy, &idle, 1, 0, __ATOMIC_ACQUIRE,
					 __ATOMIC_RELAXED))
		return 0;
	if (__atomic_load_n(&fs->aring_state, __ATOMIC_RELAXED) == 0) {
		struct io_uring *ring = malloc(sizeof(*ring));
		if (ring && flex_io_uring_active() &&
		    io_uring_queue_init(FS_ARING_DEPTH, ring, 0) == 0) {
			fs->aring = ring;
			fs->aring_pid = getpid();
			__atomic_store_n(&fs->aring_state, 1, __ATOMIC_RELAXED);
		} else {
			free(ring);
			__atomic_store_n(&fs->aring_state, -1, __ATOMIC_RELAXED);
		}
	}
	if (__atomic_load_n(&fs->aring_state, __ATOMIC_RELAXED) < 0 || fs->aring_pid != getpid()) {
		__atomic_store_n(&fs->aring_busy, 0, __ATOMIC_RELEASE);
		return 0;
	}
	return 1;
}

void fs_aring_exit(struct flexspace *fs)
{
	if (fs->aring && fs->aring_pid == getpid())
		io_uring_queue_exit(fs->aring);
	free(fs->aring);
	fs->aring = NULL;
	fs->aring_state = 0;
}

int flexspace_read_many_begin(const struct flexspace *cfs, const struct flex_iovec *v, int n,
			      struct flexspace_reads **out)
{
	struct flexspace *fs = (struct flexspace *)cfs;
	if (out)
		*out = NULL;
	if (!fs || !out || n < 0 || (n && !v))
		return -EINVAL;
	struct flexspace_reads *r = NULL;
	flex_brlock_rdlock(&fs->lock);
	int rc = many_plan(fs, v, n, &r);
	if (!rc && r->ns && aring_take(fs)) {
		struct io_uring *ring = fs->aring;
		int fd = r->direct ? fs->direct_fd : fs->data_fd;
		for (; r->nsub < r->ns && r->nsub < FS_ARING_DEPTH; r->nsub++) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
			if (!sqe)
				break;
			const struct flex_iovec *e = &r->sp[r->nsub];
			io_uring_prep_read(sqe, fd, e->buf, (unsigned)e->len, e->off);
			io_uring_sqe_set_data64(sqe, (uint64_t)r->nsub);
		}
		int sub = r->nsub ? io_uring_submit(ring) : 0;
		if (sub < r->nsub) {
			/* Entries the kernel did not take stay queued: the ring
			 * is not used again, and the end reads them itself and
			 * waits only for those taken. */
			__atomic_store_n(&fs->aring_state, -1, __ATOMIC_RELAXED);
			r->nsub = sub > 0 ? sub : 0;
		}
		if (!r->nsub)
			__atomic_store_n(&fs->aring_busy, 0, __ATOMIC_RELEASE);
	}
	flex_brlock_rdunlock(&fs->lock);
	if (rc) {
		reads_free(r);
		return rc;
	}
	*out = r;
	return 0;
}

int flexspace_read_many_end(struct flexspace_reads *r)
{
	if (!r)
		return -EINVAL;
	struct flexspace *fs = r->fs;
	int rc = 0;
	uint8_t *redo = r->nsub ? calloc((size_t)r->nsub, 1) : NULL;
	if (r->nsub && !redo)
		rc = -ENOMEM;
	for (int got = 0; got < r->nsub;) {
		struct io_uring_cqe *cqe;
		int w = io_uring_wait_cqe(fs->aring, &cqe);
		if (w == -EINTR)
			continue;
		if (w < 0) {
			/* The kernel may still write into the stage: it is
			 * left to it, and the ring is not used again. */
			__atomic_store_n(&fs->aring_state, -1, __ATOMIC_RELAXED);
			free(r->st);
			r->st = NULL;
			reads_free(r);
			free(redo);
			return w;
		}
		uint64_t k = io_uring_cqe_get_data64(cqe);
		if (redo && k < (uint64_t)r->nsub &&
		    (cqe->res < 0 || (size_t)cqe->res != r->sp[k].len))
			redo[k] = 1;
		io_uring_cqe_seen(fs->aring, cqe);
		got++;
	}
	if (r->nsub)
		__atomic_store_n(&fs->aring_busy, 0, __ATOMIC_RELEASE);
	/* A span the ring read short or refused, and those it never had. */
	for (int k = 0; k < r->nsub && redo && !rc; k++)
		if (redo[k])
			rc = reads_sync(r, k, k + 1);
	free(redo);
	if (!rc)
		rc = reads_sync(r, r->nsub, r->ns);
	/* The places held the bytes they held at the begin while no segment
	 * they lie in was freed since; one that was may also have been cut
	 * off the file, and its read failed: -ESTALE either way. */
	flex_brlock_rdlock(&fs->lock);
	int stale = reads_stale(r);
	flex_brlock_rdunlock(&fs->lock);
	if (stale && rc != -ENOMEM)
		rc = -ESTALE;
	if (!rc)
		reads_scatter(r);
	reads_free(r);
	return rc;
}
