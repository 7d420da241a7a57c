# shellcheck shell=bash
# Image building for scripts/testbed.sh (sourced). Everything goes under
# $TB_BUILD (build/testbed). Images are cached under $TB_BUILD/cache with a
# key derived from their inputs:
#   l1-base-KEY.cpio    busybox, kvm_amd module chain, numactl, L2 kernel,
#                       guest tools, /init        (slow-changing inputs)
#   l2-base-KEY.cpio    busybox, L2 modules, guest tools, /init
#   l2-initrd-KEY.cpio  l2-base + scenario files + lib   (= $TB_L2_INITRD)
#   l1-initrd-KEY.cpio  l1-base + scenarios + lib + our binaries + L2 initrd
#   l2k-{base,initrd}-SCENARIO-KEY.cpio  the same two for a scenario that
#                       boots its own L2 kernel (scenario file l2-kernel)
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

# Spec lines on stdin: comments and blank lines dropped, deduplicated.
tb_spec_filter() { sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' | awk '!seen[$0]++'; }

# tb_union_spec FILE DEFAULT-LINES : DEFAULT-LINES then the FILE of every
# scenario, deduplicated, comments dropped. The l2-* files of a scenario
# with its own L2 kernel (l2-kernel) go into its own L2 image instead.
tb_union_spec() {
    local file=$1 defaults=$2 s
    {
        if [[ -n $defaults ]]; then printf '%s\n' "$defaults"; fi
        for s in $(tb_all_scenarios); do
            if [[ $file == l2-* && -f $TB_ITEST/scenarios/$s/l2-kernel ]]; then continue; fi
            if [[ -f $TB_ITEST/scenarios/$s/$file ]]; then cat "$TB_ITEST/scenarios/$s/$file"; fi
        done
    } | tb_spec_filter
}

tb_scenario_spec() { # SCENARIO FILE : that scenario's own FILE, filtered
    local f=$TB_ITEST/scenarios/$1/$2
    if [[ -f $f ]]; then tb_spec_filter <"$f"; fi
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
# tb_make_l2_base NAME KVER MODS TOOLS [KEY-EXTRA] : busybox, KVER's modules
# MODS (from TB_MODROOT, default the host), the host programs TOOLS, the
# guest tools and /init, as cache/NAME-KEY.cpio. Sets TB_MADE, TB_MADE_KEY.
tb_make_l2_base() {
    local name=$1 kver=$2 mods=$3 tools=$4 extra=${5:-} key out stage
    key=$({
        tb_base_key_inputs
        tb_hash_files "$TB_ITEST/guest/l2-init.sh"
        printf 'mods:%s\ntools:%s\n' "$mods" "$tools"
        if [[ -n $extra ]]; then printf '%s\n' "$extra"; fi
    } | sha256sum | cut -c1-16)
    out=$TB_BUILD/cache/$name-$key.cpio
    TB_MADE_KEY=$key
    TB_MADE=$out
    [[ -f $out && $TB_REBUILD != 1 ]] && return 0
    tb_msg "building $name image for $kver ($key)"
    stage=$(mktemp -d "$TB_BUILD/stage-l2.XXXXXX")
    tb_stage_skeleton "$stage"
    tb_stage_busybox "$stage"
    printf '%s\n' "$mods" >"$stage/.mods"
    tb_stage_modules "$kver" "$stage" "$stage/.mods"
    rm -f "$stage/.mods"
    # shellcheck disable=SC2086
    tb_stage_tools "$stage" "$tools"
    tb_stage_guest_tools "$stage"
    install -m 0755 "$TB_ITEST/guest/l2-init.sh" "$stage/init"
    tb_cpio "$stage" "$out"
    rm -rf "$stage"
    tb_cache_prune "$name"
}

tb_build_l2_base() {
    tb_make_l2_base l2-base "$TB_KVER" "$(tb_union_spec l2-modules "")" "$(tb_union_spec l2-tools "")"
    TB_L2_BASE_KEY=$TB_MADE_KEY
    TB_L2_BASE=$TB_MADE
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

tb_guest_code_key() { # KVER KMODS MAKE (spec lines of l2-kmods, l2-make)
    local kver=$1 kmods=$2 make=$3 dirs
    # shellcheck disable=SC2086
    dirs=$(printf '%s\n%s\n' "$kmods" "$(printf '%s\n' "$make" | awk '{ print $1 }')" | sed '/^$/d' | sort -u)
    # shellcheck disable=SC2086
    printf 'kver %s kmods %s make %s src %s\n' "$kver" "$kmods" "$make" "$(tb_repo_sources_hash $dirs)"
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

tb_stage_guest_code() { # ROOT KVER KMODS MAKE : modules built against KVER's headers
    local root=$1 kver=$2 kmods=$3 make=$4 d src line t kdir
    kdir=/lib/modules/$kver/build
    for d in $kmods; do
        [[ -d $kdir ]] || tb_die "$TB_EXIT_SETUP" "no kernel headers at $kdir (linux-headers-$kver)"
        src=$(tb_copy_src "$d")
        tb_msg "building kernel module(s) in $d against $kver"
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
    done <<<"$make"
}

# tb_make_l2_initrd NAME BASE BASE-KEY KVER KMODS MAKE : BASE + lib +
# scenarios + our guest code (KMODS built against KVER) as
# cache/NAME-KEY.cpio. Sets TB_MADE, TB_MADE_KEY.
tb_make_l2_initrd() {
    local name=$1 base=$2 base_key=$3 kver=$4 kmods=$5 make=$6 key out stage
    key=$(printf '%s %s %s\n' "$base_key" "$(tb_scenario_files_hash)" "$(tb_guest_code_key "$kver" "$kmods" "$make")" |
        sha256sum | cut -c1-16)
    out=$TB_BUILD/cache/$name-$key.cpio
    TB_MADE_KEY=$key
    TB_MADE=$out
    [[ -f $out && $TB_REBUILD != 1 ]] && return 0
    stage=$(mktemp -d "$TB_BUILD/stage-l2o.XXXXXX")
    tb_stage_scenarios "$stage"
    tb_stage_guest_code "$stage" "$kver" "$kmods" "$make"
    tb_cpio "$stage" "$out.overlay"
    cat "$base" "$out.overlay" >"$out.tmp"
    rm -f "$out.overlay"
    mv -f "$out.tmp" "$out"
    rm -rf "$stage"
    tb_cache_prune "$name"
}

tb_build_l2_initrd() {
    tb_build_l2_base
    tb_make_l2_initrd l2-initrd "$TB_L2_BASE" "$TB_L2_BASE_KEY" "$TB_KVER" \
        "$(tb_union_spec l2-kmods "")" "$(tb_union_spec l2-make "")"
    TB_L2_INITRD_KEY=$TB_MADE_KEY
    TB_L2_INITRD_HOST=$TB_MADE
    tb_build_l2_kernels
}

# --- scenarios with an L2 kernel of their own (scenario file l2-kernel) ---
#   l2-kernel  one word: a Debian kernel release ("6.1.0-56-amd64"), or an
#              installed linux-headers-* metapackage ("linux-headers-amd64",
#              Debian 12's default kernel, 6.1 LTS) naming the release its
#              headers are for. Either way the headers of that release must
#              be installed (they are, from that package), and the kernel
#              is the linux-image package of the same version.
# The kernel package is fetched with `apt-get download` and unpacked under
# $TB_BUILD/kernels/ (nothing is installed on the host). The scenario gets
# L2 images of its own built from ITS l2-modules (that kernel's modules),
# l2-tools, l2-kmods (built against that kernel's headers) and l2-make; its
# l2-* files stay out of the default L2 image. Built only for the
# scenarios of this run; l1.sh sees them as TB_L2_KERNEL / TB_L2_INITRD
# (nested: /tb/l2/kernels/SCENARIO/{vmlinuz,initrd.img,release} in L1;
# direct and --l2-in-qemu: $TB_BUILD/l2-kernels/SCENARIO/). l2-disk is not
# supported for such a scenario.
declare -gA TB_L2K_KERNEL=() TB_L2K_INITRD=() TB_L2K_RELEASE=()
TB_L2K_KEYS=""

# tb_l2_kernel_release SPEC : sets TB_KREL, the release SPEC names.
tb_l2_kernel_release() {
    local spec=$1
    TB_KREL=""
    case $spec in
    linux-headers-*)
        tb_ensure_packages "$spec"
        TB_KREL=$(dpkg-query -W -f='${Depends}\n' "$spec" | tr ',' '\n' |
            sed -n 's/^ *linux-headers-\([0-9][^ ]*\).*/\1/p' | head -n 1)
        [[ -n $TB_KREL ]] || tb_die "$TB_EXIT_SETUP" "l2-kernel $spec: that package depends on no linux-headers-<release>"
        ;;
    *) TB_KREL=$spec ;;
    esac
    [[ $TB_KREL =~ ^[0-9]+\.[0-9]+[A-Za-z0-9.+~_-]*$ ]] ||
        tb_die "$TB_EXIT_SETUP" "l2-kernel: '$spec' is neither a kernel release (e.g. 6.1.0-56-amd64) nor a linux-headers-* package"
    tb_ensure_packages "linux-headers-$TB_KREL"
}

# tb_fetch_kernel RELEASE : sets TB_KROOT to an unpacked linux-image-RELEASE
# of the installed headers' version (so that modules built against those
# headers load), with modules.dep (the package leaves depmod to its
# postinst). Cached by release and version; the 2 newest are kept.
tb_fetch_kernel() {
    local rel=$1 ver root tmp deb
    ver=$(dpkg-query -W -f='${Version}' "linux-headers-$rel" 2>/dev/null) ||
        tb_die "$TB_EXIT_SETUP" "linux-headers-$rel is not installed"
    root=$TB_BUILD/kernels/${rel}_$ver
    TB_KROOT=$root
    [[ -f $root/.unpacked ]] && return 0
    mkdir -p "$TB_BUILD/kernels"
    tmp=$(mktemp -d "$TB_BUILD/kernels/.fetch.XXXXXX")
    tb_msg "fetching linux-image-$rel=$ver for an L2 (apt-get download; unpacked, not installed)"
    if ! (cd "$tmp" && apt-get download -q "linux-image-$rel=$ver") >"$tmp/download.log" 2>&1; then
        apt-get update -q >>"$tmp/download.log" 2>&1 || true
        (cd "$tmp" && apt-get download -q "linux-image-$rel=$ver") >>"$tmp/download.log" 2>&1 ||
            tb_die "$TB_EXIT_SETUP" "apt-get download linux-image-$rel=$ver failed (if the archive has moved on, upgrade the headers: apt-get install linux-headers-amd64): $(tail -n 3 "$tmp/download.log")"
    fi
    deb=$(find "$tmp" -maxdepth 1 -name '*.deb' | head -n 1)
    dpkg-deb -x "$deb" "$tmp/root" || tb_die "$TB_EXIT_SETUP" "dpkg-deb -x $deb failed"
    [[ -f $tmp/root/boot/vmlinuz-$rel && -d $tmp/root/lib/modules/$rel ]] ||
        tb_die "$TB_EXIT_SETUP" "$deb has no boot/vmlinuz-$rel or lib/modules/$rel"
    depmod -b "$tmp/root" "$rel" || tb_die "$TB_EXIT_SETUP" "depmod failed for the unpacked $rel"
    rm -rf "$root"
    mv "$tmp/root" "$root"
    rm -rf "$tmp"
    touch "$root/.unpacked"
    # shellcheck disable=SC2012 # names are ours: RELEASE_VERSION
    ls -1dt "$TB_BUILD"/kernels/*/ 2>/dev/null | tail -n +3 | xargs -r rm -rf --
}

tb_build_l2_kernel_image() { # SCENARIO
    local s=$1 spec kroot dir
    spec=$(tb_scenario_spec "$s" l2-kernel | head -n 1)
    [[ -n $spec ]] || tb_die "$TB_EXIT_SETUP" "scenario $s: empty l2-kernel file"
    tb_l2_kernel_release "$spec"
    tb_fetch_kernel "$TB_KREL"
    kroot=$TB_KROOT
    TB_MODROOT=$kroot tb_make_l2_base "l2k-base-$s" "$TB_KREL" \
        "$(tb_scenario_spec "$s" l2-modules)" "$(tb_scenario_spec "$s" l2-tools)" "kernel ${kroot##*/}"
    tb_make_l2_initrd "l2k-initrd-$s" "$TB_MADE" "$TB_MADE_KEY" "$TB_KREL" \
        "$(tb_scenario_spec "$s" l2-kmods)" "$(tb_scenario_spec "$s" l2-make)"
    dir=$TB_BUILD/l2-kernels/$s
    mkdir -p "$dir"
    ln -sfn "$kroot/boot/vmlinuz-$TB_KREL" "$dir/vmlinuz"
    ln -sfn "$TB_MADE" "$dir/initrd.img"
    printf '%s\n' "$TB_KREL" >"$dir/release"
    TB_L2K_KERNEL[$s]=$dir/vmlinuz
    TB_L2K_INITRD[$s]=$dir/initrd.img
    TB_L2K_RELEASE[$s]=$TB_KREL
    TB_L2K_KEYS+="$s:${kroot##*/}:$TB_MADE_KEY "
    tb_msg "scenario $s: L2 kernel $TB_KREL ($(basename "$TB_MADE"))"
}

# Scenarios of this run (SCENARIOS, set by scripts/testbed.sh) with an
# l2-kernel file.
tb_build_l2_kernels() {
    local s
    TB_L2K_KERNEL=() TB_L2K_INITRD=() TB_L2K_RELEASE=()
    TB_L2K_KEYS=""
    for s in ${SCENARIOS[@]+"${SCENARIOS[@]}"}; do
        [[ -f $TB_ITEST/scenarios/$s/l2-kernel && -z ${TB_L2K_KERNEL[$s]:-} ]] || continue
        tb_build_l2_kernel_image "$s"
    done
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
        if [[ -n $TB_L2K_KEYS ]]; then printf 'l2-kernels %s\n' "$TB_L2K_KEYS"; fi
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
    for n in "${!TB_L2K_KERNEL[@]}"; do
        install -D -m 0644 "${TB_L2K_KERNEL[$n]}" "$stage/tb/l2/kernels/$n/vmlinuz"
        install -D -m 0644 "${TB_L2K_INITRD[$n]}" "$stage/tb/l2/kernels/$n/initrd.img"
        printf '%s\n' "${TB_L2K_RELEASE[$n]}" >"$stage/tb/l2/kernels/$n/release"
    done
    tb_cpio "$stage" "$out.overlay"
    cat "$TB_L1_BASE" "$out.overlay" >"$out.tmp"
    rm -f "$out.overlay"
    mv -f "$out.tmp" "$out"
    rm -rf "$stage"
    tb_cache_prune l1-initrd
}
