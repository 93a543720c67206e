/*
 * fdb_int.h - FlexDB's private interfaces.
 *
 * Modules:
 *   fdb_record.c   the encoding of a pair in the FlexSpace (varint lengths,
 *                  key, value, checksum) and in the WAL
 *   fdb_memtable.c a skip list for one writer and many readers, in an arena
 *   fdb_wal.c      write-ahead log files
 *   fdb_index.c    the sparse index: intervals found by key, whose offsets
 *                  are partial offsets plus shifts (paper section 5.1)
 *   fdb_store.c    intervals in the FlexSpace: the index rebuilt at open,
 *                  puts and deletes applied a run at a time, splits and
 *                  merges, range deletes, check
 *   fdb_tidy.c     tidying: scattered intervals rewritten whole, in key
 *                  order, by the committer (flexdb_compact)
 *   fdb_cache.c    the interval cache: entries (whole or thin, with maps),
 *                  the CLOCK ring, loading an interval, admission
 *   fdb_read.c     gets, the committer's prefetch, warming
 *   fdb_scan.c     scans (fdb_cache.h is what these four share)
 *   flexdb.c       the API, batches, recovery, checkpoints
 *   fdb_commit.c   the write path, the committer thread, group commit
 *   fdb_iter.c     iterators
 *
 * Locking (flexdb.c and fdb_commit.c have the details):
 *   db->wmu     the writers' queue, sequence numbers, memtable
 *               switches; the writer first in the queue appends to the
 *               WAL and the active memtable with it released (w_busy)
 *   db->mtmu    the memtable pointers and their reference counts
 *   db->syncmu  WAL syncs (group commit) and WAL file lifetimes
 *   db->lock    rwlock (striped over threads: flex_brlock.h) over the
 *               sparse index, the cache and the FlexSpace contents:
 *               readers share it, and a cache miss attaches its
 *               interval under it and the store's cache_mu; the committer
 *               and flexdb_check take it exclusively, and fdb_cache_reap
 *               only tries to, without waiting, to free what readers
 *               retired from the cache
 */
#ifndef FDB_INT_H
#define FDB_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../common/flex_codec.h"
#include "../common/flex_hg.h"
#include "flexdb.h"

/* ---- records (fdb_record.c) ----------------------------------------------- */

/* A pair in the FlexSpace: varint klen, varint vlen, key, value, and a
 * 4-byte little-endian checksum (low half of XXH3-64 over everything
 * before it). */
#define FDB_REC_MAX (2 * FLEX_VARINT_MAX + FLEXDB_MAX_KEY + FLEXDB_MAX_VALUE + 4)

size_t fdb_rec_size(uint32_t klen, uint32_t vlen);
size_t fdb_rec_encode(uint8_t *out, const void *key, uint32_t klen, const void *val,
		      uint32_t vlen);
/* Decodes the record at [p, end): its size, and pointers into it.
 * Returns 0, or FLEX_ECORRUPT (bad lengths or checksum, or truncated). */
int fdb_rec_decode(const uint8_t *p, const uint8_t *end, size_t *size, const uint8_t **key,
		   uint32_t *klen, const uint8_t **val, uint32_t *vlen);
/* Decodes only the header: sizes, without the checksum (recovery reads
 * just enough of an anchor to learn its key). */
int fdb_rec_peek(const uint8_t *p, const uint8_t *end, uint32_t *klen, uint32_t *vlen,
		 size_t *hdr);
/* Whether the checksum of the record rec of size bytes (as parsed) holds:
 * 0 or FLEX_ECORRUPT. */
int fdb_rec_check(const uint8_t *rec, size_t size);

/* fdb_rec_decode without the checksum: what lies in [p, end) is only
 * framed, and nothing parsed may be trusted before fdb_rec_check.  A
 * scan parses a whole interval but hashes only the pairs it uses. */
static inline int fdb_rec_parse(const uint8_t *p, const uint8_t *end, size_t *size,
				const uint8_t **key, uint32_t *klen, const uint8_t **val,
				uint32_t *vlen)
{
	size_t hdr;
	if (end - p >= 2 && p[0] && p[0] < 0x80 && p[1] < 0x80) {
		*klen = p[0];
		*vlen = p[1];
		hdr = 2;
	} else if (fdb_rec_peek(p, end, klen, vlen, &hdr)) {
		return FLEX_ECORRUPT;
	}
	size_t body = hdr + *klen + *vlen;
	if ((size_t)(end - p) < body + 4)
		return FLEX_ECORRUPT;
	*key = p + hdr;
	*val = p + hdr + *klen;
	*size = body + 4;
	return 0;
}

/* Orders keys as memcmp over the shorter length, then the shorter first;
 * only the sign of the result means anything.  Inline and a word at a
 * time for the common lengths: searches, merges and scans compare keys
 * more often than they do anything else. */
static inline int fdb_keycmp(const void *a, uint32_t alen, const void *b, uint32_t blen)
{
	const uint8_t *x = a, *y = b;
	uint32_t n = alen < blen ? alen : blen;
	if (n >= 8 && n <= 64) {
		/* Eight bytes at a time, the last word overlapping the one
		 * before it (whose bytes are equal by then). */
		for (uint32_t i = 0;;) {
			uint64_t u, v;
			memcpy(&u, x + i, 8);
			memcpy(&v, y + i, 8);
			if (u != v) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
				u = __builtin_bswap64(u);
				v = __builtin_bswap64(v);
#endif
				return u < v ? -1 : 1;
			}
			i += 8;
			if (i >= n)
				break;
			if (i + 8 > n)
				i = n - 8;
		}
	} else if (n) {
		int c = memcmp(x, y, n);
		if (c)
			return c;
	}
	return alen < blen ? -1 : alen > blen;
}
uint16_t fdb_fingerprint(const void *key, uint32_t klen);

/* ---- memtable (fdb_memtable.c) -------------------------------------------- */

struct fdb_mt;

/* The value of an entry; `tomb` marks a delete.  Immutable once published:
 * a newer put links a new value in front of it (prev), so that a reader
 * can skip versions newer than what it may see: the versions of a batch
 * become visible together, when the writer publishes the batch's
 * sequence number (fdb_db_write, fdb_commit.c). */
struct fdb_val {
	const struct fdb_val *prev;
	uint64_t seq;
	uint32_t vlen;
	uint8_t tomb;
	uint8_t data[];
};

struct fdb_mt *fdb_mt_new(void);
void fdb_mt_free(struct fdb_mt *m);
/* Writer only.  Copies key and value; returns 0 or -ENOMEM. */
int fdb_mt_put(struct fdb_mt *m, const void *key, uint32_t klen, const void *val,
	       uint32_t vlen, int tomb, uint64_t seq);
/* A range delete in a memtable: every key in [start, end) whose version
 * in the memtable is older (start may be empty: from the first key). */
struct fdb_mt_range {
	const struct fdb_mt_range *next; /* older */
	uint64_t seq;
	const uint8_t *start, *end;
	uint32_t slen, elen;
};
/* Writer only: adds a range delete (copied).  0 or -ENOMEM.  It hides,
 * from fdb_mt_get and fdb_mt_val, the versions in this memtable with a
 * smaller sequence number; fdb_mt_count counts it as an entry. */
int fdb_mt_del_range(struct fdb_mt *m, const void *start, uint32_t slen, const void *end,
		     uint32_t elen, uint64_t seq);
/* Any thread: the range deletes, newest first (NULL when none, the common
 * case readers test first). */
const struct fdb_mt_range *fdb_mt_ranges(const struct fdb_mt *m);
/* The newest range delete with seq <= max_seq covering key, or NULL. */
const struct fdb_mt_range *fdb_mt_range_find(const struct fdb_mt *m, const void *key,
					     uint32_t klen, uint64_t max_seq);
/* Where the last fdb_mt_put_next left off: its predecessors per level. */
#define FDB_MT_MAX_HEIGHT 12
struct fdb_mt_finger {
	void *prev[FDB_MT_MAX_HEIGHT];
	int height; /* levels of prev that are set; 0: none yet */
};
/* fdb_mt_put for keys in ascending order (equal keys in ascending seq):
 * each search starts where the last one ended, so a sorted run costs
 * about one step per pair instead of a search from the head.  The finger
 * starts zeroed and is valid until another put changes the memtable. */
int fdb_mt_put_next(struct fdb_mt *m, struct fdb_mt_finger *f, const void *key, uint32_t klen,
		    const void *val, uint32_t vlen, int tomb, uint64_t seq);
/* Any thread, concurrently with the writer: the newest version with a
 * sequence number <= max_seq, or NULL.  It stays valid while the memtable
 * lives.  A key a newer range delete of the memtable covers reads as a
 * tombstone with tomb == 2. */
const struct fdb_val *fdb_mt_get(const struct fdb_mt *m, const void *key, uint32_t klen,
				 uint64_t max_seq);
size_t fdb_mt_bytes(const struct fdb_mt *m);
uint64_t fdb_mt_count(const struct fdb_mt *m);

/* Ordered iteration; `node` is opaque. */
struct fdb_mt_iter {
	const struct fdb_mt *m;
	const void *node;
};
void fdb_mt_seek(struct fdb_mt_iter *it, const struct fdb_mt *m, const void *key, uint32_t klen);
/* Positions at the last key <= key (klen 0: the last key). */
void fdb_mt_seek_le(struct fdb_mt_iter *it, const struct fdb_mt *m, const void *key,
		    uint32_t klen);
int fdb_mt_valid(const struct fdb_mt_iter *it);
void fdb_mt_next(struct fdb_mt_iter *it);
/* Moves to the previous key (O(log n) search). */
void fdb_mt_prev(struct fdb_mt_iter *it);
const uint8_t *fdb_mt_key(const struct fdb_mt_iter *it, uint32_t *klen);
/* The newest version <= max_seq of the current entry, or NULL; a range
 * delete covers it as in fdb_mt_get. */
const struct fdb_val *fdb_mt_val(const struct fdb_mt_iter *it, uint64_t max_seq);

/* ---- WAL (fdb_wal.c) -------------------------------------------------------- */

/* FDB_OP_DEL_RANGE: key is the start (may be empty), val the end. */
enum { FDB_OP_PUT = 1, FDB_OP_DEL = 2, FDB_OP_DEL_RANGE = 3 };

struct fdb_wal {
	const struct flex_io *io;
	int fd;
	uint64_t gen;
	_Atomic uint64_t size;	     /* end of the records; changed by the writer only */
	_Atomic uint64_t last_seq;   /* of the last record written */
	_Atomic uint64_t synced_seq; /* every record <= this is durable */
	pthread_mutex_t markmu;	     /* orders the sync marks of concurrent syncs */
	uint64_t marked;	     /* seq in the last sync mark written */
	uint64_t started;	     /* bytes handed to the disk (fdb_wal_writeback) */
	char path[];
};

/* space[2] is the FlexSpace's durable point now (fdb_walset_create); the
 * header keeps it. */
int fdb_wal_create(const struct flex_io *io, int dir_fd, const char *dir, uint64_t gen,
		   const uint64_t space[2], struct fdb_wal **out);
/* Appends the records of n batches (payloads from fdb_batch), of
 * sequence numbers seq, seq + 1, ..., one record per batch, in one
 * write.  Each record is checked on its own at recovery, which stops at
 * the first bad one: after a crash that tore the write, at most a prefix
 * of them is replayed. */
int fdb_wal_append_group(struct fdb_wal *w, uint64_t seq, size_t n, const uint8_t *const *payload,
			 const size_t *len);
/* Thread-safe: makes every record appended before the call durable. */
int fdb_wal_sync(struct fdb_wal *w);
/* The writer that appends, after an append: starts the whole MiBs written
 * since the last call on their way to the disk (io->writeback), so that
 * the sync at the memtable switch, or a flexdb_sync, has less left to
 * wait for.  Advisory: nothing becomes durable by it. */
void fdb_wal_writeback(struct fdb_wal *w);
void fdb_wal_close(struct fdb_wal *w);

/* Checkpoints: copies the WAL of generation gen, open as src_fd, into a
 * new file of directory dir and makes it durable.  upto == UINT64_MAX
 * copies the whole file (one no longer written to); otherwise the file is
 * the active one and only its records below offset upto are copied, and
 * not its sync mark, which may name later records. */
int fdb_wal_copy(const struct flex_io *io, int src_fd, uint64_t gen, uint64_t upto,
		 const char *dir);

typedef int (*fdb_wal_fn)(void *arg, uint64_t seq, const uint8_t *payload, size_t len);
/* Replaying a WAL file takes two steps, so that the first may run while
 * the FlexSpace opens.  fdb_wal_scan reads one file (fdb_walset_list
 * lists them), calls fn for each valid record in order, stopping at the
 * first torn one, and syncs the file (not when read_only: it is opened
 * O_RDONLY); it changes nothing a reader sees.  *last_seq is the previous
 * file's last sequence number on entry and this file's on return; *nrec
 * gets the records replayed; `newest`: no later file exists.
 * fdb_wal_settle then holds the file against space[2], the point the
 * FlexSpace recovered to, and cuts the torn tail off (not when
 * read_only).  FLEX_ECORRUPT when a record that was synced is missing or
 * damaged, or the FlexSpace is older than when the file was created (see
 * fdb_wal.c). */
struct fdb_wal_scanned {
	uint64_t gen;
	uint64_t point[2];  /* the FlexSpace's durable point at its creation */
	uint64_t end, size; /* where its sound records end; its size */
	int has_point;	    /* point is known (not a format 1 file) */
	int headless;	    /* its header never became durable */
};
int fdb_wal_scan(const struct flex_io *io, const char *dir, uint64_t gen, int newest, int read_only,
		 fdb_wal_fn fn, void *arg, uint64_t *last_seq, uint64_t *nrec,
		 struct fdb_wal_scanned *out);
int fdb_wal_settle(const struct flex_io *io, const char *dir, const struct fdb_wal_scanned *sc,
		   const uint64_t space[2], int read_only);

/* A batch payload: u32 count, then per op: u8 op, varint klen, [varint
 * vlen], key, [value]; a range delete is encoded as a put of start and end
 * with op FDB_OP_DEL_RANGE. */
struct fdb_batch_op {
	uint8_t op;
	const uint8_t *key;
	uint32_t klen;
	const uint8_t *val;
	uint32_t vlen;
};
/* Iterates the ops of a payload; returns 1 with *op filled, 0 at the end,
 * FLEX_ECORRUPT on damage.  *pos starts at 0. */
int fdb_payload_next(const uint8_t *payload, size_t len, size_t *pos, struct fdb_batch_op *op);

/* ---- sparse index (fdb_index.c) ------------------------------------------ */

/* An interval: consecutive pairs in the FlexSpace whose first key is at
 * least `key` (the first interval's key is empty, below every key). */
struct fdb_cent;
struct fdb_ival {
	uint8_t *key;
	struct fdb_cent *cache;
	uint32_t klen;
	uint32_t size;	/* bytes */
	uint32_t count; /* pairs; FDB_COUNT_UNKNOWN after recovery */
	/* The key came from an anchor pair too long to verify at open; its
	 * checksum is checked when the interval is loaded or a lookup ends
	 * just before it (fdb_store.c). */
	uint8_t unverified;
	/* The FlexSpace extents its bytes lie in, at most: exact when last
	 * counted, raised by every run that changes it, FDB_PIECES_MAX at
	 * most (fdb_store.c, ival_scattered). */
	uint8_t pieces;
};
#define FDB_COUNT_UNKNOWN UINT32_MAX
#define FDB_PIECES_MAX 255

struct fdb_index;
#define FDB_INDEX_MAX_HEIGHT 32
struct fdb_ipath {
	int depth;
	void *node[FDB_INDEX_MAX_HEIGHT];
	int idx[FDB_INDEX_MAX_HEIGHT];
	int64_t base[FDB_INDEX_MAX_HEIGHT];
	void *leaf;
	int j;
	int64_t leaf_base;
};

struct fdb_index *fdb_index_new(void);
void fdb_index_free(struct fdb_index *x); /* frees the intervals too */
uint64_t fdb_index_count(const struct fdb_index *x);
/* Finds the interval for key: the last one whose key is <= key. */
struct fdb_ival *fdb_index_find(const struct fdb_index *x, const void *key, uint32_t klen,
				struct fdb_ipath *p);
struct fdb_ival *fdb_index_first(const struct fdb_index *x, struct fdb_ipath *p);
struct fdb_ival *fdb_index_last(const struct fdb_index *x, struct fdb_ipath *p);
struct fdb_ival *fdb_index_next(struct fdb_ipath *p);
/* The interval dist places after (dist < 0: before) the path's when it
 * is in the same leaf, else NULL; the path does not move (prefetching). */
const struct fdb_ival *fdb_index_peek(const struct fdb_ipath *p, int dist);
struct fdb_ival *fdb_index_prev(struct fdb_ipath *p);
uint64_t fdb_index_offset(const struct fdb_ipath *p);
/* Call after changing the key of the path's interval (which must keep
 * its place in the order). */
void fdb_index_rekey(struct fdb_index *x, struct fdb_ipath *p);
/* Adds delta to the offsets of every interval after the path's. */
void fdb_index_shift(struct fdb_ipath *p, int64_t delta);
/* Inserts iv right after the path's interval (or first, in an empty
 * index) at offset off; the path is invalid afterwards. */
int fdb_index_insert_after(struct fdb_index *x, struct fdb_ipath *p, struct fdb_ival *iv,
			   uint64_t off);
/* Removes the path's interval (not freed); the path is invalid after. */
void fdb_index_remove(struct fdb_index *x, struct fdb_ipath *p);
/* Removes up to n intervals from the path's on, as many as its leaf
 * holds (not freed: fdb_index_peek finds them before); returns how many.
 * The path is invalid after.  O(leaf + height): a range delete drops a
 * leaf's worth of intervals at a time. */
uint32_t fdb_index_remove_n(struct fdb_index *x, struct fdb_ipath *p, uint32_t n);
/* Appends at the end (recovery). */
int fdb_index_append(struct fdb_index *x, struct fdb_ival *iv, uint64_t off);
int fdb_index_check(const struct fdb_index *x);

/* ---- the store (fdb_store.c) ----------------------------------------------- */

/* Where an interval's bytes lie in the FlexSpace's DATA, as the read that
 * loaded it found them (flexspace_read_locate): piece i starts loff[i]
 * bytes into the interval and runs to the next one's start (the last to
 * the interval's end), at DATA offset poff[i].  A thin entry made of an
 * entry that has it reads a pair without asking the FlexTree; `stamp`
 * tells the FlexSpace whether the pieces still hold those bytes. */
struct fdb_pmap {
	uint64_t stamp;
	uint32_t n;
	uint32_t loff[]; /* then uint64_t poff[n], 8-aligned: fdb_cache.c */
};

/* A cached interval: its raw bytes as stored in the FlexSpace (records
 * back to back, checksums verified when they entered), the offset of each
 * record, and each key's 16-bit fingerprint.  One allocation per array,
 * none per pair, so the cache holds nearly its size in pairs.
 *
 * A *thin* entry (raw NULL, `thin` set) keeps only the fingerprints, where
 * each record starts and where the bytes lay when they were read: a lookup
 * reads the one record it needs.  It is the fields up to FDB_CENT_HEAD and
 * its arrays after them, in one allocation of about 5 bytes per pair
 * (fdb_cache.c, "thin entries"): the fields after the head do not exist
 * in it.  In the cache, raw is NULL exactly in thin entries. */
struct fdb_cent {
	uint8_t *raw;
	struct fdb_ival *iv;
	size_t bytes; /* accounted against the cache size */
	uint32_t size, n;
	uint32_t slot;	  /* index in its CLOCK ring */
	atomic_uchar ref; /* CLOCK bit */
	uint8_t thin;	  /* 0, or how a thin entry's offsets are kept */
	uint16_t pieces;  /* of a thin entry's map (0: none) */
	/* Whole entries (and entries on their way into the cache) only. */
	uint32_t *off;
	uint16_t *fp;
	/* Any change drops it. */
	struct fdb_pmap *map;
	uint32_t rawcap, cap;
	uint8_t packed;	 /* off and fp live in the struct's allocation */
	uint8_t map_own; /* map is an allocation of its own */
};
#define FDB_CENT_HEAD offsetof(struct fdb_cent, off)
_Static_assert(FDB_CENT_HEAD % 8 == 0, "a thin entry's 64-bit arrays follow its head");

/* The counters lookups bump, in stripes 128 bytes apart so that readers on
 * different threads do not write the same cache line: a thread bumps its
 * own stripe (fdb_stat_add), fdb_store_cache_counts sums them. */
/* FDB_ST_SCANS: store reads of scans and iterators (for warming's count
 * of the threads reading); FDB_ST_SCAN_LOCATED and FDB_ST_SCAN_STALE: those
 * of their reads that went through thin entries' maps, and those the maps
 * could not serve (the bytes moved); FDB_ST_RENEWED: thin entries given
 * a fresh map in place of one a get or a scan found stale;
 * FDB_ST_SEEK_JUMPS and FDB_ST_SEEK_JUMP_MISSES: forward seeks that
 * started at their key's pair through a thin entry, and those whose
 * fingerprint's pair held another key (fdb_store_scan);
 * FDB_ST_FETCH_AHEAD and FDB_ST_FETCH_STALE: intervals the committer's
 * prefetch took from the reads begun while the chunk before was applied,
 * and begun reads it read again (fdb_store_prefetch). */
enum {
	FDB_ST_HITS,
	FDB_ST_THIN_HITS,
	FDB_ST_THIN_LOCATED,
	FDB_ST_MISSES,
	FDB_ST_SCANS,
	FDB_ST_SCAN_LOCATED,
	FDB_ST_SCAN_STALE,
	FDB_ST_RENEWED,
	FDB_ST_SEEK_JUMPS,
	FDB_ST_SEEK_JUMP_MISSES,
	FDB_ST_FETCH_AHEAD,
	FDB_ST_FETCH_STALE,
	FDB_ST_N
};
#define FDB_STAT_STRIPES 8
struct fdb_stat_stripe {
	atomic_ullong v[FDB_ST_N];
	char pad[128 - FDB_ST_N * sizeof(atomic_ullong)];
};

/* A CLOCK ring of cached entries, and where its hand stands. */
struct fdb_ring {
	struct fdb_cent **v;
	uint32_t n, cap, hand;
};

struct fdb_store {
	struct flexspace *fs;
	struct fdb_index *index;
	/* CLOCK rings of cached intervals.  Readers attach the intervals they
	 * read under the shared lock and cache_mu; the exclusive lock
	 * excludes them.  An entry a reader takes out of the cache may still
	 * be in another reader's hands: it waits in the graveyard until the
	 * next exclusive holder frees it (fdb_store_reap).  Its bytes stay
	 * charged there, and the rings keep a 32nd of the cache for them.
	 * Readers load cache_bytes and grave_bytes without the mutex. */
	pthread_mutex_t cache_mu;
	struct fdb_ring ring[2]; /* whole entries, thin ones (fdb_cache.c) */
	size_t cache_bytes, cache_limit;
	size_t thin_bytes;     /* of thin entries, at most 3/4 of the cache */
	size_t thin_map_bytes; /* of those, their maps' (fdb_cent_map_bytes) */
	struct fdb_cent **grave;
	uint32_t ngrave, grave_cap;
	size_t grave_bytes;
	uint64_t admit_tick;
	/* Whether thin entries keep their maps (fdb_cache.c, maps_policy):
	 * relaxed atomic, set under cache_mu or the exclusive lock. */
	int use_maps;
	uint64_t pol_tick;
	uint64_t keys, bytes; /* keys: cache_mu or the exclusive lock */
	uint64_t uncounted; /* intervals whose pair count is not known yet */
	uint64_t memtable_size; /* flexdb_options' (ival_scattered weighs it) */
	/* Status of a change that failed part-way: the FlexSpace may hold
	 * some of it and the index and cache none, so nothing may be read
	 * through them any more (FLEX_EFAILED); 0 while they agree. */
	int failed;
	struct fdb_stat_stripe stat[FDB_STAT_STRIPES]; /* fdb_stat_add */
	atomic_ullong gen; /* changed by every apply: see fdb_cands */
	uint8_t *rec; /* scratch for one encoded record */
	/* The run of changes being worked out (fdb_store.c, "runs"): while
	 * in_run is set the FlexSpace is behind the index. */
	struct fdb_run *run;
	int in_run;
	/* Tidying (fdb_tidy.c): the committer's cursor and what it read;
	 * tidy_credit: bytes commits wrote that tidying may still rewrite
	 * (committer only); tidy_bytes, tidy_due: for stats. */
	struct fdb_tidy *tidy;
	/* Warming (fdb_read.c, fdb_store_warm): the committer's cursor, the
	 * key of the next interval to read; warm_done once a pass ended. */
	uint8_t *warm_key;
	uint32_t warm_klen;
	atomic_int warm_done;
	int no_tidy; /* the space has max_data_size */
	int from_snap; /* the index came from the file INDEX (fdb_snap.c) */
	uint64_t snap_stamp; /* the stamp of that INDEX */
	int tidy_whole; /* the last step ended a pass with nothing left */
	uint64_t tidy_credit;
	_Atomic uint64_t tidy_bytes;
	atomic_int tidy_due;
};

/* Builds the index of the open FlexSpace fs: from the file INDEX in dir
 * when a clean close left one of these contents (fdb_snap.c), else from
 * the anchors. */
int fdb_store_open(struct fdb_store *s, struct flexspace *fs, uint64_t cache_limit,
		   const struct flex_io *io, const char *dir);
void fdb_store_close(struct fdb_store *s);
/* Exclusive lock held: applies the puts and deletes at the start of
 * ops[0..n), sorted by key, that fall into one interval (*done of them,
 * at least one unless it fails) as one flexspace_apply.  After a failure
 * every fdb_store_* call below returns FLEX_EFAILED. */
int fdb_store_apply_run(struct fdb_store *s, const struct fdb_batch_op *ops, int n, int *done);

/* Tidying: rewriting whole, in key order, the intervals whose bytes lie
 * in more than one extent, between memtables (fdb_tidy.c).  Committer
 * only.  fdb_store_tidy_read (shared lock) looks at the intervals from
 * where the last step stopped and reads those to rewrite;
 * fdb_store_tidy_write (exclusive lock) rewrites up to `burst` of them
 * from *i on, each as one flexspace_apply (a failed one fails the store,
 * as in fdb_store_apply_run).
 * fdb_store_tidy_grant starts tidying with the credit commits gave, or
 * with full, with enough for a whole pass. */
int fdb_store_tidy_read(struct fdb_store *s, uint32_t *n);
int fdb_store_tidy_write(struct fdb_store *s, uint32_t *i, uint32_t burst);
void fdb_store_tidy_grant(struct fdb_store *s, int full);

/* Exclusive lock held: removes every pair with start <= key < end: the
 * bytes of the edge intervals' pairs and of every interval between them
 * go in one collapse. */
int fdb_store_delete_range(struct fdb_store *s, const void *start, uint32_t slen,
			   const void *end, uint32_t elen);

/* Cache entries a reader built under the shared lock from intervals it
 * read anyway; fdb_store_admit attaches them if the store has not changed
 * since fdb_cands_init (its generation). */
#define FDB_CANDS_INLINE 32
struct fdb_cand {
	struct fdb_ival *iv;
	struct fdb_cent *c;
	int kind; /* ADMIT_WHOLE, ADMIT_AUTO, ADMIT_ROOM or ADMIT_RENEW (fdb_cache.h) */
	const struct fdb_cent *old; /* the entry an ADMIT_RENEW one replaces */
};
struct fdb_cands {
	uint64_t gen;
	int n, cap;
	int done;	    /* admitted so far (fdb_store_admit_part) */
	struct fdb_cand *v; /* inline_v, or the caller's array of cap */
	struct fdb_cand inline_v[FDB_CANDS_INLINE];
};
/* Shared lock held: starts an empty set with room for FDB_CANDS_INLINE
 * entries, or for cap in v when v is not NULL. */
void fdb_cands_init(struct fdb_store *s, struct fdb_cands *cands, struct fdb_cand *v, int cap);
/* Frees the entries. */
void fdb_cands_free(struct fdb_cands *cands);
/* Attaches (or frees) the entries; `shared`: the caller holds the shared
 * lock it held at fdb_cands_init, otherwise the exclusive lock. */
void fdb_store_admit(struct fdb_store *s, struct fdb_cands *cands, int shared);
/* Exclusive lock held: fdb_store_admit in parts of at most max entries
 * (all of them when max <= 0), so that the caller may let readers in
 * between, the store unchanged meanwhile (readers only cache, and reap
 * what they retired): 1 while entries are left. */
int fdb_store_admit_part(struct fdb_store *s, struct fdb_cands *cands, int max);
/* Any lock: whether the graveyard is worth a fdb_store_reap. */
int fdb_store_reap_due(struct fdb_store *s);
/* Exclusive lock held: frees the entries readers retired. */
void fdb_store_reap(struct fdb_store *s);
/* Shared lock held: the pair count and the intervals not counted yet. */
void fdb_store_counts(struct fdb_store *s, uint64_t *keys, uint64_t *uncounted);
/* Any lock: bumps counter `which` (FDB_ST_*); the sums of them. */
void fdb_stat_add(struct fdb_store *s, int which);
void fdb_store_cache_counts(struct fdb_store *s, uint64_t out[FDB_ST_N]);
/* Any lock: how many of the counters' stripes moved since seen[] (which
 * it updates), about how many threads looked pairs up meanwhile. */
int fdb_store_lookup_threads(struct fdb_store *s, uint64_t seen[FDB_STAT_STRIPES]);

/* Shared lock held.  Returns 0 (found: value copied as flexdb_get does),
 * FLEXDB_NOTFOUND or an error.  A miss offers its interval in cands. */
int fdb_store_get(struct fdb_store *s, const void *key, uint32_t klen, void *buf, size_t cap,
		  size_t *vlen, struct fdb_cands *cands);
/* Shared lock held, the committer only: one step of warming the cache
 * (fdb_read.c); sets warm_done once the pass is over. */
void fdb_store_warm(struct fdb_store *s);
/* The committer, before it applies a run to the interval before nx (at
 * q): starts fetching the memory of the next intervals (fdb_read.c). */
void fdb_run_prefetch(const struct fdb_ipath *q, const struct fdb_ival *nx);
/* Reads ahead for the committer (fdb_read.c): the uncached intervals a
 * chunk changes, with a buffer each, and the reads begun into them. */
struct fdb_fetch {
	struct fdb_ival **list;
	uint64_t *offs;	 /* where each interval was */
	uint32_t *sizes; /* and its size then */
	uint32_t *room;	 /* bytes its buffer has beyond the size */
	uint8_t **raws;
	int nl;
	struct flexspace_reads *reads; /* begun, not yet waited for */
	uint64_t size;		       /* the space's size at the begin */
	int rc;			       /* of the reads, once waited for */
};
/* Shared lock held: begins the reads of the uncached intervals ops[0..n)
 * change, all after the one holding after_key (the last key of the chunk
 * applied meanwhile) and the one after it, into *f.  On error (nothing
 * begun) *f is empty. */
int fdb_fetch_begin(struct fdb_store *s, const struct fdb_batch_op *ops, int n,
		    const void *after_key, uint32_t after_klen, struct fdb_fetch *f);
/* Waits for f's reads (no lock needed). */
void fdb_fetch_wait(struct fdb_fetch *f);
/* Waits for f's reads, frees f and empties it. */
void fdb_fetch_free(struct fdb_fetch *f);
/* Shared lock held: reads the uncached intervals that ops[0..n) (in key
 * order) will change, taking those `ahead` (waited for, or NULL) read
 * and still current, and offers them in cands, so that the committer
 * applies them under the exclusive lock without reading.  Frees ahead. */
int fdb_store_prefetch(struct fdb_store *s, const struct fdb_batch_op *ops, int n,
		       struct fdb_cands *cands, struct fdb_fetch *ahead);
/* A cache miss admits its interval whole into a full cache once in this
 * many (thin otherwise). */
#define FDB_ADMIT_EVERY 16
/* A bump allocator whose blocks never move: an iterator copies a chunk of
 * pairs into one, and frees it whole when it reads the next chunk. */
struct fdb_ar_blk;
struct fdb_ar {
	struct fdb_ar_blk *blk;
	struct fdb_ar_blk *spare; /* kept by fdb_ar_reset for the next fill */
	uint64_t mallocs;	  /* blocks it asked the allocator for */
};
void *fdb_ar_alloc(struct fdb_ar *a, size_t n);
void fdb_ar_reset(struct fdb_ar *a);
/* fdb_ar_reset keeping at most `keep` bytes of blocks (a parked iterator's). */
void fdb_ar_trim(struct fdb_ar *a, size_t keep);
void fdb_ar_free(struct fdb_ar *a);

/* A copied pair: key then value, in an fdb_ar.  A pair the store scan
 * found in a record it has not verified is `unchecked`: it points into
 * the record, read whole into the arena (its hdr bytes of lengths before
 * the key, its checksum after the value), and fdb_pair_check verifies it
 * before the pair is used. */
struct fdb_pair {
	uint8_t *key;
	uint32_t klen;
	uint32_t vlen;
	uint8_t tomb; /* memtable deletes, while merging */
	uint8_t unchecked;
	uint8_t hdr; /* of an unchecked pair */
};

/* 0, or FLEX_ECORRUPT when p is unchecked and its record is damaged. */
static inline int fdb_pair_check(struct fdb_pair *p)
{
	if (!p->unchecked)
		return 0;
	if (fdb_rec_check(p->key - p->hdr, (size_t)p->hdr + p->klen + p->vlen + 4))
		return FLEX_ECORRUPT;
	p->unchecked = 0;
	return 0;
}

/* Shared lock held: returns up to max pairs, their bytes in ar, in key
 * order starting at the
 * first key >= from (> from unless inclusive), or with reverse, in
 * descending order from the last key <= from (< from unless inclusive);
 * flen 0 starts at the first (last) key.  A non-NULL lim ends the scan
 * before the first key >= lim (with reverse, < lim), and no interval
 * wholly past it is read.  Uncached intervals read are offered in
 * cands.  Pairs may be unchecked, but not the last when there are max of
 * them, nor any whose key decided where the scan starts or stops. */
int fdb_store_scan(struct fdb_store *s, const void *from, uint32_t flen, int inclusive, int reverse,
		   const void *lim, uint32_t limlen, struct fdb_pair *out, int max, int *n,
		   struct fdb_ar *ar, struct fdb_cands *cands);
int fdb_store_check(struct fdb_store *s);

/* ---- the front end's private files (fdb_db.h: flexdb.c, fdb_commit.c,
 * fdb_iter.c) ----------------------------------------------------------------- */

/* How many times an iterator grew its buffers: a refill that needed a
 * new arena block, or a key buffer too small for a key.  Refills reuse
 * them, so once the iterator has read a chunk of its largest pairs the
 * count stops growing. */
uint64_t fdb_iter_grows(const struct flexdb_iter *it);

/* ---- WAL sets (fdb_wal.c) ---------------------------------------------------- */

/* A WAL file's name: "WAL-" and its generation as 16 hex digits. */
#define FDB_WAL_NAME 21 /* bytes, with the NUL */
void fdb_wal_name(char name[FDB_WAL_NAME], uint64_t gen);

/* The WAL files of a store's directory, and the FlexSpace whose durable
 * point they record (flexspace_durable). */
struct fdb_walset {
	const struct flex_io *io;
	const char *dir;
	int dir_fd;
	struct flexspace *fs;
};
/* dir/WAL-<gen>; -ENAMETOOLONG when it does not fit in cap. */
int fdb_walset_path(const struct fdb_walset *ws, uint64_t gen, char *buf, size_t cap);
/* The generations of the files in the directory, sorted (*gens to free). */
int fdb_walset_list(const struct fdb_walset *ws, uint64_t **gens, size_t *n);
/* fdb_wal_create, recording the FlexSpace's durable point now. */
int fdb_walset_create(const struct fdb_walset *ws, uint64_t gen, struct fdb_wal **out);
/* fdb_wal_settle, against the point the FlexSpace recovered to. */
int fdb_walset_settle(const struct fdb_walset *ws, const struct fdb_wal_scanned *sc, int read_only);
/* Opens the file of generation gen read-only: its descriptor, or -errno
 * (-ENOENT when it is gone). */
int fdb_walset_open(const struct fdb_walset *ws, uint64_t gen);
/* Who removes files, for the killpoints (flex_killpoint.h) around the
 * directory sync: fdb.commit.dir.sync.* and fdb.recover.dir.sync.*, or
 * none. */
enum fdb_wal_rm { FDB_WAL_RM_QUIET, FDB_WAL_RM_COMMIT, FDB_WAL_RM_RECOVER };
/* Unlinks the files of gens[0..n) (missing ones are fine), then syncs the
 * directory, so that a removed file cannot come back after a crash to be
 * replayed over newer data. */
int fdb_walset_remove(const struct fdb_walset *ws, const uint64_t *gens, size_t n,
		      enum fdb_wal_rm site);

#endif /* FDB_INT_H */
