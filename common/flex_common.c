/*
 * flex_common.c - the status-code text and the runtime version shared by the
 * three FlexDB layers (contract: include/flex_common.h).
 *
 * Every public function of flextree, flexspace and flexdb reports failure as
 * one negative int: -errno for operating-system errors, or a FLEX_E* code in
 * the reserved range [-10099, -10000].  flex_strerror() is the single place
 * that turns either kind into text, so that callers never need errno,
 * strerror() (not thread-safe) or an allocated message.  It lives in
 * libflextree, the lowest layer, because all three libraries link it.
 *
 * Only static strings are returned: the text of a status cannot be freed,
 * overwritten by another thread or invalidated at thread exit, which is why
 * positive statuses get a fixed sentence instead of a formatted number.
 */
#include <limits.h>
#include <string.h>

#include "flex_common.h"

FLEX_EXPORT const char *flex_strerror(int status)
{
	switch (status) {
	case FLEX_OK:
		return "success";
	case FLEX_ECORRUPT:
		return "data read from a file is corrupt (bad checksum, magic, length or "
		       "invariant); it was not returned";
	case FLEX_EBUSY:
		return "store or file is in use by another handle or process";
	case FLEX_EFAILED:
		return "an earlier write or sync failed; the handle refuses further writes "
		       "and must be closed";
	case FLEX_EVERSION:
		return "file was written by an incompatible format version";
	case FLEX_ETOOBIG:
		return "key, value, extent or offset exceeds a documented limit";
	case FLEX_EOPTION:
		return "an options field is out of its documented range";
	case FLEX_EREADONLY:
		return "handle was opened read-only";
	case FLEX_ENOTSTORE:
		return "not a FlexDB/FlexSpace store: the directory holds files the library did "
		       "not create (nothing was changed)";
	case FLEX_EKIND_SPACE:
		return "this is a FlexSpace, not a FlexDB store (nothing was changed)";
	case FLEX_EKIND_DB:
		return "this is a FlexDB store, not a FlexSpace (nothing was changed)";
	default:
		break;
	}
	/* Positive values are documented non-error results of a particular
	 * function (e.g. "not found"); their meaning belongs to that function,
	 * so only say that it is not a failure. */
	if (status > 0)
		return "not an error (positive status)";
	if (status <= FLEX_ECORRUPT && status >= FLEX_ERANGE_LAST)
		return "unknown library error";
	/* -INT_MIN overflows; no errno is that large anyway. */
	if (status == INT_MIN)
		return "unknown error";
	/* strerrordesc_np (glibc >= 2.32) is thread-safe and returns static
	 * text, unlike strerror(); it returns NULL for unknown numbers. */
	const char *s = strerrordesc_np(-status);
	return s ? s : "unknown error";
}

FLEX_EXPORT const char *flex_version(int *major, int *minor, int *patch)
{
	if (major)
		*major = FLEX_VERSION_MAJOR;
	if (minor)
		*minor = FLEX_VERSION_MINOR;
	if (patch)
		*patch = FLEX_VERSION_PATCH;
	return FLEX_VERSION_STRING;
}
