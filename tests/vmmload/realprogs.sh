# shellcheck shell=bash
# Real programs (issue 12): Debian programs nobody on the project wrote, each
# run natively and under vmmload in the same directory with the same input;
# stdout, stderr, exit status and every file left in the directory must be
# identical. Sourced by scripts/test-vmmload.sh (uses BIN, WORK, PY, ok, bad).
# The packages come from scripts/lib/deps.sh.

RP=$WORK/rp
RP_TIMEOUT=${VMMLOAD_RP_TIMEOUT:-120}

# Deterministic input: text, binary data, a small tree; fixed mtimes so
# archivers that store them (tar, gzip, pigz) write identical bytes.
rp_prepare() {
	rm -rf "$RP/run" && mkdir -p "$RP/run/tree/a/b" "$RP/run/tree/c" || return 1
	"$PY" - "$RP/run" <<'EOF' || return 1
import random, sys
d = sys.argv[1]
r = random.Random(12)
words = ["alpha", "beta", "gamma", "delta", "kvm", "page", "fault", "guest", "host", "ring", "dirty", "slot"]
with open(d + "/text.txt", "w") as f:
    for i in range(20000):
        f.write(" ".join(r.choice(words) for _ in range(r.randint(1, 9))) + f" {r.randint(0, 99999)}\n")
with open(d + "/data.bin", "wb") as f:
    f.write(bytes(r.getrandbits(8) for _ in range(1 << 20)))
for n, p in enumerate(["tree/a/one.txt", "tree/a/b/two.txt", "tree/c/three.txt", "tree/top.txt"]):
    with open(d + "/" + p, "w") as f:
        f.write(("line %d of %s\n" % (n, p)) * (n * 40 + 3))
with open(d + "/records.json", "w") as f:
    f.write("[" + ",".join('{"id":%d,"name":"%s","score":%d}' % (i, r.choice(words), r.randint(0, 100)) for i in range(500)) + "]\n")
EOF
	find "$RP/run" -exec touch -h -d @1700000000 {} +
}

# rp_same NAME CMD...: runs CMD (from inside the run directory) natively and
# under vmmload; compares stdout, stderr, status and the directory trees
# (contents of every file, byte for byte; .git internals excluded: they hold
# inode numbers and times).
rp_same() {
	local name=$1 n v
	shift
	rp_prepare || {
		bad "$name: preparing input"
		return
	}
	(cd "$RP/run" && timeout "$RP_TIMEOUT" "$@" >"$RP/n.out" 2>"$RP/n.err")
	n=$?
	rm -rf "$RP/native" && mv "$RP/run" "$RP/native"
	rp_prepare || return
	(cd "$RP/run" && "$BIN" -q --timeout "$RP_TIMEOUT" -- "$@" >"$RP/v.out" 2>"$RP/v.err")
	v=$?
	if [ "$n" = "$v" ] && cmp -s "$RP/n.out" "$RP/v.out" && cmp -s "$RP/n.err" "$RP/v.err" &&
		diff -r --no-dereference --exclude=.git "$RP/native" "$RP/run" >"$RP/tree.diff" 2>&1; then
		ok "$name (status $v, $(wc -c <"$RP/v.out")+$(wc -c <"$RP/v.err") bytes out+err, files identical)"
	else
		bad "$name: native status $n, vmmload status $v"
		diff "$RP/n.out" "$RP/v.out" | head -4
		diff "$RP/n.err" "$RP/v.err" | head -4
		head -4 "$RP/tree.diff"
	fi
}

echo "== real programs against their native runs (issue 12)"
mkdir -p "$RP"
rp_same "xz -T2 compress and test" sh -c 'xz -T2 -6 -k data.bin text.txt && xz -t data.bin.xz && xz -dc text.txt.xz | md5sum'
rp_same "zstd -T2 compress and decompress" sh -c 'zstd -q -T2 -3 text.txt -o text.zst && zstd -q -d text.zst -o back.txt && cmp text.txt back.txt'
rp_same "pigz -p 2 and gzip -d" sh -c 'pigz -p 2 -k -9 text.txt data.bin && gzip -dc text.txt.gz | wc -c'
rp_same "gzip -9 and bzip2" sh -c 'gzip -9 -k text.txt && bzip2 -k data.bin && bzip2 -t data.bin.bz2'
rp_same "sort --parallel=2 -k2n" sort --parallel=2 -S 4M -t ' ' -k2,2 -k1,1 text.txt -o sorted.txt
rp_same "sqlite3 SQL script" sh -c 'sqlite3 db.sqlite <<EOF
CREATE TABLE w(word TEXT, n INTEGER);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 5000)
INSERT INTO w SELECT printf("w%03d", i % 97), i FROM c;
CREATE INDEX wi ON w(word);
SELECT word, count(*), sum(n) FROM w GROUP BY word ORDER BY 3 DESC LIMIT 5;
UPDATE w SET n = n * 2 WHERE word LIKE "w01%";
SELECT total(n) FROM w;
SELECT nope FROM w;
EOF'
rp_same "perl word count" perl -ne 'for (split) { $c{$_}++ } END { print "$_ $c{$_}\n" for sort { $c{$b} <=> $c{$a} || $a cmp $b } keys %c }' text.txt
rp_same "python3 threads (ThreadPoolExecutor)" "$PY" -c '
import concurrent.futures, hashlib
def h(i):
    return hashlib.sha256(open("data.bin", "rb").read()[i * 4096:(i + 1) * 4096] * 50).hexdigest()[:12]
with concurrent.futures.ThreadPoolExecutor(4) as ex:
    print(list(ex.map(h, range(16))))'
rp_same "python3 re-execs itself through /proc/self/exe" "$PY" -c '
import os, subprocess, sys
print(os.readlink("/proc/self/exe") == os.path.realpath(sys.executable))
print(subprocess.run(["/proc/self/exe", "-c", "print(6 * 7)"], capture_output=True).stdout)'
rp_same "git init, add, commit, log" env GIT_AUTHOR_NAME=A GIT_AUTHOR_EMAIL=a@example.org GIT_COMMITTER_NAME=C \
	GIT_COMMITTER_EMAIL=c@example.org GIT_AUTHOR_DATE='2020-01-02T03:04:05Z' GIT_COMMITTER_DATE='2020-01-02T03:04:05Z' \
	HOME=/nonexistent GIT_CONFIG_NOSYSTEM=1 sh -c 'git init -q -b main repo && cp -r tree/. repo/ && cd repo &&
	git add -A && git commit -q -m first && echo more >>top.txt && git commit -q -am second &&
	git log --format="%H %an %s" && git show --stat HEAD~1 | tail -3 && git cat-file -p HEAD^{tree}'
rp_same "tar c and x" sh -c 'tar --sort=name --owner=0 --group=0 --numeric-owner -cf t.tar tree && mkdir x && tar -xf t.tar -C x && tar -tvf t.tar'
rp_same "find and du" sh -c 'find . -type f -name "*.txt" | sort; du -ab tree | sort -k2'
rp_same "openssl dgst and enc with a fixed key" sh -c 'openssl dgst -sha256 data.bin text.txt &&
	openssl enc -aes-256-cbc -K 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f -iv 0f0e0d0c0b0a09080706050403020100 -in text.txt -out text.enc &&
	openssl enc -d -aes-256-cbc -K 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f -iv 0f0e0d0c0b0a09080706050403020100 -in text.enc | sha1sum'
rp_same "shell pipeline" sh -c 'cat text.txt | tr " " "\n" | grep -v "^[0-9]*$" | sort | uniq -c | sort -rn | head -5; exit 3'
rp_same "busybox sh -c with applets" busybox sh -c 'ls tree | wc -l; echo $((6 * 7)); cat tree/top.txt | head -2; busybox md5sum text.txt'
ln -sf "$(command -v busybox)" "$RP/wc"
rp_same "busybox through an applet symlink (argv[0] picks the applet)" "$RP/wc" -l text.txt
rp_same "awk, sed, grep -r, diff" sh -c 'awk "{ s += \$NF } END { print NR, s }" text.txt; sed -n "s/alpha/ALPHA/gp" text.txt | head -3;
	grep -rn "line 2" tree | sort; sed s/line/LINE/ tree/top.txt >top2.txt; diff tree/top.txt top2.txt | head -4; exit 0'
rp_same "jq" jq -c '[.[] | select(.score > 90) | {id, name}] | length, (map(.score) | add)' records.json
rp_same "missing file: stderr and status" sh -c 'cat nothere; ls nothere2; grep x nothere3'
rp_same "sha256sum, wc, cut, paste, uniq" sh -c 'sha256sum data.bin text.txt; wc text.txt; cut -d" " -f1 text.txt | sort | uniq -c | paste -s -d" "'
rp_same "python3 multiprocessing.Pool, Value and Queue (shared semaphores)" "$PY" -c '
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
