#!/bin/bash
# The GPU machine's proof of tools/lib/cufile: unmodified torch.cuda.gds
# programs on NVIDIA's libcufile.so.0 and on fgds's, and fgds's own API.
# Run from a folder holding fgds's wheel (fgds-*.whl), libcufile.so, the fgds
# binary, tools/python/tests/gds_tutorial.py and examples/load_4g.py:
#
#   bash gpu-proof.sh [OUTDIR]
#
# Prints (and writes to OUTDIR) the tutorial's result on each library and
# one JSON line per 4 GiB load: MiB/s, CPU s/GiB, identical bytes or the error.
set -u
B=$(cd "$(dirname "$0")" && pwd)
O=${1:-${OUT:-/tmp/gds-proof-out}}
mkdir -p "$O"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
	--target /tmp/fgds-site "$B"/fgds-*.whl || exit 1
export PYTHONPATH=/tmp/fgds-site
W=$(mktemp -d /tmp/gds-proof.XXXXXX)
{
	uname -r
	nvidia-smi -L
	df -hT "$W" | tail -1
	python3 -c 'import torch, fgds; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
} 2>&1 | tee "$O/machine.txt"
FGDS_RUN="$B/fgds run --lib $B/libcufile.so --"

# The PyTorch GDS tutorial, unchanged, on torch.cuda.gds: NVIDIA's cuFile,
# then fgds's libcufile.so.0; then on fgds.torch (the one-import switch).
for lib in nvidia fgds fgds.torch; do
	mkdir -p "$W/tutorial-$lib"
	case $lib in
	nvidia) pre= gds=torch ;;
	fgds) pre=$FGDS_RUN gds=torch ;;
	fgds.torch) pre= gds=fgds ;;
	esac
	(cd "$W/tutorial-$lib" && FGDS_TUTORIAL_GDS=$gds FGDS_TUTORIAL_DEVICE=cuda \
		timeout 180 $pre python3 "$B/gds_tutorial.py") >"$O/tutorial-$lib.log" 2>&1
	echo "tutorial on $lib: exit $?: $(grep -E 'tutorial ok|Error' "$O/tutorial-$lib.log" | tail -1)"
done

# A 4 GiB file into GPU memory.
t0=$(date +%s%N)
head -c 4G /dev/urandom >"$W/f4g"
echo "4 GiB file written in $((($(date +%s%N) - t0) / 1000000)) ms"
for run in "nvidia torch" "fgds-libcufile torch" "fgds-api fgds"; do
	set -- $run
	pre=
	[ "$1" = fgds-libcufile ] && pre=$FGDS_RUN
	r=$(timeout 180 $pre python3 "$B/load_4g.py" "$W/f4g" --api "$2" 2>"$O/load-$1.err")
	echo "load $1: exit $?: $r" | tee -a "$O/loads.txt"
done
rm -rf "$W"
