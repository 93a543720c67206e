/*
 * flex_brlock.h - a reader-writer lock for paths that readers on many
 * threads take for every call (internal to the libraries; not installed).
 *
 * One pthread rwlock is one word that every reader writes twice, so two
 * threads reading at once pass its cache line back and forth on every
 * call.  A flex_brlock is FLEX_BRLOCK_STRIPES rwlocks on lines of their
 * own: a reader takes the stripe of its thread (threads take stripes in
 * turn), a writer takes every stripe in order.  Reads cost what they cost
 * with one rwlock; a write costs a lock per stripe.  The stripes prefer
 * writers, so a steady stream of readers does not starve one; as with
 * any rwlock, a thread must not take it again while it holds it.
 * Exported from libflextree for the layers above, not installed.
 */
#ifndef FLEX_BRLOCK_H
#define FLEX_BRLOCK_H

#include <pthread.h>

#include "flex_common.h"

#define FLEX_BRLOCK_STRIPES 8

struct flex_brlock {
	struct {
		pthread_rwlock_t l;
		char pad[128 - sizeof(pthread_rwlock_t) % 128];
	} s[FLEX_BRLOCK_STRIPES];
};

/* The calling thread's slot: 0 for the first thread to ask, 1 for the
 * next, and so on; what spreads threads over stripes (here and for the
 * libraries' striped counters). */
FLEX_EXPORT unsigned flex_thread_slot(void);

/* 0 or -errno (then nothing needs destroying). */
FLEX_EXPORT int flex_brlock_init(struct flex_brlock *b);
FLEX_EXPORT void flex_brlock_destroy(struct flex_brlock *b);
/* A thread unlocks the stripe it locked: its own. */
FLEX_EXPORT void flex_brlock_rdlock(struct flex_brlock *b);
FLEX_EXPORT void flex_brlock_rdunlock(struct flex_brlock *b);
FLEX_EXPORT void flex_brlock_wrlock(struct flex_brlock *b);
/* 0 with every stripe taken, or EBUSY (then none) without waiting. */
FLEX_EXPORT int flex_brlock_trywrlock(struct flex_brlock *b);
FLEX_EXPORT void flex_brlock_wrunlock(struct flex_brlock *b);

#endif /* FLEX_BRLOCK_H */
