#!/usr/bin/env bash
# Builds a private LAN out of network namespaces, so the lan profile and mDNS
# can run without touching the machine's own network:
#
#   sudo testnet/netns.sh up mt 3      # namespaces mt-br, mt-1, mt-2, mt-3
#   sudo ip netns exec mt-1 meshtrain node --profile lan --no-data-dir
#   sudo ip netns exec mt-2 meshtrain node --profile lan --no-data-dir
#   sudo testnet/netns.sh down mt
#
# mt-br holds a bridge (multicast snooping off, so mDNS floods to every
# port); each node namespace has lo and eth0 = 10.77.0.<i>/24, IPv6 off, and
# a route for multicast out of eth0. Nothing is created in the namespace the
# script runs in: every link is made inside a namespace of its own.
set -euo pipefail

usage() {
	echo "usage: $0 up PREFIX N | down PREFIX" >&2
	exit 2
}

# no_ipv6 turns IPv6 off in a namespace before its links exist, so the kernel
# sends no router solicitations or MLD reports of its own.
no_ipv6() {
	local f
	for f in /proc/sys/net/ipv6/conf/{all,default}/disable_ipv6; do
		ip netns exec "$1" sh -c '[ ! -e "$1" ] || echo 1 > "$1"' sh "$f"
	done
}

up() {
	local p=$1 n=$2
	[[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 250)) || usage
	ip netns add "$p-br"
	no_ipv6 "$p-br"
	ip -n "$p-br" link add br0 type bridge mcast_snooping 0
	ip -n "$p-br" link set br0 up
	for ((i = 1; i <= n; i++)); do
		local ns=$p-$i
		ip netns add "$ns"
		no_ipv6 "$ns"
		ip -n "$ns" link add eth0 type veth peer name "n$i" netns "$p-br"
		ip -n "$p-br" link set "n$i" master br0 up
		ip -n "$ns" link set lo up
		ip -n "$ns" addr add "10.77.0.$i/24" dev eth0
		ip -n "$ns" link set eth0 multicast on up
		ip -n "$ns" route add 224.0.0.0/4 dev eth0
	done
}

down() {
	local p=$1 ns
	for ns in $(ip netns list | awk '{print $1}'); do
		if [[ $ns == "$p-br" || $ns =~ ^"$p"-[0-9]+$ ]]; then
			ip netns del "$ns"
		fi
	done
}

case ${1:-} in
up) (($# == 3)) || usage; up "$2" "$3" ;;
down) (($# == 2)) || usage; down "$2" ;;
*) usage ;;
esac
