/*
 * flex_hg.h - what Helgrind is told about C11 atomics (internal to the
 * libraries; not installed).
 *
 * Helgrind sees pthread locks but not C11 atomics.  The `make helgrind`
 * build defines FLEX_HELGRIND; elsewhere these compile to nothing.  A
 * release store that publishes data is preceded by FLEX_HB_BEFORE(&the
 * atomic) and an acquire load that may have read it is followed by
 * FLEX_HB_AFTER(&the atomic): the arc that orders the published data.  The
 * atomic objects themselves are declared with FLEX_ATOMIC_OBJ when they
 * are created: accesses to them are not data races (C11 5.1.2.4).
 */
#ifndef FLEX_HG_H
#define FLEX_HG_H

#ifdef FLEX_HELGRIND
#include <valgrind/helgrind.h>
#define FLEX_HB_BEFORE(a) ANNOTATE_HAPPENS_BEFORE(a)
#define FLEX_HB_AFTER(a) ANNOTATE_HAPPENS_AFTER(a)
#define FLEX_ATOMIC_OBJ(a, n) ANNOTATE_BENIGN_RACE_SIZED(a, n, "C11 atomic")
#else
#define FLEX_HB_BEFORE(a) ((void)(a))
#define FLEX_HB_AFTER(a) ((void)(a))
#define FLEX_ATOMIC_OBJ(a, n) ((void)(a), (void)(n))
#endif

#endif /* FLEX_HG_H */
