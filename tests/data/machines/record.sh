#!/bin/sh
# Record the files numabench.machine.topology.discover() and numabench.numa.weights read
# from a live machine into tests/data/machines/<name>/ (GPUs: write gpus.json
# by hand, or from `python3 -c 'from numabench.machine.gpus import visible_gpus; ...'`).
#
#   sh tests/data/machines/record.sh vm-1node
set -eu
name=${1:?usage: record.sh NAME}
dest=$(dirname "$0")/$name
mkdir -p "$dest"
copy() {  # copy one file (sysfs files report size 4096, so read them with cat)
    [ -e "/$1" ] || return 0
    mkdir -p "$dest/$(dirname "$1")"
    cat "/$1" > "$dest/$1"
}
copy sys/devices/system/node/online
for n in $(cd /sys/devices/system/node && ls -d node[0-9]* 2>/dev/null); do
    for f in cpulist meminfo distance; do copy "sys/devices/system/node/$n/$f"; done
done
copy sys/devices/system/cpu/online
copy proc/sys/kernel/osrelease
copy proc/cpuinfo
w=sys/kernel/mm/mempolicy/weighted_interleave
if [ -d "/$w" ]; then
    for f in $(cd "/$w" && ls); do copy "$w/$f"; done
fi
for d in /sys/bus/pci/devices/*; do
    # only display controllers (class 0x03xxxx): GPUs
    case $(cat "$d/class") in 0x03*) copy "sys/bus/pci/devices/$(basename "$d")/numa_node";; esac
done
[ -e "$dest/gpus.json" ] || echo '[]' > "$dest/gpus.json"
echo "recorded $(find "$dest" -type f | wc -l) files in $dest"
