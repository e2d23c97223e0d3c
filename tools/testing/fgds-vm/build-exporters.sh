#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Compile the GPU driver objects that patches/ changes (amdgpu's and xe's
# dma-buf export, device or VRAM init and remove()), once, in their own
# object directory: no emulated device runs these drivers, so this checks
# that the changes build; the exporter matrix (fgds_exporter_test) checks
# the export pattern itself.
#
#   build-exporters.sh      (after build-kernel.sh has laid the tree)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

need_root
OBJ=$FGDS_ROOT/fgds/kbuild-exporters
OBJS=(drivers/gpu/drm/amd/amdgpu/amdgpu_dma_buf.o drivers/gpu/drm/amd/amdgpu/amdgpu_device.o
	drivers/gpu/drm/amd/amdgpu/amdgpu_drv.o
	drivers/gpu/drm/xe/xe_dma_buf.o drivers/gpu/drm/xe/xe_vram.o drivers/gpu/drm/xe/xe_pci.o)
[ -f "$FGDS_ROOT/fgds/linux/.fgds-tree" ] || die "no kernel tree: run build-kernel.sh first"
mkdir -p "$FGDS_ROOT/fgds/cfg" "$OBJ"
cp "$FGDS_VM"/configs/*.config "$FGDS_ROOT/fgds/cfg/"
K="make -s -C /fgds/linux O=/fgds/kbuild-exporters LLVM=1 -j$(nproc)"
log "configuring the exporters' build (tinyconfig + fgds.config + exporters.config)"
inroot sh -c "$K tinyconfig >/dev/null &&
	cd /fgds/kbuild-exporters &&
	/fgds/linux/scripts/kconfig/merge_config.sh -m -O . .config /fgds/cfg/fgds.config /fgds/cfg/exporters.config >/dev/null &&
	$K olddefconfig" || die "configuration failed"
for l in $(grep -E '^CONFIG_[A-Z0-9_]+=[ym]$' "$FGDS_VM/configs/exporters.config"); do
	grep -qx "$l" "$OBJ/.config" || die "the exporters' config dropped $l"
done
log "compiling ${OBJS[*]}"
inroot sh -c "$K ${OBJS[*]} >/fgds/kbuild-exporters/build.log 2>&1" ||
	{ tail -n 40 "$OBJ/build.log" >&2; die "exporter objects failed: see $OBJ/build.log"; }
if grep -q "warning:" "$OBJ/build.log"; then
	grep "warning:" "$OBJ/build.log" >&2
	die "exporter objects built with warnings"
fi
log "built: ${OBJS[*]}"
