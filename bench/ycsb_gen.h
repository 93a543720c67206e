/*
 * ycsb_gen.h - YCSB's core-workload generators in C (ycsb_gen.c, in the
 * benchmarks' archive), shared by the benchmarks (bench/ycsb_bench.c,
 * bench/flexdb_bench.c) and their test (test/test_ycsb_gen.c).
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
int64_t ycsb_fnvhash64(int64_t val);

/* CoreWorkload.buildKeyName: writes the key (not NUL-terminated if it does
 * not fit; cap >= 4 + max(20, zeropadding) + 1 always fits) and returns its
 * length.  hashed = !orderedinserts. */
size_t ycsb_build_key(char *buf, size_t cap, int64_t keynum, int hashed, int zeropadding);

/* ---- zipfian ------------------------------------------------------------------------ */

#define YCSB_ZIPFIAN_CONSTANT 0.99
/* ScrambledZipfianGenerator's item count and its precomputed zeta. */
#define YCSB_SCRAMBLED_ITEM_COUNT 10000000000LL
#define YCSB_SCRAMBLED_ZETAN 26.46902820178302

struct ycsb_zipf {
	int64_t items, base, countforzeta;
	double theta, zeta2theta, alpha, zetan, eta;
};

/* ZipfianGenerator.nextLong(itemcount).  The zeta grows incrementally when
 * itemcount grows (YCSB never shrinks it by default: allowitemcountdecrease
 * is false); eta is then recomputed from the original item count, as YCSB
 * does. */
int64_t ycsb_zipf_next_long(struct ycsb_zipf *z, struct ycsb_rng *r, int64_t itemcount);

/* ZipfianGenerator(min, max, constant, zetan); zetan < 0 computes it
 * (the constructor without zetan).  Draws once, as the constructor's
 * nextValue() does. */
void ycsb_zipf_init(struct ycsb_zipf *z, struct ycsb_rng *r, int64_t min, int64_t max,
		    double constant, double zetan);

/* ---- scrambled zipfian ------------------------------------------------------------ */

struct ycsb_scrambled {
	int64_t min, max, itemcount;
	struct ycsb_zipf gen;
};

/* ScrambledZipfianGenerator(min, max) with the default constant 0.99. */
void ycsb_scrambled_init(struct ycsb_scrambled *s, struct ycsb_rng *r, int64_t min, int64_t max);

int64_t ycsb_scrambled_next(struct ycsb_scrambled *s, struct ycsb_rng *r);

/* ---- skewed latest ---------------------------------------------------------------- */

struct ycsb_latest {
	struct ycsb_zipf zipf;
};

/* SkewedLatestGenerator(basis): a ZipfianGenerator(basis.lastValue())
 * (items 0 .. lastValue - 1), then one draw as the constructor's
 * nextValue(). */
void ycsb_latest_init(struct ycsb_latest *l, struct ycsb_rng *r, int64_t last);

/* nextValue(): last - zipfian.nextLong(last), last = basis.lastValue(). */
int64_t ycsb_latest_next(struct ycsb_latest *l, struct ycsb_rng *r, int64_t last);

/* ---- uniform -------------------------------------------------------------------------- */

/* UniformLongGenerator(lb, ub): inclusive bounds. */
int64_t ycsb_uniform(struct ycsb_rng *r, int64_t lb, int64_t ub);

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
extern const struct ycsb_workload ycsb_workloads[6];
#define YCSB_MIN_SCAN 1
#define YCSB_MAX_SCAN 100

/* DiscreteGenerator.nextValue: one double, walked over the weights in the
 * order they were added (zero weights are never added). */
enum ycsb_op ycsb_choose_op(const struct ycsb_workload *w, struct ycsb_rng *r);

/* ---- test vectors ------------------------------------------------------------------------ */

/* Writes the shipped test vectors (bench/ycsb_vectors.txt) for seed to f:
 * the first keys with YCSB's default padding and with UDB's 27-byte keys,
 * fnvhash64 values, and the first draws of each generator.  One item per
 * line, "kind arguments : value"; the test regenerates and compares. */
void ycsb_write_vectors(FILE *f, uint64_t seed);

#endif /* YCSB_GEN_H */
