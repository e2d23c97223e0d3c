/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * A stand-in for NVIDIA's libcufile.so.0 in tests/run.rs: cuFileGetVersion
 * says 99999, and it lacks cuFileBufRegisterDmabufFGDS (fgds's own
 * extension), so a program can tell which library it got.
 */
typedef struct { int err; int cu_err; } CUfileError_t;

CUfileError_t cuFileGetVersion(int *version)
{
	CUfileError_t ok = { 0, 0 };

	*version = 99999;
	return ok;
}
