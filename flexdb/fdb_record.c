/*
 * fdb_record.c - how a pair is stored in the FlexSpace (paper section 5.1,
 * plus a checksum): base-128 varint key length, varint value length, the
 * key, the value, then the low 32 bits of XXH3-64 over all of it.  A pair
 * read back is always verified before it is used; docs/FORMAT.md has the
 * layout and test_flexdb pins an example.
 */
#include <string.h>
#include <xxhash.h>

#include "fdb_int.h"

size_t fdb_varint_put(uint8_t *p, uint32_t v)
{
	size_t n = 0;
	while (v >= 0x80) {
		p[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (uint8_t)v;
	return n;
}

size_t fdb_varint_get_slow(const uint8_t *p, const uint8_t *end, uint32_t *v)
{
	uint64_t r = 0;
	for (size_t i = 0; i < 5 && p + i < end; i++) {
		r |= (uint64_t)(p[i] & 0x7f) << (7 * i);
		if (!(p[i] & 0x80)) {
			if (r > UINT32_MAX)
				return 0;
			*v = (uint32_t)r;
			return i + 1;
		}
	}
	return 0;
}

static size_t varint_len(uint32_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

size_t fdb_rec_size(uint32_t klen, uint32_t vlen)
{
	return varint_len(klen) + varint_len(vlen) + klen + vlen + 4;
}

size_t fdb_rec_encode(uint8_t *out, const void *key, uint32_t klen, const void *val,
		      uint32_t vlen)
{
	size_t n = fdb_varint_put(out, klen);
	n += fdb_varint_put(out + n, vlen);
	memcpy(out + n, key, klen);
	n += klen;
	if (vlen)
		memcpy(out + n, val, vlen);
	n += vlen;
	uint32_t c = (uint32_t)XXH3_64bits(out, n);
	memcpy(out + n, &c, 4);
	return n + 4;
}

int fdb_rec_peek(const uint8_t *p, const uint8_t *end, uint32_t *klen, uint32_t *vlen,
		 size_t *hdr)
{
	size_t a = fdb_varint_get(p, end, klen);
	if (!a)
		return FLEX_ECORRUPT;
	size_t b = fdb_varint_get(p + a, end, vlen);
	if (!b || *klen == 0 || *klen > FLEXDB_MAX_KEY || *vlen > FLEXDB_MAX_VALUE)
		return FLEX_ECORRUPT;
	*hdr = a + b;
	return 0;
}

int fdb_rec_decode(const uint8_t *p, const uint8_t *end, size_t *size, const uint8_t **key,
		   uint32_t *klen, const uint8_t **val, uint32_t *vlen)
{
	size_t hdr;
	if (fdb_rec_peek(p, end, klen, vlen, &hdr))
		return FLEX_ECORRUPT;
	size_t body = hdr + *klen + *vlen;
	if ((size_t)(end - p) < body + 4)
		return FLEX_ECORRUPT;
	uint32_t c;
	memcpy(&c, p + body, 4);
	if (c != (uint32_t)XXH3_64bits(p, body))
		return FLEX_ECORRUPT;
	*key = p + hdr;
	*val = p + hdr + *klen;
	*size = body + 4;
	return 0;
}

int fdb_keycmp(const void *a, uint32_t alen, const void *b, uint32_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);
	if (c)
		return c;
	return alen < blen ? -1 : alen > blen;
}

uint16_t fdb_fingerprint(const void *key, uint32_t klen)
{
	uint64_t h = XXH3_64bits(key, klen);
	return (uint16_t)(h ^ (h >> 16) ^ (h >> 32) ^ (h >> 48));
}
