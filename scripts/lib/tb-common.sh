# shellcheck shell=bash
# Host-side helpers for scripts/testbed.sh: logging, packages, kernel lookup,
# copying ELF binaries with their shared libraries, kernel modules.
# Sourced, never executed.

# Exit codes of scripts/testbed.sh (documented in docs/testbed.md).
# shellcheck disable=SC2034 # used by the scripts that source this file
readonly TB_EXIT_OK=0
readonly TB_EXIT_SCENARIO=1   # a scenario failed (or was skipped)
readonly TB_EXIT_USAGE=2      # bad command line / unknown scenario
readonly TB_EXIT_SETUP=3      # packages, image build, QEMU could not start
readonly TB_EXIT_L1=4         # L1-level failure: L1 panic, QEMU died, timeout

tb_msg() { printf '[testbed] %s\n' "$*" >&2; }
tb_warn() { printf '[testbed] WARNING: %s\n' "$*" >&2; }
tb_die() {
    local code=$1
    shift
    printf '[testbed] ERROR: %s\n' "$*" >&2
    exit "$code"
}

# Milliseconds since an arbitrary point (monotonic enough for durations).
tb_host_ms() {
    local s
    s=$(date +%s%N)
    printf '%s\n' "$((s / 1000000))"
}

tb_fmt_secs() { # ms -> "12.3"
    local ms=$1
    printf '%d.%d' "$((ms / 1000))" "$(((ms % 1000) / 100))"
}

# --- packages --------------------------------------------------------------

# tb_pkg_missing PKG... : prints the packages that are not installed.
tb_pkg_missing() {
    local p st
    for p in "$@"; do
        st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
        [[ $st == installed ]] || printf '%s\n' "$p"
    done
}

# tb_ensure_packages PKG... : apt-get install whatever is missing.
tb_ensure_packages() {
    local missing
    missing=$(tb_pkg_missing "$@")
    [[ -z $missing ]] && return 0
    tb_msg "installing missing packages: ${missing//$'\n'/ }"
    [[ $(id -u) -eq 0 ]] || tb_die "$TB_EXIT_SETUP" "need root to install packages"
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086
    if ! apt-get install -y -q --no-install-recommends $missing >&2; then
        apt-get update -q >&2 || true
        # shellcheck disable=SC2086
        apt-get install -y -q --no-install-recommends $missing >&2 ||
            tb_die "$TB_EXIT_SETUP" "apt-get install failed for: $missing"
    fi
}

tb_pkg_version() {
    dpkg-query -W -f='${Package}=${Version}\n' "$1" 2>/dev/null || echo "$1=none"
}

# --- kernel ----------------------------------------------------------------

# Prints the newest installed 6.12 kernel version (e.g. 6.12.117+deb12-amd64).
tb_kernel_version() {
    local f best=""
    for f in /boot/vmlinuz-6.12*; do
        [[ -e $f ]] || continue
        [[ -d /lib/modules/${f#/boot/vmlinuz-} ]] || continue
        best=$(printf '%s\n%s\n' "$best" "${f#/boot/vmlinuz-}" | sed '/^$/d' | sort -V | tail -n 1)
    done
    [[ -n $best ]] || return 1
    printf '%s\n' "$best"
}

# --- ELF binaries ----------------------------------------------------------

# tb_is_static FILE : true when FILE needs no dynamic loader.
tb_is_static() {
    local out
    out=$(LC_ALL=C ldd "$1" 2>&1 || true)
    [[ $out == *"not a dynamic executable"* || $out == *"statically linked"* ]]
}

# tb_copy_elf SRC ROOT [DEST] : copy SRC into staging ROOT at DEST (default:
# the same absolute path as SRC), plus every shared library ldd lists and
# the program interpreter, at their absolute paths.
tb_copy_elf() {
    local src=$1 root=$2 dest=${3:-$1} line lib
    install -D -m 0755 "$src" "$root$dest"
    tb_is_static "$src" && return 0
    while IFS= read -r line; do
        lib=""
        case $line in
        *"=> not found"*) tb_die "$TB_EXIT_SETUP" "$src: missing library: $line" ;;
        *"=> /"*)
            lib=${line#*=> }
            lib=${lib%% (*}
            ;;
        /*)
            lib=${line%% (*}
            lib=${lib#"${lib%%[![:space:]]*}"}
            ;;
        [[:space:]]/*)
            lib=${line#"${line%%[![:space:]]*}"}
            lib=${lib%% (*}
            ;;
        esac
        [[ -n $lib && -e $lib ]] || continue
        [[ -e $root$lib ]] || install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
    done < <(LC_ALL=C ldd "$src")
}

# --- busybox ---------------------------------------------------------------

# tb_stage_busybox ROOT : static busybox in ROOT/bin with a symlink per applet.
tb_stage_busybox() {
    local root=$1 bb=/bin/busybox applet
    tb_is_static "$bb" || tb_die "$TB_EXIT_SETUP" "$bb is not static (install busybox-static)"
    install -D -m 0755 "$bb" "$root/bin/busybox"
    mkdir -p "$root/sbin" "$root/usr/bin" "$root/usr/sbin"
    while IFS= read -r applet; do
        [[ -n $applet && $applet != busybox ]] || continue
        [[ -e $root/bin/$applet ]] || ln -s busybox "$root/bin/$applet"
    done < <("$bb" --list)
}

# tb_stage_skeleton ROOT : directories and the few device nodes the kernel
# needs before init mounts devtmpfs.
tb_stage_skeleton() {
    local root=$1
    mkdir -p "$root"/{dev,proc,sys,tmp,run,mnt,root,etc,tb/bin}
    chmod 1777 "$root/tmp"
    [[ -e $root/dev/console ]] || mknod -m 600 "$root/dev/console" c 5 1 2>/dev/null || true
    [[ -e $root/dev/null ]] || mknod -m 666 "$root/dev/null" c 1 3 2>/dev/null || true
    printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
    printf 'root:x:0:\n' >"$root/etc/group"
}

# --- kernel modules --------------------------------------------------------

# The kernel module functions below read /lib/modules/KVER of the host, or
# of an unpacked kernel package when TB_MODROOT names its root (a kernel that
# is not installed here: scenario file l2-kernel, see tb-images.sh).

# tb_module_path KVER NAME : prints the modules.dep path of module NAME
# (dashes and underscores are equivalent), nothing when it is built in.
tb_module_path() {
    local kver=$1 name=${2//-/_} dir=${TB_MODROOT:-}/lib/modules/$1
    if awk -v n="$name" '{ b=$0; sub(/.*\//, "", b); sub(/\.ko.*/, "", b); gsub(/-/, "_", b); if (b == n) f=1 } END { exit !f }' "$dir/modules.builtin" 2>/dev/null; then
        return 0
    fi
    awk -F: -v n="$name" '{ b=$1; sub(/.*\//, "", b); sub(/\.ko.*/, "", b); gsub(/-/, "_", b); if (b == n) { print $1; exit } }' "$dir/modules.dep"
}

# tb_module_closure KVER PATH : prints PATH's dependencies in load order, then PATH.
tb_module_closure() {
    local kver=$1 path=$2 deps d
    deps=$(awk -F: -v p="$path" '$1 == p { print $2; exit }' "${TB_MODROOT:-}/lib/modules/$kver/modules.dep")
    # modules.dep lists the deepest dependency last: load in reverse order.
    for d in $deps; do printf '%s\n' "$d"; done | tac
    printf '%s\n' "$path"
}

# tb_stage_modules KVER ROOT SPECFILE : SPECFILE has "name [params...]" lines.
# Decompresses each module and its dependencies into ROOT/lib/modules/KVER,
# runs depmod there (so busybox modprobe works) and writes
# ROOT/lib/modules/KVER/tb-load: "relative/path.ko [params]" in load order.
tb_stage_modules() {
    local kver=$1 root=$2 spec=$3 mdir=${TB_MODROOT:-}/lib/modules/$1 name params path p dst
    local seen=" "
    local out=$root/lib/modules/$kver
    mkdir -p "$out"
    : >"$out/tb-load"
    [[ -s $spec ]] || return 0
    while read -r name params; do
        [[ -n $name && $name != \#* ]] || continue
        path=$(tb_module_path "$kver" "$name")
        if [[ -z $path ]]; then
            if grep -q "/${name//_/[-_]}\.ko" "$mdir/modules.builtin" 2>/dev/null; then
                tb_msg "module $name is built into $kver; nothing to pack"
                continue
            fi
            tb_die "$TB_EXIT_SETUP" "kernel module '$name' not found for $kver"
        fi
        while IFS= read -r p; do
            [[ $seen == *" $p "* ]] && continue
            seen+="$p "
            dst=$out/${p%.xz}
            dst=${dst%.zst}
            dst=${dst%.gz}
            mkdir -p "$(dirname "$dst")"
            case $p in
            *.xz) xz -dc "$mdir/$p" >"$dst" ;;
            *.zst) zstd -q -dc "$mdir/$p" >"$dst" ;;
            *.gz) gzip -dc "$mdir/$p" >"$dst" ;;
            *) cp "$mdir/$p" "$dst" ;;
            esac
            if [[ $p == "$path" && $params == noload ]]; then
                : # packed for the scenario to load itself (modprobe NAME)
            elif [[ $p == "$path" ]]; then
                printf '%s %s\n' "${dst#"$out"/}" "$params" >>"$out/tb-load"
            else
                printf '%s\n' "${dst#"$out"/}" >>"$out/tb-load"
            fi
        done < <(tb_module_closure "$kver" "$path")
    done <"$spec"
    cp "$mdir"/modules.builtin* "$mdir/modules.order" "$out/" 2>/dev/null || true
    depmod -b "$root" "$kver" 2>/dev/null || tb_warn "depmod failed for staged modules (modprobe may not work)"
}

# --- cpio ------------------------------------------------------------------

# tb_cpio DIR OUT : newc archive of DIR, owned by root, uncompressed (the
# kernel unpacks uncompressed archives fastest under TCG).
tb_cpio() {
    local dir=$1 out=$2
    (cd "$dir" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >"$out.tmp"
    mv -f "$out.tmp" "$out"
}

# tb_hash_files FILE... : one sha256 over names and contents.
tb_hash_files() {
    local f
    for f in "$@"; do
        printf '%s\n' "$f"
        if [[ -f $f ]]; then sha256sum <"$f"; else echo missing; fi
    done | sha256sum | cut -c1-16
}
