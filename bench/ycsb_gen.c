/*
 * ycsb_gen.c - YCSB's core-workload generators (ycsb_gen.h says which
 * Java class each follows).
 */
#include "ycsb_gen.h"

int64_t ycsb_fnvhash64(int64_t val)
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

size_t ycsb_build_key(char *buf, size_t cap, int64_t keynum, int hashed, int zeropadding)
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

/* ZipfianGenerator.zetastatic: initialsum + sum_{i=st}^{n-1} 1/(i+1)^theta. */
static double ycsb_zeta(int64_t st, int64_t n, double theta, double initialsum)
{
	double sum = initialsum;

	for (int64_t i = st; i < n; i++)
		sum += 1 / pow((double)(i + 1), theta);
	return sum;
}

int64_t ycsb_zipf_next_long(struct ycsb_zipf *z, struct ycsb_rng *r, int64_t itemcount)
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

void ycsb_zipf_init(struct ycsb_zipf *z, struct ycsb_rng *r, int64_t min, int64_t max,
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

void ycsb_scrambled_init(struct ycsb_scrambled *s, struct ycsb_rng *r, int64_t min, int64_t max)
{
	s->min = min;
	s->max = max;
	s->itemcount = max - min + 1;
	ycsb_zipf_init(&s->gen, r, 0, YCSB_SCRAMBLED_ITEM_COUNT, YCSB_ZIPFIAN_CONSTANT,
		       YCSB_SCRAMBLED_ZETAN);
}

int64_t ycsb_scrambled_next(struct ycsb_scrambled *s, struct ycsb_rng *r)
{
	int64_t ret = ycsb_zipf_next_long(&s->gen, r, s->gen.items);

	return s->min + ycsb_fnvhash64(ret) % s->itemcount;
}

void ycsb_latest_init(struct ycsb_latest *l, struct ycsb_rng *r, int64_t last)
{
	ycsb_zipf_init(&l->zipf, r, 0, last - 1, YCSB_ZIPFIAN_CONSTANT, -1);
	(void)ycsb_zipf_next_long(&l->zipf, r, last);
}

int64_t ycsb_latest_next(struct ycsb_latest *l, struct ycsb_rng *r, int64_t last)
{
	return last - ycsb_zipf_next_long(&l->zipf, r, last);
}

int64_t ycsb_uniform(struct ycsb_rng *r, int64_t lb, int64_t ub)
{
	return lb + (int64_t)ycsb_rng_below(r, (uint64_t)(ub - lb + 1));
}

const struct ycsb_workload ycsb_workloads[6] = {
    {"ycsb-A", {0.50, 0.50, 0, 0, 0}, YCSB_ZIPFIAN},
    {"ycsb-B", {0.95, 0.05, 0, 0, 0}, YCSB_ZIPFIAN},
    {"ycsb-C", {1.00, 0, 0, 0, 0}, YCSB_ZIPFIAN},
    {"ycsb-D", {0.95, 0, 0.05, 0, 0}, YCSB_LATEST},
    {"ycsb-E", {0, 0, 0.05, 0.95, 0}, YCSB_ZIPFIAN},
    {"ycsb-F", {0.50, 0, 0, 0, 0.50}, YCSB_ZIPFIAN},
};

enum ycsb_op ycsb_choose_op(const struct ycsb_workload *w, struct ycsb_rng *r)
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

void ycsb_write_vectors(FILE *f, uint64_t seed)
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
