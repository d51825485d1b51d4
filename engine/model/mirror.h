/*
 * mirror — copies of a container's expert files on other disks, so every
 * expert read can be striped over all of them (storage/ does the striping).
 *
 * A mirror folder holds experts/layer-LLL.bin files byte-identical to the
 * container's and a colibri-mirror.json naming the model it belongs to. It
 * is registered in the container's manifest ("mirrors"); a partial mirror
 * lists only the layers it holds. Copies are written to a temporary name,
 * fsynced, verified record by record against the manifest's checksums by
 * reading them back past the page cache, and only then renamed into place.
 */
#ifndef COLIBRI_ENGINE_MIRROR_H
#define COLIBRI_ENGINE_MIRROR_H

#include <stdbool.h>
#include <stdint.h>

struct manifest;

/* Copies the expert files of layers[0..n) (all MoE layers when layers is
 * NULL) to to_dir, each checked against the manifest's checksums, and
 * registers the mirror. A layer whose own file is missing, short or fails
 * a checksum is copied from a registered mirror that holds it whole (a
 * warning says which); with none, the error names the damaged file and
 * nothing of that layer is left in to_dir. */
int mirror_add(const char *model_dir, const char *to_dir, const int32_t *layers, int n, bool quiet);

/* Re-checks every record of a registered mirror (every mirror when to_dir is
 * NULL). -EIO with a message naming the first bad file and record. */
int mirror_verify(const char *model_dir, const char *to_dir, bool quiet);

/* Leftovers of an interrupted mirror_add in the mirror folder dir of the
 * model of m: the temporary files it writes there, each expert file's name
 * followed by ".tmp", colibri-mirror.json.tmp and colibri-mirror.json.tmp-*
 * (file_write_atomic's), and nothing else. Calls
 * found for each that exists; a nonzero return stops the walk and is the
 * result (0 otherwise). mirror_add removes them; doctor reports them. */
int mirror_leftovers(const struct manifest *m, const char *dir, int (*found)(void *ctx, const char *path),
		     void *ctx);

/* Unregisters a mirror; its files stay where they are. */
int mirror_remove(const char *model_dir, const char *to_dir);

#endif
