#!/bin/sh
# netns.sh — network namespaces for the MPI tests (issue 23): one namespace
# per rank, each joined by a veth pair to a bridge in the root namespace, so
# that ranks on one machine talk TCP to each other over real interfaces.
#
#   netns.sh check            exit 0 when we are root and `ip netns add`
#                             works; else one line saying why, exit 77
#   netns.sh up N PREFIX      make namespaces PREFIX0..PREFIX(N-1); prints
#                             the subnet (10.R.0.0/24) on stdout
#   netns.sh down N PREFIX    remove them again; idempotent, also after a
#                             half-made `up`
#
# Namespace i gets 10.R.0.(i+1)/24 on its end of the veth (named eth0 in the
# namespace) and lo up; the bridge PREFIXbr in the root namespace holds
# 10.R.0.254/24.  The bridge needs that address: the ranks reach the PMIx
# server inside mpirun, which runs in the root namespace, over TCP (see
# README.md), and their loopback is not its loopback.
#
# R is the first of 10.200..10.249 that no route in the root namespace uses;
# the choice runs under a lock so parallel tests get different subnets.
# PREFIX must be unique per test (e.g. cmpi$$) and at most 9 characters:
# interface names (PREFIX i h, PREFIX br) are limited to 15.
set -u

die() { echo "netns.sh: $*" >&2; exit 1; }

check() {
	if [ "$(id -u)" != 0 ]; then
		echo "network namespaces need root (uid $(id -u))"; exit 77
	fi
	command -v ip >/dev/null 2>&1 || { echo "no ip command (iproute2)"; exit 77; }
	t=cnschk$$
	if ! err=$(ip netns add $t 2>&1); then
		echo "ip netns add fails: $err" | head -n 1; exit 77
	fi
	if ! err=$(ip link add ${t}a type veth peer name ${t}b 2>&1); then
		ip netns del $t 2>/dev/null
		echo "ip link add type veth fails: $err" | head -n 1; exit 77
	fi
	ip link del ${t}a 2>/dev/null
	ip netns del $t
	exit 0
}

prefix_ok() {
	case $1 in
	''|*[!A-Za-z0-9_]*) die "bad prefix '$1' (letters, digits, _)";;
	esac
	[ ${#1} -le 9 ] || die "prefix '$1' longer than 9 characters"
}

down() {
	n=$1 p=$2
	prefix_ok "$p"
	i=0
	while [ $i -lt "$n" ]; do
		# Deleting the root end of the veth removes its peer too; deleting
		# the namespace removes whatever is still inside it.
		ip link del ${p}${i}h 2>/dev/null
		ip netns del ${p}${i} 2>/dev/null
		i=$((i + 1))
	done
	ip link del ${p}br 2>/dev/null
	exit 0
}

up() {
	n=$1 p=$2
	prefix_ok "$p"
	case $n in ''|*[!0-9]*) die "bad rank count '$n'";; esac
	[ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "rank count $n not in 1..200"
	lock=/run/colibri-netns.lock
	exec 9>"$lock" || die "cannot open $lock"
	flock 9 || die "cannot lock $lock"
	r=200
	while [ $r -lt 250 ]; do
		ip -4 route show | grep -q "^10\.$r\." || break
		r=$((r + 1))
	done
	[ $r -lt 250 ] || die "no free subnet among 10.200-249.0.0/24"
	ip link add ${p}br type bridge || { "$0" down "$n" "$p"; die "cannot make bridge ${p}br"; }
	ip addr add 10.$r.0.254/24 dev ${p}br &&
	ip link set ${p}br up || { "$0" down "$n" "$p"; die "cannot bring up ${p}br"; }
	# The route now exists: later `up`s see the subnet as taken.
	flock -u 9
	i=0
	while [ $i -lt "$n" ]; do
		ns=${p}${i}
		if ! { ip netns add $ns &&
		       ip link add ${p}${i}h type veth peer name ${p}${i}n &&
		       ip link set ${p}${i}n netns $ns &&
		       ip -n $ns link set ${p}${i}n name eth0 &&
		       ip -n $ns addr add 10.$r.0.$((i + 1))/24 dev eth0 &&
		       ip -n $ns link set eth0 up &&
		       ip -n $ns link set lo up &&
		       ip link set ${p}${i}h master ${p}br &&
		       ip link set ${p}${i}h up; }; then
			"$0" down "$n" "$p"
			die "cannot set up namespace $ns"
		fi
		i=$((i + 1))
	done
	echo 10.$r.0.0/24
}

case ${1:-} in
check) check;;
up) [ $# -eq 3 ] || die "usage: netns.sh up N PREFIX"; up "$2" "$3";;
down) [ $# -eq 3 ] || die "usage: netns.sh down N PREFIX"; down "$2" "$3";;
*) die "usage: netns.sh check | up N PREFIX | down N PREFIX";;
esac
