# shellcheck shell=sh
# demo: what scripts/demo.sh shows (and checks): a VM whose FMem and SMem
# tiers are NUMA nodes, with the double balloon taking memory from each tier
# on its own through the REST API. The guest side is the balloon scenario's
# l2.sh (tb.run=balloon) with our demeter_balloon.ko.
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l1.sh
. "$TB_LIB/l1.sh"
tb_begin l1

MIB=1048576
[ -x "$TB_VMM" ] || tb_skip "no VMM binary at $TB_VMM"
[ -x "$TB_CH_REMOTE" ] || tb_skip "no ch-remote binary at $TB_CH_REMOTE"
[ "$(tb_node_count)" -ge 2 ] || tb_skip "the host has fewer than two NUMA nodes"
trap 'tb_vmm_stop' EXIT

free_of() { # ANSWER-LINE NODE -> MiB free
    echo "$1" | sed -n "s/.* n$2=\([0-9]*\).*/\1/p" | awk '{ printf "%d", $1 / 1024 }'
}

rm -f "$TB_API_SOCK"
tb_vmm_start --kernel "$TB_L2_KERNEL" --initramfs "$TB_L2_INITRD" \
    --cmdline "console=ttyS0 reboot=k panic=-1 tb.run=balloon tb.balloon=demeter" \
    --cpus boot=2 --memory size=0 \
    --memory-zone id=fmem,size=512M,host_numa_node=0 id=smem,size=1G,host_numa_node=1,shared=on \
    --numa 'guest_numa_id=0,cpus=[0-1],distances=[1@25],memory_zones=fmem,latency_ns=80,bandwidth_mbps=20000' \
    'guest_numa_id=1,distances=[0@25],memory_zones=smem,latency_ns=200,bandwidth_mbps=8000' \
    --balloon 'size=[0,0],statistics=on,heterogeneous_memory=on' \
    --api-socket "path=$TB_API_SOCK" --serial tty --console off
if ! tb_vmm_wait_line '@@BAL READY' 180; then
    tb_fail guest-ready "serial tail: $(tail -n 5 "$TB_VMM_SERIAL" | tr -d '\r' | tr '\n' '|')"
    tb_finish
fi
tb_pass guest-ready "$(($(tb_now_ms) - TB_VMM_START_MS)) ms after VMM start"

tb_vmm_send show
tb_vmm_wait_line '@@BAL SHOW node=1' 30 || tb_fail guest-topology "no answer to show"
show=$(tr -d '\r' <"$TB_VMM_SERIAL" | grep '@@BAL SHOW node=' | tail -n 2)
echo "$show" >"$TB_OUT/topology.txt"
n0=$(echo "$show" | grep 'node=0')
n1=$(echo "$show" | grep 'node=1')
tb_fact_str node0 "${n0#@@BAL SHOW }"
tb_fact_str node1 "${n1#@@BAL SHOW }"
t0=$(echo "$n0" | sed -n 's/.* tier=\([0-9]*\).*/\1/p')
t1=$(echo "$n1" | sed -n 's/.* tier=\([0-9]*\).*/\1/p')
tb_check smem-node-in-a-lower-tier test "${t1:-0}" -gt "${t0:-0}"
tb_check_eq smem-node-has-no-cpus "" "$(echo "$n1" | sed -n 's/.* cpus=\([^ ]*\) .*/\1/p')"

before=$(tb_vmm_ask 'm before' '@@BAL M before ')
t=$(tb_now_ms)
tb_chr resize --balloon '[128M,384M]' >"$TB_OUT/resize.out" 2>&1
if tb_wait_until 120 tb_balloon_actual_is $((128 * MIB)) $((384 * MIB)); then
    tb_pass balloons-reached "[128M,384M] in $(($(tb_now_ms) - t)) ms"
else
    tb_fail balloons-reached "actual [$(tb_balloon_field fmem actual),$(tb_balloon_field smem actual)]"
fi
after=$(tb_vmm_ask 'm after' '@@BAL M after ')
tb_chr balloon-stats >"$TB_OUT/balloon-stats.json" 2>&1
for n in 0 1; do
    b=$(free_of "$before" $n)
    a=$(free_of "$after" $n)
    tb_fact "node${n}_free_mib_before" "${b:-null}"
    tb_fact "node${n}_free_mib_after" "${a:-null}"
done
d0=$(($(free_of "$before" 0) - $(free_of "$after" 0)))
d1=$(($(free_of "$before" 1) - $(free_of "$after" 1)))
tb_check fmem-gave-about-128MiB test "$d0" -ge 120 -a "$d0" -le 136
tb_check smem-gave-about-384MiB test "$d1" -ge 370 -a "$d1" -le 398
actual=$(tb_chr info | tr -d ' \n' | sed -n 's/.*"memory_actual_size":\([0-9]*\).*/\1/p')
tb_fact memory_actual_size_mib "$((${actual:-0} / MIB))"
tb_check_eq info-memory-actual-size $(((1536 - 512) * MIB)) "$actual"
tb_vmm_send quit
tb_vmm_wait_exit 60
tb_check_eq vmm-exit-0 0 "$TB_VMM_RC"
tb_finish
