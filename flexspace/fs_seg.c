/*
 * fs_seg.c - FlexSpace's data file: segments, the segment buffer, reads
 * and garbage collection (paper section 4.1).
 *
 * The data file is a sequence of fixed-size segments written like a log:
 * new bytes are appended to the one open segment, buffered in memory, and
 * written out when the segment fills or a sync asks for it (only the part
 * not yet written; appending continues into the same segment afterwards).
 * An in-memory array counts each segment's live bytes.  When the file
 * holds more than gc_ratio bytes per live byte, garbage collection picks
 * the least-live segments, copies their extents to the open segment and
 * re-points the tree at the copies (logged as remap records); the emptied
 * segments are reused once that log is durable.  Extents are at most a
 * 32nd of a segment and live data is capped at 30/32 of max_data_size, so
 * the least-live segment always frees room for at least one extent.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../common/flex_killpoint.h"
#include "../common/flex_vec.h"
#include "flexspace_int.h"

static int fs_grow_segments(struct flexspace *fs, uint32_t want)
{
	if (want <= fs->seg_cap)
		return 0;
	uint32_t cap = fs->seg_cap ? fs->seg_cap : 64;
	while (cap < want)
		cap *= 2;
	uint32_t *v = realloc(fs->valid, (size_t)cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	fs->valid = v;
	uint8_t *s = realloc(fs->state, cap);
	if (!s)
		return -ENOMEM;
	fs->state = s;
	uint64_t *f = realloc(fs->freed_at, (size_t)cap * sizeof(*f));
	if (!f)
		return -ENOMEM;
	fs->freed_at = f;
	memset(fs->freed_at + fs->seg_cap, 0, (size_t)(cap - fs->seg_cap) * sizeof(*f));
	memset(fs->valid + fs->seg_cap, 0, (size_t)(cap - fs->seg_cap) * sizeof(*v));
	memset(fs->state + fs->seg_cap, SEG_FREE, cap - fs->seg_cap);
	fs->seg_cap = cap;
	return 0;
}

/* ---- the read-only mapping of DATA ---------------------------------------- */

/* Address space reserved for the mapping: DATA may grow into it without
 * a remap (pages past the end of the file are never touched: map_end).
 * Bytes past it are read with pread. */
#define FS_MAP_MAX ((uint64_t)256 << 30)

/* Maps DATA read-only for reads (see flexspace_int.h).  Failure is not an
 * error: reads then use pread.  MADV_RANDOM: a lookup wants one pair, and
 * the kernel's read-around of a faulting page (128 KiB) would fill a
 * memory budget with neighbours nobody asked for; scans ask for their
 * spans explicitly (fs_read_pieces). */
static void fs_map_data(struct flexspace *fs, uint64_t data_bytes)
{
	fs->map = NULL;
	if (fs->no_mmap || getenv("FLEX_NO_MMAP"))
		return;
	uint64_t want = fs->max_data < FS_MAP_MAX ? fs->max_data : FS_MAP_MAX;
	void *m = mmap(NULL, want, PROT_READ, MAP_SHARED, fs->data_fd, 0);
	if (m == MAP_FAILED)
		return;
	madvise(m, want, MADV_RANDOM);
	fs->map = m;
	fs->map_len = want;
	fs->map_end = data_bytes < want ? data_bytes : want;
}

/* DATA now holds bytes up to end. */
static inline void fs_map_grow(struct flexspace *fs, uint64_t end)
{
	if (end > fs->map_end)
		fs->map_end = end < fs->map_len ? end : fs->map_len;
}

int fs_seg_init(struct flexspace *fs, uint64_t data_bytes)
{
	uint64_t n = (data_bytes + fs->seg_size - 1) / fs->seg_size;
	if (n > UINT32_MAX / 2)
		return FLEX_ECORRUPT;
	fs->nsegs = (uint32_t)n;
	fs->open_seg = UINT32_MAX;
	fs->buf = malloc(fs->seg_size);
	if (!fs->buf)
		return -ENOMEM;
	fs_map_data(fs, data_bytes);
	return fs_grow_segments(fs, fs->nsegs + 1);
}

void fs_seg_free(struct flexspace *fs)
{
	if (fs->map)
		munmap((void *)fs->map, fs->map_len);
	fs->map = NULL;
	free(fs->valid);
	free(fs->state);
	free(fs->freed_at);
	free(fs->buf);
}

struct fs_valid_scan {
	struct flexspace *fs;
	uint64_t data_size;
	uint32_t *count; /* extents per segment, at [seg + 1] (fs_check_overlap) */
	int bad;
};

static int fs_count_extent(void *arg, const struct flextree_extent *e)
{
	struct fs_valid_scan *vs = arg;
	struct flexspace *fs = vs->fs;
	if (e->poff == FLEXTREE_HOLE)
		return 0;
	uint64_t seg = e->poff / fs->seg_size;
	/* An extent never crosses a segment, is never longer than the
	 * maximum, and lies inside the file: its bytes were synced before
	 * anything durable referred to them, so one past the end of DATA
	 * means DATA lost bytes. */
	if (seg >= fs->nsegs || (e->poff + e->len - 1) / fs->seg_size != seg ||
	    e->len > fs->max_extent || e->poff + e->len > vs->data_size) {
		vs->bad = 1;
		return 1;
	}
	fs->valid[seg] += e->len;
	fs->live += e->len;
	if (vs->count)
		vs->count[seg + 1]++;
	return 0;
}

/* ---- no physical byte mapped twice ---------------------------------------- */

/* Two logical ranges mapping the same physical bytes -- possible only
 * with a damaged or crafted tree or log, since every change writes fresh
 * bytes -- would let a write through one change the other, and garbage
 * collection would count the bytes twice.  Checked at open and by
 * flexspace_check.  The extents are bucketed by segment (a counting sort:
 * every extent lies within one segment), then each bucket's ranges are
 * marked in a bitmap of one segment, which must not have a bit marked
 * twice, and cleared again for the next bucket.  Linear: two tree scans
 * (at open the first is the one that counts live bytes), 8 bytes per extent and a bit per byte of one segment; about 40 ms per
 * million extents (docs/DURABILITY.md).  Sorting each bucket instead cost
 * five times that. */
struct fs_ov_scan {
	struct flexspace *fs;
	uint32_t *pos; /* per segment: next free index in ent */
	uint64_t *ent; /* offset in its segment << 32 | length */
	int fill;      /* 0: counting pass, 1: filling pass */
};

static int fs_ov_extent(void *arg, const struct flextree_extent *e)
{
	struct fs_ov_scan *o = arg;
	if (e->poff == FLEXTREE_HOLE)
		return 0;
	uint64_t seg = e->poff / o->fs->seg_size;
	if (seg >= o->fs->nsegs || e->poff % o->fs->seg_size + e->len > o->fs->seg_size)
		return 1; /* reported by the callers' own checks */
	if (!o->fill)
		o->pos[seg + 1]++;
	else
		o->ent[o->pos[seg]++] = (e->poff % o->fs->seg_size) << 32 | e->len;
	return 0;
}

/* Sets (set = 1) or clears bits [a, b) of map; when setting, returns 1 if
 * one of them was set already. */
static int fs_ov_mark(uint64_t *map, uint64_t a, uint64_t b, int set)
{
	int hit = 0;
	while (a < b) {
		uint64_t w = a / 64, lo = a % 64;
		uint64_t n = b - a < 64 - lo ? b - a : 64 - lo;
		uint64_t m = (n == 64 ? ~0ull : ((1ull << n) - 1)) << lo;
		if (set) {
			hit |= (map[w] & m) != 0;
			map[w] |= m;
		} else {
			map[w] &= ~m;
		}
		a += n;
	}
	return hit;
}

/* counted: the extents per segment at [seg + 1] (nsegs + 1 entries, taken
 * over), as fs_rebuild_valid's scan counts them; NULL: counted here. */
static int fs_check_overlap_counted(struct flexspace *fs, uint32_t *counted)
{
	struct fs_ov_scan o = {.fs = fs};
	uint64_t *map = calloc(fs->seg_size / 64, sizeof(uint64_t));
	o.pos = counted ? counted : calloc((size_t)fs->nsegs + 1, sizeof(uint32_t));
	int rc = !map || !o.pos ? -ENOMEM
		 : counted	? 0
				: flextree_scan(fs->tree, 0, UINT64_MAX, fs_ov_extent, &o);
	uint64_t n = 0;
	for (uint32_t s = 0; !rc && s < fs->nsegs; s++) {
		n += o.pos[s + 1];
		o.pos[s + 1] = (uint32_t)n; /* start of segment s + 1's bucket */
	}
	if (!rc && n > UINT32_MAX)
		rc = -ENOMEM;
	if (!rc && !(o.ent = malloc((n ? n : 1) * sizeof(uint64_t))))
		rc = -ENOMEM;
	if (!rc) {
		o.fill = 1;
		rc = flextree_scan(fs->tree, 0, UINT64_MAX, fs_ov_extent, &o);
	}
	/* Bucket s is now [pos[s - 1], pos[s]) (pos[-1] = 0). */
	for (uint32_t s = 0, from = 0; !rc && s < fs->nsegs; from = o.pos[s++]) {
		for (uint32_t i = from; i < o.pos[s] && !rc; i++)
			if (fs_ov_mark(map, o.ent[i] >> 32, (o.ent[i] >> 32) + (uint32_t)o.ent[i],
				       1))
				rc = FLEX_ECORRUPT;
		for (uint32_t i = from; i < o.pos[s]; i++)
			fs_ov_mark(map, o.ent[i] >> 32, (o.ent[i] >> 32) + (uint32_t)o.ent[i], 0);
	}
	free(o.ent);
	free(o.pos);
	free(map);
	return rc > 0 ? FLEX_ECORRUPT : rc;
}

int fs_check_overlap(struct flexspace *fs)
{
	return fs_check_overlap_counted(fs, NULL);
}

/* Recomputes live bytes per segment from the tree (at open). */
int fs_rebuild_valid(struct flexspace *fs)
{
	struct fs_valid_scan vs = {.fs = fs};
	int rc = fs->io->fsize(fs->io, fs->data_fd, &vs.data_size);
	if (rc)
		return rc;
	memset(fs->valid, 0, (size_t)fs->seg_cap * sizeof(uint32_t));
	fs->live = 0;
	/* The overlap check's counting pass rides along (one scan less). */
	vs.count = calloc((size_t)fs->nsegs + 1, sizeof(uint32_t));
	if (!vs.count)
		return -ENOMEM;
	rc = flextree_scan(fs->tree, 0, UINT64_MAX, fs_count_extent, &vs);
	if (vs.bad || rc) {
		free(vs.count);
		return vs.bad ? FLEX_ECORRUPT : rc;
	}
	rc = fs_check_overlap_counted(fs, vs.count);
	if (rc)
		return rc;
	fs->npending = 0;
	fs->nfree = 0;
	fs->free_hint = 0;
	for (uint32_t s = 0; s < fs->nsegs; s++) {
		fs->state[s] = fs->valid[s] ? SEG_USED : SEG_FREE;
		fs->nfree += !fs->valid[s];
	}
	return 0;
}

/* ---- the segment buffer -------------------------------------------------- */

/* Writing the buffered bytes of the open segment that are not yet in DATA
 * only reads the buffer, so the holder of change_mu does it with readers
 * going on (fs_flush_unlocked); recording that the bytes are in DATA
 * (flushed, the mapping's end) takes the exclusive lock.  *upto: the
 * buffer's fill that DATA now holds. */
static int fs_flush_write(struct flexspace *fs, uint32_t *upto)
{
	*upto = fs->fill;
	if (fs->open_seg == UINT32_MAX || fs->flushed == fs->fill)
		return 0;
	/* Batched through the seam (io_uring when available) in 1 MiB
	 * pieces so a large flush is one submission. */
	struct flex_iovec v[8];
	int n = 0;
	uint64_t base = (uint64_t)fs->open_seg * fs->seg_size;
	uint32_t pos = fs->flushed;
	int rc = 0;
	while (pos < fs->fill && !rc) {
		uint32_t c = fs->fill - pos > (1u << 20) ? (1u << 20) : fs->fill - pos;
		v[n++] = (struct flex_iovec){.buf = fs->buf + pos, .len = c, .off = base + pos};
		pos += c;
		if (n == 8 || pos == fs->fill) {
			rc = fs->io->write_batch(fs->io, fs->data_fd, v, n);
			n = 0;
		}
	}
	return rc;
}

static void fs_flush_publish(struct flexspace *fs, uint32_t upto)
{
	if (fs->open_seg == UINT32_MAX || upto == fs->flushed)
		return;
	fs->st.data_bytes_written += upto - fs->flushed;
	fs->flushed = upto;
	fs->data_unsynced = 1;
	fs_map_grow(fs, (uint64_t)fs->open_seg * fs->seg_size + upto);
}

/* The exclusive lock held. */
int fs_flush_buffer(struct flexspace *fs)
{
	uint32_t upto;
	int rc = fs_flush_write(fs, &upto);
	if (!rc)
		fs_flush_publish(fs, upto);
	return rc;
}

/* change_mu held, the rwlock not. */
int fs_flush_unlocked(struct flexspace *fs)
{
	uint32_t upto;
	int rc = fs_flush_write(fs, &upto);
	if (!rc) {
		fs_excl_lock(fs);
		fs_flush_publish(fs, upto);
		fs_excl_unlock(fs);
	}
	return rc;
}

/* Before a change appends len bytes (change_mu held, the rwlock not): if
 * they will not fit in the open segment, what the buffer holds is written
 * out now, so that closing the segment under the exclusive lock has at
 * most the change's own bytes to write. */
int fs_preflush(struct flexspace *fs, uint64_t len)
{
	if (fs->open_seg == UINT32_MAX || fs->fill + len <= fs->seg_size)
		return 0;
	int rc = fs_flush_unlocked(fs);
	return rc ? fs_fail(fs, rc) : 0;
}

/* The fdatasync of DATA alone (a sync calls it with no lock held, having
 * cleared data_unsynced itself). */
int fs_fdatasync_data(struct flexspace *fs)
{
	FLEX_KILLPOINT("fs.data.sync.before");
	int rc = fs->io->fdatasync(fs->io, fs->data_fd);
	if (!rc)
		FLEX_KILLPOINT("fs.data.sync.after");
	return rc;
}

int fs_sync_data(struct flexspace *fs)
{
	if (!fs->data_unsynced)
		return 0;
	int rc = fs_fdatasync_data(fs);
	if (!rc)
		fs->data_unsynced = 0;
	return rc;
}

static void fs_close_segment(struct flexspace *fs)
{
	uint32_t s = fs->open_seg;
	if (s == UINT32_MAX)
		return;
	if (fs->valid[s]) {
		fs->state[s] = SEG_USED;
	} else {
		fs->state[s] = SEG_PENDING;
		fs->npending++;
	}
	fs->open_seg = UINT32_MAX;
}

/* Picks the segment to append to next: the lowest free one, else a new
 * one at the end of the file (within max_data).  Running out here means
 * fs_reserve_space was not called first. */
static int fs_open_segment(struct flexspace *fs)
{
	int rc;
	if ((rc = fs_flush_buffer(fs)) != 0)
		return rc;
	fs_close_segment(fs);
	if (fs->nfree) {
		for (uint32_t s = fs->free_hint; s < fs->nsegs; s++) {
			if (fs->state[s] == SEG_FREE) {
				fs->free_hint = s + 1;
				fs->open_seg = s;
				fs->nfree--;
				goto opened;
			}
		}
	}
	fs->free_hint = fs->nsegs;
	if ((uint64_t)(fs->nsegs + 1) * fs->seg_size > fs->max_data)
		return -ENOSPC;
	if ((rc = fs_grow_segments(fs, fs->nsegs + 2)) != 0)
		return rc;
	fs->open_seg = fs->nsegs++;
opened:
	fs->state[fs->open_seg] = SEG_OPEN;
	fs->fill = fs->flushed = 0;
	return 0;
}

/* Appends up to len bytes to the open segment, opening one if needed; the
 * piece never crosses a segment.  Reports where it went and how much. */
int fs_append(struct flexspace *fs, const void *data, uint32_t len, uint64_t *poff,
	      uint32_t *got)
{
	if (fs->open_seg == UINT32_MAX || fs->fill == fs->seg_size) {
		int rc = fs_open_segment(fs);
		if (rc)
			return rc;
	}
	uint32_t room = fs->seg_size - fs->fill;
	uint32_t c = len < room ? len : room;
	*poff = (uint64_t)fs->open_seg * fs->seg_size + fs->fill;
	if (c >= FS_DIRECT_BYTES && fs->flushed == fs->fill) {
		/* A large piece with nothing pending goes straight from the
		 * caller's buffer to DATA: one copy instead of two.  The segment
		 * buffer then holds only bytes at or after `flushed`. */
		int rc = flex_io_write_full(fs->io, fs->data_fd, data, c, *poff);
		if (rc)
			return rc;
		fs->flushed = fs->fill + c;
		fs->data_unsynced = 1;
		fs->st.data_bytes_written += c;
		fs_map_grow(fs, *poff + c);
	} else {
		memcpy(fs->buf + fs->fill, data, c);
	}
	*got = c;
	fs->fill += c;
	fs->valid[fs->open_seg] += c;
	fs->live += c;
	return 0;
}

/* Accounts for [poff, poff+len) no longer being referenced. */
void fs_seg_drop(struct flexspace *fs, uint64_t poff, uint64_t len)
{
	if (poff == FLEXTREE_HOLE || !len)
		return;
	uint32_t s = (uint32_t)(poff / fs->seg_size);
	fs->valid[s] -= (uint32_t)len;
	fs->live -= len;
	if (fs->valid[s] == 0 && fs->state[s] == SEG_USED) {
		fs->state[s] = SEG_PENDING;
		fs->npending++;
	}
}

/* A sync has taken the log records that emptied the PENDING segments:
 * they become reusable when that log is durable (fs_seg_release). */
void fs_seg_mark_pending(struct flexspace *fs)
{
	if (!fs->npending)
		return;
	for (uint32_t s = 0; s < fs->nsegs; s++)
		if (fs->state[s] == SEG_PENDING)
			fs->state[s] = SEG_RELEASE;
}

/* Frees the RELEASE segments (their removal is durable), and the PENDING
 * ones too when all is set (a tree commit made every removal durable). */
void fs_seg_release(struct flexspace *fs, int all)
{
	if (!fs->npending)
		return;
	for (uint32_t s = 0; s < fs->nsegs; s++) {
		if (s < fs->npinned && fs->pinned[s])
			continue; /* a checkpoint is copying it */
		if (fs->state[s] == SEG_RELEASE || (all && fs->state[s] == SEG_PENDING)) {
			fs->state[s] = SEG_FREE;
			fs->freed_at[s] = ++fs->free_seq;
			fs->nfree++;
			fs->npending--;
			if (s < fs->free_hint)
				fs->free_hint = s;
		}
	}
}

/* Cuts free segments off the end of DATA (after a tree commit: nothing
 * durable refers to them). */
void fs_trim_data(struct flexspace *fs)
{
	uint32_t n = fs->nsegs;
	while (n > 0 && fs->state[n - 1] == SEG_FREE)
		n--;
	if (n == fs->nsegs)
		return;
	if (fs->io->ftruncate(fs->io, fs->data_fd, (uint64_t)n * fs->seg_size) != 0)
		return; /* keeping the space is harmless */
	FLEX_KILLPOINT("fs.data.trimmed");
	if (fs->map_end > (uint64_t)n * fs->seg_size)
		fs->map_end = (uint64_t)n * fs->seg_size;
	fs->nfree -= fs->nsegs - n;
	fs->nsegs = n;
	if (fs->free_hint > n)
		fs->free_hint = n;
}

/* Bytes that can be appended without collecting garbage: the rest of the
 * open segment, free segments, and growth within max_data. */
static uint64_t fs_space_avail(const struct flexspace *fs)
{
	uint64_t avail = (uint64_t)fs->nfree * fs->seg_size;
	if (fs->open_seg != UINT32_MAX)
		avail += fs->seg_size - fs->fill;
	uint64_t file = (uint64_t)fs->nsegs * fs->seg_size;
	if (fs->max_data > file)
		avail += (fs->max_data - file) / fs->seg_size * fs->seg_size;
	return avail;
}

/* Makes room for a change that appends len bytes before it starts, so that
 * the change never has to make the log durable half-way through: first
 * emptied segments are released by a durable log write, then garbage is
 * collected.  Live data is capped at 30/32 of max_data so that collection
 * can always free room (the paper's forward-progress rule).  The caller
 * holds sync_mu and change_mu (not the rwlock): the sync and collection
 * here keep change_mu, since the caller's change is under way. */
int fs_reserve_space(struct flexspace *fs, uint64_t len)
{
	if (fs->max_data >= FLEXSPACE_MAX_SIZE)
		return 0;
	if (fs->live + len > fs->max_data / 32 * 30)
		return -ENOSPC;
	/* One segment stays in reserve after every change: GC relocates a
	 * victim (at most 30/32 live) into it before the victim is freed. */
	uint64_t need = len + fs->seg_size;
	uint64_t before = 0;
	int pinned_sync = 0;
	for (int round = 0; fs_space_avail(fs) < need; round++) {
		int rc;
		uint64_t avail = fs_space_avail(fs);
		/* Segments a checkpoint pinned stay pending however often the
		 * log is synced: one sync, then collection or -ENOSPC. */
		if (fs->npending && !pinned_sync) {
			rc = fs_log_sync(fs, 0);
			pinned_sync = fs->pinned != NULL;
		} else if (round == 0 || avail > before) {
			before = avail;
			rc = fs_gc_run(fs, 0);
		} else {
			return -ENOSPC; /* collection stopped making progress */
		}
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- reads -------------------------------------------------------------- */

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
 * (mincore) whether three of its pieces are in memory, and the answer
 * holds for the next ones (a probe per read cost in-memory scans 15 %). */
#define FS_PROBE_PIECES 4
#define FS_PROBE_EVERY 16

/* Whether the page of DATA holding offset off is in memory (1 when the
 * kernel does not say). */
static int fs_map_resident(const struct flexspace *fs, uint64_t off)
{
	unsigned char vec = 1;
	uintptr_t page = ((uintptr_t)fs->map + off) & ~(uintptr_t)4095;
	return mincore((void *)page, 1, &vec) != 0 || (vec & 1);
}

/* Whether a read of pieces v[0..n) should copy from the mapping: a probe
 * looks at the first, middle and last pieces. */
static int fs_map_warm(struct flexspace *fs, const struct flex_iovec *v, int n)
{
	unsigned t = __atomic_fetch_add(&fs->map_probes, 1, __ATOMIC_RELAXED);
	if (t % FS_PROBE_EVERY == 0) {
		int cold = !fs_map_resident(fs, v[0].off) || !fs_map_resident(fs, v[n / 2].off) ||
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

/* Reads the pieces m[0..n) (a mapping of consecutive logical bytes) into
 * buf: holes as zeros, the open segment from its buffer, everything else
 * in one batch (fs_read_pieces). */
static int fs_read_mappings(struct flexspace *fs, uint8_t *buf, const struct flextree_mapping *m,
			    size_t n)
{
	struct flex_iovec v[FS_READ_BATCH];
	int nv = 0;
	uint64_t done = 0;
	uint64_t open_base = (uint64_t)fs->open_seg * fs->seg_size;
	for (size_t i = 0; i < n; i++) {
		uint8_t *dst = buf + done;
		if (m[i].poff == FLEXTREE_HOLE) {
			memset(dst, 0, m[i].len);
		} else if (fs->open_seg != UINT32_MAX && m[i].poff >= open_base &&
			   m[i].poff < open_base + fs->seg_size &&
			   m[i].poff + m[i].len > open_base + fs->flushed) {
			/* Not yet in DATA: from the segment buffer (whose bytes
			 * before `flushed` may never have been copied into it, so
			 * a piece is split there). */
			uint64_t at = m[i].poff - open_base;
			if (at + m[i].len > fs->fill)
				return FLEX_ECORRUPT;
			uint64_t head = at < fs->flushed ? fs->flushed - at : 0;
			if (head)
				v[nv++] = (struct flex_iovec){.buf = dst, .len = head, .off = m[i].poff};
			memcpy(dst + head, fs->buf + at + head, m[i].len - head);
		} else {
			v[nv++] = (struct flex_iovec){.buf = dst, .len = m[i].len, .off = m[i].poff};
		}
		done += m[i].len;
	}
	int rc = nv ? fs_read_pieces(fs, v, nv) : 0;
	return rc == -ENODATA ? FLEX_ECORRUPT : rc;
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
		ssize_t n = flextree_query(fs->tree, off, len, m, FS_READ_BATCH);
		if (n < 0)
			return (int)n;
		if (n == 0)
			return FLEX_ECORRUPT;
		if (n > FS_READ_BATCH)
			n = FS_READ_BATCH;
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

/* ---- garbage collection -------------------------------------------------- */

struct fs_victim_scan {
	struct flexspace *fs;
	const uint8_t *victim; /* per segment */
	struct flextree_extent *ext;
	size_t n, cap;
	int err;
};

static int fs_collect_victim_extent(void *arg, const struct flextree_extent *e)
{
	struct fs_victim_scan *vs = arg;
	if (e->poff == FLEXTREE_HOLE || !vs->victim[e->poff / vs->fs->seg_size])
		return 0;
	if (flex_vec_reserve(&vs->ext, &vs->cap, vs->n + 1, 256)) {
		vs->err = -ENOMEM;
		return 1;
	}
	vs->ext[vs->n++] = *e;
	return 0;
}

static int fs_cmp_seg_live(const void *a, const void *b, void *arg)
{
	const uint32_t *valid = arg;
	uint32_t x = valid[*(const uint32_t *)a], y = valid[*(const uint32_t *)b];
	return x < y ? -1 : x > y;
}

/* Moves one extent (already read into data) to the open segment, in as
 * many pieces as segment boundaries require. */
static int fs_relocate(struct flexspace *fs, const struct flextree_extent *e, const uint8_t *data)
{
	uint32_t done = 0;
	while (done < e->len) {
		uint64_t poff;
		uint32_t got;
		int rc = fs_append(fs, data + done, e->len - done, &poff, &got);
		if (rc)
			return rc;
		if ((rc = flextree_remap(fs->tree, e->loff + done, got, poff)) != 0 ||
		    (rc = fs_log_add(fs, FS_OP_REMAP, e->loff + done, got, poff)) != 0)
			return rc;
		fs_seg_drop(fs, e->poff + done, got);
		done += got;
	}
	fs->st.gc_bytes_moved += e->len;
	return 0;
}

/* One collection run: relocates the live extents of up to FS_GC_BATCH
 * least-live segments, then makes the log durable so they can be reused.
 * The caller holds sync_mu and change_mu, not the rwlock: the victims are
 * found and read with readers going on (no other change can move them),
 * and each extent is re-pointed under the exclusive lock on its own, so
 * a reader waits for one extent's copy at most.  may_release lets the
 * closing sync give up change_mu while it waits for the disk. */
int fs_gc_run(struct flexspace *fs, int may_release)
{
	uint32_t *cand = malloc((size_t)fs->nsegs * sizeof(*cand));
	uint8_t *victim = calloc(fs->nsegs, 1);
	struct fs_victim_scan vs = {.fs = fs, .victim = victim};
	uint8_t *data = NULL;
	int rc = 0;
	if (!cand || !victim) {
		rc = -ENOMEM;
		goto out;
	}
	uint32_t nc = 0;
	for (uint32_t s = 0; s < fs->nsegs; s++)
		if (fs->state[s] == SEG_USED && fs->valid[s] <= fs->seg_size / 32 * 30)
			cand[nc++] = s;
	qsort_r(cand, nc, sizeof(*cand), fs_cmp_seg_live, fs->valid);
	/* Enough victims to bring the file back under the ratio, each
	 * freeing at least a 32nd of a segment. */
	uint64_t used = (uint64_t)(fs->nsegs - fs->npending) * fs->seg_size;
	uint64_t target = (uint64_t)((double)fs->live * fs->gc_ratio * 0.8);
	uint64_t reclaim = 0, need = used > target ? used - target : fs->seg_size;
	/* The copies must fit in the space available now: the victims are
	 * reusable only after this run's log is durable. */
	uint64_t avail = fs_space_avail(fs), moved = 0;
	uint32_t nv = 0;
	for (uint32_t i = 0; i < nc && nv < FS_GC_BATCH && reclaim < need; i++) {
		if (moved + fs->valid[cand[i]] > avail)
			break;
		victim[cand[i]] = 1;
		reclaim += fs->seg_size - fs->valid[cand[i]];
		moved += fs->valid[cand[i]];
		nv++;
	}
	if (!nv)
		goto out;
	rc = flextree_scan(fs->tree, 0, UINT64_MAX, fs_collect_victim_extent, &vs);
	if (vs.err)
		rc = vs.err;
	if (rc)
		goto out;
	data = malloc((size_t)fs->max_extent * FS_GC_BATCH);
	if (!data) {
		rc = -ENOMEM;
		goto out;
	}
	fs->in_gc = 1;
	for (size_t i = 0; i < vs.n && !rc; i += FS_GC_BATCH) {
		size_t k = vs.n - i < FS_GC_BATCH ? vs.n - i : FS_GC_BATCH;
		struct flex_iovec v[FS_GC_BATCH];
		for (size_t j = 0; j < k; j++)
			v[j] = (struct flex_iovec){.buf = data + j * fs->max_extent,
						   .len = vs.ext[i + j].len,
						   .off = vs.ext[i + j].poff};
		rc = fs->io->read_batch(fs->io, fs->data_fd, v, (int)k);
		if (rc == -ENODATA)
			rc = FLEX_ECORRUPT;
		for (size_t j = 0; j < k && !rc; j++) {
			if ((rc = fs_preflush(fs, vs.ext[i + j].len)) != 0)
				break;
			fs_excl_lock(fs);
			rc = fs_relocate(fs, &vs.ext[i + j], data + j * fs->max_extent);
			fs_excl_unlock(fs);
			/* Part of the victims' extents moved, none of it
			 * logged: the n-th hit is mid-collection. */
			if (!rc)
				FLEX_KILLPOINT("fs.gc.moved");
		}
	}
	fs->in_gc = 0;
	if (!rc) {
		fs_excl_lock(fs);
		fs->st.gc_runs++;
		fs_excl_unlock(fs);
		rc = fs_log_sync(fs, may_release);
	}
out:
	free(cand);
	free(victim);
	free(vs.ext);
	free(data);
	return rc;
}

/* Whether the data file holds enough garbage for a collection. */
int fs_gc_due(const struct flexspace *fs)
{
	if (fs->in_gc)
		return 0;
	uint64_t used = (uint64_t)(fs->nsegs - fs->npending) * fs->seg_size;
	uint64_t garbage = used > fs->live ? used - fs->live : 0;
	if (garbage < (uint64_t)FS_GC_MIN_SEGMENTS * fs->seg_size)
		return 0;
	return (double)used > (double)fs->live * fs->gc_ratio;
}

/* ---- check -------------------------------------------------------------- */

struct fs_check_scan {
	struct flexspace *fs;
	uint32_t *valid;
	uint64_t data_size;
	int bad;
};

static int fs_check_extent(void *arg, const struct flextree_extent *e)
{
	struct fs_check_scan *cs = arg;
	struct flexspace *fs = cs->fs;
	if (e->poff == FLEXTREE_HOLE)
		return 0;
	uint64_t s = e->poff / fs->seg_size;
	if (s >= fs->nsegs || (e->poff + e->len - 1) / fs->seg_size != s ||
	    e->len > fs->max_extent || fs->state[s] == SEG_FREE) {
		cs->bad = 1;
		return 1;
	}
	if (s == fs->open_seg && e->poff % fs->seg_size + e->len > fs->fill) {
		cs->bad = 1;
		return 1;
	}
	/* Bytes not in the open segment's buffer must be in DATA. */
	uint64_t end = e->poff + e->len;
	if (s == fs->open_seg && end > s * fs->seg_size + fs->flushed)
		end = s * fs->seg_size + fs->flushed;
	if (end > e->poff && end > cs->data_size) {
		cs->bad = 1;
		return 1;
	}
	cs->valid[s] += e->len;
	return 0;
}

/* Live-byte counts and segment states agree with the tree's extents. */
int fs_check_segments(struct flexspace *fs)
{
	struct fs_check_scan cs = {.fs = fs};
	int rc = fs->io->fsize(fs->io, fs->data_fd, &cs.data_size);
	if (rc)
		return rc;
	cs.valid = calloc(fs->nsegs + 1, sizeof(uint32_t));
	if (!cs.valid)
		return -ENOMEM;
	rc = flextree_scan(fs->tree, 0, UINT64_MAX, fs_check_extent, &cs);
	uint64_t live = 0;
	uint32_t pending = 0;
	for (uint32_t s = 0; !rc && !cs.bad && s < fs->nsegs; s++) {
		live += cs.valid[s];
		pending += fs->state[s] == SEG_PENDING || fs->state[s] == SEG_RELEASE;
		if (cs.valid[s] != fs->valid[s] ||
		    (fs->state[s] == SEG_USED && !fs->valid[s]) ||
		    (fs->state[s] == SEG_OPEN && s != fs->open_seg))
			cs.bad = 1;
	}
	if (!rc && !cs.bad && (live != fs->live || pending != fs->npending))
		cs.bad = 1;
	if (!rc && !cs.bad)
		rc = fs_check_overlap(fs);
	free(cs.valid);
	return rc ? rc : cs.bad ? FLEX_ECORRUPT : 0;
}
