/*
 * blockdev — which disk a file lives on, named so that a disk profile
 * measured once is found again: by the whole disk, not the partition, the
 * loop device or the path.
 *
 * The identity comes from st_dev: /sys/dev/block/MAJ:MIN names the block
 * device; a partition resolves to its parent disk, a loop device to the
 * disk of its backing file, a device-mapper or md device with exactly one
 * underlying device to that device. File systems without a block device of
 * their own (btrfs subvolumes, overlayfs) are followed through the mount
 * table: the mount source, or overlayfs's upperdir. What cannot be resolved
 * (tmpfs, NFS) is keyed by file system type and st_dev.
 */
#ifndef COLIBRI_PLANNER_BLOCKDEV_H
#define COLIBRI_PLANNER_BLOCKDEV_H

#include <stdbool.h>

struct blockdev {
	char key[320];        /* stable identity: "disk:MODEL/SERIAL" (or "disk:SERIAL"), "dev:NAME" or "fs:TYPE:MAJ:MIN" */
	char name[64];        /* kernel name of the whole disk (nvme0n1, sda, vda); "" if none */
	char model[96];       /* /sys/block/NAME/device/model; "" if absent */
	char serial[96];      /* device serial or wwid; "" if absent */
	char fs_type[32];     /* file system of the path, from the mount table */
	unsigned major, minor; /* of the whole disk, or of st_dev when unresolved */
	bool resolved;        /* name refers to a real block device */
};

/* Identifies the disk holding path (a file or folder), or the disk path
 * is (a block device node). 0 on success; -errno
 * if path cannot be stat'ed. An unresolvable file system still succeeds,
 * with resolved false and an "fs:" key. */
int blockdev_identify(struct blockdev *out, const char *path);

#endif
