/*
 * flex_codec.h - the integer encodings of every on-disk structure (internal
 * to the libraries; not installed; layouts in docs/FORMAT.md).
 *
 * Fixed-width fields are little-endian.  They are assembled a byte at a
 * time, so a file is the same on a host of either byte order and a field
 * may sit at any offset (a memcpy of the host integer would be neither).
 * Written out as shifts of each byte, not as loops, the code compiles to
 * one load or store on a little-endian host at -O2 (gcc merges the
 * stores of an unrolled sequence, not those of a loop).
 *
 * Lengths in FlexDB's pairs and WAL batches are unsigned LEB128 varints:
 * seven bits a byte, low group first, the top bit set on every byte but
 * the last; a 32-bit value takes at most five bytes.
 */
#ifndef FLEX_CODEC_H
#define FLEX_CODEC_H

#include <stddef.h>
#include <stdint.h>

#define FLEX_VARINT_MAX 5u

static inline void flex_put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void flex_put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static inline void flex_put_le64(uint8_t *p, uint64_t v)
{
	flex_put_le32(p, (uint32_t)v);
	flex_put_le32(p + 4, (uint32_t)(v >> 32));
}

static inline uint16_t flex_get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t flex_get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t flex_get_le64(const uint8_t *p)
{
	return (uint64_t)flex_get_le32(p) | (uint64_t)flex_get_le32(p + 4) << 32;
}

/* Bytes that flex_varint_put writes for v (1..FLEX_VARINT_MAX). */
static inline size_t flex_varint_len(uint32_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

/* Writes v at p (room for FLEX_VARINT_MAX bytes); returns the bytes
 * written. */
static inline size_t flex_varint_put(uint8_t *p, uint32_t v)
{
	size_t n = 0;
	while (v >= 0x80) {
		p[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (uint8_t)v;
	return n;
}

/* Decodes the varint at [p, end) into *v; returns its bytes, or 0 when it
 * runs past end, past FLEX_VARINT_MAX bytes or past 32 bits (damage).
 * The one-byte case (lengths below 128) comes first: scans decode two
 * lengths per pair. */
static inline size_t flex_varint_get(const uint8_t *p, const uint8_t *end, uint32_t *v)
{
	if (p < end && *p < 0x80) {
		*v = *p;
		return 1;
	}
	uint64_t r = 0;
	for (size_t i = 0; i < FLEX_VARINT_MAX && p + i < end; i++) {
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

#endif
