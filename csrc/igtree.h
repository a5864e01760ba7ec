/*
 * igtree.h — the whole API of the Olifant draft model: TiMBL's IGTree
 * (timbl -a1) over fixed-width windows of token ids, in plain C99.
 *
 * Model. A training instance is a window of `window` context ids (oldest
 * first) and the id that followed (its class). Levels of the tree are the
 * window positions ordered by gain ratio (or information gain, or an explicit
 * permutation); every node keeps the default class of its training
 * instances, chosen by count, then global class frequency, then first-seen
 * order; nodes that agree with their parent and have no children left are
 * pruned bottom-up. A query walks one path and answers the default of the
 * deepest matching node — exactly TiMBL 6.5's IGTree (see
 * shared/reference/igtree-spec.md).
 *
 * Ids. Feature and class ids are < vocab_size. The id vocab_size itself is
 * the padding id used for positions before a document's start. Query ids
 * that were never seen at a level simply do not match there.
 *
 * Handles are opaque. There is no global state: every call that can fail
 * takes an igt_error* (may be NULL) and returns an igt_status. A model is
 * immutable once built or loaded and may be queried from many threads at
 * once; a builder belongs to one thread at a time (it may use threads of its
 * own, see igt_builder_set_threads).
 *
 * This header is plain C99 (and C++); the library is written in C99 with
 * POSIX (files, pthreads) where the system has it.
 */
#ifndef OLIFANT_IGTREE_H
#define OLIFANT_IGTREE_H

#include <stddef.h>
#include <stdint.h>

#include "olif_file.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Library version: "MAJOR.MINOR.PATCH"; NUMBER = MAJOR*10000 + MINOR*100 + PATCH. */
#define IGT_VERSION_MAJOR OLIF_VERSION_MAJOR
#define IGT_VERSION_MINOR OLIF_VERSION_MINOR
#define IGT_VERSION_PATCH OLIF_VERSION_PATCH
#define IGT_VERSION_NUMBER OLIF_VERSION_NUMBER
#define IGT_VERSION_STRING OLIF_VERSION_STRING

#define IGT_FORMAT_VERSION 2u       /* written by igt_save; 1 and 2 are read */
#define IGT_MAX_WINDOW 16u
#define IGT_MAX_VOCAB (1u << 26)     /* ids must stay below this */
#define IGT_TOPK_ALL 0xFFFFFFFFu     /* store every class of every node */
#define IGT_NO_TOKEN 0xFFFFFFFFu     /* igt_answer.token when there is no model or input */

/* Status codes, errors and their descriptions are the file layer's, one set for both libraries
 * (olif_file.h: OLIF_OK, OLIF_ERR_*, olif_status_string); igt_status and igt_error are its
 * types under this library's names. */
typedef olif_status igt_status;
typedef olif_error igt_error;

/* IGT_VERSION_STRING and IGT_VERSION_NUMBER of the library linked (which may
 * differ from the header compiled against). */
const char *igt_version(void);
uint32_t igt_version_number(void);

typedef enum {
    IGT_ORDER_GAIN_RATIO = 0,   /* TiMBL's default (-w gr) */
    IGT_ORDER_INFO_GAIN = 1,    /* -w ig */
    IGT_ORDER_EXPLICIT = 2      /* permutation given in igt_config */
} igt_order;

#define IGT_TOKENIZER_NAME_MAX 64
#define IGT_TOKENIZER_DIGEST_SIZE 32

typedef struct {
    uint32_t window;            /* features per instance, 1..IGT_MAX_WINDOW */
    uint32_t vocab_size;        /* ids < vocab_size; vocab_size = padding id */
    uint32_t order;             /* an igt_order */
    uint32_t permutation[IGT_MAX_WINDOW]; /* IGT_ORDER_EXPLICIT: 0-based
                                   window positions, root level first */
    uint32_t top_k;             /* classes kept per node beyond the winner
                                   summary: 0 = none, IGT_TOPK_ALL = all */
    char tokenizer_name[IGT_TOKENIZER_NAME_MAX];          /* NUL-terminated */
    uint8_t tokenizer_digest[IGT_TOKENIZER_DIGEST_SIZE];  /* e.g. sha256 of
                                   the vocabulary */
} igt_config;

/* Fill a config with defaults: window 4, gain-ratio order, top_k 0. */
void igt_config_init(igt_config *cfg, uint32_t vocab_size);

typedef struct igt_builder igt_builder;
typedef struct igt_model igt_model;

/* Progress during a build: phase name, units done, units total. Return
 * nonzero to cancel the build (it then fails with OLIF_ERR_CANCELLED). */
typedef int (*igt_progress_fn)(void *user, const char *phase,
                               uint64_t done, uint64_t total);

/* ---- Building ---------------------------------------------------------- */

igt_status igt_builder_new(const igt_config *cfg, igt_builder **out,
                           igt_error *err);

/* Append n instances: rows of window+1 ids, context oldest first, then the
 * class. Feature ids may be the padding id; class ids may not. A row whose
 * context continues the previous row's (shifted by one, the previous class
 * last) costs one stored id, as in a document; others cost window+1. */
igt_status igt_builder_add_instances(igt_builder *b, const uint32_t *rows,
                                     size_t n, igt_error *err);

/* Append one document: one instance per token, the context left-padded
 * with the padding id at the document's start (contexts never cross
 * documents). */
igt_status igt_builder_add_document(igt_builder *b, const uint32_t *tokens,
                                    size_t n, igt_error *err);

/* Append many documents at once: doc_starts[i] is the offset of document i
 * in tokens (ascending, doc_starts[0] == 0), n_docs of them. */
igt_status igt_builder_add_documents(igt_builder *b, const uint32_t *tokens,
                                     size_t n_tokens,
                                     const uint64_t *doc_starts,
                                     size_t n_docs, igt_error *err);

/* Instances added so far. */
uint64_t igt_builder_count(const igt_builder *b);

/* Bound the memory the builder uses for instances and their sorting to about
 * `bytes` (0: no bound, everything in memory, the default). Beyond it,
 * instances go to temporary files in `tmpdir` (NULL: $TMPDIR, else /tmp),
 * sorted in runs and merged straight into the tree build, so the corpus is
 * limited by disk rather than memory. The model (the tree being built)
 * comes on top of the bound (about 28 bytes a node while building). The
 * files are created exclusively (mode 0600) and unlinked at once, so nothing
 * remains after success, failure, cancel or a crash; they are checksummed
 * and checked as they are read back. The model is byte-identical to an
 * unbounded build. Call before adding instances; bytes below
 * IGT_MIN_MEMORY_LIMIT are refused. With a limit, adding instances may
 * spill to disk: if that fails (OLIF_ERR_IO, e.g. a full disk) the builder
 * keeps refusing with that error and can only be freed. Without a limit, a
 * builder holds at most 2^32 - 2 stored ids (tokens plus window ids per
 * document) and beyond that refuses with OLIF_ERR_LIMIT. */
#define IGT_MIN_MEMORY_LIMIT (1u << 16)
igt_status igt_builder_set_memory_limit(igt_builder *b, uint64_t bytes, const char *tmpdir,
                                        igt_error *err);

/* Threads for statistics, sorting and the tree scan: 1 (the default), up to
 * IGT_MAX_THREADS, or 0 for one per online CPU. The model does not depend on
 * the number. */
#define IGT_MAX_THREADS 64u
igt_status igt_builder_set_threads(igt_builder *b, uint32_t threads, igt_error *err);

/* Build the pruned tree. Consumes the builder's instances (the builder must
 * still be freed and cannot be built twice). progress may be NULL. */
igt_status igt_builder_build(igt_builder *b, igt_model **out,
                             igt_progress_fn progress, void *user,
                             igt_error *err);

void igt_builder_free(igt_builder *b);

/* ---- Files --------------------------------------------------------------- */

#define IGT_LOAD_SKIP_CHECKSUM 1u  /* structure is still fully validated;
                                      for fuzzing and trusted files */

/* Write the model as one file of format IGT_FORMAT_VERSION. Atomic: readers
 * see the old file or the whole new one. The bytes go to a fresh temporary
 * file in path's directory (unnamed where the system allows, else created
 * with O_EXCL|O_NOFOLLOW), mode 0600, fsync'd, renamed over path, and the
 * directory fsync'd; on any error the temporary file is removed and path is
 * left as it was. */
igt_status igt_save(const igt_model *m, const char *path, igt_error *err);

/* igt_save in format version 1 or 2 (1: for readers older than version 2;
 * about 2.5x larger). */
igt_status igt_save_version(const igt_model *m, const char *path, uint32_t version,
                            igt_error *err);

/* Read a model file (format 1 or 2) into private memory and validate it:
 * every length, offset, index, sort order, count and class id, and the
 * checksums. A truncated, corrupt, foreign or wrong-version file is an
 * error, never a crash; so is a path that is not a regular file (FIFO,
 * directory, device), refused before reading. Once loaded the model never
 * reads the file again: changing, truncating or replacing it cannot affect
 * the model. A version-1 file is converted to version 2 on load. */
igt_status igt_load(const char *path, uint32_t flags, igt_model **out,
                    igt_error *err);

/* Load from a buffer (copied). Same validation as igt_load. */
igt_status igt_load_buffer(const void *data, size_t size, uint32_t flags,
                           igt_model **out, igt_error *err);

void igt_free(igt_model *m);

/* ---- Facts about a model ------------------------------------------------ */

typedef struct {
    uint32_t format_version;    /* of the image held: what igt_save writes */
    uint32_t window;
    uint32_t vocab_size;
    uint32_t padding_id;
    uint32_t order;
    uint32_t top_k;
    uint32_t permutation[IGT_MAX_WINDOW]; /* root level first, 0-based */
    double gain_ratio[IGT_MAX_WINDOW];    /* per window position */
    double info_gain[IGT_MAX_WINDOW];     /* per window position */
    uint64_t n_instances;
    uint64_t n_nodes;           /* stored nodes below the root */
    uint64_t n_dist_entries;    /* stored (class, count) pairs */
    uint64_t n_classes;         /* distinct classes in training */
    uint64_t file_size;         /* bytes igt_save writes */
    uint32_t default_class;     /* answer at depth 0 */
    int memory_mapped;          /* 0: models are never backed by a file mapping */
    char tokenizer_name[IGT_TOKENIZER_NAME_MAX];
    uint8_t tokenizer_digest[IGT_TOKENIZER_DIGEST_SIZE];
} igt_info;

/* Zeroes *out for a NULL model; does nothing for a NULL out. */
void igt_get_info(const igt_model *m, igt_info *out);

/* ---- Queries -------------------------------------------------------------- */

/* Any id is a valid query id: ids at or above vocab_size (other than the
 * padding id) simply match nothing. Queries read only the ids asked for and
 * write only the outputs given. Given a NULL model, or a NULL id array with
 * a nonzero count, igt_predict and igt_predict_batch write answers whose
 * token is IGT_NO_TOKEN (all else 0), and igt_draft and igt_node_classes
 * return 0; a NULL output makes the call do nothing. */

typedef struct {
    uint32_t token;         /* predicted next id: default of the deepest match */
    uint32_t depth;         /* levels matched, 0..window */
    uint32_t leaf;          /* 1 if the matched node has no stored children */
    uint32_t node;          /* node index, for igt_node_classes (0 = root) */
    uint32_t winner_count;  /* training count of token at that node */
    uint32_t total;         /* training instances under that node */
    double distance;        /* TiMBL's distance: weights of unmatched levels */
} igt_answer;

/* Predict the id after `context` (n ids, oldest first). Only the last
 * `window` ids are used; a shorter context is left-padded as at a document
 * start. context may be NULL when n is 0. */
void igt_predict(const igt_model *m, const uint32_t *context, size_t n,
                 igt_answer *out);

/* n queries given as rows of exactly `window` ids each (rows holds
 * n * window ids, out n answers). */
void igt_predict_batch(const igt_model *m, const uint32_t *rows, size_t n,
                       igt_answer *out);

/* Draft up to k ids after context, appending each prediction to the context
 * for the next. Stops early, before emitting a prediction whose match depth
 * is below min_depth or whose winner_count/total is below min_share (use 0
 * and 0.0 never to stop; a NaN min_share never stops). tokens (and answers,
 * if not NULL) must have room for k entries; up to k are written. Returns
 * the number drafted. */
size_t igt_draft(const igt_model *m, const uint32_t *context, size_t n,
                 size_t k, uint32_t min_depth, double min_share,
                 uint32_t *tokens, igt_answer *answers);

/* The stored class counts of a node, best first (the winner is first).
 * Writes up to max entries to classes and counts (either may be NULL) and
 * returns how many the node stores (0 if the model keeps no distributions
 * or node is out of range: nodes are 0..n_nodes). */
size_t igt_node_classes(const igt_model *m, uint32_t node, uint32_t *classes,
                        uint32_t *counts, size_t max);

#ifdef __cplusplus
}
#endif
#endif /* OLIFANT_IGTREE_H */
