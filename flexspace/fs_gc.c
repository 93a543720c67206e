/*
 * fs_gc.c - FlexSpace's garbage collection and the checks of its segment
 * table (paper section 4.1).
 *
 * When the segments holding data take more than gc_ratio bytes per live
 * byte (free segments are reused before DATA grows; in a space without
 * max_data_size they are punched as holes when freed), garbage
 * collection picks the least-live segments, copies their extents to the
 * open segment and re-points the tree at the copies (logged as remap
 * records); the emptied segments are reused once that log is durable.
 * Extents are at most a 32nd of a segment and live data is capped at 30/32
 * of max_data_size, so the least-live segment always frees room for at
 * least one extent.
 *
 * The live bytes of each segment are recounted from the tree at open, and
 * checked against it by flexspace_check, together with the rule that no
 * physical byte is mapped twice.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/flex_killpoint.h"
#include "../common/flex_vec.h"
#include "flexspace_int.h"

/* ---- no physical byte mapped twice ---------------------------------------- */

/* Two logical ranges mapping the same physical bytes -- possible only
 * with a damaged or crafted tree or log, since every change writes fresh
 * bytes -- would let a write through one change the other, and garbage
 * collection would count the bytes twice.  Checked at open and by
 * flexspace_check.  The extents are bucketed by segment (a counting sort:
 * every extent lies within one segment).  A bucket whose extents come in
 * the order of their bytes, each after the last, passes as it is;
 * otherwise its ranges are marked in a bitmap of one segment, which must
 * not have a bit marked twice, and the span marked is cleared for the
 * next bucket.  Linear: two tree scans (at open the first is the one that
 * counts live bytes), 8 bytes per extent and a bit per byte of one
 * segment; about 40 ms per million extents (docs/DURABILITY.md).  Sorting
 * each bucket instead cost five times that. */
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

/* Sets bits [a, b) of map; returns 1 if one of them was set already.
 * The whole words between the edges are tested with one OR over them and
 * written with memset: a rewritten interval is one extent of kilobytes,
 * and a word at a time made this check most of what an open of a large
 * space computed. */
static uint64_t fs_ov_bits(uint64_t lo, uint64_t n)
{
	return (n == 64 ? ~0ull : ((1ull << n) - 1)) << lo;
}

static int fs_ov_mark(uint64_t *map, uint64_t a, uint64_t b)
{
	if (a >= b)
		return 0;
	uint64_t wa = a / 64, wb = (b - 1) / 64;
	uint64_t ma = fs_ov_bits(a % 64, wa == wb ? b - a : 64 - a % 64);
	uint64_t mb = wa == wb ? 0 : fs_ov_bits(0, (b - 1) % 64 + 1);
	uint64_t seen = (map[wa] & ma) | (map[wb] & mb);
	for (uint64_t w = wa + 1; w < wb; w++)
		seen |= map[w];
	map[wa] |= ma;
	map[wb] |= mb;
	if (wb > wa + 1)
		memset(map + wa + 1, 0xff, (wb - wa - 1) * sizeof(*map));
	return seen != 0;
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
	/* Bucket s is now [pos[s - 1], pos[s]) (pos[-1] = 0).  A bucket whose
	 * extents come in the order of their bytes, each after the last (a
	 * segment tidying or a sequential load wrote), needs no bitmap. */
	for (uint32_t s = 0, from = 0; !rc && s < fs->nsegs; from = o.pos[s++]) {
		uint64_t end = 0, lo = UINT64_MAX, hi = 0;
		uint32_t i = from;
		for (; i < o.pos[s] && o.ent[i] >> 32 >= end; i++)
			end = (o.ent[i] >> 32) + (uint32_t)o.ent[i];
		if (i == o.pos[s])
			continue;
		for (i = from; i < o.pos[s] && !rc; i++) {
			uint64_t a = o.ent[i] >> 32, b = a + (uint32_t)o.ent[i];
			lo = a < lo ? a : lo;
			hi = b > hi ? b : hi;
			if (fs_ov_mark(map, a, b))
				rc = FLEX_ECORRUPT;
		}
		/* Cleared for the next bucket over the span it marked. */
		if (hi > lo)
			memset(map + lo / 64, 0, ((hi - 1) / 64 - lo / 64 + 1) * sizeof(*map));
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


/* ---- live bytes per segment ---------------------------------------------- */

/* Whether a mapped extent breaks what every one keeps to: it lies in one
 * segment of the file and is no longer than the maximum (open and
 * flexspace_check). */
static int fs_extent_misplaced(const struct flexspace *fs, const struct flextree_extent *e)
{
	uint64_t seg = e->poff / fs->seg_size;
	return seg >= fs->nsegs || (e->poff + e->len - 1) / fs->seg_size != seg ||
	       e->len > fs->max_extent;
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
	/* It also lies inside the file: its bytes were synced before
	 * anything durable referred to them, so one past the end of DATA
	 * means DATA lost bytes. */
	if (fs_extent_misplaced(fs, e) || e->poff + e->len > vs->data_size) {
		vs->bad = 1;
		return 1;
	}
	fs->valid[seg] += e->len;
	fs->live += e->len;
	if (vs->count)
		vs->count[seg + 1]++;
	return 0;
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
		if ((rc = flextree_repoint(fs->tree, e->loff + done, poff, got)) != 0 ||
		    (rc = fs_log_add(fs, FS_OP_REMAP, e->loff + done, got, poff)) != 0)
			return rc;
		fs_seg_drop(fs, e->poff + done, got);
		done += got;
	}
	fs->st.gc_bytes_moved += e->len;
	return 0;
}

/* Bytes of the segments that hold data: the open one and the used ones.
 * Free segments are not counted: they are reused before DATA grows and,
 * in a space without max_data_size, punched as holes when freed.
 * Counting them would keep a collection due that cannot bring the count
 * down (it only turns used segments into more free ones), and every
 * maintenance would move nearly-live segments for nothing. */
static uint64_t fs_used_bytes(const struct flexspace *fs)
{
	return (uint64_t)(fs->nsegs - fs->npending - fs->nfree) * fs->seg_size;
}

/* One collection run: relocates the live extents of up to FS_GC_BATCH
 * least-live segments, then makes the log durable so they can be reused
 * (those emptied before a tree commit between batches, at that commit).
 * The caller holds sync_mu and change_mu, not the rwlock: the victims are
 * found and read with readers going on (no other change can move them),
 * and each extent is re-pointed under the exclusive lock on its own, so
 * a reader waits for one extent's copy at most.  may_release lets the
 * closing sync give up change_mu while it waits for the disk. */
static int fs_gc_pick(struct flexspace *fs, int may_release, uint32_t max_valid, int all)
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
		if (fs->state[s] == SEG_USED && fs->valid[s] <= max_valid)
			cand[nc++] = s;
	qsort_r(cand, nc, sizeof(*cand), fs_cmp_seg_live, fs->valid);
	/* Enough victims to bring the file back under the ratio, each
	 * freeing at least a 32nd of a segment. */
	uint64_t used = fs_used_bytes(fs);
	uint64_t target = (uint64_t)((double)fs->live * fs->gc_ratio * 0.8);
	uint64_t reclaim = 0, need = all ? UINT64_MAX : used > target ? used - target : fs->seg_size;
	/* The copies must fit in the space available now: the victims are
	 * reusable only once the records that emptied them are durable. */
	uint64_t avail = fs_space_avail(fs), moved = 0;
	uint32_t nv = 0;
	for (uint32_t i = 0; i < nc && nv < FS_GC_BATCH && reclaim < need; i++) {
		if (moved + fs->valid[cand[i]] > avail ||
		    (nv && moved + fs->valid[cand[i]] > (uint64_t)FS_GC_MOVE_SEGMENTS * fs->seg_size))
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
	/* Batches of up to FS_GC_BATCH extents and FS_GC_READ_BYTES (or one
	 * extent, however long), read packed into one buffer. */
	size_t total = 0, longest = 0;
	for (size_t i = 0; i < vs.n; i++) {
		total += vs.ext[i].len;
		longest = vs.ext[i].len > longest ? vs.ext[i].len : longest;
	}
	size_t room = total < FS_GC_READ_BYTES ? total : FS_GC_READ_BYTES;
	room = longest > room ? longest : room;
	data = malloc(room ? room : 1);
	if (!data) {
		rc = -ENOMEM;
		goto out;
	}
	fs->in_gc = 1;
	for (size_t i = 0, k; i < vs.n && !rc; i += k) {
		struct flex_iovec v[FS_GC_BATCH];
		size_t at = 0;
		for (k = 0; i + k < vs.n && k < FS_GC_BATCH; k++) {
			uint32_t len = vs.ext[i + k].len;
			if (k && at + len > FS_GC_READ_BYTES)
				break;
			v[k] = (struct flex_iovec){.buf = data + at, .len = len, .off = vs.ext[i + k].poff};
			at += len;
		}
		rc = fs->io->read_batch(fs->io, fs->data_fd, v, (int)k);
		if (rc == -ENODATA)
			rc = FLEX_ECORRUPT;
		for (size_t j = 0; j < k && !rc; j++) {
			if ((rc = fs_preflush(fs, vs.ext[i + j].len)) != 0)
				break;
			fs_excl_lock(fs);
			rc = fs_relocate(fs, &vs.ext[i + j], v[j].buf);
			fs_excl_unlock(fs);
			/* Part of the victims' extents moved, none of it
			 * logged since the run's last tree commit: the n-th
			 * hit is mid-collection. */
			if (!rc)
				FLEX_KILLPOINT("fs.gc.moved");
		}
		/* The victims' extents lie all over the space: each one moved
		 * dirties a tree leaf, which cannot leave memory before a
		 * commit, and adds a log record.  A run would otherwise hold
		 * most of a large tree, and a log buffer past log_limit, until
		 * it ends; it commits as the changes do.  Victims emptied so
		 * far are freed by it, and none of those left is. */
		if (!rc && fs_commit_due(fs))
			rc = fs_commit(fs);
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

int fs_gc_run(struct flexspace *fs, int may_release)
{
	return fs_gc_pick(fs, may_release, fs->seg_size / 32 * 30, 0);
}

static uint32_t fs_sparse_segments(const struct flexspace *fs)
{
	uint32_t n = 0;
	for (uint32_t s = 0; s < fs->nsegs; s++)
		n += fs->state[s] == SEG_USED && fs->valid[s] <= fs->seg_size / 2;
	return n;
}

/* Runs until one finds no used segment at most half live, or no room for
 * the copies.  Each run empties one of those found at the start at
 * least; changes made while a run's sync let change_mu go may add more,
 * which wait for the next call past that many runs. */
int fs_gc_sparse(struct flexspace *fs)
{
	for (uint32_t left = fs_sparse_segments(fs); left; left--) {
		/* A change that failed while a run's sync let change_mu go
		 * may have left half of itself in the tree: no commit now. */
		if (fs->failed)
			return FLEX_EFAILED;
		uint64_t runs = fs->st.gc_runs;
		int rc = fs_gc_pick(fs, 1, fs->seg_size / 2, 1);
		if (rc || fs->st.gc_runs == runs)
			return rc;
	}
	return 0;
}

/* Whether the data file holds enough garbage for a collection. */
int fs_gc_due(const struct flexspace *fs)
{
	return fs_gc_due_at(fs, fs->gc_ratio);
}

int fs_gc_due_at(const struct flexspace *fs, double ratio)
{
	if (fs->in_gc)
		return 0;
	uint64_t used = fs_used_bytes(fs);
	uint64_t garbage = used > fs->live ? used - fs->live : 0;
	if (garbage < (uint64_t)FS_GC_MIN_SEGMENTS * fs->seg_size)
		return 0;
	return (double)used > (double)fs->live * ratio;
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
	if (fs_extent_misplaced(fs, e) || fs->state[s] == SEG_FREE) {
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
