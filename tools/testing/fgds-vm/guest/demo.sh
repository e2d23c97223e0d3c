# SPDX-License-Identifier: GPL-2.0
#
# The main job's guest side: show the fixture, then move a file from the
# NVMe into the GPU stand-in's memory and have the host verify it.
. /fgds/src/tools/testing/fgds-vm/guest/setup.sh

echo "fgds-demo: PCI topology (NVMe and GPU stand-in below one switch):"
lspci -tv
echo "fgds-demo: GPU stand-in $FGDS_GPU_BDF bound to $(basename "$(readlink /sys/bus/pci/devices/$FGDS_GPU_BDF/driver)")"
echo "fgds-demo: data NVMe $FGDS_NVME, raw area $FGDS_RAW, ext4 $FGDS_EXT4, xfs $FGDS_XFS"
cd /fgds/tests-bin-$FGDS_KCONFIG
if [ -e /dev/fgds0 ] && [ -x ./fgds_demo ]; then
	echo "fgds-demo: /dev/fgds0 -> $(basename "$(readlink -f /sys/class/misc/fgds0/device)")"
	./fgds_demo
else
	./fixture_test -r vfio.exports_bar_range_as_dmabuf -r vfio.guest_bar_writes_reach_host_file
fi
