/*
 * flex_vec.h - growing a heap array by doubling (internal to the
 * libraries; not installed).
 *
 *	if (flex_vec_reserve(&v, &cap, n + 1, 64))
 *		return -ENOMEM;
 *	v[n++] = x;
 *
 * makes room for n + 1 elements in v, whose room is cap elements (size_t):
 * cap doubles, from 64 when it is 0, until it is enough, and v is
 * reallocated.  Doubling keeps appending n elements O(n) in all.  On
 * failure, or when the bytes would not fit in a size_t, it returns
 * -ENOMEM and leaves v and cap as they were, so the caller still owns v
 * and what it holds.
 */
#ifndef FLEX_VEC_H
#define FLEX_VEC_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* pp is the address of the caller's T * (any T): it is read and written
 * through memcpy, because accessing a T * as a void * is not allowed. */
static inline int flex_vec_reserve_(void *pp, size_t *cap, size_t want, size_t elem, size_t first)
{
	if (want <= *cap)
		return 0;
	size_t c = *cap ? *cap : first ? first : 1;
	while (c < want) {
		if (c > SIZE_MAX / 2)
			return -ENOMEM;
		c *= 2;
	}
	if (c > SIZE_MAX / elem)
		return -ENOMEM;
	void *old, *p;
	memcpy(&old, pp, sizeof(old));
	p = realloc(old, c * elem);
	if (!p)
		return -ENOMEM;
	memcpy(pp, &p, sizeof(p));
	*cap = c;
	return 0;
}

/* See above: vp is the address of the array's pointer, cap of its room
 * in elements, first the room to start from. */
#define flex_vec_reserve(vp, cap, want, first)                                                     \
	flex_vec_reserve_((vp), (cap), (want), sizeof(**(vp)), (first))

#endif
