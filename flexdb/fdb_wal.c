/*
 * fdb_wal.c - FlexDB's write-ahead log.
 *
 * Each memtable has its own WAL file, WAL-<generation as 16 hex digits>.
 * Every flexdb_put, flexdb_delete and flexdb_write appends one record that
 * holds the whole batch, so a batch is replayed entirely or not at all.  A
 * record carries the writer's sequence number and a checksum; replay goes
 * through the files in generation order and through each file until the
 * first record that is torn or damaged (LESSONS: order by sequence
 * numbers, never by file times; one-record logs count).  The committer
 * removes a WAL only after its memtable is durable in the FlexSpace, and
 * syncs the directory so that a removed WAL cannot come back.  The
 * fdb_walset_* functions own a directory's files: their names, listing,
 * creation, replay and removal, and the FlexSpace's durable points that
 * creation records and replay checks.
 *
 * Record: u32 magic "FWR1", u32 payload length, u64 seq, u64 checksum
 * (XXH3-64 of the payload seeded with seq), payload.  The file starts with a 64-byte
 * header; records start at 8 KiB (docs/FORMAT.md).
 *
 * A damaged record looks like a torn one, and stopping there would drop
 * synced writes without a word (a corruption sweep showed every flipped
 * bit in a record doing so).  Hence the sync mark: after each fdatasync a
 * 32-byte mark naming the highest durable sequence number is written (not
 * synced) at 4 KiB, in its own page between the header and the records.
 * A replay that ends below the mark has met damage, not a torn tail:
 * FLEX_ECORRUPT.  Likewise a file followed by a newer one was synced whole
 * before the newer one was created, so it must replay to its end, and a
 * record whose checksum holds but whose sequence number breaks the chain
 * is misplaced.  A torn tail that is accepted is cut off, so that no file
 * but the newest ever ends in one, and recovery removes an empty newest
 * file before creating the next (flexdb.c).
 *
 * The header also keeps the FlexSpace's durable point when the file was
 * created, after the memtables before the previous one were committed:
 * a FlexSpace that recovers to an earlier point has lost synced changes
 * (an older copy of its LOG, say) whose WAL files are gone, so that too
 * is FLEX_ECORRUPT.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "../common/flex_ckpt.h"
#include "../common/flex_killpoint.h"
#include "../common/flex_vec.h"
#include "fdb_int.h"

#define WAL_MAGIC "FLEXWAL1"
/* Format 1 had no sync mark and records from byte 32; it is still
 * replayed. */
#define WAL_FORMAT 2u
#define WAL_HDR1 32u
#define WAL_HDR 64u
#define WAL_MARK_AT 4096u
#define WAL_MARK_BYTES 32u
#define WAL_RECORDS 8192u
/* Records are started on their way to the disk a MiB at a time. */
#define FDB_WAL_WRITEBACK ((uint64_t)1 << 20)
#define MARK_MAGIC 0x31535746u /* "FWS1" */
#define REC_MAGIC 0x31525746u /* "FWR1" */
#define REC_HDR 24u

/* The sequence number seeds the checksum, so it is covered too. */
static uint64_t rec_csum(uint64_t seq, const uint8_t *payload, size_t len)
{
	return XXH3_64bits_withSeed(payload, len, seq);
}

void fdb_wal_name(char name[FDB_WAL_NAME], uint64_t gen)
{
	snprintf(name, FDB_WAL_NAME, "WAL-%016" PRIx64, gen);
}

int fdb_wal_create(const struct flex_io *io, int dir_fd, const char *dir, uint64_t gen,
		   const uint64_t space[2], struct fdb_wal **out)
{
	size_t plen = strlen(dir) + 1 + FDB_WAL_NAME;
	struct fdb_wal *w = calloc(1, sizeof(*w) + plen);
	if (!w)
		return -ENOMEM;
	char name[FDB_WAL_NAME];
	fdb_wal_name(name, gen);
	snprintf(w->path, plen, "%s/%s", dir, name);
	w->io = io;
	w->gen = gen;
	w->fd = io->open(io, w->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (w->fd < 0) {
		int rc = w->fd;
		free(w);
		return rc;
	}
	uint8_t h[WAL_HDR] = {0};
	memcpy(h, WAL_MAGIC, 8);
	flex_put_le32(h + 8, WAL_FORMAT);
	flex_put_le64(h + 16, gen);
	flex_put_le64(h + 24, space[0]);
	flex_put_le64(h + 32, space[1]);
	flex_put_le64(h + 56, XXH3_64bits(h, 56));
	int rc = flex_io_write_full(io, w->fd, h, WAL_HDR, 0);
	/* The file must exist durably before any record in it is relied on. */
	if (!rc) {
		FLEX_KILLPOINT("fdb.walnew.sync.before");
		rc = io->fdatasync(io, w->fd);
	}
	if (!rc) {
		FLEX_KILLPOINT("fdb.walnew.sync.after");
		rc = io->fsync(io, dir_fd);
	}
	if (!rc)
		FLEX_KILLPOINT("fdb.walnew.dir.sync.after");
	if (rc) {
		io->close(io, w->fd);
		io->unlink(io, w->path);
		free(w);
		return rc;
	}
	pthread_mutex_init(&w->markmu, NULL);
	atomic_store(&w->size, WAL_RECORDS);
	*out = w;
	return 0;
}

int fdb_wal_append_group(struct fdb_wal *w, uint64_t seq, size_t n, const uint8_t *const *payload,
			 const size_t *len)
{
	uint8_t stackbuf[4096];
	size_t total = 0;
	if (!n)
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (len[i] > UINT32_MAX)
			return FLEX_ETOOBIG;
		total += REC_HDR + len[i];
	}
	uint8_t *b = total <= sizeof(stackbuf) ? stackbuf : malloc(total);
	if (!b)
		return -ENOMEM;
	uint8_t *r = b;
	for (size_t i = 0; i < n; i++) {
		flex_put_le32(r, REC_MAGIC);
		flex_put_le32(r + 4, (uint32_t)len[i]);
		flex_put_le64(r + 8, seq + i);
		flex_put_le64(r + 16, rec_csum(seq + i, payload[i], len[i]));
		memcpy(r + REC_HDR, payload[i], len[i]);
		r += REC_HDR + len[i];
	}
	int rc = flex_io_write_full(w->io, w->fd, b, total, atomic_load(&w->size));
	if (b != stackbuf)
		free(b);
	if (rc)
		return rc;
	/* In the file, not yet in the memtable nor acknowledged. */
	FLEX_KILLPOINT("fdb.wal.appended");
	atomic_fetch_add(&w->size, total);
	atomic_store(&w->last_seq, seq + n - 1);
	return 0;
}

void fdb_wal_writeback(struct fdb_wal *w)
{
	uint64_t hi = atomic_load(&w->size) / FDB_WAL_WRITEBACK * FDB_WAL_WRITEBACK;
	if (!w->io->writeback || hi <= w->started)
		return;
	(void)w->io->writeback(w->io, w->fd, w->started, hi - w->started);
	w->started = hi;
}

static void mark_encode(uint8_t *m, uint64_t gen, uint64_t seq)
{
	memset(m, 0, WAL_MARK_BYTES);
	flex_put_le32(m, MARK_MAGIC);
	flex_put_le64(m + 8, gen);
	flex_put_le64(m + 16, seq);
	flex_put_le64(m + 24, XXH3_64bits(m, 24));
}

int fdb_wal_sync(struct fdb_wal *w)
{
	uint64_t target = atomic_load(&w->last_seq);
	if (atomic_load(&w->synced_seq) >= target)
		return 0;
	FLEX_KILLPOINT("fdb.wal.sync.before");
	int rc = w->io->fdatasync(w->io, w->fd);
	if (rc)
		return rc;
	FLEX_KILLPOINT("fdb.wal.sync.after");
	uint64_t cur = atomic_load(&w->synced_seq);
	while (cur < target && !atomic_compare_exchange_weak(&w->synced_seq, &cur, target))
		;
	/* The mark is not synced itself: it only ever names records that
	 * are durable, and the next sync carries it. */
	pthread_mutex_lock(&w->markmu);
	if (target > w->marked) {
		uint8_t m[WAL_MARK_BYTES];
		mark_encode(m, w->gen, target);
		rc = flex_io_write_full(w->io, w->fd, m, WAL_MARK_BYTES, WAL_MARK_AT);
		if (!rc)
			w->marked = target;
	}
	pthread_mutex_unlock(&w->markmu);
	return rc;
}

void fdb_wal_close(struct fdb_wal *w)
{
	if (!w)
		return;
	w->io->close(w->io, w->fd);
	pthread_mutex_destroy(&w->markmu);
	free(w);
}

int fdb_wal_copy(const struct flex_io *io, int src_fd, uint64_t gen, uint64_t upto, const char *dir)
{
	char name[FDB_WAL_NAME];
	fdb_wal_name(name, gen);
	uint64_t size;
	int rc = io->fsize(io, src_fd, &size);
	if (rc)
		return rc;
	if (upto == UINT64_MAX) {
		struct flex_ckpt_range r = {0, size};
		return flex_ckpt_copy(io, src_fd, dir, name, &r, 1, size);
	}
	/* A file with no record yet is shorter than its records' offset. */
	if (upto > size)
		upto = size;
	struct flex_ckpt_range r[2] = {{0, upto < WAL_MARK_AT ? upto : WAL_MARK_AT},
				       {WAL_RECORDS, upto > WAL_RECORDS ? upto - WAL_RECORDS : 0}};
	return flex_ckpt_copy(io, src_fd, dir, name, r, 2, upto);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

struct gen_list {
	uint64_t *gens;
	size_t n, cap;
};

static int gen_add(void *arg, const char *name)
{
	struct gen_list *l = arg;
	char *end;
	if (strncmp(name, "WAL-", 4) != 0 || strlen(name) != FDB_WAL_NAME - 1)
		return 0;
	uint64_t g = strtoull(name + 4, &end, 16);
	if (*end)
		return 0;
	if (flex_vec_reserve(&l->gens, &l->cap, l->n + 1, 8))
		return -ENOMEM;
	l->gens[l->n++] = g;
	return 0;
}

int fdb_walset_list(const struct fdb_walset *ws, uint64_t **gens, size_t *n)
{
	struct gen_list l = {0};
	int rc = ws->io->list(ws->io, ws->dir, gen_add, &l);
	if (rc) {
		free(l.gens);
		l.gens = NULL;
		l.n = 0;
	}
	if (l.n > 1)
		qsort(l.gens, l.n, sizeof(uint64_t), cmp_u64);
	*gens = l.gens;
	*n = l.n;
	return rc;
}

/* Replay reads the file through a window of WAL_WINDOW bytes (or one
 * record, if larger): two reads per record were two system calls per put,
 * most of the time a reopen after a crash took. */
#define WAL_WINDOW (1u << 20)
struct wal_window {
	const struct flex_io *io;
	int fd;
	uint64_t size;
	uint8_t *buf;
	size_t cap;
	uint64_t off, len; /* the file bytes buf holds */
};

/* Points *p at file bytes [off, off + n), which lie inside the file. */
static int wal_window_get(struct wal_window *w, uint64_t off, size_t n, const uint8_t **p)
{
	if (off < w->off || off + n > w->off + w->len) {
		size_t want = n > WAL_WINDOW ? n : WAL_WINDOW;
		if (want > w->cap) {
			uint8_t *nb = realloc(w->buf, want);
			if (!nb)
				return -ENOMEM;
			w->buf = nb;
			w->cap = want;
		}
		uint64_t len = w->size - off < w->cap ? w->size - off : w->cap;
		w->len = 0;
		int rc = flex_io_read_full(w->io, w->fd, w->buf, len, off);
		if (rc)
			return rc == -ENODATA ? FLEX_ECORRUPT : rc;
		w->off = off;
		w->len = len;
	}
	*p = w->buf + (off - w->off);
	return 0;
}

int fdb_wal_scan(const struct flex_io *io, const char *dir, uint64_t gen, int newest, int read_only,
		 fdb_wal_fn fn, void *arg, uint64_t *last_seq, uint64_t *nrec,
		 struct fdb_wal_scanned *out)
{
	char path[4096], name[FDB_WAL_NAME];
	fdb_wal_name(name, gen);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	*nrec = 0;
	*out = (struct fdb_wal_scanned){.gen = gen};
	int fd = io->open(io, path, (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC, 0);
	if (fd < 0)
		return fd;
	uint64_t size = 0;
	int rc = io->fsize(io, fd, &size);
	uint8_t h[WAL_HDR];
	uint32_t format = 0;
	if (!rc && size >= WAL_HDR1) {
		rc = flex_io_read_full(io, fd, h, WAL_HDR1, 0);
		format = flex_get_le32(h + 8);
	}
	if (!rc && format != 1 && size >= WAL_HDR)
		rc = flex_io_read_full(io, fd, h, WAL_HDR, 0);
	if (!rc && (size < WAL_HDR1 || (format != 1 && size < WAL_HDR))) {
		io->close(io, fd);
		/* Created but its header never became durable.  Only the newest
		 * file can be left so: recovery removes empty files. */
		out->headless = 1;
		return newest ? 0 : FLEX_ECORRUPT;
	}
	/* Format 1: checksum of [0, 24) at 24; later ones: of [0, 56) at 56. */
	int sound = format == 1 ? flex_get_le64(h + 24) == XXH3_64bits(h, 24)
				: flex_get_le64(h + 56) == XXH3_64bits(h, 56);
	if (!rc && (memcmp(h, WAL_MAGIC, 8) || !sound || flex_get_le64(h + 16) != gen))
		rc = FLEX_ECORRUPT;
	if (!rc && format != 1 && format != WAL_FORMAT)
		rc = FLEX_EVERSION;
	/* The point the FlexSpace had reached when the file was created:
	 * fdb_wal_settle holds it against the one it recovered to. */
	if (!rc && format >= 2) {
		out->has_point = 1;
		out->point[0] = flex_get_le64(h + 24);
		out->point[1] = flex_get_le64(h + 32);
	}
	uint64_t off = format == 1 ? WAL_HDR1 : WAL_RECORDS;
	/* Between the header and the first record there is only the mark,
	 * written after records were: a file ending there was cut. */
	if (!rc && format >= 2 && size > WAL_HDR && size < WAL_RECORDS)
		rc = FLEX_ECORRUPT;
	struct wal_window win = {.io = io, .fd = fd, .size = size};
	while (!rc && off + REC_HDR <= size) {
		const uint8_t *rh;
		if ((rc = wal_window_get(&win, off, REC_HDR, &rh)) != 0)
			break;
		uint32_t len = flex_get_le32(rh + 4);
		uint64_t seq = flex_get_le64(rh + 8);
		uint64_t sum = flex_get_le64(rh + 16);
		if (flex_get_le32(rh) != REC_MAGIC || len > size - off - REC_HDR)
			break;
		const uint8_t *b;
		if ((rc = wal_window_get(&win, off + REC_HDR, len, &b)) != 0)
			break;
		if (rec_csum(seq, b, len) != sum)
			break;
		/* Sequence numbers are consecutive across all files; a sound
		 * record out of sequence was put where it does not belong. */
		if (*last_seq && seq != *last_seq + 1) {
			rc = FLEX_ECORRUPT;
			break;
		}
		rc = fn(arg, seq, b, len);
		*last_seq = seq;
		(*nrec)++;
		off += REC_HDR + len;
	}
	free(win.buf);
	if (!rc && format >= 2 && size >= WAL_MARK_AT + WAL_MARK_BYTES) {
		uint8_t m[WAL_MARK_BYTES], want[WAL_MARK_BYTES];
		rc = flex_io_read_full(io, fd, m, WAL_MARK_BYTES, WAL_MARK_AT);
		mark_encode(want, gen, flex_get_le64(m + 16));
		if (!rc && !memcmp(m, want, WAL_MARK_BYTES) && flex_get_le64(m + 16) > *last_seq)
			rc = FLEX_ECORRUPT; /* a synced record did not replay */
	}
	if (!rc && format >= 2 && !newest && (off != size || !*nrec))
		rc = FLEX_ECORRUPT; /* synced whole before the next file */
	/* A file that failed keeps all its bytes: what follows the failure
	 * may be records a read error hid, for the next open to replay. */
	out->end = rc ? size : off;
	out->size = size;
	/* What is replayed must stay durable: it may never have been synced
	 * by the session that wrote it.  Syncing changes nothing a reader
	 * sees, so it is done here, while the FlexSpace opens. */
	if (!rc && !read_only) {
		FLEX_KILLPOINT("fdb.replay.sync.before");
		rc = io->fdatasync(io, fd);
	}
	if (!rc)
		FLEX_KILLPOINT("fdb.replay.sync.after");
	io->close(io, fd);
	return rc;
}

int fdb_wal_settle(const struct flex_io *io, const char *dir, const struct fdb_wal_scanned *sc,
		   const uint64_t space[2], int read_only)
{
	/* The FlexSpace had reached this point when the file was created. */
	if (sc->has_point &&
	    (sc->point[0] > space[0] || (sc->point[0] == space[0] && sc->point[1] > space[1])))
		return FLEX_ECORRUPT;
	/* A read-only replay leaves the file as it is, torn tail and all:
	 * the next writable open judges it the same way. */
	if (read_only || sc->headless || sc->end >= sc->size)
		return 0;
	char path[4096], name[FDB_WAL_NAME];
	fdb_wal_name(name, sc->gen);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = io->open(io, path, O_RDWR | O_CLOEXEC, 0);
	if (fd < 0)
		return fd;
	int rc = io->ftruncate(io, fd, sc->end); /* the torn tail */
	if (!rc)
		rc = io->fdatasync(io, fd);
	io->close(io, fd);
	return rc;
}

/* ---- the set of a directory's WAL files ----------------------------------- */

int fdb_walset_path(const struct fdb_walset *ws, uint64_t gen, char *buf, size_t cap)
{
	char name[FDB_WAL_NAME];
	fdb_wal_name(name, gen);
	int n = snprintf(buf, cap, "%s/%s", ws->dir, name);
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* A file records the point the FlexSpace has made durable when it is
 * created; replay holds it against the point the space recovered to. */
int fdb_walset_create(const struct fdb_walset *ws, uint64_t gen, struct fdb_wal **out)
{
	struct flexspace_point now;
	int rc = flexspace_durable(ws->fs, &now, NULL);
	if (rc)
		return rc;
	uint64_t space[2] = {now.version, now.batches};
	return fdb_wal_create(ws->io, ws->dir_fd, ws->dir, gen, space, out);
}

int fdb_walset_settle(const struct fdb_walset *ws, const struct fdb_wal_scanned *sc, int read_only)
{
	struct flexspace_point rec;
	int rc = flexspace_durable(ws->fs, NULL, &rec);
	if (rc)
		return rc;
	uint64_t space[2] = {rec.version, rec.batches};
	return fdb_wal_settle(ws->io, ws->dir, sc, space, read_only);
}

int fdb_walset_open(const struct fdb_walset *ws, uint64_t gen)
{
	char path[PATH_MAX];
	int rc = fdb_walset_path(ws, gen, path, sizeof(path));
	return rc ? rc : ws->io->open(ws->io, path, O_RDONLY | O_CLOEXEC, 0);
}

/* The killpoints just before and after (after != 0) the directory sync
 * of a removal. */
static void remove_killpoint(enum fdb_wal_rm site, int after)
{
	if (site == FDB_WAL_RM_COMMIT && !after)
		FLEX_KILLPOINT("fdb.commit.dir.sync.before");
	else if (site == FDB_WAL_RM_COMMIT)
		FLEX_KILLPOINT("fdb.commit.dir.sync.after");
	else if (site == FDB_WAL_RM_RECOVER && !after)
		FLEX_KILLPOINT("fdb.recover.dir.sync.before");
	else if (site == FDB_WAL_RM_RECOVER)
		FLEX_KILLPOINT("fdb.recover.dir.sync.after");
}

int fdb_walset_remove(const struct fdb_walset *ws, const uint64_t *gens, size_t n,
		      enum fdb_wal_rm site)
{
	int rc = 0;
	for (size_t i = 0; i < n && !rc; i++) {
		char path[PATH_MAX];
		rc = fdb_walset_path(ws, gens[i], path, sizeof(path));
		if (!rc && (rc = ws->io->unlink(ws->io, path)) == -ENOENT)
			rc = 0;
	}
	/* Removed, but the removal is not durable yet. */
	if (!rc)
		remove_killpoint(site, 0);
	if (!rc)
		rc = ws->io->fsync(ws->io, ws->dir_fd);
	if (!rc)
		remove_killpoint(site, 1);
	return rc;
}

int fdb_payload_next(const uint8_t *payload, size_t len, size_t *pos, struct fdb_batch_op *op)
{
	const uint8_t *end = payload + len;
	if (*pos == 0)
		*pos = 4; /* the count, checked by the caller */
	if (*pos >= len)
		return 0;
	const uint8_t *p = payload + *pos;
	op->op = *p++;
	size_t a = flex_varint_get(p, end, &op->klen);
	if (!a || (op->op != FDB_OP_PUT && op->op != FDB_OP_DEL && op->op != FDB_OP_DEL_RANGE))
		return FLEX_ECORRUPT;
	p += a;
	op->vlen = 0;
	if (op->op != FDB_OP_DEL) {
		a = flex_varint_get(p, end, &op->vlen);
		if (!a)
			return FLEX_ECORRUPT;
		p += a;
	}
	/* A range's start may be empty; its end is a key. */
	int range = op->op == FDB_OP_DEL_RANGE;
	if ((op->klen == 0 && !range) || op->klen > FLEXDB_MAX_KEY ||
	    op->vlen > (range ? FLEXDB_MAX_KEY : FLEXDB_MAX_VALUE) || (range && op->vlen == 0) ||
	    (size_t)(end - p) < (size_t)op->klen + op->vlen)
		return FLEX_ECORRUPT;
	op->key = p;
	op->val = p + op->klen;
	if (range && fdb_keycmp(op->key, op->klen, op->val, op->vlen) >= 0)
		return FLEX_ECORRUPT;
	*pos = (size_t)(p + op->klen + op->vlen - payload);
	return 1;
}
