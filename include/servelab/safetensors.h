/* safetensors.h - memory-mapped safetensors checkpoints, single or sharded.
 *
 * The header is untrusted input: its length, JSON, dtypes, shapes and offsets
 * are all validated (shape x dtype size == byte length, offsets inside the
 * data section, no two tensors overlapping) before any tensor is handed out.
 * Tensor data is never copied: st_tensor_t.data points into the mapping.
 */
#ifndef SERVELAB_SAFETENSORS_H
#define SERVELAB_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "servelab/config.h"
#include "servelab/core.h"

#define ST_MAX_DIMS 8
/* Headers larger than this are refused (the reference implementation uses 100 MB). */
#define ST_MAX_HEADER_BYTES (100u * 1000u * 1000u)

typedef struct {
    char *name;
    sl_dtype_t dtype;
    int n_dims;
    int64_t shape[ST_MAX_DIMS];
    int64_t n_elems;
    const void *data;   /* inside the file's mapping */
    size_t n_bytes;
    int file_index;     /* which shard */
} st_tensor_t;

/* One parsed file. */
typedef struct {
    st_tensor_t *tensors;
    int n_tensors;
} st_header_t;

/* Parses and validates a whole safetensors file image (`buf`, `len` bytes):
 * the 8-byte header length, the JSON header and every tensor entry against the
 * data section. Tensors point into `buf`. `fname` is used in messages only.
 * Returns 0, or -1 with "FILE: tensor NAME: what is wrong" in `err`. This is
 * the function the fuzz target drives. */
int st_parse(const uint8_t *buf, size_t len, const char *fname, st_header_t *out, sl_err_t *err);
void st_header_free(st_header_t *h);

/* All tensors of a checkpoint directory: model.safetensors, or the shards
 * named by model.safetensors.index.json (every shard must exist, every
 * tensor of the weight map must be in the shard it names, and no tensor may
 * appear twice). */
typedef struct {
    int n_files;
    char **file_names;
    sl_mmap_t *maps;
    st_header_t *headers;
    int n_tensors;          /* total over files */
    st_tensor_t **index;    /* sorted by name, for st_find */
} st_archive_t;

int st_open_dir(const char *model_dir, st_archive_t *out, sl_err_t *err);
void st_close(st_archive_t *a);

/* Looks a tensor up by name; NULL if absent. */
const st_tensor_t *st_find(const st_archive_t *a, const char *name);

/* Finds `name` and checks its rank and shape. Returns NULL with
 * "FILE: tensor NAME: expected shape [a, b], found [c, d]" (or "missing") in `err`. */
const st_tensor_t *st_expect(const st_archive_t *a, const char *name, int n_dims,
                             const int64_t *shape, sl_err_t *err);

#endif
