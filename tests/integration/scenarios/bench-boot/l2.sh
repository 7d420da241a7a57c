# shellcheck shell=sh
# bench-boot (guest side): nothing to do but be measured; the handshake
# holds the guest while the L1 side reads the VMM's memory, then the guest
# powers off.
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l2.sh
. "$TB_LIB/l2.sh"
tb_begin l2
tb_l2_handshake 60
tb_report
