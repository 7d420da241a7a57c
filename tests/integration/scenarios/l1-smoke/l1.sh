# shellcheck shell=sh
# l1-smoke: L1 sanity: /dev/kvm, kvm_amd nested+NPT, 2 nodes, node 1 memory-only, slower tier
# The L1 host is what the other scenarios assume: a usable /dev/kvm with
# nested virtualization and nested paging, two NUMA nodes, node 1
# memory-only and in a lower memory tier than node 0.
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l1.sh
. "$TB_LIB/l1.sh"
tb_begin l1

tb_fact_str kernel "$(uname -r)"
tb_fact_str cpu_model "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
tb_fact cpus "$(grep -c '^processor' /proc/cpuinfo)"

if [ -c /dev/kvm ]; then tb_pass "dev-kvm-exists"; else tb_fail "dev-kvm-exists" "no /dev/kvm"; fi

# kvm_amd (the testbed) or kvm_intel (a direct-mode host).
kmod=""
for m in kvm_amd kvm_intel; do
    [ -d "/sys/module/$m" ] && kmod=$m && break
done
tb_fact_str kvm_module "${kmod:-none}"
if [ "$TB_MODE" = nested ]; then
    tb_check_eq "kvm_amd-loaded" kvm_amd "$kmod"
fi
if [ -n "$kmod" ]; then
    p=/sys/module/$kmod/parameters
    nested=$(cat "$p/nested" 2>/dev/null)
    if [ "$kmod" = kvm_amd ]; then paging=$(cat "$p/npt" 2>/dev/null); else paging=$(cat "$p/ept" 2>/dev/null); fi
    tb_fact_str kvm_nested "$nested"
    tb_fact_str kvm_npt_or_ept "$paging"
    case $nested in 1 | Y) tb_pass "kvm-nested-enabled" "nested=$nested" ;; *) tb_fail "kvm-nested-enabled" "nested='$nested'" ;; esac
    # KVM uses two-dimensional paging exactly when the CPU offers it: the
    # nested testbed's L1 CPU has no NPT by default (docs/testbed.md), so
    # KVM must fall back to shadow paging there, and use NPT/EPT elsewhere.
    if grep -qwE 'npt|ept' /proc/cpuinfo; then want_paging=Y; else want_paging=N; fi
    tb_fact_str cpu_has_npt_or_ept "$want_paging"
    case $paging in 1 | Y) paging=Y ;; *) paging=N ;; esac
    tb_check_eq "kvm-paging-mode-matches-cpu" "$want_paging" "$paging"
else
    tb_fail "kvm-module-loaded" "neither kvm_amd nor kvm_intel is loaded"
fi
if dmesg 2>/dev/null | grep -q 'Nested Paging enabled'; then
    tb_fact kvm_dmesg_nested_paging true
fi

n=$(tb_node_count)
tb_fact nodes "$n"
numa_checks=1
if [ "$TB_MODE" != nested ] && [ "$n" -lt 2 ]; then
    echo "SKIP: NUMA checks (direct-mode host with $n node)"
    numa_checks=0
fi
if [ "$numa_checks" = 1 ]; then
    tb_check_eq "two-numa-nodes" 2 "$n"
    c0=$(tb_node_cpulist 0)
    c1=$(tb_node_cpulist 1)
    tb_fact_str node0_cpus "$c0"
    tb_fact_str node1_cpus "$c1"
    if [ -n "$c0" ]; then tb_pass "node0-has-cpus" "$c0"; else tb_fail "node0-has-cpus"; fi
    tb_check_eq "node1-has-no-cpus" "" "$c1"
    tb_fact node0_memtotal_kb "$(tb_node_memtotal_kb 0)"
    tb_fact node1_memtotal_kb "$(tb_node_memtotal_kb 1)"
    tb_fact_str node0_distance "$(tb_node_distance 0)"
    t0=$(tb_memory_tier_of 0)
    t1=$(tb_memory_tier_of 1)
    tb_fact node0_memory_tier "${t0:-null}"
    tb_fact node1_memory_tier "${t1:-null}"
    if [ -n "$t0" ] && [ -n "$t1" ] && [ "$t1" -gt "$t0" ]; then
        tb_pass "node1-in-lower-memory-tier" "memory_tier$t1 below memory_tier$t0"
    else
        tb_fail "node1-in-lower-memory-tier" "node0 tier '${t0}', node1 tier '${t1}'"
    fi
    if command -v numactl >/dev/null 2>&1; then
        numactl --hardware
        tb_check "numactl-runs" numactl --membind=1 true
    fi
fi

for b in "$TB_VMM" "$TB_CH_REMOTE" "$TB_VMMLOAD"; do
    [ -x "$b" ] && echo "present: $b"
done
tb_fact vmm_present "$([ -x "$TB_VMM" ] && echo true || echo false)"
tb_finish
