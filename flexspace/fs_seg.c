/*
 * fs_seg.c - FlexSpace's data file: segments, the segment buffer and the
 * read-only mapping of DATA (paper section 4.1).
 *
 * The data file is a sequence of fixed-size segments written like a log:
 * new bytes are appended to the one open segment, buffered in memory, and
 * written out when the segment fills or a sync asks for it (only the part
 * not yet written; appending continues into the same segment afterwards).
 * An in-memory array counts each segment's live bytes.  Reads are in
 * fs_read.c; garbage collection, which empties the least-live segments,
 * and the checks of the segment table are in fs_gc.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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
	fs->map = fs->resident = NULL;
	/* Without the mapping for reads (no_mmap), a mapping nothing may
	 * touch still tells what the page cache holds (fs_data_resident:
	 * FlexDB warms its cache from those intervals only); it maps no page
	 * into the process.  Only over the kernel's own descriptors. */
	int reads = !fs->no_mmap && !getenv("FLEX_NO_MMAP");
	if (!reads && fs->io != flex_io_posix())
		return;
	uint64_t want = fs->max_data < FS_MAP_MAX ? fs->max_data : FS_MAP_MAX;
	/* The kernel tells what the page cache holds only to a process that
	 * owns the file or may write it; to others it says every page is. */
	struct stat st;
	int told = (fstat(fs->data_fd, &st) == 0 && st.st_uid == geteuid()) ||
		   faccessat(fs->dir_fd, "DATA", W_OK, AT_EACCESS) == 0;
	if (!reads && !told)
		return;
	void *m = mmap(NULL, want, reads ? PROT_READ : PROT_NONE, MAP_SHARED, fs->data_fd, 0);
	if (m == MAP_FAILED)
		return;
	if (reads) {
		madvise(m, want, MADV_RANDOM);
		fs->map = m;
	}
	fs->resident = told ? m : NULL;
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
	const void *m = fs->map ? (const void *)fs->map : fs->resident;
	if (m)
		munmap((void *)m, fs->map_len);
	fs->map = NULL;
	fs->resident = NULL;
	free(fs->valid);
	free(fs->state);
	free(fs->freed_at);
	free(fs->punch);
	free(fs->buf);
}

/* ---- the segment buffer -------------------------------------------------- */

/* Notes that [lo, hi) of DATA was written (change_mu held), to be started
 * on its way to the disk (fs_writeback_start), so that the fdatasync of
 * the next sync waits for less than every segment the changes filled.
 * Only whole FS_WB_ALIGN blocks: a partly filled one waits for the write
 * that fills it. */
static void fs_writeback_note(struct flexspace *fs, uint64_t lo, uint64_t hi)
{
	lo -= lo % FS_WB_ALIGN;
	hi -= hi % FS_WB_ALIGN;
	if (!fs->io->writeback || hi <= lo)
		return;
	int touches = fs->nwb && lo <= fs->wb[fs->nwb - 1].hi && hi >= fs->wb[fs->nwb - 1].lo;
	if (!touches && fs->nwb < FS_WB_RANGES) {
		fs->wb[fs->nwb].lo = lo;
		fs->wb[fs->nwb++].hi = hi;
		return;
	}
	/* Touching the last range, or out of room: the last one grows to
	 * cover it (what lies between was written already). */
	uint32_t k = fs->nwb - 1;
	fs->wb[k].lo = lo < fs->wb[k].lo ? lo : fs->wb[k].lo;
	fs->wb[k].hi = hi > fs->wb[k].hi ? hi : fs->wb[k].hi;
}

/* change_mu held, the exclusive lock not (fs_excl_unlock): starts the
 * ranges noted. */
void fs_writeback_start(struct flexspace *fs)
{
	for (uint32_t i = 0; i < fs->nwb; i++)
		(void)fs->io->writeback(fs->io, fs->data_fd, fs->wb[i].lo,
					fs->wb[i].hi - fs->wb[i].lo);
	fs->nwb = 0;
}

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
			if (!rc)
				fs_writeback_note(fs, v[0].off, v[n - 1].off + v[n - 1].len);
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
		fs_writeback_note(fs, *poff, *poff + c);
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
 * ones too when all is set (a tree commit made every removal durable).
 * Each is queued for fs_seg_punch. */
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
			if (!fs->bounded &&
			    flex_vec_reserve(&fs->punch, &fs->punch_cap, fs->npunch + 1, 16) == 0)
				fs->punch[fs->npunch++] = s;
			if (s < fs->free_hint)
				fs->free_hint = s;
		}
	}
}

/* A freed segment's blocks go back to the file system (a hole: nothing
 * reads a free segment, and its next write allocates them again), so
 * that segments freed below the end of DATA, which fs_trim_data cannot
 * cut, do not count as space; where holes cannot be made they stay.
 * Outside the exclusive lock, so that readers do not wait for the
 * fallocate calls: with change_mu held no segment is reused meanwhile,
 * and readers of located mappings found each freed (freed_at) under the
 * shared lock before they could read it.  Not in a bounded space
 * (max_data_size), whose collection counts on the blocks it has. */
void fs_seg_punch(struct flexspace *fs)
{
	for (uint32_t i = 0; i < fs->npunch; i++) {
		uint32_t s = fs->punch[i];
		if (s < fs->nsegs && fs->state[s] == SEG_FREE)
			(void)fs->io->fallocate(fs->io, fs->data_fd,
						FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
						(uint64_t)s * fs->seg_size, fs->seg_size);
	}
	fs->npunch = 0;
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
uint64_t fs_space_avail(const struct flexspace *fs)
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
