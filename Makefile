# SPDX-License-Identifier: GPL-2.0
#
# fgds: the two commands of the README, and their parts.
#
#   make demo     build Linux 7.2 + fgds, boot the VM, move a file from the
#                 NVMe into the GPU stand-in and verify it from the host
#   make check    every test (host side, then in the VM on the debug kernel),
#                 ending with "N passed, N failed"
#   make stress   the VM's bounded tests run longer than make check runs them
#                 (fgds_stress 600 s, fgds_fuzz up to 800 s, 200 rebinds of
#                 the exporter, 100 rounds of each lifetime test), on the
#                 debug kernel; not part of CI
#
# FGDS_KCONFIG=release|debug picks the kernel configuration (demo: release,
# check: debug). Everything is built under build/ (ignored by git).

VM := tools/testing/fgds-vm
BENCH := tools/testing/fgds-bench

.PHONY: demo check stress bench bench-host bench-report toolchain kernel tests host-check clean distclean \
	series series-check series-plan-check

demo:
	FGDS_KCONFIG=$(or $(FGDS_KCONFIG),release) $(VM)/run-vm.sh demo

check:
	FGDS_KCONFIG=$(or $(FGDS_KCONFIG),debug) $(VM)/check.sh

stress:
	FGDS_KCONFIG=$(or $(FGDS_KCONFIG),debug) FGDS_STRESS=1 FGDS_VM_TIMEOUT=5400 \
		FGDS_TESTS=fgds_lifetime_test,fgds_stress,fgds_fuzz,fgds_exporter_test \
		$(VM)/run-vm.sh check

# The driver's figures and the in-VM suite (every path side by side), on the
# release kernel; the driver's figures in build/bench/vm-driver.json, the
# suite's rows in build/bench/vm-suite.json, plots in build/bench/plots,
# unregistered against registered GPU memory through libcufile.so.0 in
# build/bench/unreg-bench.json.
bench:
	FGDS_KCONFIG=$(or $(FGDS_KCONFIG),release) $(VM)/run-vm.sh bench
	mkdir -p build/bench
	cp build/vm-$(or $(FGDS_KCONFIG),release)/out/vm-suite.json build/bench/vm-suite.json
	cp build/vm-$(or $(FGDS_KCONFIG),release)/out/vm-driver.json build/bench/vm-driver.json
	cp build/vm-$(or $(FGDS_KCONFIG),release)/out/vecsplit.txt build/bench/vecsplit.txt
	cp build/vm-$(or $(FGDS_KCONFIG),release)/out/unreg-bench.json build/bench/unreg-bench.json
	-cp build/vm-$(or $(FGDS_KCONFIG),release)/out/unreg-bench-python.json build/bench/unreg-bench-python.json
	$(BENCH)/plot.py build/bench/vm-suite.json build/bench/plots

# The host suite: the library's engine against fio and a pread pool.
bench-host:
	$(BENCH)/host-suite.sh

# docs/benchmarks.md and its plots, from the suites' JSON in build/bench
# (vm: make bench; host: make bench-host; gpu: gpu-suite.py on a GPU machine).
bench-report:
	$(BENCH)/report.py

toolchain:
	$(VM)/toolchain.sh

kernel:
	$(VM)/build-kernel.sh $(FGDS_KCONFIG)

tests: kernel
	$(VM)/build-tests.sh $(FGDS_KCONFIG)

host-check:
	$(VM)/host-tests.sh

# The overlay as patch series against Linux 7.2, authored and signed off by
# git's user.name/user.email: build/series/ (cover letter and one patch per
# logical change) and build/series/fixes/ (the upstream fixes), planned by
# tools/testing/fgds-series/plan. series-check applies them one patch at a
# time to pristine 7.2 and builds after each (slow: a cold kernel build the
# first time, then some 17 minutes on two cores); series-plan-check says
# whether the plan covers every overlay file.
SERIES := tools/testing/fgds-series

series:
	$(SERIES)/fgds-series.py generate

series-check: series
	nice -n 19 $(SERIES)/series-check.sh

series-plan-check:
	$(SERIES)/fgds-series.py plan-check

# Keeps the toolchain root (build/root) but drops kernels and VM state.
clean:
	rm -rf --one-file-system build/root/fgds build/vm-* build/results-*

distclean:
	rm -rf --one-file-system build
