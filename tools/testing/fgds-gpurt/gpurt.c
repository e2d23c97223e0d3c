// SPDX-License-Identifier: GPL-2.0
/*
 * The GPU runtime of the fgds VM's GPU stand-in (an ivshmem BAR bound to
 * vfio-pci): the CUDA driver API and HIP runtime calls fgds's library,
 * libcufile.so.0 and the fgds CLI make, and nothing else. Installed as
 * libcuda.so.1 and libamdhip64.so (one object: one process has one view of
 * the devices, whose vfio groups have one opener at a time).
 *
 * - Device memory is ranges of the BAR; device pointers lie in an address
 *   range reserved PROT_NONE per device (not the BAR's mapping), so a host
 *   dereference of one faults. Addresses and BAR ranges are allocated apart,
 *   first fit, as CUDA 13 (driver 580) was seen to (cuda_facts.py): a freed
 *   address is handed out again at once, with a new buffer id, and a later
 *   allocation may lie below an earlier one; the BAR range of a freed
 *   allocation that was exported is never used again (NVIDIA keeps the
 *   memory behind an open dma-buf until it is closed, and an importer may
 *   still hold it).
 * - cuMemGetHandleForAddressRange exports exactly the range asked for as a
 *   vfio-pci dma-buf (VFIO_DEVICE_FEATURE_DMA_BUF): page aligned and in one
 *   allocation. Stricter than CUDA, which exports past an allocation's end
 *   (what lies there): an importer that asks for that here is told.
 * - Copies and fills go through vfio's mapping of the BAR.
 * - A stream is a host thread running its work in order; the legacy
 *   default stream waits for the blocking streams' earlier work and they
 *   for its; copies from or to pageable memory return when done, those
 *   from or to cuMemHostAlloc'd memory are queued.
 * - Whatever is not implemented (an attribute, a flag, the per-thread
 *   default stream, a runtime call from a host function, a handle that is
 *   not this runtime's) aborts, naming the call.
 *
 * FGDS_GPURT_DEVICES=a,b: the devices, each a PCI address bound to
 * vfio-pci or file:PATH (a file standing in for the BAR, for tests on a
 * machine without the VM: no dma-buf export there); by default every
 * ivshmem (1af4:1110) bound to vfio-pci. FGDS_GPURT_VERBOSE=1 says why
 * each failing call failed. FGDS_GPURT_LOG=FILE appends a line per
 * allocation and free ("alloc ORDINAL BAR_OFFSET SIZE", "free ORDINAL
 * BAR_OFFSET"), so that a test can check the bytes of a program's memory
 * in the BAR after it exited.
 *
 * This file owns the runtime's state, the errors and aborts, and the
 * devices (discovery, opening a BAR, PCI addresses). gpurt_mem.c owns
 * device and pinned host memory and dma-buf export, gpurt_stream.c streams
 * and their work, gpurt_cuda.c the CUDA calls, gpurt_hip.c the HIP ones;
 * gpurt_internal.h is what they share.
 */
#include "gpurt_internal.h"

pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t progress;
bool initialized;
bool verbose;
int ndevs;
struct gpurt_dev devs[GPURT_MAX_DEVS];
long page_size;

__thread struct CUctx_st *cur_ctx;
__thread bool in_host_fn;

void __noreturn __printf(2, 3) die(const char *fn, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "fgds-gpurt: %s: ", fn);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (not implemented by the stand-in's runtime)\n");
	abort();
}

int __printf(3, 4) fail(const char *fn, int code, const char *fmt, ...)
{
	va_list ap;

	if (!verbose)
		return code;
	fprintf(stderr, "fgds-gpurt: %s returns %d: ", fn, code);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return code;
}

/* Every entry point: no runtime call from a host function (CUDA forbids it). */
void entry(const char *fn)
{
	if (in_host_fn) {
		fprintf(stderr, "fgds-gpurt: %s called from a host function: %s\n", fn,
			"CUDA forbids runtime calls there (cuLaunchHostFunc)");
		abort();
	}
}

/* Devices */

static int bdf_parse(struct gpurt_dev *d)
{
	int n = sscanf(d->name, "%x:%x:%x.%x", &d->domain, &d->bus, &d->slot, &d->func);

	return n == 4 ? 0 : -1;
}

static int ivshmem_vfio(const struct dirent *e)
{
	char path[512], buf[32], link[512];
	ssize_t n;
	FILE *f;
	int ok = 0;

	if (e->d_name[0] == '.')
		return 0;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/vendor", e->d_name);
	f = fopen(path, "r");
	if (f) {
		ok = fgets(buf, sizeof(buf), f) && !strncmp(buf, "0x1af4", 6);
		fclose(f);
	}
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/device", e->d_name);
	f = ok ? fopen(path, "r") : NULL;
	ok = 0;
	if (f) {
		ok = fgets(buf, sizeof(buf), f) && !strncmp(buf, "0x1110", 6);
		fclose(f);
	}
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/driver", e->d_name);
	n = ok ? readlink(path, link, sizeof(link) - 1) : -1;
	if (n < 0)
		return 0;
	link[n] = 0;
	return !strcmp(basename(link), "vfio-pci");
}

static void add_dev(const char *name)
{
	struct gpurt_dev *d;

	if (ndevs == GPURT_MAX_DEVS)
		die("cuInit", "more than %d devices", GPURT_MAX_DEVS);
	d = &devs[ndevs];
	d->ordinal = ndevs++;
	d->ctx.dev = d;
	if (!strncmp(name, "file:", 5)) {
		d->file = true;
		snprintf(d->name, sizeof(d->name), "%s", name + 5);
		d->bus = 0xff;
		d->slot = d->ordinal;
		return;
	}
	snprintf(d->name, sizeof(d->name), "%s", name);
	if (bdf_parse(d))
		die("cuInit", "FGDS_GPURT_DEVICES: %s is neither a PCI address nor file:PATH",
		    name);
}

static void discover(void)
{
	const char *env = getenv("FGDS_GPURT_DEVICES");
	struct dirent **list;
	int n;

	verbose = getenv("FGDS_GPURT_VERBOSE") && !strcmp(getenv("FGDS_GPURT_VERBOSE"), "1");
	page_size = sysconf(_SC_PAGESIZE);
	if (env) {
		char *copy = strdup(env), *save = NULL;

		for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
			add_dev(t);
		free(copy);
		return;
	}
	n = scandir("/sys/bus/pci/devices", &list, ivshmem_vfio, alphasort);
	for (int i = 0; i < n; i++) {
		add_dev(list[i]->d_name);
		free(list[i]);
	}
	if (n >= 0)
		free(list);
}

/*
 * The lock is held across fork(): a stream thread takes it whenever it looks
 * at its queue (on every broadcast), and a child forked meanwhile, which has
 * none of the parent's threads, would find it held for good.
 */
static void fork_prepare(void)
{
	pthread_mutex_lock(&lock);
}

static void fork_done(void)
{
	pthread_mutex_unlock(&lock);
}

/* Called with the lock held. */
void init_locked(void)
{
	pthread_condattr_t a;

	if (initialized)
		return;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&progress, &a);
	pthread_atfork(fork_prepare, fork_done, fork_done);
	discover();
	initialized = true;
}

/* Opens the device's BAR: the vfio device (or the file) and its mapping; the lock is held. */
int dev_open(const char *fn, struct gpurt_dev *d)
{
	const char *why = NULL;
	void *va;

	if (d->open)
		return 0;
	if (d->file) {
		struct stat st;
		int fd = open(d->name, O_RDWR | O_CLOEXEC);

		if (fd < 0 || fstat(fd, &st)) {
			fprintf(stderr, "fgds-gpurt: %s: %s: %s\n", fn, d->name, strerror(errno));
			return -1;
		}
		d->bar_size = st.st_size;
		d->bar = mmap(NULL, d->bar_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
		if (d->bar == MAP_FAILED) {
			fprintf(stderr, "fgds-gpurt: %s: mmap %s: %s\n", fn, d->name,
				strerror(errno));
			return -1;
		}
	} else {
#ifdef VFIO_DEVICE_FEATURE_DMA_BUF
		int ret = fgds_vfio_open_bdf(&d->vfio, d->name, &why);

		if (ret) {
			fprintf(stderr, "fgds-gpurt: %s: vfio-pci %s: %s: %s\n", fn, d->name, why,
				strerror(-ret));
			fgds_vfio_close(&d->vfio);
			return -1;
		}
		d->bar_size = d->vfio.bar_size;
		d->bar = fgds_vfio_map_bar(&d->vfio);
		if (!d->bar) {
			fprintf(stderr, "fgds-gpurt: %s: mmap of %s's BAR2: %s\n", fn, d->name,
				strerror(errno));
			fgds_vfio_close(&d->vfio);
			return -1;
		}
#else
		why = "built without VFIO_DEVICE_FEATURE_DMA_BUF (linux/vfio.h of Linux 7.0 on)";
		fprintf(stderr, "fgds-gpurt: %s: %s: %s\n", fn, d->name, why);
		return -1;
#endif
	}
	/* Device addresses: reserved, never mapped, aligned as the BAR offsets they stand for. */
	va = mmap(NULL, d->bar_size + GPURT_VA_ALIGN, PROT_NONE,
		  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (va == MAP_FAILED) {
		fprintf(stderr, "fgds-gpurt: %s: reserving device addresses: %s\n", fn,
			strerror(errno));
		return -1;
	}
	d->va = ((uint64_t)va + GPURT_VA_ALIGN - 1) & ~(GPURT_VA_ALIGN - 1);
	d->open = true;
	return 0;
}

CUresult unlock_ret(CUresult r)
{
	pthread_mutex_unlock(&lock);
	return r;
}

int bus_id(char *buf, int len, int dev)
{
	const struct gpurt_dev *d;

	if (!buf || dev < 0 || dev >= ndevs)
		return -1;
	d = &devs[dev];
	/* "[domain]:[bus]:[device].[function]", in hexadecimal */
	if (snprintf(buf, len, "%04X:%02X:%02X.%X", d->domain, d->bus, d->slot, d->func) >= len)
		return -1;
	return 0;
}
