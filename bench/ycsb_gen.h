/*
 * ycsb_gen.h - YCSB's core-workload generators in C, as static functions so
 * that the benchmark (bench/ycsb_bench.c) and its test
 * (test/test_ycsb_gen.c) share one copy.
 *
 * Each generator follows the Java class of YCSB 0.17 (site.ycsb.generator,
 * site.ycsb.workloads.CoreWorkload) formula for formula, quirks included,
 * so that a stream here has the shape of YCSB's:
 *
 *   ycsb_fnvhash64      Utils.fnvhash64: FNV-1a 64 over the 8 bytes of the
 *                       value, low byte first, then Math.abs on the signed
 *                       result (Long.MIN_VALUE stays negative, as in Java).
 *   ycsb_build_key      CoreWorkload.buildKeyName: with orderedinserts=false
 *                       (YCSB's default insertorder=hashed) the key number
 *                       is replaced by fnvhash64(keynum); then "user", then
 *                       (zeropadding - digits) zeros, then Long.toString.
 *                       zeropadding 1 is YCSB's default (no padding); the
 *                       benchmark pads to the dataset's key size, which is
 *                       YCSB's own way of making keys of a fixed length.
 *   ycsb_zipf_*         ZipfianGenerator (Gray et al., "Quickly generating
 *                       billion-record synthetic databases"), including the
 *                       incremental zeta when the item count grows and the
 *                       eta recomputed from the original item count.
 *   ycsb_scrambled_*    ScrambledZipfianGenerator: a zipfian (0.99) over
 *                       10^10 + 1 items with the precomputed zeta
 *                       26.46902820178302, hashed with fnvhash64, mod the
 *                       item count, plus min.
 *   ycsb_latest_*       SkewedLatestGenerator: lastValue - zipfian(lastValue)
 *                       over the acknowledged insert counter.
 *   ycsb_uniform        UniformLongGenerator: lb + uniform integer in
 *                       [0, ub - lb].
 *   ycsb_choose_op      DiscreteGenerator over the operation proportions,
 *                       added in CoreWorkload's order (read, update, insert,
 *                       scan, read-modify-write).
 *
 * The one deliberate difference: YCSB draws from java.util's
 * ThreadLocalRandom; here every draw comes from a seeded splitmix64 stream
 * (ycsb_rng), one per client thread, shared by all generators of that
 * thread as ThreadLocalRandom is.  Doubles are the top 53 bits / 2^53, as
 * nextDouble.  So streams are reproducible from a seed but are not YCSB's
 * byte-for-byte; keys (no randomness) are.  The generators' constructors
 * draw once, as YCSB's do (ZipfianGenerator and SkewedLatestGenerator call
 * nextValue() at construction).
 */
#ifndef YCSB_GEN_H
#define YCSB_GEN_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---- random source ---------------------------------------------------------------- */

struct ycsb_rng {
	uint64_t s;
};

static inline void ycsb_rng_seed(struct ycsb_rng *r, uint64_t seed)
{
	r->s = seed;
}

static inline uint64_t ycsb_rng_next(struct ycsb_rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Uniform in [0, 1), 53 bits, as Random.nextDouble. */
static inline double ycsb_rng_double(struct ycsb_rng *r)
{
	return (double)(ycsb_rng_next(r) >> 11) * 0x1.0p-53;
}

/* Uniform in [0, n), n >= 1 (multiply-shift, no modulo bias worth
 * mentioning below 2^32). */
static inline uint64_t ycsb_rng_below(struct ycsb_rng *r, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)ycsb_rng_next(r) * n) >> 64);
}

/* ---- keys ------------------------------------------------------------------------- */

#define YCSB_FNV_OFFSET_BASIS_64 0xCBF29CE484222325ULL
#define YCSB_FNV_PRIME_64 1099511628211ULL

/* Utils.fnvhash64(long): FNV-1a over the value's 8 bytes, low byte first,
 * then Math.abs of the signed result. */
static inline int64_t ycsb_fnvhash64(int64_t val)
{
	uint64_t h = YCSB_FNV_OFFSET_BASIS_64, v = (uint64_t)val;

	for (int i = 0; i < 8; i++) {
		h ^= v & 0xff;
		v >>= 8;
		h *= YCSB_FNV_PRIME_64;
	}
	/* Math.abs: two's complement negation, Long.MIN_VALUE unchanged. */
	if (h & (1ULL << 63))
		h = (uint64_t)0 - h;
	return (int64_t)h;
}

/* CoreWorkload.buildKeyName: writes the key (not NUL-terminated if it does
 * not fit; cap >= 4 + max(20, zeropadding) + 1 always fits) and returns its
 * length.  hashed = !orderedinserts. */
static inline size_t ycsb_build_key(char *buf, size_t cap, int64_t keynum, int hashed,
				    int zeropadding)
{
	char num[24];
	int64_t k = hashed ? ycsb_fnvhash64(keynum) : keynum;
	int n = snprintf(num, sizeof(num), "%lld", (long long)k);
	int fill = zeropadding - n;
	size_t len = 0;

	if (fill < 0)
		fill = 0;
	if (cap < 4 + (size_t)fill + (size_t)n + 1)
		return 0;
	memcpy(buf, "user", 4);
	len = 4;
	memset(buf + len, '0', (size_t)fill);
	len += (size_t)fill;
	memcpy(buf + len, num, (size_t)n);
	len += (size_t)n;
	buf[len] = 0;
	return len;
}

/* ---- zipfian ------------------------------------------------------------------------ */

#define YCSB_ZIPFIAN_CONSTANT 0.99
/* ScrambledZipfianGenerator's item count and its precomputed zeta. */
#define YCSB_SCRAMBLED_ITEM_COUNT 10000000000LL
#define YCSB_SCRAMBLED_ZETAN 26.46902820178302

struct ycsb_zipf {
	int64_t items, base, countforzeta;
	double theta, zeta2theta, alpha, zetan, eta;
};

/* ZipfianGenerator.zetastatic: initialsum + sum_{i=st}^{n-1} 1/(i+1)^theta. */
static inline double ycsb_zeta(int64_t st, int64_t n, double theta, double initialsum)
{
	double sum = initialsum;

	for (int64_t i = st; i < n; i++)
		sum += 1 / pow((double)(i + 1), theta);
	return sum;
}

/* ZipfianGenerator.nextLong(itemcount).  The zeta grows incrementally when
 * itemcount grows (YCSB never shrinks it by default: allowitemcountdecrease
 * is false); eta is then recomputed from the original item count, as YCSB
 * does. */
static inline int64_t ycsb_zipf_next_long(struct ycsb_zipf *z, struct ycsb_rng *r,
					  int64_t itemcount)
{
	if (itemcount > z->countforzeta) {
		z->zetan = ycsb_zeta(z->countforzeta, itemcount, z->theta, z->zetan);
		z->countforzeta = itemcount;
		z->eta = (1 - pow(2.0 / (double)z->items, 1 - z->theta)) /
			 (1 - z->zeta2theta / z->zetan);
	}
	double u = ycsb_rng_double(r);
	double uz = u * z->zetan;

	if (uz < 1.0)
		return z->base;
	if (uz < 1.0 + pow(0.5, z->theta))
		return z->base + 1;
	return z->base + (int64_t)((double)itemcount * pow(z->eta * u - z->eta + 1, z->alpha));
}

/* ZipfianGenerator(min, max, constant, zetan); zetan < 0 computes it
 * (the constructor without zetan).  Draws once, as the constructor's
 * nextValue() does. */
static inline void ycsb_zipf_init(struct ycsb_zipf *z, struct ycsb_rng *r, int64_t min, int64_t max,
				  double constant, double zetan)
{
	z->items = max - min + 1;
	z->base = min;
	z->theta = constant;
	z->zeta2theta = ycsb_zeta(0, 2, z->theta, 0);
	z->alpha = 1.0 / (1.0 - z->theta);
	z->zetan = zetan >= 0 ? zetan : ycsb_zeta(0, z->items, z->theta, 0);
	z->countforzeta = z->items;
	z->eta = (1 - pow(2.0 / (double)z->items, 1 - z->theta)) / (1 - z->zeta2theta / z->zetan);
	(void)ycsb_zipf_next_long(z, r, z->items);
}

/* ---- scrambled zipfian ------------------------------------------------------------ */

struct ycsb_scrambled {
	int64_t min, max, itemcount;
	struct ycsb_zipf gen;
};

/* ScrambledZipfianGenerator(min, max) with the default constant 0.99. */
static inline void ycsb_scrambled_init(struct ycsb_scrambled *s, struct ycsb_rng *r, int64_t min,
				       int64_t max)
{
	s->min = min;
	s->max = max;
	s->itemcount = max - min + 1;
	ycsb_zipf_init(&s->gen, r, 0, YCSB_SCRAMBLED_ITEM_COUNT, YCSB_ZIPFIAN_CONSTANT,
		       YCSB_SCRAMBLED_ZETAN);
}

static inline int64_t ycsb_scrambled_next(struct ycsb_scrambled *s, struct ycsb_rng *r)
{
	int64_t ret = ycsb_zipf_next_long(&s->gen, r, s->gen.items);

	return s->min + ycsb_fnvhash64(ret) % s->itemcount;
}

/* ---- skewed latest ---------------------------------------------------------------- */

struct ycsb_latest {
	struct ycsb_zipf zipf;
};

/* SkewedLatestGenerator(basis): a ZipfianGenerator(basis.lastValue())
 * (items 0 .. lastValue - 1), then one draw as the constructor's
 * nextValue(). */
static inline void ycsb_latest_init(struct ycsb_latest *l, struct ycsb_rng *r, int64_t last)
{
	ycsb_zipf_init(&l->zipf, r, 0, last - 1, YCSB_ZIPFIAN_CONSTANT, -1);
	(void)ycsb_zipf_next_long(&l->zipf, r, last);
}

/* nextValue(): last - zipfian.nextLong(last), last = basis.lastValue(). */
static inline int64_t ycsb_latest_next(struct ycsb_latest *l, struct ycsb_rng *r, int64_t last)
{
	return last - ycsb_zipf_next_long(&l->zipf, r, last);
}

/* ---- uniform -------------------------------------------------------------------------- */

/* UniformLongGenerator(lb, ub): inclusive bounds. */
static inline int64_t ycsb_uniform(struct ycsb_rng *r, int64_t lb, int64_t ub)
{
	return lb + (int64_t)ycsb_rng_below(r, (uint64_t)(ub - lb + 1));
}

/* ---- workloads -------------------------------------------------------------------------- */

enum ycsb_op { YCSB_READ, YCSB_UPDATE, YCSB_INSERT, YCSB_SCAN, YCSB_RMW, YCSB_NOPS };
enum ycsb_dist { YCSB_UNIFORM, YCSB_ZIPFIAN, YCSB_LATEST };

struct ycsb_workload {
	const char *name;
	/* Proportions in YCSB_READ .. YCSB_RMW order. */
	double prop[YCSB_NOPS];
	enum ycsb_dist dist;
};

/* The core workloads, as YCSB's workloads/workload[a-f] files set them
 * (E: maxscanlength 100, scanlengthdistribution uniform, minscanlength 1). */
static const struct ycsb_workload ycsb_workloads[6] = {
    {"ycsb-A", {0.50, 0.50, 0, 0, 0}, YCSB_ZIPFIAN},
    {"ycsb-B", {0.95, 0.05, 0, 0, 0}, YCSB_ZIPFIAN},
    {"ycsb-C", {1.00, 0, 0, 0, 0}, YCSB_ZIPFIAN},
    {"ycsb-D", {0.95, 0, 0.05, 0, 0}, YCSB_LATEST},
    {"ycsb-E", {0, 0, 0.05, 0.95, 0}, YCSB_ZIPFIAN},
    {"ycsb-F", {0.50, 0, 0, 0, 0.50}, YCSB_ZIPFIAN},
};
#define YCSB_MIN_SCAN 1
#define YCSB_MAX_SCAN 100

/* DiscreteGenerator.nextValue: one double, walked over the weights in the
 * order they were added (zero weights are never added). */
static inline enum ycsb_op ycsb_choose_op(const struct ycsb_workload *w, struct ycsb_rng *r)
{
	double sum = 0, val = ycsb_rng_double(r);
	int last = -1;

	for (int i = 0; i < YCSB_NOPS; i++)
		sum += w->prop[i];
	for (int i = 0; i < YCSB_NOPS; i++) {
		if (w->prop[i] <= 0)
			continue;
		double pw = w->prop[i] / sum;
		if (val < pw)
			return (enum ycsb_op)i;
		val -= pw;
		last = i;
	}
	/* Rounding left val >= the last weight: YCSB throws here; the last
	 * operation is the closest behaviour that does not. */
	return (enum ycsb_op)last;
}

/* ---- test vectors ------------------------------------------------------------------------ */

/* Writes the shipped test vectors (bench/ycsb_vectors.txt) for seed to f:
 * the first keys with YCSB's default padding and with UDB's 27-byte keys,
 * fnvhash64 values, and the first draws of each generator.  One item per
 * line, "kind arguments : value"; the test regenerates and compares. */
static inline void ycsb_write_vectors(FILE *f, uint64_t seed)
{
	struct ycsb_rng r;
	char key[64];
	static const int64_t fnv_in[] = {
	    0, 1, 2, 255, 256, 1000000, 2147483647LL, 9223372036854775807LL};

	fprintf(f,
		"# YCSB generator test vectors (bench/ycsb_gen.h), seed %llu.\n"
		"# Regenerate: build/release/bench/ycsb_bench --print-vectors > "
		"bench/ycsb_vectors.txt\n",
		(unsigned long long)seed);
	for (size_t i = 0; i < sizeof(fnv_in) / sizeof(fnv_in[0]); i++)
		fprintf(f, "fnvhash64 %lld : %lld\n", (long long)fnv_in[i],
			(long long)ycsb_fnvhash64(fnv_in[i]));
	for (int64_t k = 0; k < 10; k++) {
		ycsb_build_key(key, sizeof(key), k, 1, 1);
		fprintf(f, "key hashed pad1 %lld : %s\n", (long long)k, key);
	}
	for (int64_t k = 0; k < 10; k++) {
		ycsb_build_key(key, sizeof(key), k, 1, 23);
		fprintf(f, "key hashed pad23 %lld : %s\n", (long long)k, key);
	}
	for (int64_t k = 0; k < 3; k++) {
		ycsb_build_key(key, sizeof(key), k, 0, 23);
		fprintf(f, "key ordered pad23 %lld : %s\n", (long long)k, key);
	}
	{
		struct ycsb_scrambled s;
		ycsb_rng_seed(&r, seed);
		ycsb_scrambled_init(&s, &r, 0, 1000000);
		for (int i = 0; i < 20; i++)
			fprintf(f, "scrambled 0 1000000 %d : %lld\n", i,
				(long long)ycsb_scrambled_next(&s, &r));
	}
	{
		struct ycsb_zipf z;
		ycsb_rng_seed(&r, seed);
		ycsb_zipf_init(&z, &r, 0, 999, YCSB_ZIPFIAN_CONSTANT, -1);
		for (int i = 0; i < 20; i++)
			fprintf(f, "zipfian 0 999 %d : %lld\n", i,
				(long long)ycsb_zipf_next_long(&z, &r, z.items));
	}
	{
		struct ycsb_latest l;
		int64_t last = 99999;
		ycsb_rng_seed(&r, seed);
		ycsb_latest_init(&l, &r, last);
		/* The counter grows by one every fourth draw. */
		for (int i = 0; i < 20; i++) {
			if (i && i % 4 == 0)
				last++;
			fprintf(f, "latest 99999 %d : %lld\n", i,
				(long long)ycsb_latest_next(&l, &r, last));
		}
	}
	ycsb_rng_seed(&r, seed);
	for (int i = 0; i < 10; i++)
		fprintf(f, "uniform 1 100 %d : %lld\n", i, (long long)ycsb_uniform(&r, 1, 100));
	for (int w = 0; w < 6; w++) {
		static const char opc[YCSB_NOPS] = {'R', 'U', 'I', 'S', 'M'};
		char ops[41];
		ycsb_rng_seed(&r, seed);
		for (int i = 0; i < 40; i++)
			ops[i] = opc[ycsb_choose_op(&ycsb_workloads[w], &r)];
		ops[40] = 0;
		fprintf(f, "ops %s : %s\n", ycsb_workloads[w].name, ops);
	}
}

#endif /* YCSB_GEN_H */
