/*
 * fdb_record.c - how a pair is stored in the FlexSpace (paper section 5.1,
 * plus a checksum): base-128 varint key length, varint value length, the
 * key, the value, then the low 32 bits of XXH3-64 over all of it
 * (little-endian).  A pair read back is always verified before it is
 * used; docs/FORMAT.md has the layout and test_flexdb pins an example.
 */
#include <string.h>
#include <xxhash.h>

#include "fdb_int.h"

size_t fdb_rec_size(uint32_t klen, uint32_t vlen)
{
	return flex_varint_len(klen) + flex_varint_len(vlen) + klen + vlen + 4;
}

size_t fdb_rec_encode(uint8_t *out, const void *key, uint32_t klen, const void *val,
		      uint32_t vlen)
{
	size_t n = flex_varint_put(out, klen);
	n += flex_varint_put(out + n, vlen);
	memcpy(out + n, key, klen);
	n += klen;
	if (vlen)
		memcpy(out + n, val, vlen);
	n += vlen;
	flex_put_le32(out + n, (uint32_t)XXH3_64bits(out, n));
	return n + 4;
}

int fdb_rec_peek(const uint8_t *p, const uint8_t *end, uint32_t *klen, uint32_t *vlen,
		 size_t *hdr)
{
	size_t a = flex_varint_get(p, end, klen);
	if (!a)
		return FLEX_ECORRUPT;
	size_t b = flex_varint_get(p + a, end, vlen);
	if (!b || *klen == 0 || *klen > FLEXDB_MAX_KEY || *vlen > FLEXDB_MAX_VALUE)
		return FLEX_ECORRUPT;
	*hdr = a + b;
	return 0;
}

int fdb_rec_check(const uint8_t *rec, size_t size)
{
	return flex_get_le32(rec + size - 4) == (uint32_t)XXH3_64bits(rec, size - 4)
		       ? 0
		       : FLEX_ECORRUPT;
}

int fdb_rec_decode(const uint8_t *p, const uint8_t *end, size_t *size, const uint8_t **key,
		   uint32_t *klen, const uint8_t **val, uint32_t *vlen)
{
	if (fdb_rec_parse(p, end, size, key, klen, val, vlen))
		return FLEX_ECORRUPT;
	return fdb_rec_check(p, *size);
}

uint16_t fdb_fingerprint(const void *key, uint32_t klen)
{
	uint64_t h = XXH3_64bits(key, klen);
	return (uint16_t)(h ^ (h >> 16) ^ (h >> 32) ^ (h >> 48));
}
