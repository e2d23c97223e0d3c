// SPDX-License-Identifier: GPL-2.0
/*
 * The GPU stand-in's runtime (gpurt.c): streams and the work queued on
 * them. A stream is a host thread running its work (copies, fills, host
 * functions, waits on a word of device memory) in order; the legacy default
 * stream waits for the blocking streams' earlier work and they for its.
 * Copies from or to pageable memory return when done.
 */
#include "gpurt_internal.h"

static void *stream_thread(void *arg);

struct CUstream_st *stream_new(struct CUctx_st *ctx, unsigned int flags, bool legacy)
{
	struct CUstream_st *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->magic = STREAM_MAGIC;
	s->ctx = ctx;
	s->flags = flags;
	s->legacy = legacy;
	if (pthread_create(&s->thread, NULL, stream_thread, s)) {
		free(s);
		return NULL;
	}
	pthread_detach(s->thread);
	s->next = ctx->streams;
	ctx->streams = s;
	return s;
}

static bool blocking(const struct CUstream_st *s)
{
	return !s->legacy && !(s->flags & CU_STREAM_NON_BLOCKING);
}

/*
 * The stream a call names: NULL and CU_STREAM_LEGACY the current context's
 * legacy default stream, else a live stream of this runtime. The lock is held.
 */
struct CUstream_st *stream_of(const char *fn, CUstream h, CUresult *err)
{
	struct CUstream_st *s;

	if (h == CU_STREAM_PER_THREAD)
		die(fn, "the per-thread default stream");
	if (!cur_ctx) {
		*err = fail(fn, CUDA_ERROR_INVALID_CONTEXT, "no current context");
		return NULL;
	}
	if (!h || h == CU_STREAM_LEGACY) {
		if (!cur_ctx->legacy)
			cur_ctx->legacy = stream_new(cur_ctx, 0, true);
		if (!cur_ctx->legacy)
			die(fn, "cannot start the legacy stream's thread");
		return cur_ctx->legacy;
	}
	s = h;
	if (s->magic != STREAM_MAGIC || s->dead)
		die(fn, "stream %p is not a live stream of this runtime", (void *)h);
	if (s->ctx != cur_ctx) {
		*err = fail(fn, CUDA_ERROR_INVALID_HANDLE,
			    "stream %p is not of the current context", (void *)h);
		return NULL;
	}
	return s;
}

/* Queues @o on @s, after what it must wait for; returns its ticket. The lock is held. */
uint64_t enqueue(struct CUstream_st *s, struct op *o)
{
	o->ticket = ++s->enqueued;
	o->next = NULL;
	if (s->tail)
		s->tail->next = o;
	else
		s->head = o;
	s->tail = o;
	pthread_cond_broadcast(&progress);
	return o->ticket;
}

struct op *op_new(const char *fn, struct CUstream_st *s, enum op_kind kind)
{
	int n = 0;
	struct op *o;

	for (struct CUstream_st *t = s->ctx->streams; t; t = t->next)
		n++;
	o = calloc(1, sizeof(*o) + n * sizeof(o->deps[0]));
	if (!o)
		die(fn, "out of host memory");
	o->kind = kind;
	/* The legacy stream waits for the blocking streams' earlier work, they for its. */
	for (struct CUstream_st *t = s->ctx->streams; t; t = t->next) {
		if (t == s || t->done == t->enqueued)
			continue;
		if ((s->legacy && blocking(t)) || (blocking(s) && t->legacy))
			o->deps[o->ndeps++] = (struct dep){ t, t->enqueued };
	}
	return o;
}

void wait_ticket(struct CUstream_st *s, uint64_t ticket)
{
	while (s->done < ticket)
		pthread_cond_wait(&progress, &lock);
}

static void run(struct op *o)
{
	switch (o->kind) {
	case OP_MARK:
		break;
	case OP_HTOD:
		memcpy(o->dev, o->host, o->n);
		break;
	case OP_DTOH:
	case OP_DTOD:
		memcpy(o->host, o->dev, o->n);
		break;
	case OP_SET8:
		memset(o->dev, o->value, o->n);
		break;
	case OP_SET32:
		for (size_t i = 0; i < o->n; i++)
			__atomic_store_n((uint32_t *)o->dev + i, o->value, __ATOMIC_RELAXED);
		break;
	case OP_HOSTFN:
		in_host_fn = true;
		o->fn(o->user);
		in_host_fn = false;
		break;
	case OP_WAIT32:
		for (;;) {
			uint32_t v = __atomic_load_n((uint32_t *)o->dev, __ATOMIC_RELAXED);
			bool ok;
			struct timespec t;

			switch (o->flags) {
			case CU_STREAM_WAIT_VALUE_GEQ:
				ok = (int32_t)(v - o->value) >= 0;
				break;
			case CU_STREAM_WAIT_VALUE_EQ:
				ok = v == o->value;
				break;
			case CU_STREAM_WAIT_VALUE_AND:
				ok = (v & o->value) != 0;
				break;
			default:
				ok = ~(v | o->value) != 0;
				break;
			}
			if (ok)
				break;
			/* Woken by fills of device memory; polled for the NVMe's writes. */
			clock_gettime(CLOCK_MONOTONIC, &t);
			t.tv_nsec += 2000000;
			if (t.tv_nsec >= 1000000000) {
				t.tv_sec++;
				t.tv_nsec -= 1000000000;
			}
			pthread_mutex_lock(&lock);
			pthread_cond_timedwait(&progress, &lock, &t);
			pthread_mutex_unlock(&lock);
		}
		break;
	}
}

static void *stream_thread(void *arg)
{
	struct CUstream_st *s = arg;

	pthread_mutex_lock(&lock);
	for (;;) {
		struct op *o;

		while (!s->head && !s->dead)
			pthread_cond_wait(&progress, &lock);
		o = s->head;
		if (!o)
			break;
		for (int i = 0; i < o->ndeps; i++)
			wait_ticket(o->deps[i].s, o->deps[i].until);
		pthread_mutex_unlock(&lock);
		run(o);
		pthread_mutex_lock(&lock);
		s->head = o->next;
		if (!s->head)
			s->tail = NULL;
		s->done = o->ticket;
		free(o);
		pthread_cond_broadcast(&progress);
	}
	pthread_mutex_unlock(&lock);
	return NULL;
}

/*
 * Queues a copy or fill of device memory [p, p + n) on @s; with @wait, or
 * for a copy from or to pageable memory, returns once it ran. The lock is held.
 */
CUresult device_op(const char *fn, struct CUstream_st *s, enum op_kind kind, uint64_t p,
		   void *host, size_t n, size_t bytes, uint32_t value, bool wait)
{
	struct gpurt_dev *d;
	struct alloc *a;
	struct op *o;
	uint64_t t;

	if (!n)
		return CUDA_SUCCESS;
	a = find(p, bytes, &d);
	if (!a || bytes < n)
		return fail(fn, CUDA_ERROR_INVALID_VALUE,
			    "%#llx+%#zx is not in one allocation", (unsigned long long)p, bytes);
	if ((kind == OP_HTOD || kind == OP_DTOH) && !host)
		return fail(fn, CUDA_ERROR_INVALID_VALUE, "no host pointer");
	if ((kind == OP_HTOD || kind == OP_DTOH) && !find_pinned(host, n))
		wait = true;
	o = op_new(fn, s, kind);
	o->dev = bar_of(d, a, p);
	o->host = host;
	o->n = n;
	o->value = value;
	t = enqueue(s, o);
	if (wait)
		wait_ticket(s, t);
	return CUDA_SUCCESS;
}

/*
 * A copy of device memory [src, src + n) to [dst, dst + n) on @s (devices of
 * this runtime, either of them); with @wait, returns once it ran. The lock is held.
 */
CUresult dtod(const char *fn, struct CUstream_st *s, uint64_t dst, uint64_t src, size_t n,
	      bool wait)
{
	struct gpurt_dev *ds, *dd;
	struct alloc *as, *ad;
	struct op *o;
	uint64_t t;

	if (!n)
		return CUDA_SUCCESS;
	as = find(src, n, &ds);
	ad = find(dst, n, &dd);
	if (!as || !ad)
		return fail(fn, CUDA_ERROR_INVALID_VALUE,
			    "%#llx or %#llx +%#zx is not in one allocation",
			    (unsigned long long)src, (unsigned long long)dst, n);
	o = op_new(fn, s, OP_DTOD);
	o->dev = bar_of(ds, as, src);
	o->host = bar_of(dd, ad, dst);
	o->n = n;
	t = enqueue(s, o);
	if (wait)
		wait_ticket(s, t);
	return CUDA_SUCCESS;
}

/* What a wait for @s waits for: on the legacy stream, the blocking streams' work too. */
uint64_t sync_ticket(const char *fn, struct CUstream_st *s)
{
	if (s->legacy)
		return enqueue(s, op_new(fn, s, OP_MARK));
	return s->enqueued;
}
