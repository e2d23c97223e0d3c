# SPDX-License-Identifier: GPL-2.0
#
# Sourced by the guest modes: finds the fixture's devices, partitions and
# formats the data NVMe (fresh image each boot), binds the GPU stand-in to
# vfio-pci, and exports what it found:
#   FGDS_GPU_BDF   the ivshmem GPU stand-in (vfio-pci, BAR2 = "VRAM", 512 MiB)
#   FGDS_GPU2_BDF  a second one (BAR2 64 MiB), served as another fgds node
#   FGDS_NVME      the data NVMe (whole namespace)
#   FGDS_RAW       its raw partition
#   FGDS_EXT4 FGDS_XFS   mount points of its file systems
#   FGDS_CMB_BDF   the NVMe whose CMB is upstream p2pmem
#   FGDS_CMB_NVME  that NVMe's namespace
#   FGDS_SLOW      an NVMe namespace whose reads QEMU throttles (8 MiB/s)
#   FGDS_FAR       an NVMe namespace on its own root port: no P2P to the stand-ins
#   FGDS_MD        an md raid0 array over two NVMes below the stand-ins' switch
#   FGDS_MPATH     an NVMe multipath head over two controllers below that switch
#                  (the multipath boot only)

fgds_die() { echo "fgds-guest: setup: $*"; exit 1; }

# Shell builtins only in the loops: under TCG a fork and exec costs the
# debug guest about a second, and the PCI scan once took 48 s with cat.
nvme_by_serial() {
	for c in /sys/class/nvme/nvme*; do
		read -r serial <"$c/serial" 2>/dev/null || continue
		[ "$serial" = "$1" ] && { echo "${c##*/}"; return; }
	done
}

FGDS_GPU_BDF= FGDS_GPU2_BDF=
for d in /sys/bus/pci/devices/*; do
	read -r vendor <"$d/vendor" && read -r device <"$d/device" || continue
	[ "$vendor:$device" = 0x1af4:0x1110 ] || continue
	if [ -z "$FGDS_GPU_BDF" ]; then
		FGDS_GPU_BDF=${d##*/}
	elif [ -z "$FGDS_GPU2_BDF" ]; then
		FGDS_GPU2_BDF=${d##*/}
	fi
done
export FGDS_GPU_BDF FGDS_GPU2_BDF
[ -n "$FGDS_GPU_BDF" ] || fgds_die "no ivshmem GPU stand-in on the PCI bus"
[ -n "$FGDS_GPU2_BDF" ] || fgds_die "no second ivshmem GPU stand-in on the PCI bus"

ctrl=$(nvme_by_serial fgds0)
[ -n "$ctrl" ] || fgds_die "no NVMe with serial fgds0"
export FGDS_NVME=/dev/${ctrl}n1
cmb=$(nvme_by_serial fgdscmb)
[ -n "$cmb" ] || fgds_die "no NVMe with serial fgdscmb"
export FGDS_CMB_NVME=/dev/${cmb}n1
cmb_dev=$(readlink -f /sys/class/nvme/$cmb/device)
export FGDS_CMB_BDF=${cmb_dev##*/}
slow=$(nvme_by_serial fgdsslow)
[ -n "$slow" ] || fgds_die "no NVMe with serial fgdsslow"
export FGDS_SLOW=/dev/${slow}n1
far=$(nvme_by_serial fgdsfar)
[ -n "$far" ] || fgds_die "no NVMe with serial fgdsfar"
export FGDS_FAR=/dev/${far}n1

# md raid0 over fgdsmd0 and fgdsmd1 with no metadata (what mdadm --build
# does), through md's sysfs interface (Documentation/admin-guide/md.rst).
md_members=
for s in fgdsmd0 fgdsmd1; do
	c=$(nvme_by_serial $s)
	[ -n "$c" ] || fgds_die "no NVMe with serial $s"
	md_members="$md_members ${c}n1"
done
echo md_fgds >/sys/module/md_mod/parameters/new_array ||
	fgds_die "md: cannot make an array (CONFIG_BLK_DEV_MD, CONFIG_MD_RAID0)"
m=/sys/block/md_fgds/md
{ echo none >$m/metadata_version && echo raid0 >$m/level &&
	echo 65536 >$m/chunk_size && echo 2 >$m/raid_disks; } ||
	fgds_die "md: describing the array failed"
slot=0
for d in $md_members; do
	read -r majmin </sys/block/$d/dev && read -r sectors </sys/block/$d/size ||
		fgds_die "md: no $d"
	{ echo $majmin >$m/new_dev && echo $slot >$m/dev-$d/slot &&
		echo $((sectors / 2)) >$m/dev-$d/size; } || fgds_die "md: adding $d failed"
	slot=$((slot + 1))
done
echo active >$m/array_state || fgds_die "md: starting the array failed"
[ -b /dev/md_fgds ] || fgds_die "md: no /dev/md_fgds"
export FGDS_MD=/dev/md_fgds

# The multipath boot (run-vm.sh mpath: nvme_core.multipath=Y) reaches every
# namespace through a head (QEMU's controllers report a subsystem of several
# controllers); subsystem "fgdsmp" has two controllers sharing one namespace,
# and its head is FGDS_MPATH. The other boots have no heads (multipath=N).
read -r mpath </sys/module/nvme_core/parameters/multipath 2>/dev/null || mpath=N
if [ "$mpath" = Y ]; then
	head=
	for try in 1 2 3 4 5 6 7 8 9 10; do
		for s in /sys/class/nvme-subsystem/nvme-subsys*; do
			read -r nqn <"$s/subsysnqn" 2>/dev/null || continue
			case $nqn in *:fgdsmp) ;; *) continue ;; esac
			for d in "$s"/nvme*n1; do
				[ -b "/dev/${d##*/}" ] && head=/dev/${d##*/}
			done
		done
		[ -n "$head" ] && break
		sleep 1
	done
	[ -n "$head" ] || fgds_die "no NVMe multipath head of subsystem fgdsmp"
	export FGDS_MPATH=$head
fi

# raw 1 GiB, ext4 1.5 GiB, xfs the rest
sfdisk -q "$FGDS_NVME" >/dev/null <<PART || fgds_die "sfdisk $FGDS_NVME failed"
label: gpt
size=1GiB, name=raw
size=1536MiB, name=ext4
name=xfs
PART
export FGDS_RAW=${FGDS_NVME}p1
mkdir -p /mnt/ext4 /mnt/xfs
mkfs.ext4 -q -F ${FGDS_NVME}p2 || fgds_die "mkfs.ext4 failed"
mkfs.xfs -q -f ${FGDS_NVME}p3 || fgds_die "mkfs.xfs failed"
mount ${FGDS_NVME}p2 /mnt/ext4 || fgds_die "mount ext4 failed"
mount ${FGDS_NVME}p3 /mnt/xfs || fgds_die "mount xfs failed"
export FGDS_EXT4=/mnt/ext4 FGDS_XFS=/mnt/xfs

echo 1af4 1110 >/sys/bus/pci/drivers/vfio-pci/new_id 2>/dev/null
# vfio-pci offers the stand-ins' BARs (pcim_p2pdma_offer()); fgds serves the offers.
if modinfo fgds >/dev/null 2>&1; then
	modprobe fgds || fgds_die "modprobe fgds failed"
fi
for bdf in $FGDS_GPU_BDF $FGDS_GPU2_BDF; do
	[ -e /sys/bus/pci/drivers/vfio-pci/$bdf ] ||
		fgds_die "vfio-pci did not bind $bdf (is vfio.enable_unsafe_noiommu_mode=1 set?)"
done

# A block device that cannot do P2P DMA: a loop device over tmpfs.
truncate -s 64M /tmp/loop.img
export FGDS_LOOP=$(losetup -f --show /tmp/loop.img) || fgds_die "losetup failed"
