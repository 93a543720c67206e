/*
 * flexspace_int.h - FlexSpace's private state, shared by flexspace.c (the
 * API and the open/recovery sequence), fs_seg.c (segments, the segment
 * buffer), fs_read.c (reads), fs_gc.c (garbage collection and the checks
 * of the segment table) and fs_log.c (the logical log, and the calls
 * that make changes durable: flexspace_sync, _commit, _stamp).
 *
 * Locking: three locks, always taken in this order, so that no reader
 * ever waits for the disk to acknowledge a write:
 *   sync_mu    serialises the durability work: syncs, tree commits and
 *              garbage collection, that is everything that writes LOG or
 *              TREE or fdatasyncs.  A change to a space with a
 *              max_data_size takes it too, since making room may need a
 *              sync or a collection (fs_reserve_space).
 *   change_mu  held by every change for its whole duration, and by the
 *              durability work except while it waits for the disk: it
 *              gives its holder the tree, the segment table and the log
 *              buffer without excluding readers.
 *   lock       the rwlock readers take shared (striped, flex_brlock.h:
 *              readers on two threads write no common line).  Its holder
 *              of change_mu takes it exclusive only while it changes
 *              what readers look at (the tree, the segment buffer and
 *              its bounds, the mapping's end, the statistics, the
 *              segment table): never
 *              across an fdatasync, and never across a tree commit, which
 *              only writes out node images (flextree_commit changes no
 *              field a lookup reads).
 * A sync takes the log records and flushes the segment buffer under all
 * three, then lets go of change_mu and lock while it fdatasyncs DATA,
 * writes the batch and fdatasyncs LOG, and takes them again to publish
 * the new durable point; changes made meanwhile go to the next batch.
 * `failed` is read and set under change_mu.  Readers never see the tree
 * through flextree_stats (a commit changes its counters); flexspace_stats
 * reports tree_st, refreshed under the exclusive lock.
 *
 * Segment life cycle:
 *   FREE --alloc--> OPEN --full or close--> USED --live bytes reach 0-->
 *   PENDING --a sync takes the log naming the removal--> RELEASE
 *   --that log durable, or a tree commit--> FREE
 * A segment whose last extent was removed may still be referenced by the
 * durable metadata (the committed tree plus the synced log) until the
 * removal itself is durable, so it is not overwritten before that; a
 * segment emptied while a sync waits for the disk stays PENDING for the
 * next one.  npending counts PENDING and RELEASE segments.
 *
 * A checkpoint (fs_ckpt.c) copies DATA after letting the locks go, so the
 * segments its copied metadata may name are pinned meanwhile: a segment
 * with pinned[s] set stays PENDING or RELEASE, and is not reused, until
 * the checkpoint ends (fs_seg_release skips it; the next sync or commit
 * after the unpin frees it).
 */
#ifndef FLEXSPACE_INT_H
#define FLEXSPACE_INT_H

#include <pthread.h>
#include <stdint.h>

#include "../common/flex_brlock.h"
#include "flexspace.h"
#include "flextree.h"

#define FS_DEFAULT_SEGMENT (4u << 20)
#define FS_DEFAULT_LOG_LIMIT ((uint64_t)8 << 20)
#define FS_DEFAULT_GC_RATIO 1.5
/* GC is not worth a tree scan for less garbage than this many segments. */
#define FS_GC_MIN_SEGMENTS 4
/* Victims relocated per GC run at most (the paper's batch of 64). */
#define FS_GC_BATCH 64
/* Live bytes a GC run moves at most, in segments (one victim at least):
 * the run lists every piece it moves (24 bytes each) before it starts. */
#define FS_GC_MOVE_SEGMENTS 16
/* Bytes a GC run reads at once at most (or one extent). */
#define FS_GC_READ_BYTES (1u << 20)
/* Initial capacity of the in-memory log buffer (records). */
#define FS_LOGBUF_RECORDS 8192
/* Pieces at least this large bypass the segment buffer (fs_append). */
#define FS_DIRECT_BYTES (32u << 10)
/* Bytes of a log record on disk. */
#define FS_REC_BYTES 24
/* DATA ranges written and waiting to be started on their way to the disk
 * (more are merged into the last), and their alignment: whole 64 KiB, so
 * that no partly written page is written back and then dirtied (and
 * counted as written) again, whatever the kernel's page size. */
#define FS_WB_RANGES 4
#define FS_WB_ALIGN ((uint64_t)64 << 10)

enum fs_seg_state { SEG_FREE = 0, SEG_OPEN, SEG_USED, SEG_PENDING, SEG_RELEASE };

/* Logical log operations (fixed on disk). */
enum fs_op { FS_OP_INSERT = 1, FS_OP_COLLAPSE = 2, FS_OP_REMAP = 3, FS_OP_TAG = 4 };

struct fs_rec {
	uint8_t op;
	uint64_t loff;
	uint64_t len;
	uint64_t arg; /* physical offset, or the tag for FS_OP_TAG */
};

struct flexspace {
	struct flex_brlock lock; /* readers take their thread's stripe */
	pthread_mutex_t sync_mu;
	pthread_mutex_t change_mu;
	int defer_maintenance; /* the option: changes leave it to flexspace_maintain */
	int bounded;	       /* max_data_size set: changes take sync_mu too */
	int read_only;	       /* the option: nothing is ever written */
	struct flextree_stats tree_st; /* the tree's counters, for flexspace_stats */
	const struct flex_io *io;
	char *dir; /* as given to flexspace_open, for the checkpoint's copies */
	int dir_fd;
	int lock_fd;
	int data_fd;
	/* DATA opened O_DIRECT (fs_read.c, flexspace_read_many) when it is
	 * mapped for reads (so the POSIX table), or -1 (also where the file
	 * system refuses O_DIRECT); direct_refused (a relaxed atomic) is set
	 * once a read through it was refused, and the reads go through
	 * data_fd from then on. */
	int direct_fd;
	int direct_refused;
	/* flexspace_read_many_begin's ring (fs_read.c): a struct io_uring
	 * set up by process aring_pid, or NULL; aring_state 0 before the
	 * first use, 1 in use, -1 not to be used (refused or failed); taken
	 * by one job at a time (aring_busy, an atomic). */
	void *aring;
	int aring_state;
	pid_t aring_pid;
	int aring_busy;
	/* The staging buffer the last flexspace_read_many left (fs_read.c;
	 * an atomic pointer). */
	struct fs_stage *stage_keep;
	int log_fd;
	struct flextree *tree;
	int failed; /* status of the failed write or sync; 0 if none */

	/* Geometry and policy. */
	uint32_t seg_size;
	uint32_t max_extent;
	uint64_t log_limit;
	double gc_ratio;
	uint64_t max_data;
	uint64_t tree_cache; /* flexspace_options.tree_cache_size */

	/* Segments: live bytes and state of each. */
	uint32_t nsegs; /* segments in DATA (the array may be longer) */
	uint32_t seg_cap;
	uint32_t *valid;
	uint8_t *state;
	/* When each segment was last freed (free_seq then; 0: never): a place
	 * a read reported under stamp s still holds the same bytes while its
	 * segment's freed_at <= s (flexspace_read_located). */
	uint64_t *freed_at;
	uint64_t free_seq;
	/* Segments freed whose blocks go back to the file system once the
	 * exclusive lock is let go (fs_seg_punch). */
	uint32_t *punch;
	uint32_t npunch;
	size_t punch_cap;
	uint64_t live;
	uint32_t npending;
	uint32_t nfree; /* segments in state SEG_FREE */
	uint32_t free_hint; /* no FREE segment below this index */

	/* The open segment and its buffer: [0, fill) of the segment hold
	 * data, [0, flushed) of it are already in DATA; only the buffer's
	 * bytes [flushed, fill) are meaningful (large pieces bypass it). */
	uint32_t open_seg; /* UINT32_MAX when none */
	uint8_t *buf;
	uint32_t fill;
	uint32_t flushed;
	int data_unsynced; /* DATA written since its last fdatasync */
	/* Ranges of DATA written and not yet handed to the disk (fs_seg.c,
	 * fs_writeback_note): noted under change_mu, started by
	 * fs_excl_unlock once the exclusive lock is let go, since starting
	 * them may wait for the disk's queue. */
	struct {
		uint64_t lo, hi;
	} wb[FS_WB_RANGES];
	uint32_t nwb;

	/* DATA mapped read-only (fs_read.c): bytes below map_end are
	 * copied from the mapping, without a system call when the kernel has
	 * the page.  map is NULL when the I/O table is not the POSIX one (a
	 * test's table must see every read), when no_mmap is set, or when
	 * the kernel refused the mapping.  map_end is how much of DATA is
	 * known to exist: the file's size at open, raised by every write,
	 * lowered by trims, and never above the reservation map_len, so the
	 * mapping is never touched past the end of the file (SIGBUS).
	 * resident is the mapping fs_data_resident asks the kernel about
	 * (mincore): map, or with no_mmap (and the POSIX table) a mapping
	 * without access that no read touches; NULL when there is none or
	 * the kernel would not answer truly (fs_map_data).  Never read
	 * through. */
	const uint8_t *map;
	const void *resident;
	int no_mmap; /* the option */
	uint64_t map_len;
	uint64_t map_end;
	/* Whether the last probe of DATA's mapping found a piece not in
	 * memory (fs_read.c, FS_PROBE_PIECES); a relaxed atomic, any
	 * reader. */
	int map_cold;
	int in_gc;

	/* Logical log.  The records not yet written, encoded as the next
	 * batch will hold them, after room for the batch's header; a sync
	 * takes the buffer whole and the next record starts a new one. */
	uint8_t *logbuf;
	uint32_t nlog;
	uint32_t logcap; /* records */
	uint64_t log_base; /* tree version the log applies to */
	uint64_t log_seq;  /* next batch sequence number */
	uint64_t log_sealed; /* seq in the last seal written for log_base */
	uint64_t log_size; /* bytes of LOG in use, written or being written */
	uint64_t log_durable; /* batches [1, log_durable) of log_base are durable */

	/* Checkpoints: one at a time (ckpt_mu); the segments below npinned
	 * with pinned[s] set are not freed (read and set under change_mu
	 * and the exclusive lock). */
	pthread_mutex_t ckpt_mu;
	uint8_t *pinned;
	uint32_t npinned;

	struct flexspace_stats st;
};

/* fs_seg.c */
int fs_seg_init(struct flexspace *fs, uint64_t data_bytes);
void fs_seg_free(struct flexspace *fs);
int fs_append(struct flexspace *fs, const void *data, uint32_t len, uint64_t *poff,
	      uint32_t *got);
int fs_flush_buffer(struct flexspace *fs);
int fs_flush_unlocked(struct flexspace *fs);
int fs_preflush(struct flexspace *fs, uint64_t len);
void fs_writeback_start(struct flexspace *fs);
int fs_fdatasync_data(struct flexspace *fs);
int fs_sync_data(struct flexspace *fs);
void fs_seg_drop(struct flexspace *fs, uint64_t poff, uint64_t len);
void fs_seg_mark_pending(struct flexspace *fs);
void fs_seg_release(struct flexspace *fs, int all);
/* change_mu held, not the exclusive lock: gives the blocks of the
 * segments fs_seg_release freed back to the file system. */
void fs_seg_punch(struct flexspace *fs);
uint64_t fs_space_avail(const struct flexspace *fs);
int fs_reserve_space(struct flexspace *fs, uint64_t len);
void fs_trim_data(struct flexspace *fs);

/* fs_read.c */
int fs_read_mapped(struct flexspace *fs, uint8_t *buf, uint64_t off, uint64_t len,
		   struct flextree_mapping *loc, size_t *nloc);
int fs_read_located(struct flexspace *fs, uint8_t *buf, const struct flextree_mapping *m,
		    size_t n, uint64_t stamp);
/* Lock held: whether DATA's bytes [poff, poff + len) are known to be in
 * memory, in the page cache or the open segment's buffer (0 when the
 * space cannot tell: no residency mapping, `resident`). */
int fs_data_resident(const struct flexspace *fs, uint64_t poff, uint64_t len);
/* Frees flexspace_read_many_begin's ring (fs_free). */
void fs_aring_exit(struct flexspace *fs);
/* Frees the staging buffer flexspace_read_many keeps (fs_free). */
void fs_stage_exit(struct flexspace *fs);

/* fs_gc.c */
int fs_rebuild_valid(struct flexspace *fs);
int fs_gc_due(const struct flexspace *fs);
/* Whether the data file is over `ratio` bytes per live byte. */
int fs_gc_due_at(const struct flexspace *fs, double ratio);
int fs_gc_run(struct flexspace *fs, int may_release);
/* flexspace_collect: runs on the segments at most half live, all of them. */
int fs_gc_sparse(struct flexspace *fs);
int fs_check_segments(struct flexspace *fs);
int fs_check_overlap(struct flexspace *fs);

/* fs_log.c */
int fs_log_add(struct flexspace *fs, uint8_t op, uint64_t loff, uint64_t len, uint64_t arg);
int fs_log_sync(struct flexspace *fs, int may_release);
int fs_log_open(struct flexspace *fs, const char *path, int create, uint32_t *seg_size,
		int *fresh);
int fs_log_attach(struct flexspace *fs, int fresh, int create);
int fs_log_replay(struct flexspace *fs, uint64_t *records);
int fs_log_reset(struct flexspace *fs);
int fs_apply(struct flextree *t, const struct fs_rec *r);
int fs_commit(struct flexspace *fs);
/* Whether the log or the tree's dirty leaves have passed their bounds. */
int fs_commit_due(const struct flexspace *fs);

/* flexspace.c */
int fs_fail(struct flexspace *fs, int rc);
void fs_excl_lock(struct flexspace *fs);
void fs_excl_unlock(struct flexspace *fs);

#endif /* FLEXSPACE_INT_H */
