# shellcheck shell=sh
# Helpers of the vmmload-kvm scenarios (sourced by their l1.sh after
# common.sh and l1.sh).

BB=$(command -v busybox)
VL="$TB_VMMLOAD -q --mem-mib 512 --timeout 120"

# same NAME CMD...: native and vmmload runs print the same on stdout, the
# program's stderr shows up in vmmload's, and both exit the same
same() {
    _n=$1
    shift
    "$@" >"$TB_OUT/$_n.native" 2>"$TB_OUT/$_n.native-stderr"
    _rn=$?
    # shellcheck disable=SC2086 # VL is a word list
    $VL --report "$TB_OUT/$_n.json" -- "$@" >"$TB_OUT/$_n.vmmload" 2>"$TB_OUT/$_n.stderr"
    _rv=$?
    if [ "$_rn" = "$_rv" ] && cmp -s "$TB_OUT/$_n.native" "$TB_OUT/$_n.vmmload" &&
        { [ ! -s "$TB_OUT/$_n.native-stderr" ] || grep -qF -f "$TB_OUT/$_n.native-stderr" "$TB_OUT/$_n.stderr"; }; then
        tb_pass "$_n" "exit $_rv, $(wc -c <"$TB_OUT/$_n.native") bytes identical"
        # The program's expected stderr (e.g. the shell's "Segmentation
        # fault" for a program that dies of SIGSEGV natively too) must not
        # read as a vmmload crash to the testbed's crash check of *.stderr.
        mv "$TB_OUT/$_n.stderr" "$TB_OUT/$_n.program-stderr"
    else
        tb_fail "$_n" "native exit $_rn, vmmload exit $_rv; stderr: $(head -c 200 "$TB_OUT/$_n.stderr" | tr '\n' '|')"
    fi
}
# field RUN KEY: a top-level string of the report; total RUN KEY: a number
# from its "totals" object
field() { sed -n "s/^  \"$2\": *\"\([^\"]*\)\".*/\1/p" "$TB_OUT/$1.json" | head -n 1; }
total() {
    tr -d ' \n' <"$TB_OUT/$1.json" | sed -n 's/.*"totals":{\([^}]*\)}.*/\1/p' |
        tr ',' '\n' | sed -n "s/^\"$2\":\([0-9]*\)$/\1/p"
}
