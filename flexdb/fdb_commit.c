/*
 * fdb_commit.c - FlexDB's write path below the API (a batch into the WAL
 * and the active memtable), memtable references, committer thread and
 * group commit (paper section 5.3).  Writes are described in flexdb.c.
 *
 * Durability (docs/DURABILITY.md): flexdb_sync(seq) returns once the WAL
 * records up to the caller's sequence number are fdatasync'ed: one thread
 * syncs for everyone waiting (group commit), and a sync never returns on
 * the strength of a flush that started before the caller's write: that
 * flush may have missed the write.
 *
 * The committer: syncs the immutable memtable's WAL (so the FlexSpace
 * never holds a change the WAL could lose), applies its range deletes
 * (each one collapse, fdb_store_delete_range), then its pairs in key order
 * to the FlexSpace in chunks of FDB_COMMIT_CHUNK pairs (read under the
 * shared lock first, then applied under the exclusive db->lock, which is
 * let go every FDB_APPLY_BURST pairs so that no reader waits for more
 * than a few pairs' work), runs the FlexSpace's maintenance after each
 * chunk without db->lock (the space is opened with defer_maintenance, so
 * no change made under db->lock commits the tree or collects garbage, and
 * no reader waits for their fdatasyncs), syncs the FlexSpace without
 * db->lock, and only then removes the WAL (syncing the directory, so that a removed
 * WAL cannot come back and be replayed over newer data).
 *
 * Lock order: flexdb.c.
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "../common/flex_killpoint.h"
#include "../common/flex_vec.h"
#include "fdb_db.h"

#define FDB_COMMIT_CHUNK 1000
/* A hold of the exclusive lock ends at the first run of pairs (one
 * interval's) that ends past FDB_BURST_NS, or FDB_APPLY_BURST pairs: a
 * pair costs a few microseconds, so a reader arriving mid-chunk waits
 * microseconds instead of the whole chunk's milliseconds (the read
 * latency's p99.9).  The time bound keeps most bursts shorter than a
 * reader watches for the lock before it sleeps (FLEX_BRLOCK_SPIN_NS):
 * woken, it would wait for a CPU, on a busy machine hundreds of
 * microseconds. */
#define FDB_APPLY_BURST 16
#define FDB_BURST_NS 20000
/* Cache entries admitted between two looks at the time. */
#define FDB_ADMIT_PART 8
/* How long the committer waits between bursts for the readers that
 * queued behind one to take the lock (flex_brlock_wrpass). */
#define FDB_PASS_NS 100000

/* The exclusive lock held since *held, *burst pairs (or intervals
 * rewritten) into the hold: ends the burst when it is due, letting the
 * readers that queued behind it in. */
static void burst_pass(struct flexdb *db, uint64_t *held, uint32_t *burst)
{
	if (*burst >= FDB_APPLY_BURST || flex_now_ns() - *held >= FDB_BURST_NS) {
		flex_brlock_wrpass(&db->lock, FDB_PASS_NS);
		*held = flex_now_ns();
		*burst = 0;
	}
}

/* ---- memtable references ------------------------------------------------------ */

/* A memtable without a WAL: the one rebuilt from the WALs at open, and a
 * read-only handle's active one, which stays empty. */
struct fdb_memref *fdb_memref_bare(void)
{
	struct fdb_memref *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->mt = fdb_mt_new();
	if (!m->mt) {
		free(m);
		return NULL;
	}
	atomic_init(&m->refs, 1);
	return m;
}

struct fdb_memref *fdb_memref_new(struct flexdb *db, uint64_t gen, int *rc)
{
	struct fdb_memref *m = fdb_memref_bare();
	*rc = -ENOMEM;
	if (!m)
		return NULL;
	*rc = fdb_walset_create(&db->wals, gen, &m->wal);
	if (*rc) {
		fdb_mt_free(m->mt);
		free(m);
		return NULL;
	}
	return m;
}

void fdb_memref_put(struct fdb_memref *m)
{
	if (!m)
		return;
	FLEX_HB_BEFORE(&m->refs);
	if (atomic_fetch_sub(&m->refs, 1) == 1) {
		FLEX_HB_AFTER(&m->refs);
		fdb_mt_free(m->mt);
		fdb_wal_close(m->wal);
		free(m);
	}
}

/* References to the current memtables (either may be NULL for imm). */
void fdb_memrefs_get(struct flexdb *db, struct fdb_memref **a, struct fdb_memref **i)
{
	pthread_mutex_lock(&db->mtmu);
	*a = db->active;
	*i = db->imm;
	if (*a)
		atomic_fetch_add(&(*a)->refs, 1);
	if (*i)
		atomic_fetch_add(&(*i)->refs, 1);
	pthread_mutex_unlock(&db->mtmu);
}

/* ---- the committer -------------------------------------------------------------- */

/* The next chunk of the memtable's pairs at it, into ops: their number
 * (0 at the end). */
static int chunk_fill(struct fdb_mt_iter *it, struct fdb_batch_op *ops)
{
	int n = 0;
	for (; n < FDB_COMMIT_CHUNK && fdb_mt_valid(it); fdb_mt_next(it)) {
		const struct fdb_val *v = fdb_mt_val(it, UINT64_MAX);
		if (v->tomb == 2)
			continue; /* removed by a range delete above */
		ops[n].key = fdb_mt_key(it, &ops[n].klen);
		ops[n].op = v->tomb ? FDB_OP_DEL : FDB_OP_PUT;
		ops[n].val = v->data;
		ops[n].vlen = v->vlen;
		n++;
	}
	return n;
}

static int commit_memtable(struct flexdb *db, struct fdb_memref *m)
{
	int rc = m->wal ? fdb_wal_sync(m->wal) : 0;
	if (rc)
		return rc;
	struct fdb_batch_op *ops = malloc(FDB_COMMIT_CHUNK * sizeof(*ops));
	struct fdb_batch_op *nops = malloc(FDB_COMMIT_CHUNK * sizeof(*nops));
	struct fdb_cand *cv = malloc(FDB_COMMIT_CHUNK * sizeof(*cv));
	if (!ops || !nops || !cv)
		rc = -ENOMEM;
	/* Range deletes first, each in one hold of the exclusive lock (one
	 * collapse, and index work for the intervals it drops), then the
	 * pairs written after them: a pair a range delete of this memtable
	 * covers and is newer than is left out (fdb_mt_val).  Readers see
	 * no difference meanwhile: the memtable's own range deletes hide
	 * the store's pairs until it is dropped.  Applying them again after
	 * a crash gives the same store. */
	const struct fdb_mt_range *rd = fdb_mt_ranges(m->mt);
	for (; rd && !rc; rd = rd->next) {
		flex_brlock_wrlock(&db->lock);
		rc = fdb_store_delete_range(&db->store, rd->start, rd->slen, rd->end, rd->elen);
		flex_brlock_wrunlock(&db->lock);
		atomic_fetch_add(&db->committed_pairs, 1);
		if (!rc) {
			FLEX_KILLPOINT("fdb.commit.range_applied");
			rc = flexspace_maintain(db->fs);
		}
	}
	struct fdb_mt_iter it;
	fdb_mt_seek(&it, m->mt, NULL, 0);
	/* The reads of the next chunk's intervals, begun before this chunk
	 * is applied: the disk reads while the committer works. */
	struct fdb_fetch ahead = {0};
	int n = rc ? 0 : chunk_fill(&it, ops);
	while (n && !rc) {
		/* Read the intervals it changes while readers go on; only the
		 * committer changes the store, so they are still current when
		 * the exclusive lock is taken. */
		struct fdb_cands cands;
		fdb_fetch_wait(&ahead);
		flex_brlock_rdlock(&db->lock);
		fdb_cands_init(&db->store, &cands, cv, FDB_COMMIT_CHUNK);
		rc = fdb_store_prefetch(&db->store, ops, n, &cands, &ahead);
		flex_brlock_rdunlock(&db->lock);
		int nn = rc ? 0 : chunk_fill(&it, nops);
		if (nn) {
			flex_brlock_rdlock(&db->lock);
			/* A failed begin leaves it to the prefetch to read. */
			(void)fdb_fetch_begin(&db->store, nops, nn, ops[n - 1].key, ops[n - 1].klen,
					      &ahead);
			flex_brlock_rdunlock(&db->lock);
		}
		flex_brlock_wrlock(&db->lock);
		uint64_t held = flex_now_ns();
		uint32_t burst = 0;
		/* The intervals read enter the cache in parts: a thousand of
		 * them take milliseconds. */
		for (int more = 1; more;) {
			more = fdb_store_admit_part(&db->store, &cands, FDB_ADMIT_PART);
			burst_pass(db, &held, &burst);
		}
		/* One FlexSpace change per interval the chunk touches. */
		for (int i = 0; i < n && !rc;) {
			burst_pass(db, &held, &burst);
			int done;
			rc = fdb_store_apply_run(&db->store, ops + i, n - i, &done);
			atomic_fetch_add(&db->committed_pairs, (uint64_t)done);
			i += done;
			burst += (uint32_t)done;
			/* Mid-commit: some pairs are in the FlexSpace, unsynced. */
			if (!rc)
				FLEX_KILLPOINT("fdb.commit.pair_applied");
		}
		flex_brlock_wrunlock(&db->lock);
		fdb_cands_free(&cands); /* after a prefetch error */
		if (!rc)
			rc = flexspace_maintain(db->fs);
		struct fdb_batch_op *t = ops;
		ops = nops;
		nops = t;
		n = nn;
	}
	fdb_fetch_free(&ahead);
	free(ops);
	free(nops);
	free(cv);
	if (!rc)
		rc = flexspace_sync(db->fs);
	if (!rc) {
		/* The WAL's records are durable in the FlexSpace now.  The
		 * memtable rebuilt at open has the old WAL files instead. */
		FLEX_KILLPOINT("fdb.commit.space_synced");
		rc = fdb_walset_remove(&db->wals, m->wal ? &m->wal->gen : db->rec_gens,
				       m->wal ? 1 : db->nrec_gens, FDB_WAL_RM_COMMIT);
		if (!m->wal)
			db->nrec_gens = 0;
	}
	if (!rc)
		atomic_fetch_add(&db->committer_runs, 1);
	return rc;
}

/* Any thread, after a read: frees the cache entries readers retired
 * (fdb_store_reap) once they are worth it and nobody holds the lock:
 * waiting for it would put the reader behind the committer's chunk or
 * other readers.  Until then readers cache less (the retired bytes are
 * charged to the cache); the committer frees them too. */
void fdb_cache_reap(struct flexdb *db)
{
	if (!fdb_store_reap_due(&db->store) || flex_brlock_trywrlock(&db->lock) != 0)
		return;
	fdb_store_reap(&db->store);
	flex_brlock_wrunlock(&db->lock);
}

/* One step of tidying (fdb_tidy.c): reads what to rewrite under the
 * shared lock, rewrites it in bursts under the exclusive lock, then runs
 * the FlexSpace's maintenance without db->lock.  Garbage collection waits
 * for a data file of FDB_TIDY_GC_SLACK more bytes per live byte than
 * usual: a pass empties the older segments by itself, and collecting
 * them half way would copy pairs the pass then rewrites.  The end of a
 * pass syncs, which frees the segments emptied; a pass that left nothing
 * to rewrite also collects as usual (what is left in the older segments:
 * intervals already in one extent).  One that ran out of credit leaves
 * its garbage to the commits' collections: a partial pass empties every
 * older segment a little, and collecting them at once would copy far
 * more than the pass wrote.  A pass flexdb_compact waits for ends with
 * the collection of every segment at most half live instead, whole or
 * not: the caller asked for the space back.
 * An error fails the handle, as the same error in a commit would: the
 * committer could not go on with the next commit either. */
#define FDB_TIDY_GC_SLACK 1.0
static int tidy_step(struct flexdb *db, int asked)
{
	uint32_t n;
	flex_brlock_rdlock(&db->lock);
	int rc = fdb_store_tidy_read(&db->store, &n);
	flex_brlock_rdunlock(&db->lock);
	if (n) {
		flex_brlock_wrlock(&db->lock);
		uint64_t held = flex_now_ns();
		for (uint32_t i = 0, burst = 0; i < n && !rc; burst++) {
			burst_pass(db, &held, &burst);
			rc = fdb_store_tidy_write(&db->store, &i, 1);
		}
		flex_brlock_wrunlock(&db->lock);
	}
	if (rc)
		return rc;
	int end = !atomic_load(&db->store.tidy_due), whole = end && db->store.tidy_whole;
	rc = flexspace_maintain_slack(db->fs, whole ? 0.0 : FDB_TIDY_GC_SLACK);
	/* The end of a pass flexdb_compact waits for: the older segments it
	 * left at most half live are collected (each byte copied frees one
	 * at least), not left until the data file passes gc_ratio again. */
	if (!rc && end && asked)
		rc = flexspace_collect(db->fs);
	if (!rc && end)
		rc = flexspace_sync(db->fs);
	return rc;
}

/* mtmu held, no memtable to commit: whether to tidy now (1), or nothing
 * is due (0).  Tidying waits until no write arrived for
 * FDB_TIDY_QUIET_MS (so that a load does not rewrite intervals its next
 * commit splits again), unless flexdb_compact waits for it: then it
 * sleeps that long, letting mtmu go, and returns -1 (look again). */
#define FDB_TIDY_QUIET_MS 100
static int tidy_now(struct flexdb *db)
{
	if (!atomic_load(&db->store.tidy_due) || atomic_load(&db->failed))
		return 0;
	if (db->compact_done != db->compact_gen)
		return 1;
	uint64_t w = atomic_load(&db->written);
	if (w == db->tidy_written)
		return 1;
	db->tidy_written = w;
	struct timespec ts;
	fdb_deadline(&ts, FDB_TIDY_QUIET_MS);
	pthread_cond_timedwait(&db->mtcond, &db->mtmu, &ts);
	return -1;
}

/* mtmu held: whether warming may take a CPU now.  Warming runs on a CPU
 * the lookups leave idle: while as many threads as the process may run on
 * look pairs up, they load the intervals themselves, and warming would
 * only take CPU from them (two reader threads on two CPUs ran 25 % slower
 * with it), so the committer looks again FDB_WARM_WAIT_MS later. */
#define FDB_WARM_WAIT_MS 20
static int warm_room(struct flexdb *db)
{
	if (fdb_store_lookup_threads(&db->store, db->warm_seen) + 1 <= db->ncpu)
		return 1;
	struct timespec ts;
	fdb_deadline(&ts, FDB_WARM_WAIT_MS);
	pthread_cond_timedwait(&db->mtcond, &db->mtmu, &ts);
	return 0;
}

/* One step of warming the cache (fdb_store_warm), under the shared lock
 * as a lookup's reads are. */
static void warm_step(struct flexdb *db)
{
	flex_brlock_rdlock(&db->lock);
	fdb_store_warm(&db->store);
	flex_brlock_rdunlock(&db->lock);
	fdb_cache_reap(db);
}

/* mtmu held, the committer idle: starts the tidying flexdb_compact
 * asked for, and answers the requests once it is done or cannot go on
 * (the handle failed: a writer's failure wakes nobody, so the waiters
 * also look at the handle now and then). */
static void compact_serve(struct flexdb *db)
{
	if (db->compact_started != db->compact_gen) {
		fdb_store_tidy_grant(&db->store, db->compact_full);
		db->compact_full = 0;
		db->compact_started = db->compact_gen;
	}
	if (db->compact_done != db->compact_started &&
	    (!atomic_load(&db->store.tidy_due) || atomic_load(&db->failed))) {
		db->compact_done = db->compact_started;
		pthread_cond_broadcast(&db->mtcond);
	}
}

void *fdb_committer_main(void *arg)
{
	struct flexdb *db = arg;
	pthread_mutex_lock(&db->mtmu);
	for (;;) {
		while (!db->imm && !db->stop) {
			compact_serve(db);
			int now = tidy_now(db);
			if (now == 0 && !atomic_load(&db->store.warm_done)) {
				if (!warm_room(db))
					continue;
				pthread_mutex_unlock(&db->mtmu);
				warm_step(db);
				pthread_mutex_lock(&db->mtmu);
				continue;
			}
			if (now == 0)
				pthread_cond_wait(&db->mtcond, &db->mtmu);
			if (now <= 0)
				continue;
			int asked = db->compact_done != db->compact_started;
			pthread_mutex_unlock(&db->mtmu);
			int rc = tidy_step(db, asked);
			pthread_mutex_lock(&db->mtmu);
			if (rc) {
				fdb_db_fail(db, rc);
				pthread_cond_broadcast(&db->mtcond);
			}
		}
		if (!db->imm)
			break;
		struct fdb_memref *m = db->imm;
		atomic_fetch_add(&m->refs, 1);
		pthread_mutex_unlock(&db->mtmu);
		int rc = atomic_load(&db->failed) ? FLEX_EFAILED : commit_memtable(db, m);
		pthread_mutex_lock(&db->mtmu);
		if (rc) {
			/* Keep the memtable (readers still see it) and its WAL
			 * (recovery replays it); refuse further writes. */
			fdb_db_fail(db, rc);
			pthread_cond_broadcast(&db->mtcond);
			fdb_memref_put(m);
			while (!db->stop)
				pthread_cond_wait(&db->mtcond, &db->mtmu);
			break;
		}
		pthread_mutex_unlock(&db->mtmu);
		/* Point reads and iterators' passes find the memtables under
		 * db->lock without a reference (flexdb_get, iter_pass): the
		 * pairs are in the store now, and
		 * once no reader holds the lock none can still be in m. */
		flex_brlock_wrlock(&db->lock);
		/* What the commit wrote may be tidied once writes pause. */
		fdb_store_tidy_grant(&db->store, 0);
		pthread_mutex_lock(&db->mtmu);
		__atomic_store_n(&db->imm, NULL, __ATOMIC_RELEASE);
		pthread_cond_broadcast(&db->mtcond);
		pthread_mutex_unlock(&db->mtmu);
		flex_brlock_wrunlock(&db->lock);
		fdb_memref_put(m); /* ours */
		fdb_memref_put(m); /* the db's */
		pthread_mutex_lock(&db->mtmu);
	}
	pthread_mutex_unlock(&db->mtmu);
	return NULL;
}

/* wmu held, no group being written (w_busy clear): hands the active
 * memtable to the committer and starts a new one, waiting for the
 * previous hand-over to finish. */
int fdb_switch_memtable(struct flexdb *db)
{
	assert(!db->w_busy);
	pthread_mutex_lock(&db->mtmu);
	if (db->imm)
		atomic_fetch_add(&db->writer_stalls, 1);
	while (db->imm && !atomic_load(&db->failed))
		pthread_cond_wait(&db->mtcond, &db->mtmu);
	pthread_mutex_unlock(&db->mtmu);
	if (atomic_load(&db->failed))
		return FLEX_EFAILED;
	/* The outgoing WAL is made durable before the next one can receive a
	 * record: otherwise a power loss could keep a record of the new file
	 * while losing the first records of this one, and replay (which has
	 * no sequence number to check the first surviving record against)
	 * would apply the later records without the earlier ones. */
	int rc = fdb_wal_sync(db->active->wal);
	if (rc)
		return fdb_db_fail(db, rc);
	FLEX_KILLPOINT("fdb.switch.wal_synced");
	struct fdb_memref *n = fdb_memref_new(db, db->wal_gen, &rc);
	if (!n) {
		/* A failed write or sync of the new WAL or of the directory
		 * is fatal like any other (docs/DURABILITY.md): retrying the
		 * creation at the next write would trust a directory whose
		 * failed fsync may have dropped earlier changes. */
		return fdb_db_fail(db, rc);
	}
	db->wal_gen++;
	pthread_mutex_lock(&db->mtmu);
	/* imm first: a reader that sees the new active sees the old one as
	 * imm (flexdb_get loads them in the other order). */
	FLEX_HB_BEFORE(&db->active);
	__atomic_store_n(&db->imm, db->active, __ATOMIC_RELEASE);
	__atomic_store_n(&db->active, n, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&db->mtcond);
	pthread_mutex_unlock(&db->mtmu);
	return 0;
}

/* Waits until every WAL record up to seq is durable; one waiter syncs for
 * all (group commit). */
int fdb_sync_to(struct flexdb *db, uint64_t seq)
{
	int rc = 0;
	pthread_mutex_lock(&db->syncmu);
	while (db->synced < seq && !rc) {
		if (db->sync_busy) {
			pthread_cond_wait(&db->synccond, &db->syncmu);
			continue;
		}
		/* Lead: sync outside the lock, so that writers keep appending
		 * and the next leader takes them all at once. */
		db->sync_busy = 1;
		uint64_t target = atomic_load(&db->written);
		pthread_mutex_unlock(&db->syncmu);
		struct fdb_memref *a, *i;
		fdb_memrefs_get(db, &a, &i);
		if (i && i->wal)
			rc = fdb_wal_sync(i->wal);
		if (!rc && a)
			rc = fdb_wal_sync(a->wal);
		fdb_memref_put(a);
		fdb_memref_put(i);
		atomic_fetch_add(&db->wal_syncs, 1);
		pthread_mutex_lock(&db->syncmu);
		if (!rc && target > db->synced)
			db->synced = target;
		db->sync_busy = 0;
		pthread_cond_broadcast(&db->synccond);
	}
	pthread_mutex_unlock(&db->syncmu);
	return rc ? fdb_db_fail(db, rc) : 0;
}

/* ---- the write path ------------------------------------------------------------- */

void fdb_batch_ranges_free(struct fdb_batch_ranges *br)
{
	free(br->op);
	free(br->at);
	br->op = NULL;
	br->at = NULL;
	br->n = 0;
}

int fdb_batch_ranges_get(const uint8_t *payload, size_t len, struct fdb_batch_ranges *br)
{
	size_t pos = 0, opcap = 0, atcap = 0;
	struct fdb_batch_op op;
	int more;
	br->n = 0;
	br->op = NULL;
	br->at = NULL;
	for (uint32_t i = 0; (more = fdb_payload_next(payload, len, &pos, &op)) == 1; i++) {
		if (op.op != FDB_OP_DEL_RANGE)
			continue;
		if (flex_vec_reserve(&br->op, &opcap, br->n + 1, 4) ||
		    flex_vec_reserve(&br->at, &atcap, br->n + 1, 4)) {
			fdb_batch_ranges_free(br);
			return -ENOMEM;
		}
		br->op[br->n] = op;
		br->at[br->n++] = i;
	}
	if (more < 0)
		fdb_batch_ranges_free(br);
	return more;
}

/* Whether op i, a put or delete, is covered by a later range delete. */
int fdb_batch_point_dead(const struct fdb_batch_ranges *br, uint32_t i,
			    const struct fdb_batch_op *op)
{
	for (uint32_t r = 0; r < br->n; r++) {
		const struct fdb_batch_op *d = &br->op[r];
		if (br->at[r] > i && fdb_keycmp(d->key, d->klen, op->key, op->klen) <= 0 &&
		    fdb_keycmp(op->key, op->klen, d->val, d->vlen) < 0)
			return 1;
	}
	return 0;
}

/* Puts a batch's ops into a memtable with sequence number seq. */
static int batch_to_mt(struct fdb_mt *mt, const uint8_t *payload, size_t len, int ranges,
		       uint64_t seq)
{
	size_t pos = 0;
	struct fdb_batch_op op;
	int more, rc = 0;
	struct fdb_batch_ranges br = {0};
	if (ranges && (rc = fdb_batch_ranges_get(payload, len, &br)) != 0)
		return rc;
	for (uint32_t i = 0; !rc && (more = fdb_payload_next(payload, len, &pos, &op)) == 1; i++) {
		if (op.op == FDB_OP_DEL_RANGE)
			rc = fdb_mt_del_range(mt, op.key, op.klen, op.val, op.vlen, seq);
		else if (!br.n || !fdb_batch_point_dead(&br, i, &op))
			rc = fdb_mt_put(mt, op.key, op.klen, op.val, op.vlen, op.op == FDB_OP_DEL,
					seq);
	}
	if (ranges)
		fdb_batch_ranges_free(&br);
	return rc;
}

/* A writer waiting in db->wq_head's queue (on its stack). */
struct fdb_writer {
	const uint8_t *payload;
	size_t len;
	int ranges;
	int rc;
	int done;
	uint64_t seq;
	pthread_cond_t cv;
	struct fdb_writer *next;
};

/* A group takes the batches queued behind its leader up to this many
 * bytes past the leader's own, or up to FDB_GROUP_MAX when the leader's
 * is large: a small write does not wait behind much more than itself. */
#define FDB_GROUP_MORE (128u << 10)
#define FDB_GROUP_MAX (1u << 20)
#define FDB_GROUP_N 64

void fdb_writers_idle(struct flexdb *db)
{
	while (db->w_busy)
		pthread_cond_wait(&db->wcond, &db->wmu);
}

/* Writes the group grp[0..n) from sequence number seq0 on, wmu released
 * (the queue's links may change meanwhile, the group not): their records
 * in one WAL write, then their batches into the active memtable in order,
 * each visible once whole.  Sets each writer's rc; returns the WAL
 * write's status. */
static int write_group(struct flexdb *db, struct fdb_writer *const *grp, size_t n, uint64_t seq0)
{
	const uint8_t *pay[FDB_GROUP_N];
	size_t len[FDB_GROUP_N];
	for (size_t i = 0; i < n; i++) {
		pay[i] = grp[i]->payload;
		len[i] = grp[i]->len;
	}
	/* The WAL file is written (not synced) before the memtable shows
	 * the changes, so a returned write survives a crash of the
	 * process. */
	int rc = fdb_wal_append_group(db->active->wal, seq0, n, pay, len);
	if (rc)
		fdb_db_fail(db, rc);
	else
		atomic_store(&db->written, seq0 + n - 1);
	/* Once its record is in the WAL, a batch goes into the memtable
	 * whatever else failed meanwhile: FLEX_EFAILED says a change was not
	 * written, and recovery would replay this one. */
	for (size_t i = 0; i < n; i++) {
		struct fdb_writer *x = grp[i];
		x->seq = seq0 + i;
		x->rc = rc;
		if (x->rc)
			continue;
		x->rc = batch_to_mt(db->active->mt, x->payload, x->len, x->ranges, x->seq);
		if (x->rc)
			fdb_db_fail(db, x->rc);
		else
			atomic_store(&db->visible, x->seq); /* the whole batch at once */
	}
	/* After the batches are visible: it may wait for the disk's queue. */
	if (!rc)
		fdb_wal_writeback(db->active->wal);
	return rc;
}

/* A writer queued behind a group being written first watches, with wmu
 * released, for its batch to be written or its turn to lead, for up to
 * FDB_WRITER_SPIN_NS (about ten groups of one put here), before it sleeps
 * on its condition variable: with two writers, sleeping and being woken
 * for every put made two threads slower than one.  What it watches is
 * read again under wmu before it sleeps, so a signal sent meanwhile is
 * not lost.  Only db->spin_max writers watch at once (one fewer than the
 * CPUs the process may use: none on one), so that watching never takes
 * the CPU the group's leader needs.  wmu held on entry and on return. */
static void writer_spin(struct flexdb *db, const struct fdb_writer *w)
{
	if (db->spinners < db->spin_max) {
		db->spinners++;
		pthread_mutex_unlock(&db->wmu);
		uint64_t until = flex_now_ns() + FDB_WRITER_SPIN_NS;
		for (unsigned i = 1;; i++) {
			if (__atomic_load_n(&w->done, __ATOMIC_RELAXED) ||
			    __atomic_load_n(&db->wq_head, __ATOMIC_RELAXED) == w)
				break;
			flex_cpu_relax();
			if (i % 32 == 0 && flex_now_ns() >= until)
				break;
		}
		pthread_mutex_lock(&db->wmu);
		db->spinners--;
	}
}

int fdb_db_write(struct flexdb *db, const uint8_t *payload, size_t len, int ranges)
{
	if (db->read_only)
		return FLEX_EREADONLY;
	struct fdb_writer w = {.payload = payload, .len = len, .ranges = ranges};
	pthread_cond_init(&w.cv, NULL);
	pthread_mutex_lock(&db->wmu);
	if (db->wq_tail)
		db->wq_tail->next = &w;
	else
		__atomic_store_n(&db->wq_head, &w, __ATOMIC_RELAXED);
	db->wq_tail = &w;
	int spun = 0;
	while (!w.done && db->wq_head != &w) {
		if (!spun && db->spin_max) {
			spun = 1;
			writer_spin(db, &w);
			continue;
		}
		pthread_cond_wait(&w.cv, &db->wmu);
	}
	if (!w.done) {
		/* The first in the queue: writes its group. */
		int rc = atomic_load(&db->failed) ? FLEX_EFAILED : 0;
		if (!rc && fdb_mt_bytes(db->active->mt) >= db->memtable_size)
			rc = fdb_switch_memtable(db);
		struct fdb_writer *grp[FDB_GROUP_N];
		grp[0] = &w;
		size_t n = 1, bytes = len;
		size_t cap = len <= FDB_GROUP_MORE ? len + FDB_GROUP_MORE : FDB_GROUP_MAX;
		/* Nor, beyond the leader's own batch, past the memtable's room
		 * (only the leader's write may take it over its size). */
		size_t used = rc ? 0 : fdb_mt_bytes(db->active->mt);
		size_t room = used < db->memtable_size ? db->memtable_size - used : 0;
		if (cap > len + room)
			cap = len + room;
		while (!rc && n < FDB_GROUP_N && grp[n - 1]->next &&
		       bytes + grp[n - 1]->next->len <= cap) {
			grp[n] = grp[n - 1]->next;
			bytes += grp[n++]->len;
		}
		uint64_t seq0 = db->seq + 1;
		if (!rc) {
			db->w_busy = 1;
			pthread_mutex_unlock(&db->wmu);
			int wrc = write_group(db, grp, n, seq0);
			pthread_mutex_lock(&db->wmu);
			db->w_busy = 0;
			if (!wrc)
				db->seq = seq0 + n - 1;
			pthread_cond_broadcast(&db->wcond);
		} else {
			w.rc = rc;
		}
		/* The group leaves the queue; the next writer leads.  The
		 * flags a watching writer reads go last, just before wmu is
		 * let go, which it takes next. */
		struct fdb_writer *x = grp[n - 1]->next;
		for (size_t i = 1; i < n; i++)
			pthread_cond_signal(&grp[i]->cv);
		if (!x)
			db->wq_tail = NULL;
		else
			pthread_cond_signal(&x->cv);
		for (size_t i = 0; i < n; i++)
			__atomic_store_n(&grp[i]->done, 1, __ATOMIC_RELAXED);
		__atomic_store_n(&db->wq_head, x, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&db->wmu);
	pthread_cond_destroy(&w.cv);
	int rc = w.rc;
	if (!rc && db->sync_writes)
		rc = fdb_sync_to(db, w.seq);
	return rc;
}
