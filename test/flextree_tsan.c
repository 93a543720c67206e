/*
 * flextree_tsan.c - readers and a writer on one persistent FlexTree whose
 * leaf cache holds two leaves, as a plain program for ThreadSanitizer
 * (`make tsan` builds and runs it; the Criterion runner does not start
 * under TSan here).  The locking is FlexSpace's: the writer takes a
 * reader-writer lock exclusively, readers share it, so readers load,
 * pin and evict leaves under each other while the tree changes between
 * their calls.
 *
 * Extent i is L bytes at logical i * L and physical (2i + 1) * 2^21 (never
 * contiguous, so never merged); the writer appends or drops the last
 * extent and commits now and then, and every reader checks what it sees
 * against that formula.  Prints PASS or FAIL; FLEX_TEST_SEED replays.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "flextree.h"

#define L 4096u
#define NREADERS 4
#define OPS 20000

static uint64_t P(uint64_t i)
{
	return (2 * i + 1) << 21;
}

static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static struct flextree *tree;

static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

struct scan_state {
	uint64_t want;
	int bad;
};

static int scan_cb(void *arg, const struct flextree_extent *e)
{
	struct scan_state *s = arg;
	if (e->loff != s->want * L || e->poff != P(s->want) || e->len != L)
		s->bad = 1;
	s->want++;
	return 0;
}

static void *reader(void *arg)
{
	uint64_t s = (uint64_t)(uintptr_t)arg | 1;
	long bad = 0;
	for (int op = 0; op < OPS && !bad; op++) {
		pthread_rwlock_rdlock(&lock);
		uint64_t size = flextree_size(tree);
		if (size) {
			uint64_t x = next(&s) % size, i = x / L, p = 0, run = 0;
			int rc = flextree_lookup(tree, x, &p, &run);
			if (rc || p != P(i) + x % L || run != L - x % L) {
				fprintf(stderr, "lookup(%llu) = %d, %llu +%llu\n",
					(unsigned long long)x, rc, (unsigned long long)p,
					(unsigned long long)run);
				bad++;
			}
			struct flextree_mapping m[3];
			ssize_t n = flextree_query(tree, x, 3 * L, m, 3);
			for (ssize_t k = 0; k < n && k < 3; k++) {
				uint64_t j = i + (uint64_t)k, o = k ? 0 : x % L;
				if (m[k].loff != j * L + o || m[k].poff != P(j) + o)
					bad++;
			}
			if (n < 1)
				bad++;
			struct scan_state st = {.want = i};
			if (flextree_scan(tree, x, 2 * L, scan_cb, &st) != 0 || st.bad)
				bad++;
		}
		pthread_rwlock_unlock(&lock);
	}
	return (void *)bad;
}

int main(void)
{
	const char *env = getenv("FLEX_TEST_SEED");
	uint64_t seed = env && *env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
	printf("flextree_tsan seed=%llu (FLEX_TEST_SEED replays)\n", (unsigned long long)seed);
	char dir[] = "/tmp/flextree_tsan.XXXXXX", path[64];
	if (!mkdtemp(dir))
		return 2;
	snprintf(path, sizeof(path), "%s/TREE", dir);
	struct flextree_options o = {.lazy_open = 1};
	int rc = flextree_open(path, &o, &tree);
	struct flextree_stats st;
	flextree_stats(tree, &st);
	flextree_close(tree);
	o.cache_size = 2 * st.leaf_bytes;
	rc = rc ? rc : flextree_open(path, &o, &tree);
	if (rc) {
		printf("FAIL: open = %d\n", rc);
		return 1;
	}
	for (uint64_t i = 0; i < 2000 && !rc; i++)
		rc = flextree_insert(tree, i * L, P(i), L);
	rc = rc ? rc : flextree_commit(tree);

	pthread_t th[NREADERS];
	for (int k = 0; k < NREADERS; k++)
		pthread_create(&th[k], NULL, reader, (void *)(uintptr_t)(seed + (uint64_t)k * 7919));
	uint64_t s = seed | 1;
	for (int op = 0; op < 3000 && !rc; op++) {
		pthread_rwlock_wrlock(&lock);
		uint64_t n = flextree_size(tree) / L;
		if (next(&s) % 2 || n < 100)
			rc = flextree_insert(tree, n * L, P(n), L);
		else
			rc = flextree_collapse(tree, (n - 1) * L, L);
		if (!rc && (flextree_pressure(tree) || next(&s) % 50 == 0))
			rc = flextree_commit(tree);
		pthread_rwlock_unlock(&lock);
	}
	long bad = 0;
	for (int k = 0; k < NREADERS; k++) {
		void *r;
		pthread_join(th[k], &r);
		bad += (long)r;
	}
	int crc = flextree_check(tree);
	flextree_stats(tree, &st);
	printf("%llu leaves, %llu leaf reads, %llu evictions\n", (unsigned long long)st.leaves,
	       (unsigned long long)st.leaf_reads, (unsigned long long)st.leaf_evictions);
	int crc2 = flextree_close(tree);
	unlink(path);
	rmdir(dir);
	if (rc || bad || crc || crc2) {
		printf("FAIL: writer %d, reader errors %ld, check %d, close %d\n", rc, bad, crc,
		       crc2);
		return 1;
	}
	printf("PASS\n");
	return 0;
}
