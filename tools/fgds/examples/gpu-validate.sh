#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# fgds check and fgds validate on a GPU machine, reports into OUT:
#
#   gpu-validate.sh FGDS_BINARY OUT [WHEEL_DIR]
#
# FGDS_BINARY is a release build of tools/fgds (cargo build --release -p
# fgds-cli); WHEEL_DIR, if given, holds Python wheels installed for the run
# (KvikIO: kvikio-cu13, libkvikio-cu13, rapids-logger), so that validate's
# KvikIO row runs. The files checked and validated are made here and removed.
set -u
bin=$1 out=$2 whl=${3:-}
if [ -n "$whl" ] && ls "$whl"/*.whl >/dev/null 2>&1; then
	python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
		--upgrade --target /tmp/fgds-site "$whl"/*.whl && export PYTHONPATH=/tmp/fgds-site
fi
dir=$(mktemp -d "$PWD/fgds-validate.XXXXXX")
{
	uname -a
	nvidia-smi -L 2>&1
	df -T "$dir" /tmp 2>&1
	lsblk -o NAME,TYPE,SIZE,MODEL,TRAN 2>&1
} | tee "$out/machine.txt"
echo "== fgds check"
"$bin" check 2>&1 | tee "$out/check.txt"
echo "exit ${PIPESTATUS[0]}" | tee -a "$out/check.txt"
head -c 8M /dev/urandom >"$dir/check-file"
echo "== fgds check FILE"
"$bin" check "$dir/check-file" 2>&1 | tee "$out/check-file.txt"
echo "exit ${PIPESTATUS[0]}" | tee -a "$out/check-file.txt"
"$bin" check --json "$dir/check-file" >"$out/check-file.json"
echo "check --json exit $?"
rm -f "$dir/check-file"
echo "== fgds validate"
"$bin" validate --dir "$dir" --bench-size "${FGDS_VALIDATE_BENCH_SIZE:-1G}" \
	--json "$out/validate.json" 2>&1 | tee "$out/validate.md"
echo "exit ${PIPESTATUS[0]}" | tee -a "$out/validate.md"
echo "left in $dir: $(ls -A "$dir" | wc -l) files"
rmdir "$dir"
