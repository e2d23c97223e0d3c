#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Install what the host needs to build the toolchain root and run the VM:
# debootstrap (Debian's) and QEMU 10 (bookworm-backports); and codespell,
# whose dictionary the host tests' checkpatch --codespell of the patch series
# reads (tools/testing/fgds-series). Idempotent and quiet when everything is
# already there.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

need_root

missing=()
command -v debootstrap >/dev/null || missing+=(debootstrap)
qver=$(qemu-system-x86_64 --version 2>/dev/null || true)
if ! [[ $qver =~ version\ (9|[1-9][0-9])\. ]]; then
	missing+=(qemu-system-x86)
fi
command -v mkfs.ext4 >/dev/null || missing+=(e2fsprogs)
/usr/bin/python3 -c 'import codespell_lib' 2>/dev/null || missing+=(codespell)
[ ${#missing[@]} -eq 0 ] && exit 0

if ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
	if grep -qs 'VERSION_CODENAME=bookworm' /etc/os-release; then
		log "adding bookworm-backports for QEMU 10"
		cat > /etc/apt/sources.list.d/fgds-backports.sources <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
	fi
fi
log "installing host packages: ${missing[*]}"
apt-get update -qq >/dev/null
args=()
for p in "${missing[@]}"; do
	# Capture first: grep -q under pipefail would fail the pipeline.
	pol=$(apt-cache policy qemu-system-x86)
	if [ "$p" = qemu-system-x86 ] && [[ $pol == *bpo* ]]; then
		args+=(-t bookworm-backports)
	fi
done
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	"${args[@]}" "${missing[@]}" >/dev/null ||
	die "could not install ${missing[*]}: install them with apt-get (QEMU >= 9 for qemu-system-x86) and retry"
