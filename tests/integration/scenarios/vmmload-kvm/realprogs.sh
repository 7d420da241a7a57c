# shellcheck shell=sh
# The real-program suite of tests/vmmload/realprogs.sh on standard KVM
# (sourced by l1.sh): Debian programs packed from the build host (l1-tools),
# each run natively in L1 and under vmmload in a fresh copy of the same input
# directory; stdout, stderr, exit status and every file left behind must be
# identical. Inputs are small (L1 runs under TCG). Debian's python3.11 with
# its standard library comes as a tar built at L0 by build-python.sh
# (l2-disk entry vlpython) and is unpacked into L1's root here.

RP=/tmp/vl-rp
RP_SH=/usr/bin/dash
RP_PATH=/usr/bin:/bin:/sbin:/tb/bin
RP_VL="$TB_VMMLOAD -q --mem-mib 1024 --timeout 240"

# One input tree, generated once; each run gets a copy with the same mtimes
# (archivers store them).
rp_template() {
    rm -rf "$RP" && mkdir -p "$RP/tmpl/tree/a/b" "$RP/tmpl/tree/c" || return 1
    awk 'BEGIN {
        srand(12)
        split("alpha beta gamma delta kvm page fault guest host ring dirty slot", w, " ")
        for (i = 0; i < 3000; i++) {
            n = int(rand() * 9) + 1; l = ""
            for (j = 0; j < n; j++) l = l w[int(rand() * 12) + 1] " "
            print l int(rand() * 100000)
        }
    }' >"$RP/tmpl/text.txt" || return 1
    head -c 262144 /dev/urandom >"$RP/tmpl/data.bin" || return 1
    for p in tree/a/one.txt tree/a/b/two.txt tree/c/three.txt tree/top.txt; do
        awk -v p="$p" 'BEGIN { for (i = 0; i < 40; i++) print "line " i " of " p }' >"$RP/tmpl/$p"
    done
    awk 'BEGIN { srand(3); printf "["; for (i = 0; i < 200; i++) printf "%s{\"id\":%d,\"score\":%d}", (i ? "," : ""), i, int(rand() * 100); print "]" }' \
        >"$RP/tmpl/records.json"
    find "$RP/tmpl" -exec touch -h -d '2023-11-14 22:13:20' {} +
}

rp_copy() { rm -rf "$RP/run" && cp -a "$RP/tmpl" "$RP/run"; }

# rp_same NAME CMD...: as rp_same in tests/vmmload/realprogs.sh.
rp_same() {
    _n=$1
    shift
    # An absolute path: busybox's timeout (and its `command -v`) would pick
    # its own applet for a bare name (sort, xz) where vmmload runs the
    # Debian program found on PATH.
    _p=$1
    case $1 in
    */*) ;;
    *)
        for _d in $(echo "$RP_PATH" | tr ':' ' '); do
            [ -x "$_d/$1" ] && { _p=$_d/$1; break; }
        done
        ;;
    esac
    [ -x "$_p" ] || { tb_fail "rp-$_n" "$1 not found on $RP_PATH"; return; }
    shift
    set -- "$_p" "$@"
    rp_copy || { tb_fail "rp-$_n" "copying the input"; return; }
    (cd "$RP/run" && PATH=$RP_PATH timeout 240 "$@" >"$RP/n.out" 2>"$RP/n.err")
    _rn=$?
    # A case that must succeed natively (RP_MUST_SUCCEED=1): identical
    # failures in both runs (a missing module, no /dev/shm) prove nothing.
    if [ "${RP_MUST_SUCCEED:-0}" = 1 ] && [ "$_rn" != 0 ]; then
        mkdir -p "$TB_OUT/rp-$_n" && cp "$RP"/n.* "$TB_OUT/rp-$_n/" 2>/dev/null
        tb_fail "rp-$_n" "native run failed (status $_rn): $(head -c 200 "$RP/n.err" | tr '\n' '|')"
        return
    fi
    rm -rf "$RP/native" && mv "$RP/run" "$RP/native"
    rp_copy || return
    # shellcheck disable=SC2086 # RP_VL is a word list
    (cd "$RP/run" && PATH=$RP_PATH $RP_VL -- "$@" >"$RP/v.out" 2>"$RP/v.err")
    _rv=$?
    if [ "$_rn" = "$_rv" ] && cmp -s "$RP/n.out" "$RP/v.out" && cmp -s "$RP/n.err" "$RP/v.err" &&
        /usr/bin/diff -r --no-dereference --exclude=.git "$RP/native" "$RP/run" >"$RP/tree.diff" 2>&1; then
        tb_pass "rp-$_n" "status $_rv, $(wc -c <"$RP/v.out")+$(wc -c <"$RP/v.err") bytes out+err, files identical"
    else
        mkdir -p "$TB_OUT/rp-$_n" && cp "$RP"/n.* "$RP"/v.* "$RP/tree.diff" "$TB_OUT/rp-$_n/" 2>/dev/null
        tb_fail "rp-$_n" "native status $_rn, vmmload status $_rv; stderr: $(head -c 200 "$RP/v.err" | tr '\n' '|')"
    fi
}

rp_template || tb_fail rp-input "generating the input tree"
rp_same xz-T2 "$RP_SH" -c 'xz -T2 -3 --block-size=64KiB -k data.bin text.txt && xz -t data.bin.xz && xz -dc text.txt.xz | md5sum'
rp_same zstd-T2 "$RP_SH" -c 'zstd -q -T2 -3 text.txt -o text.zst && zstd -q -d text.zst -o back.txt && cmp text.txt back.txt'
rp_same pigz "$RP_SH" -c 'pigz -p 2 -k -9 text.txt data.bin && gzip -dc text.txt.gz | wc -c'
rp_same gzip-bzip2 "$RP_SH" -c 'gzip -9 -k text.txt && bzip2 -k data.bin && bzip2 -t data.bin.bz2'
rp_same sort-parallel sort --parallel=2 -S 1M -t ' ' -k2,2 -k1,1 text.txt -o sorted.txt
rp_same sqlite3 "$RP_SH" -c 'sqlite3 db.sqlite <<EOF
CREATE TABLE w(word TEXT, n INTEGER);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 2000)
INSERT INTO w SELECT printf("w%03d", i % 97), i FROM c;
CREATE INDEX wi ON w(word);
SELECT word, count(*), sum(n) FROM w GROUP BY word ORDER BY 3 DESC LIMIT 5;
SELECT nope FROM w;
EOF'
rp_same perl perl -ne 'for (split) { $c{$_}++ } END { print "$_ $c{$_}\n" for sort { $c{$b} <=> $c{$a} || $a cmp $b } keys %c }' text.txt
rp_same git env GIT_AUTHOR_NAME=A GIT_AUTHOR_EMAIL=a@example.org GIT_COMMITTER_NAME=C \
    GIT_COMMITTER_EMAIL=c@example.org GIT_AUTHOR_DATE='2020-01-02T03:04:05Z' GIT_COMMITTER_DATE='2020-01-02T03:04:05Z' \
    HOME=/nonexistent GIT_CONFIG_NOSYSTEM=1 "$RP_SH" -c 'git init -q -b main repo && cp -r tree/. repo/ && cd repo &&
    git add -A && git commit -q -m first && echo more >>top.txt && git commit -q -am second &&
    git log --format="%H %an %s" && git cat-file -p HEAD^{tree}'
rp_same tar "$RP_SH" -c 'tar --sort=name --owner=0 --group=0 --numeric-owner -cf t.tar tree && mkdir x && tar -xf t.tar -C x && tar -tvf t.tar'
rp_same find-du "$RP_SH" -c 'find . -type f -name "*.txt" | sort; du -ab tree | sort -k2'
rp_same openssl "$RP_SH" -c 'openssl dgst -sha256 data.bin text.txt &&
    openssl enc -aes-256-cbc -K 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f -iv 0f0e0d0c0b0a09080706050403020100 -in text.txt -out text.enc &&
    openssl enc -d -aes-256-cbc -K 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f -iv 0f0e0d0c0b0a09080706050403020100 -in text.enc | sha1sum'
rp_same pipeline "$RP_SH" -c 'cat text.txt | tr " " "\n" | grep -v "^[0-9]*$" | sort | uniq -c | sort -rn | head -5; exit 3'
rp_same busybox-sh /bin/busybox sh -c 'ls tree | wc -l; echo $((6 * 7)); head -2 tree/top.txt; busybox md5sum text.txt'
ln -sf /bin/busybox "$RP/wc"
rp_same busybox-applet-link "$RP/wc" -l text.txt
rp_same awk-sed-grep-diff "$RP_SH" -c 'mawk "{ s += \$NF } END { print NR, s }" text.txt; sed -n "s/alpha/ALPHA/gp" text.txt | head -3;
    grep -rn "line 2" tree | sort; sed s/line/LINE/ tree/top.txt >top2.txt; diff tree/top.txt top2.txt | head -4; exit 0'
rp_same jq jq -c '(map(select(.score > 90)) | length), (map(.score) | add), .[7]' records.json
rp_same missing-file "$RP_SH" -c 'cat nothere; ls nothere2; grep x nothere3'
rp_same coreutils "$RP_SH" -c 'sha256sum data.bin text.txt; wc text.txt; cut -d" " -f1 text.txt | sort | uniq -c | paste -s -d" "'
# python3: threads, re-exec through /proc/self/exe, multiprocessing with
# shared semaphores in /dev/shm (as tests/vmmload/realprogs.sh).
PY=/usr/bin/python3.11
# In L1 the interpreter comes from the tar; in direct mode from the host.
[ -x "$PY" ] || [ ! -f /tb/l2/disks/vlpython.img ] ||
    /usr/bin/tar -xf /tb/l2/disks/vlpython.img --skip-old-files -C / || tb_log "unpacking vlpython.img failed"
if [ -x "$PY" ]; then
    [ -d /dev/shm ] || mkdir -p /dev/shm
    grep -q ' /dev/shm ' /proc/mounts || mount -t tmpfs -o mode=1777 shm /dev/shm
    RP_MUST_SUCCEED=1
    rp_same python3-threads "$PY" -c '
import concurrent.futures, hashlib
def h(i):
    return hashlib.sha256(open("data.bin", "rb").read()[i * 4096:(i + 1) * 4096] * 50).hexdigest()[:12]
with concurrent.futures.ThreadPoolExecutor(4) as ex:
    print(list(ex.map(h, range(16))))'
    rp_same python3-proc-self-exe "$PY" -c '
import os, subprocess, sys
print(os.readlink("/proc/self/exe") == os.path.realpath(sys.executable))
print(subprocess.run(["/proc/self/exe", "-c", "print(6 * 7)"], capture_output=True).stdout)'
    rp_same python3-multiprocessing "$PY" -c '
import multiprocessing as mp
def sq(x):
    return x * x
def add(v, q, n):
    with v.get_lock():
        v.value += n
    q.put(n)
if __name__ == "__main__":
    with mp.Pool(2) as p:
        print(sum(p.map(sq, range(2000))), p.apply(sq, (12,)))
    v, q = mp.Value("i", 0), mp.Queue()
    ps = [mp.Process(target=add, args=(v, q, n)) for n in (1, 2, 3)]
    for x in ps: x.start()
    for x in ps: x.join()
    print(v.value, sorted(q.get() for _ in ps), [x.exitcode for x in ps])'
    RP_MUST_SUCCEED=0
else
    tb_fail rp-python3-packed "no $PY: /tb/l2/disks/vlpython.img (l2-disk vlpython) missing or not unpacked"
fi
# A write-heavy two-thread compressor with write tracking only, repeated:
# one run of the benchmark once ended with vmmload status 125 here.
RP_VL="$TB_VMMLOAD -q --mem-mib 1024 --timeout 240 --reads off"
for i in 1 2 3 4; do
    rp_same "xz-T2-writes-only-$i" xz -T2 -3 --block-size=64KiB -c data.bin
done
RP_VL="$TB_VMMLOAD -q --mem-mib 1024 --timeout 240"
rm -rf "$RP"
