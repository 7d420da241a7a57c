# mtat-colo: checks on tier-policy's decision log (decisions.jsonl, one
# JSON object per line, keys sorted as serde_json writes them).
#   awk -f check-log.awk -v pmax=UNITS -v budget=BYTES -v step_s=UNIX_S -v slo=MS FILE
# Prints "slices N", "targets TS LC BE1 BE2" per completed decision,
# "seq VM S0 S1 ..." per VM (its share, units, at the start and after
# every slice that changed it: what its VMM must have held, in order), and
# one "<check> ok ..." or "<check> FAIL ..." line per check:
#   slices-within-p-max      each slice grows and shrinks at most pmax units
#   lc-moves-first           no slice moves an LC VM after one that did not
#   committed-within-budget  Σ held after each slice's growth <= budget
#   lc-follows-step          after step_s, the first decision whose input
#                            p99 violates the SLO (the first that can see
#                            the step) or the next one raises the LC VM's
#                            target above its share: within two intervals
#                            (or keeps it, when it already holds its whole
#                            FMem tier)

function num(s, key,    r) {
    if (!match(s, "\"" key "\":-?[0-9][0-9.eE+-]*"))
        return ""
    r = substr(s, RSTART + length(key) + 3, RLENGTH - length(key) - 3)
    return r + 0
}

# entries(LIST, OUT): [["a",1],["b",2]] -> OUT["a"] = 1, ...; returns count
function entries(s, out,    n, e, name) {
    n = 0
    while (match(s, /\["[A-Za-z0-9_.-]+",[0-9]+\]/)) {
        e = substr(s, RSTART + 2, RLENGTH - 3)
        name = substr(e, 1, index(e, "\"") - 1)
        out[name] = substr(e, index(e, ",") + 1) + 0
        n++
        s = substr(s, RSTART + RLENGTH)
    }
    return n
}

# note that VM now holds S units (its sequence of shares)
function held(vm, s) {
    if (!(vm in last) || last[vm] != s) {
        seq[vm] = seq[vm] " " s
        last[vm] = s
    }
}

function fail(check, msg) {
    if (!(check in failed))
        failed[check] = msg
}

/"event":"start"/ {
    s = $0
    while (match(s, /"name":"[^"]*","share_units":[0-9]+/)) {
        v = substr(s, RSTART, RLENGTH)
        s = substr(s, RSTART + RLENGTH)
        match(v, /"name":"[^"]*"/)
        held(substr(v, RSTART + 8, RLENGTH - 9), num(v, "share_units"))
    }
}

/"event":"decision"/ {
    line = $0
    ts = num(line, "ts")
    ndec++
    # inputs: each VM's share and class
    split("", cur)
    split("", islc)
    split("", maxu)
    s = line
    while (match(s, /"lc":(true|false),"max_units":[0-9]+,"min_units":[0-9]+,"name":"[^"]*","p99_ms":[^,]*,"share_units":[0-9]+/)) {
        v = substr(s, RSTART, RLENGTH)
        s = substr(s, RSTART + RLENGTH)
        match(v, /"name":"[^"]*"/)
        name = substr(v, RSTART + 8, RLENGTH - 9)
        cur[name] = num(v, "share_units")
        maxu[name] = num(v, "max_units")
        islc[name] = (v ~ /"lc":true/)
        if (islc[name]) {
            lcname = name
            p99[ndec] = substr(v, index(v, "\"p99_ms\":") + 9)
            sub(/,.*/, "", p99[ndec])
        }
    }
    if (lcname != "" && (lcname in cur)) {
        lcshare[ndec] = cur[lcname]
        lcmax[ndec] = maxu[lcname]
    }
    dts[ndec] = ts
    # targets (only when the decision was accepted)
    if (match(line, /"targets":\{[^}]*\}/)) {
        t = substr(line, RSTART, RLENGTH)
        split("", tg)
        while (match(t, /"[A-Za-z0-9_.-]+":[0-9]+/)) {
            e = substr(t, RSTART + 1, RLENGTH - 1)
            tg[substr(e, 1, index(e, "\"") - 1)] = substr(e, index(e, ":") + 1) + 0
            t = substr(t, RSTART + RLENGTH)
        }
        if (lcname in tg)
            lctarget[ndec] = tg[lcname]
        if (line ~ /"outcome":"done"/)
            printf "targets %.3f %d %d %d\n", ts, tg["lc"], tg["be1"], tg["be2"]
    }
    # slices
    i = index(line, "\"slices\":[")
    if (!i)
        next
    rest = substr(line, i + 10)
    j = index(rest, "],\"targets\":")
    if (j)
        rest = substr(rest, 1, j - 1)
    n = split(rest, sl, /\},\{/)
    non_lc_seen = 0
    for (k = 1; k <= n; k++) {
        if (sl[k] !~ /committed_bytes/)
            continue
        nslices++
        split("", gr)
        split("", sh)
        g = 0
        if (match(sl[k], /"grow":\[(\["[^"]*",[0-9]+\],?)*\]/))
            entries(substr(sl[k], RSTART, RLENGTH), gr)
        if (match(sl[k], /"shrink":\[(\["[^"]*",[0-9]+\],?)*\]/))
            entries(substr(sl[k], RSTART, RLENGTH), sh)
        up = 0
        down = 0
        has_lc = 0
        for (vm in sh) {
            down += cur[vm] - sh[vm]
            if (sh[vm] > cur[vm])
                fail("slices-within-p-max", sprintf("decision at %.3f slice %d: %s in shrink grows %d -> %d", ts, k, vm, cur[vm], sh[vm]))
            cur[vm] = sh[vm]
            held(vm, sh[vm])
            has_lc = has_lc || islc[vm]
        }
        for (vm in gr) {
            up += gr[vm] - cur[vm]
            if (gr[vm] < cur[vm])
                fail("slices-within-p-max", sprintf("decision at %.3f slice %d: %s in grow shrinks %d -> %d", ts, k, vm, cur[vm], gr[vm]))
            cur[vm] = gr[vm]
            held(vm, gr[vm])
            has_lc = has_lc || islc[vm]
        }
        if (up > maxup)
            maxup = up
        if (down > maxdown)
            maxdown = down
        if (up > pmax || down > pmax)
            fail("slices-within-p-max", sprintf("decision at %.3f slice %d moves +%d/-%d units (p_max %d)", ts, k, up, down, pmax))
        if (has_lc && non_lc_seen)
            fail("lc-moves-first", sprintf("decision at %.3f: slice %d moves the LC VM after a BE-only slice", ts, k))
        if (!has_lc)
            non_lc_seen = 1
        else
            lcslices++
        c = num(sl[k], "committed_bytes")
        if (c > maxc)
            maxc = c
        if (c > budget)
            fail("committed-within-budget", sprintf("decision at %.3f slice %d: %d bytes held", ts, k, c))
    }
}

END {
    printf "slices %d\n", nslices
    for (vm in seq)
        printf "seq %s%s\n", vm, seq[vm]
    print "decisions " ndec
    if (!("slices-within-p-max" in failed))
        printf "slices-within-p-max ok %d slices, largest +%d/-%d units, p_max %d\n", nslices, maxup, maxdown, pmax
    if (!("lc-moves-first" in failed))
        printf "lc-moves-first ok %d slices moved the LC VM, none after a BE-only slice\n", lcslices
    if (!("committed-within-budget" in failed))
        printf "committed-within-budget ok largest %d of %d bytes\n", maxc, budget
    for (check in failed)
        printf "%s FAIL %s\n", check, failed[check]
    # the first decision after the load step that sees it (a p99 over
    # the SLO, or none, which the daemon counts as a violation), and the
    # one after it
    first = 0
    for (d = 1; d <= ndec; d++)
        if (dts[d] > step_s && (p99[d] == "null" || p99[d] + 0 > slo + 0)) {
            first = d
            break
        }
    if (!first || first + 1 > ndec) {
        printf "lc-follows-step FAIL no two decisions after the step from one that saw p99 over the SLO (%d decisions)\n", ndec
        exit 0
    }
    s0 = lcshare[first]
    t1 = (first in lctarget) ? lctarget[first] : -1
    t2 = (first + 1 in lctarget) ? lctarget[first + 1] : -1
    detail = sprintf("%.1f s after the step: LC share %d units; targets %d, %d; p99 %s, %s ms (SLO %s ms)", dts[first] - step_s, s0, t1, t2, p99[first], p99[first + 1], slo)
    if (t1 > s0 || t2 > s0)
        print "lc-follows-step ok " detail
    else if (s0 >= lcmax[first] && t1 >= s0 && t2 >= s0)
        # the daemon had already given it its whole FMem tier (it explores
        # while it learns): nothing left to grow, only a shrink would fail
        print "lc-follows-step ok (already at its whole tier, kept) " detail
    else
        print "lc-follows-step FAIL " detail
}
