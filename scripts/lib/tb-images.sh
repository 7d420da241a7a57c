# shellcheck shell=bash
# Image building for scripts/testbed.sh (sourced). Everything goes under
# $TB_BUILD (build/testbed). Images are cached under $TB_BUILD/cache with a
# key derived from their inputs:
#   l1-base-KEY.cpio    busybox, kvm_amd module chain, numactl, L2 kernel,
#                       guest tools, /init        (slow-changing inputs)
#   l2-base-KEY.cpio    busybox, L2 modules, guest tools, /init
#   l2-initrd-KEY.cpio  l2-base + scenario files + lib   (= $TB_L2_INITRD)
#   l1-initrd-KEY.cpio  l1-base + scenarios + lib + our binaries + L2 initrd
# Uncompressed newc archives, concatenated (the kernel accepts that).
#
# Needs: TB_ROOT TB_BUILD TB_KVER TB_REBUILD (0/1).

TB_ITEST=${TB_ITEST:-$TB_ROOT/tests/integration}
TB_BIN_NAMES="cloud-hypervisor ch-remote vmmload tier-policy"
TB_DEFAULT_L1_MODULES="kvm_amd nested=1 npt=1"
TB_DEFAULT_L1_TOOLS="numactl migratepages memhog"
TB_TARGET_TRIPLE=x86_64-unknown-linux-gnu
# Upstream Cloud Hypervisor v53 (static binaries, never part of the project):
# packed into L1 as /usr/local/bin/ch-upstream and ch-remote-upstream when
# the folder exists (TB_CH_UPSTREAM / TB_CH_REMOTE_UPSTREAM in scenarios).
TB_CH_ANCHOR_DIR=${TB_CH_ANCHOR_DIR:-$TB_ROOT/../shared/anchors/cloud-hypervisor-v53}
declare -gA TB_UPSTREAM_BINS=() # L1 path -> host path
tb_find_upstream() {
    TB_UPSTREAM_BINS=()
    [[ -x $TB_CH_ANCHOR_DIR/cloud-hypervisor ]] &&
        TB_UPSTREAM_BINS[/usr/local/bin/ch-upstream]=$(readlink -f "$TB_CH_ANCHOR_DIR/cloud-hypervisor")
    [[ -x $TB_CH_ANCHOR_DIR/ch-remote ]] &&
        TB_UPSTREAM_BINS[/usr/local/bin/ch-remote-upstream]=$(readlink -f "$TB_CH_ANCHOR_DIR/ch-remote")
    return 0
}

tb_all_scenarios() {
    local d
    for d in "$TB_ITEST"/scenarios/*/; do
        d=${d%/}
        if [[ -f $d/l1.sh || -f $d/l2.sh ]]; then printf '%s\n' "${d##*/}"; fi
    done
}

# tb_union_spec FILE DEFAULT-LINES : DEFAULT-LINES then the FILE of every
# scenario, deduplicated, comments dropped.
tb_union_spec() {
    local file=$1 defaults=$2 s
    {
        if [[ -n $defaults ]]; then printf '%s\n' "$defaults"; fi
        for s in $(tb_all_scenarios); do
            if [[ -f $TB_ITEST/scenarios/$s/$file ]]; then cat "$TB_ITEST/scenarios/$s/$file"; fi
        done
    } | sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' | awk '!seen[$0]++'
}

tb_cache_prune() { # NAME : keep the 3 newest NAME-*.cpio
    local name=$1
    # shellcheck disable=SC2012 # file names are ours: NAME-<hex>.cpio
    ls -1t "$TB_BUILD/cache/$name"-*.cpio 2>/dev/null | tail -n +4 | xargs -r rm -f --
}

tb_lock() {
    mkdir -p "$TB_BUILD/cache"
    exec {TB_LOCK_FD}>"$TB_BUILD/.lock"
    flock -w 900 "$TB_LOCK_FD" || tb_die "$TB_EXIT_SETUP" "could not lock $TB_BUILD/.lock (another build stuck?)"
}

tb_unlock() {
    if [[ -n ${TB_LOCK_FD:-} ]]; then
        exec {TB_LOCK_FD}>&-
        TB_LOCK_FD=""
    fi
}

# --- guest tools: tests/integration/guest/*.c -> static binaries ---------
tb_build_tools() {
    local c name key out
    TB_TOOLS=()
    mkdir -p "$TB_BUILD/tools"
    # Also vmmload's native-identity test programs (as vl-*), so the
    # vmmload-kvm scenario can run them on the L1 host's standard KVM.
    for c in "$TB_ITEST"/guest/*.c "$TB_ROOT"/tests/vmmload/{hello,threads,accuracy,cpu,sysbench,futex,signals}.c; do
        [[ -f $c ]] || continue
        name=$(basename "$c" .c)
        [[ $c == "$TB_ROOT"/tests/vmmload/* ]] && name=vl-$name
        key=$(tb_hash_files "$c")
        out=$TB_BUILD/tools/$name-$key
        if [[ ! -x $out || $TB_REBUILD == 1 ]]; then
            tb_msg "building guest tool $name (gcc -static)"
            gcc -static -O2 -pthread -Wall -Wextra -o "$out.tmp" "$c" ||
                tb_die "$TB_EXIT_SETUP" "gcc failed for $c"
            mv -f "$out.tmp" "$out"
            find "$TB_BUILD/tools" -name "$name-*" ! -name "$name-$key" -delete
        fi
        TB_TOOLS+=("$out")
    done
}

# tb_stage_tools ROOT SPEC-LINES : host programs (names or paths) + libs.
tb_stage_tools() {
    local root=$1 spec=$2 t path
    for t in $spec; do
        path=$t
        [[ $t == /* ]] || path=$(command -v "$t" || true)
        [[ -n $path && -x $path ]] || tb_die "$TB_EXIT_SETUP" "tool '$t' not found on this host"
        tb_copy_elf "$path" "$root"
    done
}

tb_stage_guest_tools() { # ROOT : the tb-* tools into ROOT/tb/bin
    local root=$1 t base
    for t in "${TB_TOOLS[@]}"; do
        base=$(basename "$t")
        install -D -m 0755 "$t" "$root/tb/bin/${base%-*}"
    done
}

tb_base_key_inputs() { # common inputs of both base images
    printf 'kernel %s %s\n' "$TB_KVER" "$(stat -c '%s %Y' "/boot/vmlinuz-$TB_KVER")"
    tb_pkg_version busybox-static
    tb_pkg_version numactl
    tb_hash_files "$TB_ROOT/scripts/lib/tb-common.sh" "$TB_ROOT/scripts/lib/tb-images.sh"
    printf '%s\n' "${TB_TOOLS[@]}"
}

# --- L2 ------------------------------------------------------------------
tb_build_l2_base() {
    local mods tools key out stage
    mods=$(tb_union_spec l2-modules "")
    tools=$(tb_union_spec l2-tools "")
    key=$({
        tb_base_key_inputs
        tb_hash_files "$TB_ITEST/guest/l2-init.sh"
        printf 'mods:%s\ntools:%s\n' "$mods" "$tools"
    } | sha256sum | cut -c1-16)
    out=$TB_BUILD/cache/l2-base-$key.cpio
    TB_L2_BASE_KEY=$key
    TB_L2_BASE=$out
    [[ -f $out && $TB_REBUILD != 1 ]] && return 0
    tb_msg "building L2 base image ($key)"
    stage=$(mktemp -d "$TB_BUILD/stage-l2.XXXXXX")
    tb_stage_skeleton "$stage"
    tb_stage_busybox "$stage"
    printf '%s\n' "$mods" >"$stage/.mods"
    tb_stage_modules "$TB_KVER" "$stage" "$stage/.mods"
    rm -f "$stage/.mods"
    # shellcheck disable=SC2086
    tb_stage_tools "$stage" "$tools"
    tb_stage_guest_tools "$stage"
    install -m 0755 "$TB_ITEST/guest/l2-init.sh" "$stage/init"
    tb_cpio "$stage" "$out"
    rm -rf "$stage"
    tb_cache_prune l2-base
}

# tb_stage_scenarios ROOT : lib + all scenario directories under ROOT/tb
tb_stage_scenarios() {
    local root=$1
    mkdir -p "$root/tb/lib" "$root/tb/scenarios" "$root/tb/bin"
    cp "$TB_ITEST"/lib/*.sh "$root/tb/lib/"
    cp -r "$TB_ITEST"/scenarios/. "$root/tb/scenarios/"
}

tb_scenario_files_hash() {
    # shellcheck disable=SC2046
    tb_hash_files $(find "$TB_ITEST/lib" "$TB_ITEST/scenarios" -type f | LC_ALL=C sort)
}

# --- our own guest code: out-of-tree modules and programs built from the repo
# Scenario files (merged over all scenarios, like l2-modules):
#   l2-kmods  one repo-relative directory per line holding a Kbuild file;
#             built against the L2 kernel's headers, every *.ko lands in
#             /tb/kmod/ of the L2 image (not loaded: the scenario insmods).
#   l2-make   "DIR TARGET..." per line; `make -C DIR TARGET...` with
#             LDFLAGS=-static, each TARGET file lands in /tb/bin/.
# Sources are copied to $TB_BUILD/src so the tree stays free of objects.

tb_repo_sources_hash() { # DIR... : hash of every file under the repo dirs
    local d
    for d in "$@"; do
        [[ -d $TB_ROOT/$d ]] || { printf 'missing %s\n' "$d"; continue; }
        # shellcheck disable=SC2046
        tb_hash_files $(cd "$TB_ROOT" && git ls-files -co --exclude-standard -- "$d" | LC_ALL=C sort)
    done | sha256sum | cut -c1-16
}

tb_guest_code_key() {
    local kmods make dirs
    kmods=$(tb_union_spec l2-kmods "")
    make=$(tb_union_spec l2-make "")
    # shellcheck disable=SC2086
    dirs=$(printf '%s\n%s\n' "$kmods" "$(printf '%s\n' "$make" | awk '{ print $1 }')" | sed '/^$/d' | sort -u)
    # shellcheck disable=SC2086
    printf 'kver %s kmods %s make %s src %s\n' "$TB_KVER" "$kmods" "$make" "$(tb_repo_sources_hash $dirs)"
}

tb_copy_src() { # DIR -> prints the copy's path (fresh)
    local d=$1 dst
    dst=$TB_BUILD/src/${d//\//_}
    rm -rf "$dst"
    mkdir -p "$dst"
    (cd "$TB_ROOT/$d" && git -C "$TB_ROOT" ls-files -co --exclude-standard -- "$d" |
        sed "s|^$d/||" | tar -C "$TB_ROOT/$d" -cf - -T - ) | tar -C "$dst" -xf -
    printf '%s\n' "$dst"
}

tb_stage_guest_code() { # ROOT
    local root=$1 d src line t kdir
    kdir=/lib/modules/$TB_KVER/build
    for d in $(tb_union_spec l2-kmods ""); do
        [[ -d $kdir ]] || tb_die "$TB_EXIT_SETUP" "no kernel headers at $kdir (linux-headers-$TB_KVER)"
        src=$(tb_copy_src "$d")
        tb_msg "building kernel module(s) in $d against $TB_KVER"
        make -s -C "$kdir" M="$src" modules >"$src/build.log" 2>&1 ||
            tb_die "$TB_EXIT_SETUP" "module build failed for $d: $(tail -n 20 "$src/build.log")"
        mkdir -p "$root/tb/kmod"
        find "$src" -name '*.ko' -exec install -m 0644 {} "$root/tb/kmod/" \;
    done
    while read -r line; do
        [[ -n $line ]] || continue
        read -r d t <<<"$line"
        src=$(tb_copy_src "$d")
        tb_msg "building $t in $d (static)"
        # shellcheck disable=SC2086
        make -s -C "$src" LDFLAGS=-static $t >"$src/build.log" 2>&1 ||
            tb_die "$TB_EXIT_SETUP" "make $t failed in $d: $(tail -n 20 "$src/build.log")"
        for t in $t; do
            install -D -m 0755 "$src/$t" "$root/tb/bin/$(basename "$t")"
        done
    done <<<"$(tb_union_spec l2-make "")"
}

tb_build_l2_initrd() {
    local key out stage
    tb_build_l2_base
    key=$(printf '%s %s %s\n' "$TB_L2_BASE_KEY" "$(tb_scenario_files_hash)" "$(tb_guest_code_key)" | sha256sum | cut -c1-16)
    out=$TB_BUILD/cache/l2-initrd-$key.cpio
    TB_L2_INITRD_KEY=$key
    TB_L2_INITRD_HOST=$out
    [[ -f $out && $TB_REBUILD != 1 ]] && return 0
    stage=$(mktemp -d "$TB_BUILD/stage-l2o.XXXXXX")
    tb_stage_scenarios "$stage"
    tb_stage_guest_code "$stage"
    tb_cpio "$stage" "$out.overlay"
    cat "$TB_L2_BASE" "$out.overlay" >"$out.tmp"
    rm -f "$out.overlay"
    mv -f "$out.tmp" "$out"
    rm -rf "$stage"
    tb_cache_prune l2-initrd
}

# --- disk images for L2 guests (scenario file l2-disk) --------------------
#   l2-disk   "NAME SCRIPT [DIR...]" per line (repo-relative): `SCRIPT OUT`
#             builds a raw image, cached as cache/disk-NAME-KEY.img, KEY =
#             hash of SCRIPT, the files under SCRIPT's folder and the DIRs,
#             and what `SCRIPT --key` prints (host package versions). Packed
#             into L1 as /tb/l2/disks/NAME.img (nested runs only).
declare -gA TB_L2_DISKS=() # NAME -> host path
tb_build_l2_disks() {
    local line name script dirs key out
    TB_L2_DISKS=()
    TB_L2_DISKS_KEY=""
    while read -r line; do
        [[ -n $line ]] || continue
        read -r name script dirs <<<"$line"
        [[ -x $TB_ROOT/$script ]] || tb_die "$TB_EXIT_SETUP" "l2-disk $name: $script is not an executable in the repo"
        # shellcheck disable=SC2086
        key=$({
            tb_repo_sources_hash "$(dirname "$script")" $dirs
            "$TB_ROOT/$script" --key
        } | sha256sum | cut -c1-16)
        out=$TB_BUILD/cache/disk-$name-$key.img
        if [[ ! -f $out || $TB_REBUILD == 1 ]]; then
            tb_msg "building disk image $name ($key) with $script"
            "$TB_ROOT/$script" "$out.tmp" >"$TB_BUILD/disk-$name.log" 2>&1 ||
                tb_die "$TB_EXIT_SETUP" "disk image $name failed: $(tail -n 20 "$TB_BUILD/disk-$name.log")"
            mv -f "$out.tmp" "$out"
            # keep the 2 newest images of this name (they are large)
            # shellcheck disable=SC2012 # file names are ours
            ls -1t "$TB_BUILD/cache/disk-$name"-*.img 2>/dev/null | tail -n +3 | xargs -r rm -f --
        fi
        TB_L2_DISKS[$name]=$out
        TB_L2_DISKS_KEY+="$name:$key "
    done <<<"$(tb_union_spec l2-disk "")"
}

# --- L1 ------------------------------------------------------------------
tb_build_l1_base() {
    local mods tools key out stage
    mods=$(tb_union_spec l1-modules "$TB_DEFAULT_L1_MODULES")
    tools=$(tb_union_spec l1-tools "$TB_DEFAULT_L1_TOOLS")
    key=$({
        tb_base_key_inputs
        tb_hash_files "$TB_ITEST/guest/l1-init.sh"
        printf 'mods:%s\ntools:%s\n' "$mods" "$tools"
    } | sha256sum | cut -c1-16)
    out=$TB_BUILD/cache/l1-base-$key.cpio
    TB_L1_BASE_KEY=$key
    TB_L1_BASE=$out
    [[ -f $out && $TB_REBUILD != 1 ]] && return 0
    tb_msg "building L1 base image ($key)"
    stage=$(mktemp -d "$TB_BUILD/stage-l1.XXXXXX")
    tb_stage_skeleton "$stage"
    tb_stage_busybox "$stage"
    printf '%s\n' "$mods" >"$stage/.mods"
    tb_stage_modules "$TB_KVER" "$stage" "$stage/.mods"
    rm -f "$stage/.mods"
    tb_stage_tools "$stage" "$tools"
    tb_stage_guest_tools "$stage"
    install -D -m 0644 "/boot/vmlinuz-$TB_KVER" "$stage/tb/l2/vmlinuz"
    install -m 0755 "$TB_ITEST/guest/l1-init.sh" "$stage/init"
    tb_cpio "$stage" "$out"
    rm -rf "$stage"
    tb_cache_prune l1-base
}

# tb_find_binaries : sets TB_BINS[name]=path for each of our binaries that
# exists: the static build of this run when it succeeded (another step,
# e.g. scripts/test.sh's API contract test, may have built a newer
# target/release copy since), else the newest of target/$TRIPLE/release
# and target/release (--no-build).
declare -gA TB_BINS=()
TB_STATIC_BUILT=${TB_STATIC_BUILT:-0}
tb_find_binaries() {
    local n a b
    TB_BINS=()
    for n in $TB_BIN_NAMES; do
        a=$TB_ROOT/target/$TB_TARGET_TRIPLE/release/$n
        b=$TB_ROOT/target/release/$n
        if [[ -x $a && ($TB_STATIC_BUILT == 1 || ! -x $b || $a -nt $b) ]]; then
            TB_BINS[$n]=$a
        elif [[ -x $b ]]; then
            TB_BINS[$n]=$b
        fi
    done
}

tb_build_l1_initrd() {
    local key out stage n
    tb_build_l1_base
    tb_build_l2_initrd
    tb_build_l2_disks
    tb_find_binaries
    tb_find_upstream
    if ((${#TB_UPSTREAM_BINS[@]})); then
        tb_msg "upstream Cloud Hypervisor: ${TB_UPSTREAM_BINS[*]} (as ${!TB_UPSTREAM_BINS[*]} in L1)"
    else
        tb_msg "upstream Cloud Hypervisor: anchors absent ($TB_CH_ANCHOR_DIR); scenarios needing it will SKIP"
    fi
    key=$({
        printf '%s %s %s\n' "$TB_L1_BASE_KEY" "$TB_L2_INITRD_KEY" "$(tb_scenario_files_hash)"
        printf 'vmm-override %s\n' "${TB_VMM_OVERRIDE:-}"
        printf 'l2-disks %s\n' "$TB_L2_DISKS_KEY"
        if [[ -f ${TB_VMM_OVERRIDE:-} ]]; then sha256sum <"$TB_VMM_OVERRIDE"; fi
        for n in "${!TB_BINS[@]}"; do printf '%s %s\n' "$n" "$(sha256sum <"${TB_BINS[$n]}")"; done | sort
        for n in "${!TB_UPSTREAM_BINS[@]}"; do printf 'upstream %s %s\n' "$n" "$(sha256sum <"${TB_UPSTREAM_BINS[$n]}")"; done | sort
    } | sha256sum | cut -c1-16)
    out=$TB_BUILD/cache/l1-initrd-$key.cpio
    # shellcheck disable=SC2034 # used by tb-run.sh
    TB_L1_INITRD=$out
    [[ -f $out && $TB_REBUILD != 1 ]] && return 0
    stage=$(mktemp -d "$TB_BUILD/stage-l1o.XXXXXX")
    tb_stage_scenarios "$stage"
    for n in "${!TB_BINS[@]}"; do
        tb_copy_elf "${TB_BINS[$n]}" "$stage" "/tb/bin/$n"
    done
    for n in "${!TB_UPSTREAM_BINS[@]}"; do
        tb_copy_elf "${TB_UPSTREAM_BINS[$n]}" "$stage" "$n"
    done
    case ${TB_VMM_OVERRIDE:-} in
    '') ;;
    qemu) # stand-in VMM: QEMU/KVM behind a CH-style command line
        tb_copy_elf "$(command -v qemu-system-x86_64)" "$stage"
        mkdir -p "$stage/usr/share"
        cp -rL /usr/share/qemu /usr/share/seabios "$stage/usr/share/"
        install -m 0755 "$TB_ITEST/guest/qemu-as-ch.sh" "$stage/tb/bin/qemu-as-ch"
        ;;
    *) tb_copy_elf "$TB_VMM_OVERRIDE" "$stage" /tb/bin/vmm-override ;;
    esac
    install -D -m 0644 "$TB_L2_INITRD_HOST" "$stage/tb/l2/initrd.img"
    for n in "${!TB_L2_DISKS[@]}"; do
        install -D -m 0644 "${TB_L2_DISKS[$n]}" "$stage/tb/l2/disks/$n.img"
    done
    tb_cpio "$stage" "$out.overlay"
    cat "$TB_L1_BASE" "$out.overlay" >"$out.tmp"
    rm -f "$out.overlay"
    mv -f "$out.tmp" "$out"
    rm -rf "$stage"
    tb_cache_prune l1-initrd
}
