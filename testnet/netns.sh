#!/usr/bin/env bash
# Builds networks out of Linux network namespaces, so the lan and public
# profiles can run without touching the machine's own network. Nothing is
# created in the namespace the script runs in: every link is made inside a
# namespace of its own, and none of them routes anywhere but to the others.
#
#   sudo testnet/netns.sh up mt 3            # a LAN: mt-br, mt-1, mt-2, mt-3
#   sudo testnet/netns.sh wan mt pub eim sym # an internet: mt-net, mt-1, mt-2 (+ mt-2-nat), mt-3 (+ mt-3-nat)
#   sudo ip netns exec mt-1 meshtrain node --profile lan --no-data-dir
#   sudo testnet/netns.sh down mt
#
# up PREFIX N: a bridged LAN. PREFIX-br holds a bridge (multicast snooping
# off, so mDNS floods to every port); each node namespace PREFIX-i has lo
# and eth0 = 10.77.0.<i>/24 and a route for multicast out of eth0.
#
# wan PREFIX HOST...: an internet, and one host per argument on it.
# PREFIX-net holds the internet's switch (a bridge) on 11.0.0.0/24, a
# range libp2p counts as public: it will not hole punch, relay or check
# reachability with private or documentation addresses (multiaddr's
# IsPublicAddr). No route leads out of these namespaces, so the range is
# reached nowhere else. Host i lives in PREFIX-i and is
#   pub: on the internet itself, eth0 = 11.0.0.<i>;
#   eim: behind a home router (PREFIX-i-nat, wan0 = 11.0.0.<100+i>) on a LAN
#        192.168.<i>.0/24 (eth0 = 192.168.<i>.2): source NAT that keeps the
#        source port (endpoint-independent mapping: a hole punch works);
#   sym: the same with a router that picks a random source port for every
#        connection (MASQUERADE --random-fully; address-and-port-dependent,
#        "symmetric" mapping: a hole punch cannot work).
# Both routers forward what the LAN sends and the replies to it, and drop
# every connection that starts on the internet side, to the LAN or to the
# router itself, as home routers do. It prints one line per host: its
# namespace, its address and kind.
#
# Every namespace has IPv6 off, so the kernel sends no router
# solicitations or MLD reports of its own. The building blocks (mkns,
# veth, bridge, router) are meant for other topologies too, e.g. a WAN
# with rate limits on its links.
set -euo pipefail

usage() {
	echo "usage: $0 up PREFIX N | wan PREFIX pub|eim|sym... | down PREFIX" >&2
	exit 2
}

# mkns NAME creates a namespace with IPv6 off (before any link exists, so
# the "default" setting covers the links made later) and lo up.
mkns() {
	local f
	ip netns add "$1"
	for f in /proc/sys/net/ipv6/conf/{all,default}/disable_ipv6; do
		ip netns exec "$1" sh -c '[ ! -e "$1" ] || echo 1 > "$1"' sh "$f"
	done
	ip -n "$1" link set lo up
}

# veth NS1 IF1 NS2 IF2 joins two namespaces with a veth pair, both ends up.
veth() {
	ip -n "$1" link add "$2" type veth peer name "$4" netns "$3"
	ip -n "$1" link set "$2" up
	ip -n "$3" link set "$4" up
}

# bridge NS makes br0 in NS (multicast snooping off: with no IGMP querier
# the bridge must flood multicast to every port).
bridge() {
	ip -n "$1" link add br0 type bridge mcast_snooping 0
	ip -n "$1" link set br0 up
}

# port BRIDGE_NS IF puts IF (in BRIDGE_NS) on br0.
port() {
	ip -n "$1" link set "$2" master br0 up
}

# router NS WAN LAN KIND makes NS a home router: forwarding on, source NAT
# out of WAN (eim: the kernel keeps source ports where it can; sym: a
# random port per connection), and nothing that starts on the WAN side
# gets in.
router() {
	local ns=$1 wan=$2 lan=$3 kind=$4 rand=()
	[[ $kind == sym ]] && rand=(--random-fully)
	ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1
	ip netns exec "$ns" iptables -t nat -A POSTROUTING -o "$wan" -j MASQUERADE "${rand[@]}"
	ip netns exec "$ns" iptables -P FORWARD DROP
	ip netns exec "$ns" iptables -A FORWARD -i "$lan" -o "$wan" -j ACCEPT
	ip netns exec "$ns" iptables -A FORWARD -i "$wan" -o "$lan" -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
	# The router's own stack must not answer either: a reset or an ICMP
	# error would leave a conntrack entry that makes the NAT pick another
	# port for the LAN's next packet to the same peer (spoiling a hole
	# punch that would otherwise work).
	ip netns exec "$ns" iptables -A INPUT -i "$wan" -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
	ip netns exec "$ns" iptables -A INPUT -i "$wan" -j DROP
}

up() {
	local p=$1 n=$2
	[[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 250)) || usage
	mkns "$p-br"
	bridge "$p-br"
	for ((i = 1; i <= n; i++)); do
		local ns=$p-$i
		mkns "$ns"
		veth "$ns" eth0 "$p-br" "n$i"
		port "$p-br" "n$i"
		ip -n "$ns" addr add "10.77.0.$i/24" dev eth0
		ip -n "$ns" link set eth0 multicast on
		ip -n "$ns" route add 224.0.0.0/4 dev eth0
	done
}

wan() {
	local p=$1
	shift
	(($# >= 1 && $# <= 99)) || usage
	local kind
	for kind in "$@"; do
		[[ $kind == pub || $kind == eim || $kind == sym ]] || usage
	done
	mkns "$p-net"
	bridge "$p-net"
	local i=0
	for kind in "$@"; do
		i=$((i + 1))
		local ns=$p-$i
		mkns "$ns"
		if [[ $kind == pub ]]; then
			veth "$ns" eth0 "$p-net" "h$i"
			port "$p-net" "h$i"
			ip -n "$ns" addr add "11.0.0.$i/24" dev eth0
			echo "$ns 11.0.0.$i pub"
			continue
		fi
		local r=$ns-nat
		mkns "$r"
		veth "$r" wan0 "$p-net" "h$i"
		port "$p-net" "h$i"
		ip -n "$r" addr add "11.0.0.$((100 + i))/24" dev wan0
		veth "$r" lan0 "$ns" eth0
		ip -n "$r" addr add "192.168.$i.1/24" dev lan0
		ip -n "$ns" addr add "192.168.$i.2/24" dev eth0
		ip -n "$ns" route add default via "192.168.$i.1"
		router "$r" wan0 lan0 "$kind"
		echo "$ns 192.168.$i.2 $kind behind 11.0.0.$((100 + i))"
	done
}

down() {
	local p=$1 ns
	for ns in $(ip netns list | awk '{print $1}'); do
		if [[ $ns == "$p-br" || $ns == "$p-net" || $ns =~ ^"$p"-[0-9]+(-nat)?$ ]]; then
			ip netns del "$ns"
		fi
	done
}

case ${1:-} in
up) (($# == 3)) || usage; up "$2" "$3" ;;
wan) (($# >= 3)) || usage; p=$2; shift 2; wan "$p" "$@" ;;
down) (($# == 2)) || usage; down "$2" ;;
*) usage ;;
esac
