#!/bin/sh
# qemu-as-ch: a stand-in for our VMM that accepts the subset of the Cloud
# Hypervisor command line the scenarios use and runs QEMU with KVM instead.
# Only for validating the harness and the scenarios' L1 halves while our
# VMM is not ready (scripts/testbed.sh --vmm qemu). Not a reference for
# timings or memory layout (QEMU's firmware, ACPI and e820 differ).
#
# Supported: --kernel --initramfs --cmdline --cpus boot=N --memory size=0
# --memory-zone id=,size=,host_numa_node= ... --numa guest_numa_id=,cpus=[a-b],
# distances=[n@d],memory_zones=,latency_ns=,bandwidth_mbps= ... --serial tty
# --console off. Exit status: QEMU's (0 after the guest powers off).
set -eu

die() {
    echo "qemu-as-ch: $*" >&2
    exit 2
}

size_mib() { # 512M, 1G, 1024M, bytes -> MiB
    case $1 in
    *[Gg]) echo $((${1%?} * 1024)) ;;
    *[Mm]) echo "${1%?}" ;;
    *[Kk]) echo $((${1%?} / 1024)) ;;
    *) echo $(($1 / 1048576)) ;;
    esac
}

field() { # "a=1,b=[x,y],c=3" b -> x,y (brackets stripped)
    printf '%s\n' "$1" | sed -n "s/.*\(^\|,\)$2=\(\[[^]]*\]\|[^,]*\).*/\2/p" | tr -d '[]'
}

kernel="" initrd="" cmdline="" cpus=1 zones="" numas=""
while [ $# -gt 0 ]; do
    opt=$1
    shift
    case $opt in
    --kernel) kernel=$1; shift ;;
    --initramfs) initrd=$1; shift ;;
    --cmdline) cmdline=$1; shift ;;
    --cpus) cpus=$(field "$1" boot); shift ;;
    --memory) [ "$(field "$1" size)" = 0 ] || die "only --memory size=0 is supported"; shift ;;
    --serial) [ "$1" = tty ] || die "only --serial tty"; shift ;;
    --console) shift ;;
    --memory-zone | --numa)
        while [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; do
            if [ "$opt" = --numa ]; then numas="$numas $1"; else zones="$zones $1"; fi
            shift
        done
        ;;
    *) die "unsupported option $opt" ;;
    esac
done
[ -n "$kernel" ] || die "--kernel missing"

set -- -accel kvm -M pc,hmat=on -cpu host -smp "${cpus:-1}"
total=0
for z in $zones; do
    id=$(field "$z" id)
    mib=$(size_mib "$(field "$z" size)")
    hn=$(field "$z" host_numa_node)
    total=$((total + mib))
    if [ -n "$hn" ]; then
        set -- "$@" -object "memory-backend-ram,id=$id,size=${mib}M,policy=bind,host-nodes=$hn"
    else
        set -- "$@" -object "memory-backend-ram,id=$id,size=${mib}M"
    fi
done
set -- "$@" -m "${total}M"
for n in $numas; do
    g=$(field "$n" guest_numa_id)
    c=$(field "$n" cpus)
    set -- "$@" -numa "node,nodeid=$g,memdev=$(field "$n" memory_zones),initiator=0${c:+,cpus=$c}"
done
for n in $numas; do
    g=$(field "$n" guest_numa_id)
    for d in $(field "$n" distances | tr ',' ' '); do
        set -- "$@" -numa "dist,src=$g,dst=${d%@*},val=${d#*@}"
    done
    lat=$(field "$n" latency_ns)
    bw=$(field "$n" bandwidth_mbps)
    [ -z "$lat" ] || set -- "$@" -numa "hmat-lb,initiator=0,target=$g,hierarchy=memory,data-type=access-latency,latency=$lat"
    [ -z "$bw" ] || set -- "$@" -numa "hmat-lb,initiator=0,target=$g,hierarchy=memory,data-type=access-bandwidth,bandwidth=${bw}M"
done
set -- "$@" -nodefaults -display none -serial stdio -monitor none -no-reboot -kernel "$kernel"
[ -z "$initrd" ] || set -- "$@" -initrd "$initrd"
[ -z "$cmdline" ] || set -- "$@" -append "$cmdline"
echo "qemu-as-ch: qemu-system-x86_64 $*" >&2
exec qemu-system-x86_64 "$@"
