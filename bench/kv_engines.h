/*
 * kv_engines.h - FlexDB, RocksDB, LevelDB and LMDB behind one small ops
 * table, opened with the same memory budget: the adapters flexdb_bench
 * and ycsb_bench share (bench/kv_engines.c, compiled once and linked into
 * both), so that both compare the engines under the same settings.
 *
 * Settings (engine_opts, filled in by the program before the first open):
 *   - FlexDB: cache_size = cache_bytes, memtable_size = memtable_bytes
 *     (two memtables), sync_writes = 0, space.no_mmap = flex_no_mmap;
 *     everything else its defaults.
 *   - RocksDB: LRU block cache of cache_bytes, write_buffer_size
 *     memtable_bytes x max_write_buffer_number 2, no compression, a full
 *     bloom filter of bloom_bits bits per key (none when 0), default
 *     WriteOptions (no sync) and ReadOptions; everything else its defaults.
 *   - LevelDB: LRU cache of cache_bytes, write_buffer_size memtable_bytes
 *     (one active plus one immutable memtable: the same 2 x peak), no
 *     compression, a bloom filter of bloom_bits bits per key (none when 0;
 *     LevelDB has none by default), default WriteOptions (no sync).
 *   - LMDB: no cache and no memtable of its own (it reads and writes
 *     through the OS page cache); one environment of KV_LMDB_MAPSIZE (a
 *     reservation of address space that must hold the data, not of disk
 *     or memory) opened MDB_NOSYNC | MDB_NOMETASYNC | MDB_NOTLS |
 *     MDB_NORDAHEAD (LMDB's advice for a database larger than memory: a
 *     page fault reads its page, not a readahead window); every put
 *     or delete is its own write transaction (LMDB's single-writer lock
 *     serialises concurrent writers); a client thread's gets share one
 *     read transaction, reset between operations and renewed for each, so
 *     every read sees the latest commit; an iterator has its own read
 *     transaction (a thread's last one is kept for reuse).
 *
 * quiesce brings a store to a quiet state: RocksDB flushes its memtables
 * (waiting), with rocks_compact compacts the whole key space, and waits
 * until no flush or compaction is pending or running; LevelDB (its C API
 * has no flush and no "compaction pending" property) waits, at most 60 s,
 * until level 0 has fewer files than its compaction trigger (4); FlexDB
 * commits its memtables and waits for its committer's tidying
 * (flexdb_compact; whole with rocks_compact); LMDB has nothing to wait
 * for.  kv_settle is what the programs do after a phase that
 * wrote: quiesce, close, open, quiesce (LevelDB writes its recovered
 * memtable to level 0 when it reopens).
 *
 * The per-operation adapters return 0, 1 for "not found" (get), or -1
 * after reporting the error with op_error (the first few per process, to
 * stderr).  Handles are shared by the client threads; tc is a thread's own
 * context from thread_init (NULL where an engine needs none), passed to
 * every call of that thread.  Open, close and quiesce failures are fatal.
 * An iterator belongs to one thread; it_seek with klen 0 positions at the
 * first key; it_close returns -1 if the iterator had failed.
 */
#ifndef KV_ENGINES_H
#define KV_ENGINES_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* Client threads per process at most (LMDB's reader slots). */
#define KV_MAX_THREADS 64
/* LMDB's map: a reservation of address space, not of disk or memory. */
#define KV_LMDB_MAPSIZE ((uint64_t)64 << 30)

struct engine_opts {
	uint64_t cache_bytes, memtable_bytes;
	int bloom_bits;	   /* RocksDB and LevelDB bloom filter bits per key, 0: none */
	/* quiesce: also compact the whole key space (RocksDB, LevelDB, and
	 * FlexDB: flexdb_compact with full) */
	int rocks_compact;
	/* FlexDB reads with pread instead of its data file's mapping
	 * (space.no_mmap): no mapped pages in its RSS */
	int flex_no_mmap;
};

extern struct engine_opts engine_opts;

/* The defaults: 64 MiB of cache, two 32 MiB memtables, 10-bit blooms. */
void engine_opts_default(void);
/* What FlexDB's quiesce (flexdb_compact) rewrote tidying and its garbage
 * collection moved, and what it wrote to DATA (those two included), TREE
 * and LOG, summed over the calls. */
extern uint64_t kv_flex_tidy_bytes, kv_flex_gc_bytes, kv_flex_settle_data, kv_flex_settle_tree,
    kv_flex_settle_log;

/* --cache-mb N, --memtable-mb N, --bloom-bits N, --rocksdb-compact,
 * --flexdb-no-mmap:
 * whether argv[*i] was one of them (*i moves past a value). */
int engine_opts_arg(int argc, char **argv, int *i);

/* One store of one engine.  For FlexDB, h is the struct flexdb *. */
struct store {
	const struct engine *eng;
	char path[PATH_MAX];
	void *h;
};

struct engine {
	const char *name;
	void (*open)(struct store *s);
	void (*quiesce)(struct store *s); /* wait for background work */
	void (*close)(struct store *s);
	void *(*thread_init)(struct store *s);
	void (*thread_done)(struct store *s, void *tc);
	int (*put)(struct store *s, void *tc, const char *k, size_t kl, const char *v, size_t vl);
	int (*del)(struct store *s, void *tc, const char *k, size_t kl);
	int (*get)(struct store *s, void *tc, const char *k, size_t kl, char *buf, size_t cap,
		   size_t *vl);
	void *(*it_open)(struct store *s, void *tc); /* NULL after op_error */
	int (*it_seek)(void *it, const char *k, size_t kl);
	int (*it_valid)(void *it);
	int (*it_next)(void *it);
	const char *(*it_key)(void *it, size_t *len);
	const char *(*it_value)(void *it, size_t *len);
	int (*it_close)(void *it);
	/* "L0 2 L1 4 L2 31": table files per level (RocksDB, LevelDB), or "". */
	void (*levels)(struct store *s, char *buf, size_t cap);
	/* Deletes every key in [a, b) in one call: flexdb_delete_range,
	 * RocksDB's DeleteRange (a range tombstone, through a write batch).
	 * NULL where the engine has none (LevelDB, LMDB). */
	int (*del_range)(struct store *s, void *tc, const char *a, size_t al, const char *b,
			 size_t bl);
	/* Makes every write that returned durable: flexdb_sync, RocksDB's
	 * FlushWAL(sync).  NULL where not offered. */
	int (*sync)(struct store *s);
};

/* The engines, FlexDB first (ratios are FlexDB / each peer). */
enum { E_FLEX, E_ROCKS, E_LEVEL, E_LMDB, NENG };
extern const struct engine engines[NENG];

/* Seek to k, then read up to n pairs (the first included) with a fresh
 * iterator; adds their key+value bytes to *bytes.  Returns the pairs read
 * or -1 (reported). */
int kv_scan(struct store *s, void *tc, const char *k, size_t kl, int n, uint64_t *bytes);

/* After a phase that wrote: quiesce, close, open, quiesce.  *settle_s
 * gets the seconds of quiesce + close, *reopen_s those of open + the
 * second quiesce (either may be NULL). */
void kv_settle(struct store *s, double *settle_s, double *reopen_s);

/* Reports a per-operation error (the first few per process, to stderr). */
__attribute__((format(printf, 1, 2))) void op_error(const char *fmt, ...);

/* Library versions for the header lines: RocksDB's from the OPTIONS file
 * a throwaway store writes in dir (run it in a child: it starts RocksDB's
 * threads), "?" if none; LevelDB's and LMDB's from their libraries. */
void rk_version(const char *dir, char *buf, size_t cap);
void kv_versions(char *leveldb, size_t lcap, char *lmdb, size_t mcap);

#endif
