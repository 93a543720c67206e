/*
 * flex_brlock.c - the striped reader-writer lock (flex_brlock.h).
 */
#include <errno.h>
#include <stdatomic.h>

#include "flex_brlock.h"

int flex_brlock_init(struct flex_brlock *b)
{
	pthread_rwlockattr_t a;
	int rc = pthread_rwlockattr_init(&a);
	if (rc)
		return -rc;
	pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	int i = 0;
	for (; i < FLEX_BRLOCK_STRIPES && !rc; i++)
		rc = pthread_rwlock_init(&b->s[i].l, &a);
	pthread_rwlockattr_destroy(&a);
	if (rc) {
		for (i -= 2; i >= 0; i--)
			pthread_rwlock_destroy(&b->s[i].l);
		return -rc;
	}
	return 0;
}

void flex_brlock_destroy(struct flex_brlock *b)
{
	for (int i = 0; i < FLEX_BRLOCK_STRIPES; i++)
		pthread_rwlock_destroy(&b->s[i].l);
}

unsigned flex_thread_slot(void)
{
	static atomic_uint next;
	static _Thread_local unsigned mine; /* slot + 1; 0 until taken */
	if (!mine)
		mine = atomic_fetch_add_explicit(&next, 1, memory_order_relaxed) + 1;
	return mine - 1;
}

void flex_brlock_rdlock(struct flex_brlock *b)
{
	pthread_rwlock_rdlock(&b->s[flex_thread_slot() % FLEX_BRLOCK_STRIPES].l);
}

void flex_brlock_rdunlock(struct flex_brlock *b)
{
	pthread_rwlock_unlock(&b->s[flex_thread_slot() % FLEX_BRLOCK_STRIPES].l);
}

void flex_brlock_wrlock(struct flex_brlock *b)
{
	for (int i = 0; i < FLEX_BRLOCK_STRIPES; i++)
		pthread_rwlock_wrlock(&b->s[i].l);
}

int flex_brlock_trywrlock(struct flex_brlock *b)
{
	for (int i = 0; i < FLEX_BRLOCK_STRIPES; i++) {
		if (pthread_rwlock_trywrlock(&b->s[i].l) != 0) {
			while (--i >= 0)
				pthread_rwlock_unlock(&b->s[i].l);
			return EBUSY;
		}
	}
	return 0;
}

void flex_brlock_wrunlock(struct flex_brlock *b)
{
	for (int i = FLEX_BRLOCK_STRIPES - 1; i >= 0; i--)
		pthread_rwlock_unlock(&b->s[i].l);
}
