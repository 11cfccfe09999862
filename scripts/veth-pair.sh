# Sourced by the benchmark scripts: two network namespaces joined by a veth
# pair, as two hosts on one Ethernet link.
#
#   veth_pair_up PREFIX MTU NET   namespaces $a (NET.1) and $b (NET.2), named
#                                 PREFIX-a-PID and PREFIX-b-PID, each with lo
#                                 and veth0 up at MTU
#   veth_pair_down                kills what still runs in $a (a server
#                                 left behind) and deletes both
#
# The caller traps EXIT to call veth_pair_down (with its own cleanup).

veth_pair_up() {
    local prefix=$1 mtu=$2 net=$3 ns
    a=$prefix-a-$$ b=$prefix-b-$$
    ip netns add "$a"
    ip netns add "$b"
    ip link add veth0 netns "$a" type veth peer name veth0 netns "$b"
    for ns in "$a" "$b"; do
        ip -n "$ns" link set lo up
        ip -n "$ns" link set veth0 mtu "$mtu" up
    done
    ip -n "$a" addr add "$net.1/24" dev veth0
    ip -n "$b" addr add "$net.2/24" dev veth0
}

veth_pair_down() {
    [ -n "${a:-}" ] || return 0
    ip netns pids "$a" 2>/dev/null | xargs -r kill 2>/dev/null || true
    ip netns del "$a" 2>/dev/null || true
    ip netns del "$b" 2>/dev/null || true
}
