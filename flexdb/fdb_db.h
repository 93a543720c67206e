/*
 * fdb_db.h - the FlexDB handle, shared by the files that make up its
 * front end (private):
 *   flexdb.c       the API: open, close, recovery, batches, point reads,
 *                  checkpoints, check and stats
 *   fdb_commit.c   the write path, memtable references, the committer
 *                  thread, memtable switches and group commit
 *   fdb_iter.c     iterators
 *
 * Locking is described in fdb_int.h and flexdb.c.
 */
#ifndef FDB_DB_H
#define FDB_DB_H

#include <time.h>

#include "../common/flex_brlock.h"
#include "fdb_int.h"

/* A memtable with the WAL that holds its records. */
struct fdb_memref {
	struct fdb_mt *mt;
	struct fdb_wal *wal;
	atomic_int refs;
};

/* Iterators a handle keeps parked: see fdb_iter.c. */
#define FDB_ITER_PARKED 4

/* How long a writer queued behind a group watches for its batch to be
 * written before it sleeps (fdb_commit.c, writer_spin). */
#define FDB_WRITER_SPIN_NS 30000u

struct flexdb {
	const struct flex_io *io;
	char *dir;
	int dir_fd;
	int lock_fd;
	struct flexspace *fs;
	struct fdb_walset wals; /* the WAL files of dir */
	struct fdb_store store;
	struct flex_brlock lock;

	pthread_mutex_t wmu;
	/* Writers in the order they came (under wmu): the first leads a
	 * group, writing its own batch and those queued behind it, and
	 * writes them with wmu released (w_busy set meanwhile; wcond tells
	 * its end to those that must not change the memtables during it).
	 * wq_head and each writer's `done` are also read without wmu, by
	 * writers watching for their turn (writer_spin): they are stored
	 * atomically.  spinners: writers watching now (under wmu), at most
	 * spin_max (one fewer than the CPUs the process may use). */
	struct fdb_writer *wq_head, *wq_tail;
	int w_busy;
	int spin_max, spinners;
	pthread_cond_t wcond;
	uint64_t seq;		  /* last of the last group written; under wmu */
	_Atomic uint64_t written; /* last sequence number in a WAL */
	_Atomic uint64_t visible; /* last batch fully in the memtable */
	uint64_t wal_gen;	  /* next WAL generation; under wmu */

	pthread_mutex_t mtmu;
	pthread_cond_t mtcond;
	struct fdb_memref *active, *imm;
	int stop;
	/* flexdb_compact's requests (under mtmu): the last one made, started
	 * and answered (the committer answers once tidying is done), and
	 * whether one not started yet asked for a whole pass.  tidy_written:
	 * db->written when the committer last looked, to tell whether writes
	 * paused. */
	uint64_t compact_gen, compact_started, compact_done;
	int compact_full;
	uint64_t tidy_written;
	/* Warming (fdb_commit.c, warm_room): the CPUs the process may run on,
	 * and the lookup counters' stripes when the committer last looked. */
	int ncpu;
	uint64_t warm_seen[FDB_STAT_STRIPES];

	pthread_mutex_t syncmu;
	pthread_cond_t synccond;
	int sync_busy;
	uint64_t synced;

	uint64_t *rec_gens; /* WAL files replayed at open, removed once their */
	size_t nrec_gens;   /* memtable is committed */

	pthread_t committer;
	int committer_started;
	atomic_int failed;

	uint64_t memtable_size;
	int sync_writes;
	int read_only; /* the option: no WAL, no committer, nothing written */

	_Atomic uint64_t writer_stalls, wal_syncs, committer_runs, committed_pairs;
	uint64_t recovered_ops;

	/* Closed iterators kept for the next opens (fdb_iter.c), on cache
	 * lines of their own: readers open and close iterators while the
	 * committer counts its work above. */
	char parked_pad[64];
	_Atomic(struct flexdb_iter *) parked[FDB_ITER_PARKED];
	char parked_end[64];
};

/* A deadline ms milliseconds from now, for pthread_cond_timedwait on a
 * condition variable of the default clock. */
static inline void fdb_deadline(struct timespec *ts, long ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/* Records the first failure: the handle refuses writes from then on
 * (FLEX_EFAILED).  Returns rc. */
static inline int fdb_db_fail(struct flexdb *db, int rc)
{
	int zero = 0;
	if (rc)
		atomic_compare_exchange_strong(&db->failed, &zero, rc);
	return rc;
}

/* ---- memtable references (fdb_commit.c) ------------------------------------ */

/* A memtable without a WAL: the one rebuilt from the WALs at open, and a
 * read-only handle's active one, which stays empty.  NULL: no memory. */
struct fdb_memref *fdb_memref_bare(void);
/* A memtable with a new WAL of generation gen; NULL with *rc set on
 * failure. */
struct fdb_memref *fdb_memref_new(struct flexdb *db, uint64_t gen, int *rc);
/* Drops a reference (NULL: nothing); the last one frees the memtable and
 * closes its WAL. */
void fdb_memref_put(struct fdb_memref *m);
/* References to the current memtables (*i may be NULL). */
void fdb_memrefs_get(struct flexdb *db, struct fdb_memref **a, struct fdb_memref **i);

/* ---- the committer and group commit (fdb_commit.c) -------------------------- */

/* The committer thread's body; arg is the handle. */
void *fdb_committer_main(void *arg);
/* wmu held, no group being written (fdb_writers_idle): hands the active
 * memtable to the committer and starts a new one, waiting for the
 * previous hand-over to finish. */
int fdb_switch_memtable(struct flexdb *db);
/* Waits until every WAL record up to seq is durable (group commit). */
int fdb_sync_to(struct flexdb *db, uint64_t seq);
/* Any thread, after a read: frees the cache entries readers retired, if
 * that is due and costs no wait. */
void fdb_cache_reap(struct flexdb *db);

/* ---- recovery (fdb_recover.c) ----------------------------------------------- */

/* Replays the WAL files left by the last session, in generation and
 * sequence order, into a memtable that becomes the immutable one: the
 * committer applies it in the background, and open does not wait for the
 * FlexSpace.  The old files stay until then (and are synced now, so that
 * nothing written after this open can outlive what it recovered).
 *
 * Two steps: fdb_recover_scan reads the files into the memtable and syncs
 * them, which changes nothing a reader sees, so it runs while the
 * FlexSpace opens (db_open); fdb_recover_finish holds each file against the
 * point the FlexSpace recovered to, cuts its torn tail and sets the
 * handle's sequence numbers and WAL generation.  The caller lists the
 * files into gens and n (fdb_walset_list) and frees gens and sc after. */
struct fdb_recovery {
	uint64_t *gens;
	size_t n;
	struct fdb_wal_scanned *sc; /* per file scanned */
	size_t nsc;
	uint64_t last, nrec; /* nrec: records of the last file scanned */
	int rc;
};
void fdb_recover_scan(struct flexdb *db, struct fdb_recovery *rv);
int fdb_recover_finish(struct flexdb *db, struct fdb_recovery *rv);

/* ---- the write path (fdb_commit.c) ------------------------------------------ */

/* The range deletes of a batch payload, with their places among its ops:
 * a put or delete that a range delete after it in the same batch covers
 * is dropped before it reaches a memtable, so that the range delete (of
 * the same sequence number) is all that remains of it. */
struct fdb_batch_ranges {
	struct fdb_batch_op *op;
	uint32_t *at;
	uint32_t n;
};
/* The range deletes of a payload; 0, -ENOMEM or FLEX_ECORRUPT. */
int fdb_batch_ranges_get(const uint8_t *payload, size_t len, struct fdb_batch_ranges *br);
void fdb_batch_ranges_free(struct fdb_batch_ranges *br);
/* Whether op i, a put or delete, is covered by a later range delete. */
int fdb_batch_point_dead(const struct fdb_batch_ranges *br, uint32_t i,
			 const struct fdb_batch_op *op);
/* Writes a batch payload (`ranges`: it holds range deletes): one WAL
 * record, then the active memtable, then with sync_writes a group
 * commit.  Writers that come while one writes are written together by
 * the first of them: their records in one WAL write, then their batches
 * into the memtable in order. */
int fdb_db_write(struct flexdb *db, const uint8_t *payload, size_t len, int ranges);
/* wmu held: waits until no group is being written (before a memtable
 * switch outside the write path). */
void fdb_writers_idle(struct flexdb *db);
/* Frees the iterators parked in db (flexdb_close: none is open). */
void fdb_iters_unpark(struct flexdb *db);

#endif /* FDB_DB_H */
