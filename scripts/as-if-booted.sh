#!/bin/sh
# Run a command on a machine that seems booted UPTIME_S seconds ago.
#
#   scripts/as-if-booted.sh UPTIME_S COMMAND [ARG...]
#
# The command and everything it starts run in a Linux time namespace (time_namespaces(7))
# whose CLOCK_MONOTONIC and CLOCK_BOOTTIME read UPTIME_S at the start, as /proc/uptime does:
# what dates things relative to boot (ring records, region clocks, "an hour ago") meets a
# young clock without a reboot. The wall clock is the host's. Needs util-linux unshare with
# --time (2.36 or later), a kernel with CONFIG_TIME_NS (5.6 or later) and CAP_SYS_ADMIN.
set -eu

usage() {
    echo "usage: $0 UPTIME_S COMMAND [ARG...]" >&2
    exit 2
}

[ $# -ge 2 ] || usage
want=$1
shift
case $want in '' | *[!0-9]*) echo "$0: UPTIME_S must be whole seconds, not '$want'" >&2; exit 2 ;; esac

if [ ! -r /proc/uptime ]; then
    echo "$0: /proc/uptime is not readable: cannot tell the clock's offset" >&2
    exit 1
fi
up=$(cut -d. -f1 /proc/uptime)
if [ "$want" -gt "$up" ]; then
    echo "$0: this machine has been up ${up} s: it cannot seem up longer (${want} s)" >&2
    exit 1
fi
# the kernel takes a namespace's offsets from the host's clocks: a caller already in a time
# namespace of its own (this script run inside itself) adds its own offsets
own_offset() {
    awk -v clock="$1" '$1 == clock { print $2 }' /proc/self/timens_offsets 2>/dev/null
}
own_monotonic=$(own_offset monotonic)
own_boottime=$(own_offset boottime)
monotonic_offset=$((want - up + ${own_monotonic:-0}))
boottime_offset=$((want - up + ${own_boottime:-0}))

if ! unshare --time --fork --monotonic=0 --boottime=0 true 2>/dev/null; then
    echo "$0: cannot make a time namespace here (unshare --time needs util-linux 2.36+," \
        "a kernel with CONFIG_TIME_NS and CAP_SYS_ADMIN)" >&2
    exit 1
fi
echo "as-if-booted: up ${want} s as the command sees it (really ${up} s)" >&2
exec unshare --time --fork --monotonic="$monotonic_offset" --boottime="$boottime_offset" "$@"
