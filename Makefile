# SPDX-License-Identifier: GPL-2.0
#
# fgds: the two commands of the README, and their parts.
#
#   make demo     build Linux 7.2 + fgds, boot the VM, move a file from the
#                 NVMe into the GPU stand-in and verify it from the host
#   make check    every test (host side, then in the VM on the debug kernel),
#                 ending with "N passed, N failed"
#
# FGDS_KCONFIG=release|debug picks the kernel configuration (demo: release,
# check: debug). Everything is built under build/ (ignored by git).

VM := tools/testing/fgds-vm

.PHONY: demo check bench toolchain kernel tests host-check clean distclean

demo:
	FGDS_KCONFIG=$(or $(FGDS_KCONFIG),release) $(VM)/run-vm.sh demo

check:
	FGDS_KCONFIG=$(or $(FGDS_KCONFIG),debug) $(VM)/check.sh

# The driver's figures, with their baselines, on the release kernel.
bench:
	FGDS_KCONFIG=$(or $(FGDS_KCONFIG),release) $(VM)/run-vm.sh bench

toolchain:
	$(VM)/toolchain.sh

kernel:
	$(VM)/build-kernel.sh $(FGDS_KCONFIG)

tests: kernel
	$(VM)/build-tests.sh $(FGDS_KCONFIG)

host-check:
	$(VM)/host-tests.sh

# Keeps the toolchain root (build/root) but drops kernels and VM state.
clean:
	rm -rf --one-file-system build/root/fgds build/vm-* build/results-*

distclean:
	rm -rf --one-file-system build
