/*
 * delrange_bench - dropping a key range: FlexDB's flexdb_delete_range
 * against per-key deletes, and RocksDB's DeleteRange against its per-key
 * deletes.
 *
 *   delrange_bench [--num N] [--frac F] [--reads R] [--scans S]
 *                  [--cases LIST] [--dir DIR] [--quick]
 *                  [--cache-mb N] [--memtable-mb N] [--bloom-bits N]
 *                  [--rocksdb-compact] [--flexdb-no-mmap]
 *
 * Each case runs in its own process on its own store (engine settings:
 * kv_engines.h, default 64 MiB cache and two 32 MiB memtables):
 *   1. load N pairs (16-byte keys "k%015u", 100-byte values) in a
 *      scattered order, then settle (kv_settle: flush, close, open);
 *   2. delete the keys [0.45 N, 0.45 N + F N) (F = 0.1 by default), with
 *      one range delete or key by key; report the time until the calls
 *      returned and until they were durable (flexdb_sync, RocksDB's
 *      FlushWAL(sync)), then the time to settle: FlexDB's close commits
 *      the memtable into the FlexSpace, RocksDB flushes its memtable;
 *   3. right after the delete (before settling), and again after it: R
 *      gets of uniformly random keys of all N (a tenth of them deleted),
 *      and S scans of 100 pairs each, seeking to a random key inside the
 *      deleted range (so every scan first crosses what was deleted);
 *   4. the bytes of the store's directory before the delete and after
 *      settling.
 * Cases: flexdb-range, flexdb-keys, rocksdb-range, rocksdb-keys.  The
 * gets check what they find (a deleted key found, or a kept one missing,
 * is an error), and so do the scans.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "kv_engines.h"

#define KEY_LEN 16
#define VAL_LEN 100
#define SCAN_LEN 100

struct cfg {
	uint64_t num, reads, scans;
	double frac;
	char dir[PATH_MAX];
};

struct dcase {
	const char *name;
	int eng;
	int range; /* one range delete, else key by key */
};

static const struct dcase cases[] = {
    {"flexdb-range", E_FLEX, 1},
    {"flexdb-keys", E_FLEX, 0},
    {"rocksdb-range", E_ROCKS, 1},
    {"rocksdb-keys", E_ROCKS, 0},
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

static void key_of(char *k, uint64_t i)
{
	char b[32];
	snprintf(b, sizeof(b), "k%015" PRIu64, i);
	memcpy(k, b, KEY_LEN);
}

/* Gets of random keys: seconds, and checks every answer. */
static double readrandom(struct store *s, const struct cfg *c, uint64_t lo, uint64_t hi,
			 uint64_t seed)
{
	struct rng r = {seed};
	char k[KEY_LEN], v[VAL_LEN + 16];
	size_t vl;
	uint64_t t0 = now_ns();
	for (uint64_t i = 0; i < c->reads; i++) {
		uint64_t x = rng_below(&r, c->num);
		key_of(k, x);
		int rc = s->eng->get(s, NULL, k, KEY_LEN, v, sizeof(v), &vl);
		int want = x >= lo && x < hi ? 1 : 0;
		if (rc != want)
			die("%s: get of key %" PRIu64 ": %d, expected %d", s->eng->name, x, rc, want);
	}
	return secs_since(t0);
}

/* Scans of SCAN_LEN pairs from a random key inside [lo, hi): seconds per
 * scan; the first key of each must be hi. */
static double scans(struct store *s, const struct cfg *c, uint64_t lo, uint64_t hi,
		    uint64_t seed)
{
	struct rng r = {seed};
	char k[KEY_LEN], want[KEY_LEN];
	key_of(want, hi);
	uint64_t t0 = now_ns();
	for (uint64_t i = 0; i < c->scans; i++) {
		key_of(k, lo + rng_below(&r, hi - lo));
		void *it = s->eng->it_open(s, NULL);
		if (!it || s->eng->it_seek(it, k, KEY_LEN))
			die("%s: seek failed", s->eng->name);
		for (int n = 0; n < SCAN_LEN && s->eng->it_valid(it); n++) {
			size_t kl, vl;
			const char *key = s->eng->it_key(it, &kl);
			s->eng->it_value(it, &vl);
			if (n == 0 && (kl != KEY_LEN || memcmp(key, want, KEY_LEN)))
				die("%s: a scan inside the deleted range started at %.*s", s->eng->name,
				    (int)kl, key);
			s->eng->it_next(it);
		}
		if (s->eng->it_close(it))
			die("%s: iterator failed", s->eng->name);
	}
	return c->scans ? secs_since(t0) / (double)c->scans : 0;
}

static void run_case(const struct dcase *dc, const struct cfg *c)
{
	struct store s = {.eng = &engines[dc->eng]};
	xsnprintf(s.path, sizeof(s.path), "%s/%s", c->dir, dc->name);
	rmtree(s.path);
	s.eng->open(&s);
	char k[KEY_LEN], k2[KEY_LEN], v[VAL_LEN];
	struct rng vr = {42};
	/* Scattered order: i * a prime step modulo N visits every key once. */
	uint64_t step = 2654435761u % c->num;
	while (step == 0 || c->num % step == 0 || step % c->num == 0)
		step++;
	uint64_t t0 = now_ns();
	for (uint64_t i = 0, x = 0; i < c->num; i++, x = (x + step) % c->num) {
		key_of(k, x);
		for (int j = 0; j < VAL_LEN; j += 8) {
			uint64_t w = rng_next(&vr);
			memcpy(v + j, &w, VAL_LEN - j < 8 ? (size_t)(VAL_LEN - j) : 8);
		}
		if (s.eng->put(&s, NULL, k, KEY_LEN, v, VAL_LEN))
			die("%s: load failed", dc->name);
	}
	double load_s = secs_since(t0);
	kv_settle(&s, NULL, NULL);
	uint64_t disk0 = du(s.path);
	uint64_t lo = (uint64_t)(0.45 * (double)c->num), hi = lo + (uint64_t)(c->frac * (double)c->num);
	if (hi > c->num)
		hi = c->num;

	t0 = now_ns();
	if (dc->range) {
		key_of(k, lo);
		key_of(k2, hi);
		if (s.eng->del_range(&s, NULL, k, KEY_LEN, k2, KEY_LEN))
			die("%s: range delete failed", dc->name);
	} else {
		for (uint64_t x = lo; x < hi; x++) {
			key_of(k, x);
			if (s.eng->del(&s, NULL, k, KEY_LEN))
				die("%s: delete failed", dc->name);
		}
	}
	double api_s = secs_since(t0);
	if (s.eng->sync(&s))
		die("%s: sync failed", dc->name);
	double durable_s = secs_since(t0);

	double rr1 = readrandom(&s, c, lo, hi, 7);
	double sc1 = scans(&s, c, lo, hi, 8);
	double settle_s, reopen_s;
	kv_settle(&s, &settle_s, &reopen_s);
	double rr2 = readrandom(&s, c, lo, hi, 9);
	double sc2 = scans(&s, c, lo, hi, 10);
	uint64_t disk1 = du(s.path);
	s.eng->close(&s);
	printf("%-14s %8.2f %10.3f %10.3f %9.3f %11.0f %8.1f %11.0f %8.1f %9.1f %9.1f\n",
	       dc->name, load_s, api_s * 1e3, durable_s * 1e3, settle_s,
	       c->reads ? (double)c->reads / rr1 : 0, sc1 * 1e6,
	       c->reads ? (double)c->reads / rr2 : 0, sc2 * 1e6, (double)disk0 / 1048576.0,
	       (double)disk1 / 1048576.0);
	fflush(stdout);
	rmtree(s.path);
}

int main(int argc, char **argv)
{
	bench_msg_pid = 1; /* the engines run in forked children */
	struct cfg c = {.num = 1000000, .reads = 200000, .scans = 2000, .frac = 0.1};
	const char *list = NULL;
	engine_opts_default();
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (engine_opts_arg(argc, argv, &i))
			continue;
		if (!strcmp(a, "--num"))
			c.num = parse_u64(a, opt_value(argc, argv, &i));
		else if (!strcmp(a, "--reads"))
			c.reads = parse_u64(a, opt_value(argc, argv, &i));
		else if (!strcmp(a, "--scans"))
			c.scans = parse_u64(a, opt_value(argc, argv, &i));
		else if (!strcmp(a, "--frac"))
			c.frac = atof(opt_value(argc, argv, &i));
		else if (!strcmp(a, "--cases"))
			list = opt_value(argc, argv, &i);
		else if (!strcmp(a, "--dir"))
			xsnprintf(c.dir, sizeof(c.dir), "%s", opt_value(argc, argv, &i));
		else if (!strcmp(a, "--quick")) {
			c.num = 20000;
			c.reads = 20000;
			c.scans = 200;
		} else
			die("unknown option %s (see the comment at the top of bench/delrange_bench.c)",
			    a);
	}
	if (c.num < 100 || c.frac <= 0 || c.frac >= 0.5)
		die("--num must be >= 100 and --frac in (0, 0.5)");
	int own_dir = !c.dir[0];
	if (own_dir) {
		xsnprintf(c.dir, sizeof(c.dir), "/tmp/delrange_bench.XXXXXX");
		if (!mkdtemp(c.dir))
			die("mkdtemp: %s", strerror(errno));
	}
	printf("# delrange_bench: %" PRIu64 " pairs (%d-byte keys, %d-byte values), delete %.0f%% "
	       "(%" PRIu64 " keys); cache %" PRIu64 " MiB, memtables 2 x %" PRIu64 " MiB\n",
	       c.num, KEY_LEN, VAL_LEN, c.frac * 100, (uint64_t)(c.frac * (double)c.num),
	       engine_opts.cache_bytes >> 20, engine_opts.memtable_bytes >> 20);
	printf("# delete: until the calls returned, until durable (sync); settle: until\n"
	       "# committed/flushed and reopened.  after: right after the delete; settled:\n"
	       "# after settling.  scan: %d pairs from a random key inside the deleted range.\n",
	       SCAN_LEN);
	printf("%-14s %8s %10s %10s %9s %11s %8s %11s %8s %9s %9s\n", "case", "load_s", "del_ms",
	       "durable_ms", "settle_s", "get/s_after", "scan_us", "get/s_set", "scan_us",
	       "disk0_MB", "disk1_MB");
	fflush(stdout);
	for (size_t i = 0; i < NCASES; i++) {
		if (list && !strstr(list, cases[i].name))
			continue;
		pid_t pid = bench_fork();
		if (pid == 0) {
			run_case(&cases[i], &c);
			exit(0);
		}
		int st;
		if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
			die("case %s failed", cases[i].name);
	}
	if (own_dir)
		rmtree(c.dir);
	return 0;
}
