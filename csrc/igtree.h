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
 * immutable once built or loaded and may be queried from many threads.
 */
#ifndef OLIFANT_IGTREE_H
#define OLIFANT_IGTREE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define IGT_FORMAT_VERSION 1u
#define IGT_MAX_WINDOW 16u
#define IGT_MAX_VOCAB (1u << 26)     /* ids must stay below this */
#define IGT_TOPK_ALL 0xFFFFFFFFu     /* store every class of every node */

typedef enum {
    IGT_OK = 0,
    IGT_ERR_ARG = 1,        /* bad argument: out-of-range id, window, k, ... */
    IGT_ERR_NOMEM = 2,      /* allocation failed */
    IGT_ERR_IO = 3,         /* open/read/write/mmap failed */
    IGT_ERR_FOREIGN = 4,    /* not an olifant model file (bad magic) */
    IGT_ERR_VERSION = 5,    /* olifant model of another format version */
    IGT_ERR_TRUNCATED = 6,  /* file shorter than its header says */
    IGT_ERR_CORRUPT = 7,    /* inconsistent header or tree structure */
    IGT_ERR_CHECKSUM = 8,   /* header or payload checksum mismatch */
    IGT_ERR_EMPTY = 9,      /* no training instances */
    IGT_ERR_LIMIT = 10,     /* a size limit of the format was exceeded */
    IGT_ERR_CANCELLED = 11  /* the progress callback asked to stop */
} igt_status;

typedef struct {
    int code;               /* an igt_status */
    char message[256];      /* what went wrong, naming the offending value */
} igt_error;

/* Static description of a status code (never NULL). */
const char *igt_status_string(int code);

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
 * nonzero to cancel the build (it then fails with IGT_ERR_CANCELLED). */
typedef int (*igt_progress_fn)(void *user, const char *phase,
                               uint64_t done, uint64_t total);

/* ---- Building ---------------------------------------------------------- */

igt_status igt_builder_new(const igt_config *cfg, igt_builder **out,
                           igt_error *err);

/* Append n instances: rows of window+1 ids, context oldest first, then the
 * class. Feature ids may be the padding id; class ids may not. */
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

/* Build the pruned tree. Consumes the builder's instances (the builder must
 * still be freed and cannot be built twice). progress may be NULL. */
igt_status igt_builder_build(igt_builder *b, igt_model **out,
                             igt_progress_fn progress, void *user,
                             igt_error *err);

void igt_builder_free(igt_builder *b);

/* ---- Files --------------------------------------------------------------- */

#define IGT_LOAD_SKIP_CHECKSUM 1u  /* structure is still fully validated;
                                      for fuzzing and trusted files */

/* Write the model as one versioned file (written to path.tmp, renamed). */
igt_status igt_save(const igt_model *m, const char *path, igt_error *err);

/* Memory-map a model file read-only. Every length and offset is validated:
 * a truncated, corrupt, foreign or wrong-version file is an error, never a
 * crash. */
igt_status igt_load(const char *path, uint32_t flags, igt_model **out,
                    igt_error *err);

/* Load from a buffer (copied). Same validation as igt_load. */
igt_status igt_load_buffer(const void *data, size_t size, uint32_t flags,
                           igt_model **out, igt_error *err);

void igt_free(igt_model *m);

/* ---- Facts about a model ------------------------------------------------ */

typedef struct {
    uint32_t format_version;
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
    uint64_t file_size;         /* bytes of the serialised model */
    uint32_t default_class;     /* answer at depth 0 */
    int memory_mapped;          /* 1 if backed by a file mapping */
    char tokenizer_name[IGT_TOKENIZER_NAME_MAX];
    uint8_t tokenizer_digest[IGT_TOKENIZER_DIGEST_SIZE];
} igt_info;

void igt_get_info(const igt_model *m, igt_info *out);

/* ---- Queries -------------------------------------------------------------- */

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
 * start. */
void igt_predict(const igt_model *m, const uint32_t *context, size_t n,
                 igt_answer *out);

/* n queries given as rows of exactly `window` ids each. */
void igt_predict_batch(const igt_model *m, const uint32_t *rows, size_t n,
                       igt_answer *out);

/* Draft up to k ids after context, appending each prediction to the context
 * for the next. Stops early, before emitting a prediction whose match depth
 * is below min_depth or whose winner_count/total is below min_share (use 0
 * and 0.0 never to stop). tokens (and answers, if not NULL) get up to k
 * entries. Returns the number drafted. */
size_t igt_draft(const igt_model *m, const uint32_t *context, size_t n,
                 size_t k, uint32_t min_depth, double min_share,
                 uint32_t *tokens, igt_answer *answers);

/* The stored class counts of a node, best first (the winner is first).
 * Writes up to max entries and returns how many the node stores (0 if the
 * model keeps no distributions or node is out of range). */
size_t igt_node_classes(const igt_model *m, uint32_t node, uint32_t *classes,
                        uint32_t *counts, size_t max);

#ifdef __cplusplus
}
#endif
#endif /* OLIFANT_IGTREE_H */
