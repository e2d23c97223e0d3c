/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the two guest programs of the library share (libfgds_test.c, on a
 * dma-buf of vfio-pci; gpurt_io_test.c, on memory of the GPU stand-in's
 * runtime): the batch of 8 reads of 1 MiB both test. Include after fgds.h
 * and fgds_test.h.
 */
#ifndef FGDS_GUEST_H
#define FGDS_GUEST_H

#include <string.h>

/* Request i of @p (cookie i) reads MiB 7 - i of handle @h's file into MiB i of @base. */
static inline void fgds_guest_reversed_reads(struct fgds_io_params p[8], int h, void *base)
{
	for (int i = 0; i < 8; i++) {
		memset(&p[i], 0, sizeof(p[i]));
		p[i].handle = h;
		p[i].opcode = FGDS_OP_READ;
		p[i].cookie = i;
		p[i].file_offset = (7 - i) * SZ_1M;
		p[i].base = base;
		p[i].buf_offset = i * SZ_1M;
		p[i].size = SZ_1M;
	}
}

#endif /* FGDS_GUEST_H */
