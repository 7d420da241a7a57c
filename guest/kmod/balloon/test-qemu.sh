#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# End-to-end test of demeter_balloon.ko against QEMU's virtio-balloon
# (no HETERO_MEM there: this exercises the FMem tier, the shared tier code,
# stats, DEFLATE_ON_OOM and unload).  Plain TCG at L0, no nesting.
#
# Guest: Debian 6.12 kernel, busybox initramfs, 2 NUMA nodes
#   node 0: 2 vCPUs + NODE0_MB, node 1: memory-only NODE1_MB.
# The host drives the balloon over QMP and runs guest commands over the
# serial console.  Prints PASS/FAIL lines and "N passed, M failed";
# exits 0 only if nothing failed (77 = skipped: a prerequisite is missing).
#
# Usage: guest/kmod/balloon/test-qemu.sh [--no-build]
# Env:   KVER (default: newest installed 6.12), KDIR, QEMU, TIMEOUT_BOOT
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
WORK=$ROOT/build/balloon-dev
KVER=${KVER:-$(ls -d /lib/modules/6.12.*/build 2>/dev/null | sort -V | tail -n 1 | cut -d/ -f4)}
KDIR=${KDIR:-/lib/modules/$KVER/build}
KERNEL=/boot/vmlinuz-$KVER
QEMU=${QEMU:-qemu-system-x86_64}
BUSYBOX=${BUSYBOX:-/bin/busybox}
NODE0_MB=${NODE0_MB:-1024}
NODE1_MB=${NODE1_MB:-512}
TIMEOUT_BOOT=${TIMEOUT_BOOT:-180}

skip() { echo "SKIP: $*"; echo "0 passed, 0 failed"; exit 77; }
[ -n "$KVER" ] && [ -r "$KERNEL" ] || skip "no readable 6.12 kernel in /boot"
command -v "$QEMU" >/dev/null || skip "no $QEMU"
command -v python3 >/dev/null || skip "no python3"
command -v cpio >/dev/null || skip "no cpio"
file -L "$BUSYBOX" 2>/dev/null | grep -q 'statically linked' || skip "no static busybox at $BUSYBOX"

if [ "${1:-}" != "--no-build" ]; then
	make -s -C "$HERE" KDIR="$KDIR" >/dev/null
fi
[ -r "$HERE/demeter_balloon.ko" ] || { echo "FAIL: build"; echo "0 passed, 1 failed"; exit 1; }

# ---- initramfs ------------------------------------------------------------
mkdir -p "$WORK"
STAGE=$(mktemp -d "$WORK/stage.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE"/{bin,dev,proc,sys,tmp}
cp "$BUSYBOX" "$STAGE/bin/busybox"
cp "$HERE/demeter_balloon.ko" "$STAGE/demeter_balloon.ko"
mknod "$STAGE/dev/console" c 5 1
mknod "$STAGE/dev/null" c 1 3
cat > "$STAGE/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
stty -echo 2>/dev/null
# Free kB of node $1.
nf() { awk '/MemFree/ {print $4}' /sys/devices/system/node/node$1/meminfo; }
# Free kB of node $1 including the per-CPU free lists (which MemFree omits).
nfp() { awk -v n="$1," '/^Node/ {on = ($2 == n)} on && $1 == "pages" && $2 == "free" {s += $3} on && $1 == "count:" {s += $2} END {print s * 4}' /proc/zoneinfo; }
echo "@@READY"
# Command loop: one shell command per line, output, then "@@END <rc>".
while IFS= read -r line; do
	eval "$line" 2>&1
	echo "@@END $?"
done
poweroff -f
EOF
chmod +x "$STAGE/init"
(cd "$STAGE" && find . | cpio -o -H newc --quiet | gzip -1) > "$WORK/initramfs.cpio.gz"

# ---- test driver ------------------------------------------------------------
python3 - "$QEMU" "$KERNEL" "$WORK" "$NODE0_MB" "$NODE1_MB" "$TIMEOUT_BOOT" <<'PYEOF'
import json, os, queue, re, socket, subprocess, sys, threading, time

qemu, kernel, work, n0mb, n1mb, tboot = sys.argv[1:7]
n0mb, n1mb, tboot = int(n0mb), int(n1mb), int(tboot)
ram = (n0mb + n1mb) << 20
MiB = 1 << 20
passed = failed = 0

def check(ok, name):
    global passed, failed
    if ok:
        passed += 1
        print("PASS: " + name, flush=True)
    else:
        failed += 1
        print("FAIL: " + name, flush=True)
    return ok

def finish(code=None):
    print("%d passed, %d failed" % (passed, failed), flush=True)
    try:
        proc.kill()
        proc.wait(timeout=10)
    except Exception:
        pass
    try:
        os.unlink(qmp_path)
    except OSError:
        pass
    sys.exit(code if code is not None else (0 if failed == 0 else 1))

qmp_path = os.path.join(work, "qmp-%d.sock" % os.getpid())
log_path = os.path.join(work, "console.log")
cmd = [qemu, "-accel", "tcg,thread=multi", "-M", "pc", "-cpu", "qemu64",
       "-smp", "2", "-m", "%dM" % (n0mb + n1mb),
       "-object", "memory-backend-ram,id=m0,size=%dM" % n0mb,
       "-object", "memory-backend-ram,id=m1,size=%dM" % n1mb,
       "-numa", "node,nodeid=0,cpus=0-1,memdev=m0",
       "-numa", "node,nodeid=1,memdev=m1",
       "-device", "virtio-balloon-pci,id=b0,deflate-on-oom=on",
       "-nodefaults", "-display", "none", "-serial", "stdio",
       "-monitor", "none", "-qmp", "unix:%s,server=on,wait=off" % qmp_path,
       "-no-reboot", "-kernel", kernel,
       "-initrd", os.path.join(work, "initramfs.cpio.gz"),
       "-append", "console=ttyS0 quiet loglevel=3 panic=-1"]
proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT)
lines = queue.Queue()
logf = open(log_path, "w")

def reader():
    buf = b""
    while True:
        b = proc.stdout.read1(4096) if hasattr(proc.stdout, "read1") else proc.stdout.read(1)
        if not b:
            lines.put(None)
            return
        buf += b
        while b"\n" in buf:
            l, buf = buf.split(b"\n", 1)
            s = l.decode(errors="replace").rstrip("\r")
            logf.write(s + "\n"); logf.flush()
            lines.put(s)
threading.Thread(target=reader, daemon=True).start()

def wait_line(pred, timeout):
    end = time.time() + timeout
    while time.time() < end:
        try:
            l = lines.get(timeout=max(0.05, end - time.time()))
        except queue.Empty:
            break
        if l is None:
            return None
        if pred(l):
            return l
    return None

def guest(c, timeout=60):
    """Run a shell command in the guest; returns (rc, output)."""
    proc.stdin.write((c + "\n").encode()); proc.stdin.flush()
    out, end = [], time.time() + timeout
    while time.time() < end:
        try:
            l = lines.get(timeout=max(0.05, end - time.time()))
        except queue.Empty:
            break
        if l is None:
            break
        m = re.match(r"^@@END (\d+)$", l)
        if m:
            return int(m.group(1)), "\n".join(out)
        out.append(l)
    print("FAIL: guest command timed out: " + c, flush=True)
    global failed
    failed += 1
    finish()

def gval(c):
    rc, out = guest(c)
    try:
        return int(out.strip().splitlines()[-1])
    except Exception:
        return None

class Qmp:
    def __init__(self, path):
        end = time.time() + 30
        while True:
            try:
                self.s = socket.socket(socket.AF_UNIX); self.s.connect(path); break
            except OSError:
                if time.time() > end: raise
                time.sleep(0.2)
        self.f = self.s.makefile("rwb")
        self.read()
        self.cmd("qmp_capabilities")
    def read(self):
        while True:
            m = json.loads(self.f.readline())
            if "event" not in m:
                return m
    def cmd(self, name, **args):
        self.f.write((json.dumps({"execute": name, "arguments": args}) + "\n").encode())
        self.f.flush()
        r = self.read()
        if "error" in r:
            raise RuntimeError("%s: %s" % (name, r["error"]))
        return r["return"]

B = "/sys/kernel/demeter_balloon"
def free_kb():
    # buddy free + per-CPU lists: freed pages may sit on the latter.
    return gval("nfp 0"), gval("nfp 1")

def meminfo():
    rc, out = guest("grep -E '^(MemFree|Cached|Shmem|Slab|AnonPages|PageTables|Percpu|KernelStack|VmallocUsed|Buffers):' /proc/meminfo")
    return " ".join("%s=%s" % (l.split()[0].rstrip(":"), l.split()[1]) for l in out.splitlines() if len(l.split()) > 1)

def wait_size(target_pages, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        s = gval("cat %s/fmem/size_pages" % B)
        if s == target_pages:
            return True, time.time()
        time.sleep(0.5)
    return False, time.time()

t0 = time.time()
if not check(wait_line(lambda l: l == "@@READY", tboot) is not None,
             "guest booted to the initramfs shell"):
    finish()
print("INFO: boot %.1f s" % (time.time() - t0), flush=True)
qmp = Qmp(qmp_path)

# -- load with the self-check ------------------------------------------------
rc, out = guest("lsmod | grep -c '^virtio_balloon' || true")
check(out.strip().endswith("0"), "stock virtio_balloon is not loaded")
rc, _ = guest("insmod /demeter_balloon.ko selftest=1")
check(rc == 0, "insmod demeter_balloon.ko")
rc, out = guest("dmesg | grep 'demeter_balloon: selftest: [0-9]* passed'")
m = re.search(r"selftest: (\d+) passed, (\d+) failed", out)
check(m is not None and m.group(2) == "0" and int(m.group(1)) > 0,
      "built-in self-check: %s" % (m.group(0) if m else "no result"))
rc, out = guest("dmesg | grep 'selftest: not ok' || true")
for l in out.splitlines():
    if "not ok" in l:
        print("INFO: " + l.strip())
rc, out = guest("dmesg | grep 'FMem node'")
print("INFO: " + out.strip().split("virtio_balloon ")[-1] if out else "INFO: no probe line")
check("FMem node 0" in out and "SMem node 1" in out, "probe logs FMem node 0 and SMem node 1")

vals = {k: gval("cat %s/%s" % (B, k)) for k in
        ["hetero_mem", "deflate_on_oom", "stats_vq", "fmem/node", "smem/node",
         "fmem/active", "smem/active", "fmem/size_pages", "smem/size_pages"]}
print("INFO: sysfs " + json.dumps(vals))
check(vals["fmem/node"] == 0 and vals["smem/node"] == 1, "sysfs: tier node ids 0 / 1")
check(vals["hetero_mem"] == 0 and vals["fmem/active"] == 1 and vals["smem/active"] == 0,
      "sysfs: no HETERO_MEM from QEMU -> FMem balloon only")
check(vals["stats_vq"] == 1 and vals["deflate_on_oom"] == 1,
      "sysfs: STATS_VQ and DEFLATE_ON_OOM negotiated")
rc, out = guest("ls -l %s/fmem/size_pages; echo 1 > %s/fmem/size_pages" % (B, B))
check(rc != 0 and "-r--------" in out, "sysfs files are read-only (0400)")

# -- inflate FMem ---------------------------------------------------------------
base0, base1 = free_kb()
print("INFO: baseline meminfo kB: " + meminfo(), flush=True)
print("INFO: baseline free node0 %d kB node1 %d kB" % (base0, base1), flush=True)
X = 256
ts = time.time()
qmp.cmd("balloon", value=ram - X * MiB)
ok, te = wait_size(X * MiB // 4096)
check(ok, "FMem balloon reaches %d MiB (%d pages)" % (X, X * 256))
print("INFO: inflate %d MiB took %.1f s (TCG)" % (X, te - ts), flush=True)
f0, f1 = free_kb()
d0, d1 = (base0 - f0) // 1024, (base1 - f1) // 1024
print("INFO: after inflate free node0 %d kB (-%d MiB), node1 %d kB (-%d MiB)"
      % (f0, d0, f1, d1), flush=True)
check(abs(d0 - X) <= 8, "node 0 free memory fell by ~%d MiB (%d MiB)" % (X, d0))
check(abs(d1) <= 4, "node 1 free memory unchanged (%d MiB)" % d1)
act = qmp.cmd("query-balloon")["actual"]
check(act == ram - X * MiB, "QEMU sees actual = RAM - %d MiB (%d MiB)" % (X, act // MiB))

# -- stats --------------------------------------------------------------------
sent0 = gval("cat %s/stats_sent" % B)
qmp.cmd("qom-set", path="/machine/peripheral/b0",
        property="guest-stats-polling-interval", value=1)
# The buffer QEMU holds first may predate the inflate: wait until the guest
# has refilled it twice since polling started, then read what QEMU has.
st, end = None, time.time() + 30
while time.time() < end:
    if (gval("cat %s/stats_sent" % B) or 0) >= (sent0 or 0) + 2:
        st = qmp.cmd("qom-get", path="/machine/peripheral/b0", property="guest-stats")
        break
    time.sleep(0.5)
s = st["stats"] if st else {}
print("INFO: guest-stats " + json.dumps(s), flush=True)
check(st is not None and st.get("last-update", 0) > 0 and s.get("stat-total-memory", 0) > 0
      and s.get("stat-free-memory", 0) > 0 and s.get("stat-available-memory", 0) > 0,
      "stats arrive in QEMU (free %d MiB, total %d MiB)"
      % (s.get("stat-free-memory", 0) // MiB, s.get("stat-total-memory", 0) // MiB))
# QEMU's free-memory is MemFree (buddy only), so compare with MemFree.
g_free = ((gval("nf 0") or 0) + (gval("nf 1") or 0)) * 1024
check(abs(s.get("stat-free-memory", 0) - g_free) < 16 * MiB,
      "stats free-memory is fresh: matches the guest's free memory (%d vs %d MiB)"
      % (s.get("stat-free-memory", 0) // MiB, g_free // MiB))
n1 = gval("cat %s/stats_sent" % B); time.sleep(3); n2 = gval("cat %s/stats_sent" % B)
check(n1 is not None and n2 is not None and n2 > n1,
      "stats buffer refreshed each time the host returns it (%s -> %s)" % (n1, n2))
qmp.cmd("qom-set", path="/machine/peripheral/b0",
        property="guest-stats-polling-interval", value=0)

# -- deflate ------------------------------------------------------------------
ts = time.time()
qmp.cmd("balloon", value=ram)
ok, te = wait_size(0)
check(ok, "FMem balloon deflates to 0")
print("INFO: deflate %d MiB took %.1f s (TCG)" % (X, te - ts), flush=True)
f0, f1 = free_kb()
print("INFO: after deflate free node0 %d kB, node1 %d kB" % (f0, f1), flush=True)
print("INFO: after deflate meminfo kB: " + meminfo(), flush=True)
check(abs(f0 - base0) // 1024 <= 8, "node 0 free memory restored (%+d MiB)" % ((f0 - base0) // 1024))
check(qmp.cmd("query-balloon")["actual"] == ram, "QEMU sees the balloon empty")

# -- batching: a target that is not a multiple of 256 -----------------------
qmp.cmd("balloon", value=ram - 1000 * 4096)
ok, _ = wait_size(1000, 60)
check(ok, "odd-sized target (1000 pages) reached exactly")

# -- unload returns everything --------------------------------------------------
qmp.cmd("balloon", value=ram - 128 * MiB)
ok, _ = wait_size(128 * 256)
check(ok, "FMem balloon reaches 128 MiB before unload")
rc, _ = guest("rmmod demeter_balloon")
check(rc == 0, "rmmod while inflated")
rc, out = guest("dmesg | grep 'fmem: returned' | tail -n 1")
check("returned %d pages" % (128 * 256) in out, "unload returned all %d pages" % (128 * 256))
f0, f1 = free_kb()
check(abs(f0 - base0) // 1024 <= 8, "node 0 free memory back after unload (%+d MiB)"
      % ((f0 - base0) // 1024))
act = qmp.cmd("query-balloon")["actual"]
check(act == ram, "QEMU sees actual = RAM after unload (%d MiB)" % (act // MiB))
rc, out = guest("ls /sys/kernel/demeter_balloon 2>&1 | head -1")
check("No such file" in out, "sysfs directory removed on unload")

# -- reload: the device re-binds and the target set before load is applied --
rc, _ = guest("insmod /demeter_balloon.ko")
check(rc == 0, "re-insmod")
ok, _ = wait_size(128 * 256)
check(ok, "re-probe picks up the pending 128 MiB target")

# -- DEFLATE_ON_OOM -------------------------------------------------------------
# Inflate most of node 0, then allocate more than is left: the OOM notifier
# must give balloon pages back instead of killing the allocator.
big = min(n0mb - 160, base0 // 1024 - 120)
qmp.cmd("balloon", value=ram - big * MiB)
ok, _ = wait_size(big * 256, 180)
check(ok, "FMem balloon reaches %d MiB" % big)
guest("echo 16384 > /sys/module/demeter_balloon/parameters/oom_pages")
rc, out = guest("cat /proc/meminfo | grep MemAvailable")
print("INFO: before hog: " + out.strip(), flush=True)
hog = (n0mb + n1mb) - big + 64
rc, out = guest("dd if=/dev/zero of=/dev/null bs=%dM count=1 2>&1; echo dd_rc=$?" % hog, 300)
print("INFO: hog of %d MiB: %s" % (hog, out.strip().replace("\n", " | ")), flush=True)
freed = gval("cat %s/fmem/oom_freed_pages" % B)
size = gval("cat %s/fmem/size_pages" % B)
check("dd_rc=0" in out, "a %d MiB allocation succeeds with %d MiB ballooned" % (hog, big))
check(freed is not None and freed > 0 and size < big * 256,
      "OOM notifier gave back %s pages (balloon now %s)" % (freed, size))
time.sleep(2)
size2 = gval("cat %s/fmem/size_pages" % B)
check(size2 == size, "no re-inflation after OOM until the host asks again (%s)" % size2)
rc, out = guest("dmesg | grep -c 'Out of memory: Killed' || true")
check(out.strip().splitlines()[-1] == "0", "no process was OOM-killed")
qmp.cmd("balloon", value=ram)
ok, _ = wait_size(0)
check(ok, "deflate to 0 after OOM")
rc, _ = guest("rmmod demeter_balloon")
check(rc == 0, "final rmmod")

rc, out = guest("dmesg | grep -E 'BUG:|WARNING:|Bad page|Oops|kmemleak|Call Trace' || true")
check(out.strip() == "", "no kernel warnings" + ("" if not out.strip() else ": " + out.strip()[:300]))
finish()
PYEOF
