/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * Loads cuFile each way a program does and says which library it got, one
 * line per way: "<how> fgds <version>" when the library exports
 * cuFileBufRegisterDmabufFGDS (fgds's extension, absent from NVIDIA's), else
 * "<how> other <version>". tests/run.rs builds it linked against a stand-in
 * of NVIDIA's libcufile.so.0 with an RPATH to it (as a program built against
 * NVIDIA's library), and passes the names and paths to dlopen as arguments.
 */
#include <dlfcn.h>
#include <stdio.h>

typedef struct { int err; int cu_err; } CUfileError_t;
typedef CUfileError_t (*get_version_fn)(int *);

/* Linked: resolved through DT_NEEDED libcufile.so.0. */
CUfileError_t cuFileGetVersion(int *version);

static void report(const char *how, void *h, get_version_fn get)
{
	int v = -1;

	if (!get) {
		printf("%s missing\n", how);
		return;
	}
	get(&v);
	printf("%s %s %d\n", how, dlsym(h, "cuFileBufRegisterDmabufFGDS") ? "fgds" : "other", v);
}

int main(int argc, char **argv)
{
	void *h;
	int i;

	/* The linked library: the handle of the program finds its symbols. */
	report("linked", dlopen(NULL, RTLD_NOW), cuFileGetVersion);
	for (i = 1; i < argc; i++) {
		h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			printf("%s failed: %s\n", argv[i], dlerror());
			continue;
		}
		report(argv[i], h, (get_version_fn)dlsym(h, "cuFileGetVersion"));
	}
	return 0;
}
