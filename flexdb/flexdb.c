/*
 * flexdb.c - FlexDB's API: open, close and recovery, writes and batches,
 * point reads, checkpoints, check and stats (paper section 5.3).
 *
 * Writes: writers queue under db->wmu; the first in the queue gives its
 * batch and those queued behind it the next sequence numbers, appends
 * them as WAL records in one write, applies them to the active memtable
 * in order (wmu released meanwhile, the queue holding the next writers
 * back) and hands the queue on; with sync_writes each then waits for a
 * group commit.  When the active memtable is full it becomes the immutable one
 * (with its own WAL file) and a new pair starts; a writer waits only if
 * the previous immutable memtable is still being committed.
 *
 * The write path below the API, durability, group commit and the
 * committer thread: fdb_commit.c.
 *
 * Recovery: the FlexSpace recovers itself; the index is rebuilt from the
 * anchor tags (fdb_store.c); the WAL files left are replayed in
 * generation and sequence order into a memtable that becomes the
 * immutable one (fdb_recover.c, while the FlexSpace opens), so that open
 * does not wait for the FlexSpace: the committer applies it like any other (re-applying a
 * committed put, delete or range delete is harmless) and removes the old
 * files once the FlexSpace has it durably.  A read-only handle replays
 * them the same way into a memtable it keeps as the immutable one for its
 * whole life; it has no WAL of its own and no committer, and refuses
 * writes before taking wmu.
 *
 * Lock order: wmu -> mtmu; syncmu and db->lock are never held with another
 * of these except mtmu briefly to take references.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/flex_ckpt.h"
#include "../common/flex_ident.h"
#include "../common/flex_killpoint.h"
#include "../common/flex_vec.h"
#include "fdb_cache.h"
#include "fdb_db.h"

#define FDB_DEFAULT_CACHE ((uint64_t)64 << 20)
#define FDB_DEFAULT_MEMTABLE ((uint64_t)32 << 20)

/* ---- writes ----------------------------------------------------------------------- */

struct flexdb_batch {
	uint8_t *buf; /* u32 count, then the ops */
	size_t len, cap;
	uint32_t count;
	uint32_t nranges; /* range deletes among the ops */
};

static int check_kv(const void *key, size_t klen, const void *val, size_t vlen, int put)
{
	if (!key || klen == 0 || (put && !val && vlen))
		return -EINVAL;
	if (klen > FLEXDB_MAX_KEY || (put && vlen > FLEXDB_MAX_VALUE))
		return FLEX_ETOOBIG;
	return 0;
}

/* A range [start, end): start may be empty (from the first key), end is
 * a key, and start < end. */
static int check_range(const void *start, size_t slen, const void *end, size_t elen)
{
	if ((!start && slen) || !end || elen == 0)
		return -EINVAL;
	if (slen > FLEXDB_MAX_KEY || elen > FLEXDB_MAX_KEY)
		return FLEX_ETOOBIG;
	if (fdb_keycmp(slen ? start : "", (uint32_t)slen, end, (uint32_t)elen) >= 0)
		return -EINVAL;
	return 0;
}

static int batch_add(struct flexdb_batch *b, uint8_t op, const void *key, size_t klen,
		     const void *val, size_t vlen)
{
	size_t need = b->len + 1 + 2 * FLEX_VARINT_MAX + klen + vlen;
	if (need > UINT32_MAX - 64)
		return FLEX_ETOOBIG;
	if (flex_vec_reserve(&b->buf, &b->cap, need, 256))
		return -ENOMEM;
	uint8_t *p = b->buf + b->len;
	*p++ = op;
	p += flex_varint_put(p, (uint32_t)klen);
	if (op != FDB_OP_DEL)
		p += flex_varint_put(p, (uint32_t)vlen);
	if (klen)
		memcpy(p, key, klen);
	p += klen;
	if (vlen)
		memcpy(p, val, vlen);
	p += vlen;
	b->len = (size_t)(p - b->buf);
	b->count++;
	b->nranges += op == FDB_OP_DEL_RANGE;
	flex_put_le32(b->buf, b->count);
	return 0;
}

struct flexdb_batch *flexdb_batch_new(void)
{
	struct flexdb_batch *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	b->cap = 256;
	b->buf = calloc(1, b->cap);
	if (!b->buf) {
		free(b);
		return NULL;
	}
	b->len = 4; /* the count */
	return b;
}

int flexdb_batch_put(struct flexdb_batch *b, const void *key, size_t klen, const void *val,
		     size_t vlen)
{
	if (!b)
		return -EINVAL;
	int rc = check_kv(key, klen, val, vlen, 1);
	return rc ? rc : batch_add(b, FDB_OP_PUT, key, klen, val, vlen);
}

int flexdb_batch_delete(struct flexdb_batch *b, const void *key, size_t klen)
{
	if (!b)
		return -EINVAL;
	int rc = check_kv(key, klen, NULL, 0, 0);
	return rc ? rc : batch_add(b, FDB_OP_DEL, key, klen, NULL, 0);
}

int flexdb_batch_delete_range(struct flexdb_batch *b, const void *start, size_t slen,
			      const void *end, size_t elen)
{
	if (!b)
		return -EINVAL;
	int rc = check_range(start, slen, end, elen);
	return rc ? rc : batch_add(b, FDB_OP_DEL_RANGE, start, slen, end, elen);
}

void flexdb_batch_clear(struct flexdb_batch *b)
{
	if (!b)
		return;
	b->len = 4;
	b->count = 0;
	b->nranges = 0;
	memset(b->buf, 0, 4);
}

void flexdb_batch_free(struct flexdb_batch *b)
{
	if (!b)
		return;
	free(b->buf);
	free(b);
}

int flexdb_write(struct flexdb *db, struct flexdb_batch *b)
{
	if (!db || !b)
		return -EINVAL;
	if (db->read_only)
		return FLEX_EREADONLY;
	if (b->count == 0)
		return 0;
	return fdb_db_write(db, b->buf, b->len, b->nranges > 0);
}

/* A one-op batch on the stack (or heap for large values). */
static int db_write1(struct flexdb *db, uint8_t op, const void *key, size_t klen,
		     const void *val, size_t vlen)
{
	int rc = check_kv(key, klen, val, vlen, op == FDB_OP_PUT);
	if (rc)
		return rc;
	uint8_t stackbuf[512];
	size_t need = 4 + 11 + klen + vlen;
	struct flexdb_batch b = {.buf = need <= sizeof(stackbuf) ? stackbuf : malloc(need),
				 .len = 4,
				 .cap = need};
	if (!b.buf)
		return -ENOMEM;
	rc = batch_add(&b, op, key, klen, val, vlen);
	if (!rc)
		rc = fdb_db_write(db, b.buf, b.len, 0);
	if (b.buf != stackbuf)
		free(b.buf);
	return rc;
}

int flexdb_put(struct flexdb *db, const void *key, size_t klen, const void *val, size_t vlen)
{
	if (!db)
		return -EINVAL;
	return db_write1(db, FDB_OP_PUT, key, klen, val, vlen);
}

int flexdb_delete(struct flexdb *db, const void *key, size_t klen)
{
	if (!db)
		return -EINVAL;
	return db_write1(db, FDB_OP_DEL, key, klen, NULL, 0);
}

int flexdb_delete_range(struct flexdb *db, const void *start, size_t slen, const void *end,
			size_t elen)
{
	if (!db)
		return -EINVAL;
	int rc = check_range(start, slen, end, elen);
	if (rc)
		return rc;
	uint8_t buf[4 + 11 + 2 * FLEXDB_MAX_KEY];
	struct flexdb_batch b = {.buf = buf, .len = 4, .cap = sizeof(buf)};
	rc = batch_add(&b, FDB_OP_DEL_RANGE, start, slen, end, elen);
	return rc ? rc : fdb_db_write(db, b.buf, b.len, 1);
}

int flexdb_sync(struct flexdb *db)
{
	if (!db)
		return -EINVAL;
	if (db->read_only)
		return FLEX_EREADONLY;
	if (atomic_load(&db->failed))
		return FLEX_EFAILED;
	pthread_mutex_lock(&db->wmu);
	uint64_t seq = db->seq;
	pthread_mutex_unlock(&db->wmu);
	return fdb_sync_to(db, seq);
}

int flexdb_compact(struct flexdb *db, int full)
{
	if (!db)
		return -EINVAL;
	if (db->read_only)
		return FLEX_EREADONLY;
	/* The memtable's pairs first: the committer tidies once it has
	 * committed them. */
	pthread_mutex_lock(&db->wmu);
	fdb_writers_idle(db);
	int rc = atomic_load(&db->failed) ? FLEX_EFAILED : 0;
	if (!rc && fdb_mt_count(db->active->mt))
		rc = fdb_switch_memtable(db);
	pthread_mutex_unlock(&db->wmu);
	pthread_mutex_lock(&db->mtmu);
	uint64_t mine = ++db->compact_gen;
	db->compact_full |= full != 0;
	pthread_cond_broadcast(&db->mtcond);
	/* A failure elsewhere (a writer's sync) wakes nobody: look at the
	 * handle every 100 ms too. */
	while (!rc && db->compact_done < mine && !db->stop) {
		if (atomic_load(&db->failed)) {
			rc = FLEX_EFAILED;
			break;
		}
		struct timespec ts;
		fdb_deadline(&ts, 100);
		pthread_cond_timedwait(&db->mtcond, &db->mtmu, &ts);
	}
	pthread_mutex_unlock(&db->mtmu);
	return rc;
}

/* ---- reads -------------------------------------------------------------------------- */

static int copy_val(const struct fdb_val *v, void *buf, size_t cap, size_t *vlen)
{
	if (v->tomb)
		return FLEXDB_NOTFOUND;
	if (cap && buf)
		memcpy(buf, v->data, cap < v->vlen ? cap : v->vlen);
	if (vlen)
		*vlen = v->vlen;
	return 0;
}

/* The calls that take a const handle change no pair, but they take the
 * handle's locks, fill its cache and count in its statistics. */
static struct flexdb *db_mut(const struct flexdb *db)
{
	return (struct flexdb *)db;
}

int flexdb_get(const struct flexdb *cdb, const void *key, size_t klen, void *buf, size_t cap,
	       size_t *vlen)
{
	struct flexdb *db = db_mut(cdb);
	if (!db || (!buf && cap))
		return -EINVAL;
	int rc = check_kv(key, klen, NULL, 0, 0);
	if (rc)
		return rc;
	/* Under the shared lock the memtables need no reference: the
	 * committer drops an immutable one only under the exclusive lock,
	 * after its pairs reached the store (fdb_committer_main).  active is
	 * loaded before imm: switch_memtable stores them the other way. */
	uint64_t vis = atomic_load(&db->visible);
	flex_brlock_rdlock(&db->lock);
	const struct fdb_memref *a = __atomic_load_n(&db->active, __ATOMIC_ACQUIRE);
	const struct fdb_memref *i = __atomic_load_n(&db->imm, __ATOMIC_ACQUIRE);
	FLEX_HB_AFTER(&db->active);
	const struct fdb_val *v = fdb_mt_get(a->mt, key, (uint32_t)klen, vis);
	if (!v && i)
		v = fdb_mt_get(i->mt, key, (uint32_t)klen, vis);
	if (v) {
		rc = copy_val(v, buf, cap, vlen);
		flex_brlock_rdunlock(&db->lock);
		return rc;
	}
	struct fdb_cands cands;
	fdb_cands_init(&db->store, &cands, NULL, 0);
	rc = fdb_store_get(&db->store, key, (uint32_t)klen, buf, cap, vlen, &cands);
	if (cands.n)
		fdb_store_admit(&db->store, &cands, 1);
	flex_brlock_rdunlock(&db->lock);
	fdb_cache_reap(db);
	return rc;
}

/* ---- open, close, recovery ---------------------------------------------------------- */

static void db_free(struct flexdb *db)
{
	fdb_iters_unpark(db);
	if (db->store.index)
		fdb_store_close(&db->store);
	if (db->fs)
		flexspace_close(db->fs);
	if (db->lock_fd >= 0)
		db->io->close(db->io, db->lock_fd);
	if (db->dir_fd >= 0)
		db->io->close(db->io, db->dir_fd);
	flex_brlock_destroy(&db->lock);
	pthread_mutex_destroy(&db->wmu);
	pthread_cond_destroy(&db->wcond);
	pthread_mutex_destroy(&db->mtmu);
	pthread_cond_destroy(&db->mtcond);
	pthread_mutex_destroy(&db->syncmu);
	pthread_cond_destroy(&db->synccond);
	free(db->rec_gens);
	free(db->dir);
	free(db);
}

/* The library's threads (the committer, the FlexSpace's opener) take no
 * signal of the host program's: they start with every signal blocked, so
 * a process-directed signal (a Ctrl-C, a timer) is delivered to one of the
 * host's own threads, as if FlexDB were not there. */
static int db_thread_start(pthread_t *th, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	sigfillset(&all);
	int rc = pthread_sigmask(SIG_SETMASK, &all, &old);
	if (rc)
		return -rc;
	rc = pthread_create(th, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return -rc;
}

static int db_start_committer(struct flexdb *db)
{
	cpu_set_t set;
	long n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set)
							     : sysconf(_SC_NPROCESSORS_ONLN);
	db->ncpu = n > 0 ? (int)n : 1;
	/* Under Helgrind, which runs one thread at a time, none watches. */
#ifndef FLEX_HELGRIND
	db->spin_max = db->ncpu - 1;
#endif
	return db_thread_start(&db->committer, fdb_committer_main, db);
}

struct space_open {
	struct flexdb *db;
	char path[PATH_MAX];
	struct flexspace_options so;
	uint64_t cache;
	int rc;
};

/* Opens the FlexSpace and reads its sparse index (db_open). */
static void *space_open_main(void *arg)
{
	struct space_open *sp = arg;
	struct flexdb *db = sp->db;
	sp->rc = flexspace_open(sp->path, &sp->so, &db->fs);
	if (!sp->rc)
		sp->rc = fdb_store_open(&db->store, db->fs, sp->cache - sp->so.tree_cache_size,
					db->io, db->dir);
	db->store.memtable_size = db->memtable_size;
	return NULL;
}

/* Identity first (flex_ident.h): a directory the library cannot prove it
 * made is refused before anything in it is created or written.  A store
 * made before identities gets its IDENTITY once it (and its FlexSpace,
 * which adds its own) has opened. */
static int db_open(struct flexdb *db, const char *dir, const struct flexdb_options *o)
{
	int create = !o->no_create && !o->read_only;
	int ident, partial;
	int rc = flex_ident_probe(db->io, dir, FLEX_KIND_DB, create, &ident, &partial);
	if (rc)
		return rc;
	if (ident == FLEX_IDENT_NEW && (rc = flex_ident_mkdir(db->io, dir)) != 0)
		return rc;
	db->dir_fd = db->io->open(db->io, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
	if (db->dir_fd < 0)
		return db->dir_fd;
	if (ident == FLEX_IDENT_NEW &&
	    (rc = flex_ident_write(db->io, dir, db->dir_fd, FLEX_KIND_DB, partial)) != 0)
		return rc;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/LOCK", dir);
	/* Readers share the lock, a writer holds it alone (flexdb.h). */
	int rw = o->read_only ? O_RDONLY : O_RDWR | (create ? O_CREAT : 0);
	db->lock_fd = db->io->open(db->io, path, rw | O_CLOEXEC, 0644);
	if (db->lock_fd < 0)
		return db->lock_fd;
	if ((rc = db->io->lock(db->io, db->lock_fd, !o->read_only)) != 0)
		return rc == -EWOULDBLOCK ? FLEX_EBUSY : rc;
	/* The FlexSpace and its sparse index open on a thread of their own
	 * while this one replays the WAL files, when there are any. */
	struct space_open sp = {.db = db};
	snprintf(sp.path, sizeof(sp.path), "%s/space", dir);
	sp.so = o->space;
	sp.so.no_create = !create;
	sp.so.read_only = o->read_only;
	sp.so.defer_maintenance = 1;
	if (!sp.so.io)
		sp.so.io = db->io;
	/* cache_size covers the tree's leaves too (flexdb.h). */
	sp.cache = o->cache_size ? o->cache_size : FDB_DEFAULT_CACHE;
	if (!sp.so.tree_cache_size)
		sp.so.tree_cache_size = sp.cache / 4;
	db->wals = (struct fdb_walset){.io = db->io, .dir = db->dir, .dir_fd = db->dir_fd};
	struct fdb_recovery rv = {0};
	rc = fdb_walset_list(&db->wals, &rv.gens, &rv.n);
	if (rc)
		return rc;
	pthread_t th;
	int apart = rv.n && !db_thread_start(&th, space_open_main, &sp);
	if (!apart)
		space_open_main(&sp);
	fdb_recover_scan(db, &rv);
	if (apart)
		pthread_join(th, NULL);
	db->wals.fs = db->fs;
	db->store.no_tidy = sp.so.max_data_size != 0;
	rc = sp.rc;
	if (!rc)
		rc = fdb_recover_finish(db, &rv);
	free(rv.sc);
	free(rv.gens);
	if (!rc && db->read_only) {
		/* No WAL and no committer: nothing is ever written. */
		db->active = fdb_memref_bare();
		return db->active ? 0 : -ENOMEM;
	}
	if (!rc) {
		db->active = fdb_memref_new(db, db->wal_gen, &rc);
		if (db->active)
			db->wal_gen++;
	}
	if (!rc && ident == FLEX_IDENT_LEGACY && create)
		rc = flex_ident_write(db->io, dir, db->dir_fd, FLEX_KIND_DB, partial);
	if (!rc) {
		rc = db_start_committer(db);
		db->committer_started = rc == 0;
	}
	return rc;
}

int flexdb_options_check(const struct flexdb_options *opt, const char **field)
{
	/* The FlexSpace's names, as fields of flexdb_options. */
	static const char *const space_fields[][2] = {
	    {"segment_size", "space.segment_size"},
	    {"log_limit", "space.log_limit"},
	    {"gc_ratio", "space.gc_ratio"},
	    {"max_data_size", "space.max_data_size"},
	    {"io", "space.io"},
	};
	const char *f = NULL, *sf = NULL;
	if (opt) {
		uint64_t cache = opt->cache_size ? opt->cache_size : FDB_DEFAULT_CACHE;
		uint64_t mt = opt->memtable_size;
		if (cache < (1u << 20) || cache > ((uint64_t)1 << 40))
			f = "cache_size";
		else if (mt && (mt < (64u << 10) || mt > ((uint64_t)4 << 30)))
			f = "memtable_size";
		else if (opt->space.tree_cache_size > cache / 2)
			f = "space.tree_cache_size";
		else if (flexspace_options_check(&opt->space, &sf)) {
			f = "space";
			for (size_t i = 0; i < sizeof(space_fields) / sizeof(space_fields[0]); i++)
				if (!strcmp(sf, space_fields[i][0]))
					f = space_fields[i][1];
		}
	}
	if (field)
		*field = f;
	return f ? FLEX_EOPTION : 0;
}

int flexdb_open(const char *dir, const struct flexdb_options *opt, struct flexdb **out)
{
	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!dir || !*dir)
		return -EINVAL;
	struct flexdb_options o = {0};
	if (opt)
		o = *opt;
	int rc = flexdb_options_check(&o, NULL);
	if (rc)
		return rc;
	struct flexdb *db = calloc(1, sizeof(*db));
	if (!db)
		return -ENOMEM;
	db->dir_fd = db->lock_fd = -1;
	/* Point reads load them without the memtable mutex (flexdb_get). */
	FLEX_ATOMIC_OBJ(&db->active, sizeof(db->active));
	FLEX_ATOMIC_OBJ(&db->imm, sizeof(db->imm));
	FLEX_ATOMIC_OBJ(db->parked, sizeof(db->parked));
	db->io = o.space.io ? o.space.io : flex_io_posix();
	db->memtable_size = o.memtable_size ? o.memtable_size : FDB_DEFAULT_MEMTABLE;
	db->sync_writes = o.sync_writes;
	db->read_only = o.read_only != 0;
	db->dir = strdup(dir);
	/* Striped, writer-preferring: readers on two threads share no lock
	 * word, and they do not starve the committer. */
	if (flex_brlock_init(&db->lock) != 0) {
		free(db->dir);
		free(db);
		return -ENOMEM;
	}
	pthread_mutex_init(&db->wmu, NULL);
	pthread_cond_init(&db->wcond, NULL);
	pthread_mutex_init(&db->mtmu, NULL);
	pthread_cond_init(&db->mtcond, NULL);
	pthread_mutex_init(&db->syncmu, NULL);
	pthread_cond_init(&db->synccond, NULL);
	rc = db->dir ? db_open(db, dir, &o) : -ENOMEM;
	if (rc) {
		if (db->active) {
			if (db->active->wal)
				db->io->unlink(db->io, db->active->wal->path);
			fdb_memref_put(db->active);
		}
		fdb_memref_put(db->imm);
		db_free(db);
		return rc;
	}
	*out = db;
	return 0;
}

int flexdb_close(struct flexdb *db)
{
	if (!db)
		return 0;
	int rc = 0;
	pthread_mutex_lock(&db->wmu);
	fdb_writers_idle(db);
	if (!db->read_only && !atomic_load(&db->failed) && fdb_mt_count(db->active->mt) > 0)
		rc = fdb_switch_memtable(db);
	pthread_mutex_lock(&db->mtmu);
	/* A read-only handle's replayed memtable is simply dropped. */
	while (db->imm && !db->read_only && !atomic_load(&db->failed))
		pthread_cond_wait(&db->mtcond, &db->mtmu);
	db->stop = 1;
	pthread_cond_broadcast(&db->mtcond);
	pthread_mutex_unlock(&db->mtmu);
	pthread_mutex_unlock(&db->wmu);
	if (db->committer_started)
		pthread_join(db->committer, NULL);
	if (!rc)
		rc = atomic_load(&db->failed);
	struct fdb_memref *a = db->active, *i = db->imm;
	if (!rc && a && a->wal && fdb_mt_count(a->mt) == 0) {
		db->io->unlink(db->io, a->wal->path); /* empty: nothing to replay */
		FLEX_KILLPOINT("fdb.close.wal_removed");
	}
	fdb_memref_put(a);
	fdb_memref_put(i);
	db->active = db->imm = NULL;
	/* Everything is in the space: commit it, so that the index kept
	 * beside it is the next open's (fdb_snap.c), unless this one fails
	 * to be written.  A session that changed nothing leaves the INDEX
	 * it opened from, which still describes the space. */
	uint64_t stamp;
	if (!rc && !db->read_only && db->fs && (rc = flexspace_commit(db->fs)) == 0 &&
	    flexspace_stamp(db->fs, &stamp) == 0 &&
	    !(db->store.from_snap && db->store.snap_stamp == stamp))
		(void)fdb_snap_save(&db->store, db->io, db->dir, stamp);
	fdb_store_close(&db->store);
	if (db->fs) {
		int frc = flexspace_close(db->fs);
		if (!rc)
			rc = frc;
		db->fs = NULL;
	}
	db_free(db);
	return rc;
}

/* ---- checkpoints ------------------------------------------------------------------ */

/* A checkpoint is the FlexSpace's durable state at one moment plus the
 * WAL records up to a later one, which recovery replays over it (applying
 * again a pair the space already holds is harmless, as at any recovery).
 * Both halves must meet: the space may hold no record the WALs do not
 * reach, and every record it lacks must be in a WAL copied.  Both hold
 * when the WALs are taken while the space's durability lock is held
 * (db_ckpt_at): a memtable reaches the space's durable state only through
 * a FlexSpace sync or tree commit, and its WAL is removed only after that
 * sync, so no WAL the copied space still needs can go, and every record
 * the space holds came from a memtable that is older than the active one
 * whose records are copied up to that moment.  The WAL files are opened
 * then, and copied later through their descriptors (a removal meanwhile
 * does not matter); the active one is copied up to the end of its last
 * whole record, as its size says then (a record is written before the
 * size counts it).  Writers, readers and the committer go on throughout;
 * the committer waits only if it syncs the space while the checkpoint
 * holds that lock. */
struct db_ckpt {
	struct flexdb *db;
	uint64_t *gens;
	int *fds;
	size_t n;
	uint64_t active_gen, active_size;
};

static int db_ckpt_at(void *arg)
{
	struct db_ckpt *c = arg;
	struct flexdb *db = c->db;
	pthread_mutex_lock(&db->mtmu);
	c->active_gen = db->active->wal->gen;
	c->active_size = atomic_load(&db->active->wal->size);
	pthread_mutex_unlock(&db->mtmu);
	int rc = fdb_walset_list(&db->wals, &c->gens, &c->n);
	if (!rc && c->n && !(c->fds = malloc(c->n * sizeof(int))))
		rc = -ENOMEM;
	for (size_t i = 0; i < c->n && c->fds; i++)
		c->fds[i] = -1;
	for (size_t i = 0; i < c->n && !rc; i++) {
		if (c->gens[i] > c->active_gen)
			continue; /* being created for a later memtable */
		int fd = fdb_walset_open(&db->wals, c->gens[i]);
		if (fd >= 0)
			c->fds[i] = fd;
		else if (fd != -ENOENT) /* gone: its memtable is in the space */
			rc = fd;
	}
	return rc;
}

/* Takes back what a failed checkpoint made in dest. */
static void db_ckpt_clean(const struct flex_io *io, const char *dest, const struct db_ckpt *c)
{
	static const char *const names[] = {"IDENTITY", "LOG", "LOG.ckpt", "TREE", "DATA", "LOCK"};
	const char *const subs[] = {"space", "space.ckpt"};
	char path[PATH_MAX];
	for (size_t d = 0; d < 2; d++) {
		snprintf(path, sizeof(path), "%s/%s", dest, subs[d]);
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			flex_ckpt_unlink(io, path, names[i]);
		io->rmdir(io, path);
	}
	for (size_t i = 0; i < c->n; i++) {
		char name[FDB_WAL_NAME];
		fdb_wal_name(name, c->gens[i]);
		flex_ckpt_unlink(io, dest, name);
	}
	flex_ckpt_unlink(io, dest, "LOCK");
	flex_ckpt_unlink(io, dest, "IDENTITY");
}

/* The space is copied into space.ckpt and renamed to space only once the
 * WALs beside it are durable: a directory with no IDENTITY and no space/
 * is not a store (FLEX_ENOTSTORE), while one with space/ would open as a
 * store made before identities.  IDENTITY comes last. */
int flexdb_checkpoint(struct flexdb *db, const char *dest_dir)
{
	if (!db || !dest_dir || !*dest_dir)
		return -EINVAL;
	if (db->read_only)
		return FLEX_EREADONLY;
	if (atomic_load(&db->failed))
		return FLEX_EFAILED;
	int created, dfd;
	int rc = flex_ckpt_dest(db->io, db->dir_fd, dest_dir, &created, &dfd);
	if (rc)
		return rc;
	char from[PATH_MAX], to[PATH_MAX];
	int n1 = snprintf(from, sizeof(from), "%s/space.ckpt", dest_dir);
	int n2 = snprintf(to, sizeof(to), "%s/space", dest_dir);
	if (n1 < 0 || n1 >= (int)sizeof(from) || n2 < 0 || n2 >= (int)sizeof(to))
		rc = -ENAMETOOLONG;
	struct db_ckpt c = {.db = db};
	struct flexspace_ckpt *ck;
	if (!rc)
		rc = flexspace_ckpt_begin(db->fs, from, db_ckpt_at, &c, &ck);
	if (!rc)
		rc = flexspace_ckpt_end(ck, 0);
	for (size_t i = 0; i < c.n && !rc; i++)
		if (c.fds[i] >= 0)
			rc = fdb_wal_copy(db->io, c.fds[i], c.gens[i],
					  c.gens[i] == c.active_gen ? c.active_size : UINT64_MAX,
					  dest_dir);
	for (size_t i = 0; i < c.n && c.fds; i++)
		if (c.fds[i] >= 0)
			db->io->close(db->io, c.fds[i]);
	if (!rc) {
		struct flex_ckpt_range none = {0, 0};
		rc = flex_ckpt_copy(db->io, -1, dest_dir, "LOCK", &none, 0, 0);
	}
	if (!rc)
		rc = db->io->fsync(db->io, dfd);
	/* The space whole under its temporary name, the WALs durable. */
	if (!rc)
		FLEX_KILLPOINT("ckpt.db.copied");
	if (!rc)
		rc = db->io->rename(db->io, from, to);
	if (!rc)
		rc = db->io->fsync(db->io, dfd);
	/* space/ durable, no IDENTITY yet. */
	if (!rc)
		FLEX_KILLPOINT("ckpt.db.renamed");
	if (!rc)
		rc = flex_ident_write(db->io, dest_dir, dfd, FLEX_KIND_DB, 0);
	if (rc)
		db_ckpt_clean(db->io, dest_dir, &c);
	db->io->close(db->io, dfd);
	if (rc && created)
		db->io->rmdir(db->io, dest_dir);
	free(c.gens);
	free(c.fds);
	return rc;
}

int flexdb_check(const struct flexdb *cdb)
{
	struct flexdb *db = db_mut(cdb);
	if (!db)
		return -EINVAL;
	flex_brlock_wrlock(&db->lock);
	int rc = fdb_store_check(&db->store);
	flex_brlock_wrunlock(&db->lock);
	return rc;
}

int flexdb_stats(const struct flexdb *cdb, struct flexdb_stats *st)
{
	struct flexdb *db = db_mut(cdb);
	if (!db || !st)
		return -EINVAL;
	memset(st, 0, sizeof(*st));
	struct fdb_memref *a, *i;
	fdb_memrefs_get(db, &a, &i);
	st->memtable_bytes = fdb_mt_bytes(a->mt) + (i ? fdb_mt_bytes(i->mt) : 0);
	st->memtable_entries = fdb_mt_count(a->mt) + (i ? fdb_mt_count(i->mt) : 0);
	st->wal_bytes = (a->wal ? atomic_load(&a->wal->size) : 0) +
			(i && i->wal ? atomic_load(&i->wal->size) : 0);
	fdb_memref_put(a);
	fdb_memref_put(i);
	flex_brlock_rdlock(&db->lock);
	fdb_store_counts(&db->store, &st->keys, &st->intervals_uncounted);
	st->bytes = db->store.bytes;
	st->intervals = fdb_index_count(db->store.index);
	st->cache_bytes = __atomic_load_n(&db->store.cache_bytes, __ATOMIC_RELAXED) +
			  __atomic_load_n(&db->store.grave_bytes, __ATOMIC_RELAXED);
	flex_brlock_rdunlock(&db->lock);
	uint64_t cc[FDB_ST_N];
	fdb_store_cache_counts(&db->store, cc);
	st->cache_hits = cc[FDB_ST_HITS];
	st->cache_thin_hits = cc[FDB_ST_THIN_HITS];
	st->cache_thin_located = cc[FDB_ST_THIN_LOCATED];
	st->scan_located = cc[FDB_ST_SCAN_LOCATED];
	st->scan_stale = cc[FDB_ST_SCAN_STALE];
	st->maps_renewed = cc[FDB_ST_RENEWED];
	st->cache_misses = cc[FDB_ST_MISSES];
	st->committer_runs = atomic_load(&db->committer_runs);
	st->committed_pairs = atomic_load(&db->committed_pairs);
	st->writer_stalls = atomic_load(&db->writer_stalls);
	st->wal_syncs = atomic_load(&db->wal_syncs);
	st->recovered_ops = db->recovered_ops;
	st->tidy_bytes = atomic_load(&db->store.tidy_bytes);
	st->tidy_due = atomic_load(&db->store.tidy_due) != 0;
	st->warming = !db->read_only && !atomic_load(&db->store.warm_done);
	st->index_from_file = db->store.from_snap;
	return flexspace_stats(db->fs, &st->space);
}
