# shellcheck shell=bash
# What the project needs on a fresh Debian 12 machine, and how to build it.
# Sourced by scripts/test.sh, scripts/demo.sh and scripts/bench.sh.

# Debian packages for building, the testbed and the tests.
DEPS_PACKAGES=(
    build-essential pkg-config
    qemu-system-x86 busybox-static cpio numactl xz-utils zstd kmod
    linux-image-6.12-amd64 linux-headers-6.12-amd64
    linux-headers-amd64 # Debian 12's default 6.1 LTS: the guest modules must build on it
    python3-venv curl
    python3-dev # guest/python/mtp: the MTP CPython extension
    e2fsprogs # mke2fs -d: the mtp-python scenario's disk image
    pigz bzip2 sqlite3 jq git openssl perl mawk # vmmload's real-program suite
    memcached # the mtat-colo testbed scenario's LC service
)

deps_install_packages() {
    local missing=() p
    for p in "${DEPS_PACKAGES[@]}"; do
        dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed || missing+=("$p")
    done
    ((${#missing[@]} == 0)) && return 0
    echo "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q && apt-get install -y -q --no-install-recommends "${missing[@]}"
}

deps_install_rust() {
    command -v cargo >/dev/null || { echo "cargo is missing: install Rust (rustup) first"; return 1; }
    if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
        rustup component add rustfmt clippy
    fi
}

deps_install_all() {
    deps_install_packages && deps_install_rust
}

# Every end-to-end scenario scripts/test.sh runs in one L1 boot.
deps_testbed_scenarios() {
    echo "--all"
}
