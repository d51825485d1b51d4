#!/bin/sh
# Small throttled "disks" for tests that measure real, different read
# speeds on one machine (issue 23): a loop device over an image file, with
# an ext4 file system mounted in the test's folder, and its own cgroup v1
# blkio group whose processes read it at most MBPS MB/s.
#
#   loopdisk.sh check                  0, or one line why not and exit 77
#   loopdisk.sh up NAME SIZE_MB MBPS DIR
#                                      DIR/NAME.img (SIZE_MB MiB) on a loop
#                                      device (losetup --direct-io=on),
#                                      mkfs.ext4, mounted on DIR/NAME; the
#                                      group /sys/fs/cgroup/blkio/NAME with
#                                      blkio.throttle.read_bps_device
#                                      "MAJ:MIN MBPS*1e6" of that device;
#                                      prints "MOUNT CGROUP DEVICE MAJ:MIN"
#   loopdisk.sh down NAME DIR          removes all of that again; idempotent,
#                                      also after a half-made `up`; exits 1
#                                      naming what it could not remove
#   loopdisk.sh exec NAME CMD [ARG..]  runs CMD inside NAME's blkio group
#                                      (the shell enters it, then execs CMD)
#   loopdisk.sh sweep                  downs the disks named cldPIDrN whose
#                                      process PID is gone (a test killed
#                                      before its teardown)
#
# The throttle counts the bytes that the group's processes read from the
# loop device itself, whatever block size, so it holds for O_DIRECT reads
# of files on the mounted file system; the image's own disk must be faster
# than MBPS. --direct-io=on keeps the image out of the page cache where the
# file system under DIR allows it (the loop device works without it).
#
# NAME must be unique per test process: it names the image, the mount
# point and the cgroup. Letters, digits and _, at most 32. Tests use
# cld<pid>r<N>, which `sweep` understands.
set -u

blkio=/sys/fs/cgroup/blkio

die() { echo "loopdisk.sh: $*" >&2; exit 1; }

name_ok() {
	case $1 in
	''|*[!A-Za-z0-9_]*) die "bad name '$1' (letters, digits, _)";;
	esac
	[ ${#1} -le 32 ] || die "name '$1' longer than 32 characters"
}

check() {
	if [ "$(id -u)" != 0 ]; then
		echo "loop devices, mount and cgroups need root (uid $(id -u))"; exit 77
	fi
	for c in losetup mkfs.ext4 mount umount mountpoint; do
		command -v $c >/dev/null 2>&1 || { echo "no $c command (util-linux, e2fsprogs)"; exit 77; }
	done
	if [ ! -f $blkio/cgroup.procs ] || [ ! -f $blkio/blkio.throttle.read_bps_device ]; then
		echo "no cgroup v1 blkio hierarchy with throttling at $blkio"; exit 77
	fi
	if [ ! -e /dev/loop-control ] && ! ls /dev/loop[0-9]* >/dev/null 2>&1; then
		echo "no loop devices (/dev/loop-control missing)"; exit 77
	fi
	t=$blkio/cldchk$$
	if ! err=$(mkdir $t 2>&1); then
		echo "cannot make a blkio group: $err" | head -n 1; exit 77
	fi
	rmdir $t
	exit 0
}

down() {
	n=$1 dir=$2
	name_ok "$n"
	bad=
	cg=$blkio/$n
	if [ -d "$cg" ]; then
		# A group with processes in it can not be removed: move them out.
		for p in $(cat "$cg/cgroup.procs" 2>/dev/null); do
			echo "$p" > $blkio/cgroup.procs 2>/dev/null
		done
		rmdir "$cg" 2>/dev/null || bad="$bad cgroup $cg;"
	fi
	m=$dir/$n
	if mountpoint -q "$m" 2>/dev/null; then
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || bad="$bad mount $m;"
	fi
	[ -d "$m" ] && { rmdir "$m" 2>/dev/null || bad="$bad folder $m;"; }
	# By the backing file's name, not `losetup -j`: that needs the file,
	# and a device may outlive it (its folder removed first).
	img=$dir/$n.img
	real=$(realpath -m "$img")
	for d in $(losetup -l -n -O NAME,BACK-FILE 2>/dev/null |
		   awk -v a="$img" -v b="$real" '$2 == a || $2 == b { print $1 }'); do
		losetup -d "$d" 2>/dev/null || bad="$bad loop device $d;"
	done
	rm -f "$img" || bad="$bad image $img;"
	[ -z "$bad" ] || die "could not remove:$bad"
	exit 0
}

up() {
	n=$1 size=$2 mbps=$3 dir=$4
	name_ok "$n"
	case $size in ''|*[!0-9]*) die "bad size '$size' (MiB)";; esac
	case $mbps in ''|*[!0-9]*) die "bad rate '$mbps' (MB/s)";; esac
	[ "$size" -ge 16 ] || die "size $size MiB: ext4 wants at least 16"
	[ "$mbps" -ge 1 ] || die "rate $mbps MB/s: at least 1"
	[ -d "$dir" ] || die "no folder $dir"
	img=$dir/$n.img m=$dir/$n cg=$blkio/$n
	[ -e "$img" ] && die "$img exists: run down first"
	truncate -s "${size}M" "$img" || die "cannot make $img"
	dev=$(losetup --find --show --direct-io=on "$img" 2>/dev/null) ||
		dev=$(losetup --find --show "$img") || { "$0" down "$n" "$dir"; die "losetup of $img failed"; }
	# No journal: nothing is written in the background while the test reads.
	if ! err=$(mkfs.ext4 -q -F -O ^has_journal -E lazy_itable_init=0 "$dev" 2>&1); then
		"$0" down "$n" "$dir"; die "mkfs.ext4 $dev failed: $err"
	fi
	mkdir -p "$m" && mount "$dev" "$m" || { "$0" down "$n" "$dir"; die "mount $dev $m failed"; }
	mm=$(cat "/sys/block/${dev#/dev/}/dev") || { "$0" down "$n" "$dir"; die "no major:minor for $dev"; }
	mkdir "$cg" || { "$0" down "$n" "$dir"; die "cannot make $cg"; }
	echo "$mm $((mbps * 1000000))" > "$cg/blkio.throttle.read_bps_device" ||
		{ "$0" down "$n" "$dir"; die "$cg: cannot throttle $mm to $mbps MB/s"; }
	echo "$m $cg $dev $mm"
}

run_in() {
	n=$1
	shift
	name_ok "$n"
	[ -d "$blkio/$n" ] || die "no group $blkio/$n: run up first"
	echo $$ > "$blkio/$n/cgroup.procs" || die "cannot enter $blkio/$n"
	exec "$@"
}

# The pid in a name cldPIDrN, or nothing.
name_pid() {
	case $1 in
	cld*r*) p=${1#cld}; p=${p%%r*}
		case $p in ''|*[!0-9]*) ;; *) echo "$p";; esac;;
	esac
}

# Whether process $1 is gone (a zombie counts as gone: its parent may be
# gone too, and nobody reaps it soon).
pid_gone() {
	st=$(sed 's/^.*) \(.\).*$/\1/' /proc/"$1"/stat 2>/dev/null) || return 0
	[ -z "$st" ] || [ "$st" = Z ]
}

sweep() {
	losetup -l -n -O BACK-FILE 2>/dev/null | while read -r f _; do
		b=${f##*/} n=${b%.img}
		[ "$b" != "$n" ] || continue
		p=$(name_pid "$n")
		[ -n "$p" ] && pid_gone "$p" && "$0" down "$n" "${f%/*}"
	done
	for cg in $blkio/cld*r*; do
		[ -d "$cg" ] || continue
		p=$(name_pid "${cg##*/}")
		[ -n "$p" ] && pid_gone "$p" && rmdir "$cg" 2>/dev/null
	done
	exit 0
}

case ${1:-} in
check) check;;
up) [ $# -eq 5 ] || die "usage: loopdisk.sh up NAME SIZE_MB MBPS DIR"; up "$2" "$3" "$4" "$5";;
down) [ $# -eq 3 ] || die "usage: loopdisk.sh down NAME DIR"; down "$2" "$3";;
exec) [ $# -ge 3 ] || die "usage: loopdisk.sh exec NAME CMD [ARG...]"; n=$2; shift 2; run_in "$n" "$@";;
sweep) sweep;;
*) die "usage: loopdisk.sh check | up NAME SIZE_MB MBPS DIR | down NAME DIR | exec NAME CMD [ARG...] | sweep";;
esac
