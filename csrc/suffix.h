/*
 * suffix.h — corpus retrieval drafters in plain C11: a suffix array over a
 * training corpus in the verifier's token ids (REST-style drafting: the most
 * frequent continuation of the longest suffix match of the context), and
 * llama.cpp's static n-gram cache (llama-lookup's static tier: the argmax
 * count after the last `order` ids, drafted only above a sample-size and a
 * majority-share threshold).
 *
 * Corpus. Documents of ids < vocab_size, added in batches (sfx_corpus_*).
 * Matches and n-grams never cross a document boundary: in the suffix array's
 * text every document is followed by the separator id, vocab_size.
 *
 * Files. Each structure is one versioned file (magic OLIFSFX\0 or OLIFNGC\0,
 * same header layout), read into private memory or copied from a buffer
 * (olif_file.h: a file changed under a loaded structure cannot affect it).
 * Every length, offset and index is validated before use and both header and
 * payload are checksummed: a truncated, corrupt, foreign or wrong-version
 * file is an error, never a crash. A built structure is serialised to this
 * image in memory and parsed by the same loader, so there is one
 * representation and one set of checks.
 *
 * Handles are opaque. There is no global state: every call that can fail
 * takes an sfx_error* (may be NULL) and returns an sfx_status. A built or
 * loaded structure is immutable and may be queried from many threads.
 */
#ifndef OLIFANT_SUFFIX_H
#define OLIFANT_SUFFIX_H

#include <stddef.h>
#include <stdint.h>

#include "olif_file.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Library version: the file layer's (olif_file.h); sfx_version() is the one linked. */
#define SFX_VERSION_NUMBER OLIF_VERSION_NUMBER
#define SFX_VERSION_STRING OLIF_VERSION_STRING
#define SFX_FORMAT_VERSION 1u
#define SFX_MAX_VOCAB (1u << 26)        /* ids must stay below this */
#define SFX_MAX_TEXT 0x7FFFFFF0u        /* corpus tokens + one separator per document */
#define SFX_MAX_ORDER 4u                /* n-gram cache: context ids per n-gram */
#define SFX_TOKENIZER_NAME_MAX 64
#define SFX_TOKENIZER_DIGEST_SIZE 32
#define SFX_LOAD_SKIP_CHECKSUM 1u       /* structure is still fully validated;
                                           for fuzzing and trusted files */

/* Status codes, errors and their descriptions are the file layer's, one set for both libraries
 * (olif_file.h: OLIF_OK, OLIF_ERR_*, olif_status_string); sfx_status and sfx_error are its
 * types under this library's names. */
typedef olif_status sfx_status;
typedef olif_error sfx_error;

/* SFX_VERSION_STRING and SFX_VERSION_NUMBER of the library linked. */
const char *sfx_version(void);
uint32_t sfx_version_number(void);

typedef struct {
    uint32_t vocab_size;    /* ids < vocab_size; vocab_size is the separator */
    char tokenizer_name[SFX_TOKENIZER_NAME_MAX];          /* NUL-terminated */
    uint8_t tokenizer_digest[SFX_TOKENIZER_DIGEST_SIZE];  /* sha256 of the
                               vocabulary */
} sfx_config;

void sfx_config_init(sfx_config *cfg, uint32_t vocab_size);

/* Progress during a build: phase name, units done, units total. Return
 * nonzero to cancel the build (it then fails with OLIF_ERR_CANCELLED). */
typedef int (*sfx_progress_fn)(void *user, const char *phase,
                               uint64_t done, uint64_t total);

/* ---- The corpus ---------------------------------------------------------- */

typedef struct sfx_corpus sfx_corpus;

sfx_status sfx_corpus_new(const sfx_config *cfg, sfx_corpus **out, sfx_error *err);

/* Append documents: doc_starts[i] is the offset of document i in tokens
 * (ascending, doc_starts[0] == 0), n_docs of them. Empty documents are
 * skipped. Ids must be < vocab_size. */
sfx_status sfx_corpus_add_documents(sfx_corpus *c, const uint32_t *tokens,
                                    size_t n_tokens, const uint64_t *doc_starts,
                                    size_t n_docs, sfx_error *err);

uint64_t sfx_corpus_tokens(const sfx_corpus *c);     /* corpus ids so far */
uint64_t sfx_corpus_documents(const sfx_corpus *c);  /* non-empty documents */
void sfx_corpus_free(sfx_corpus *c);

/* ---- The suffix array (REST-style drafting) -------------------------------- */

typedef struct sfx_index sfx_index;

/* Build the suffix array of the corpus (SA-IS, linear time; about 13 bytes a
 * token while building). The corpus is unchanged and may be built again. */
sfx_status sfx_index_build(const sfx_corpus *c, sfx_index **out,
                           sfx_progress_fn progress, void *user, sfx_error *err);

/* Write as one versioned file, atomically and mode 0600 (olif_write_file). */
sfx_status sfx_index_save(const sfx_index *x, const char *path, sfx_error *err);

/* Read a file into private memory (olif_read_file) / load from a buffer (copied). */
sfx_status sfx_index_load(const char *path, uint32_t flags, sfx_index **out,
                          sfx_error *err);
sfx_status sfx_index_load_buffer(const void *data, size_t size, uint32_t flags,
                                 sfx_index **out, sfx_error *err);

void sfx_index_free(sfx_index *x);

/* The full check of what a checksum vouches for: the suffix array holds
 * every corpus position exactly once, in suffix order. O(n) memory bits and
 * O(sum of neighbouring common prefixes) time: for tests and tools. */
sfx_status sfx_index_verify(const sfx_index *x, sfx_error *err);

typedef struct {
    uint32_t format_version;
    uint32_t vocab_size;
    uint32_t separator;         /* = vocab_size */
    uint32_t token_bytes;       /* 2 or 4: how the text is stored */
    uint64_t n_text;            /* text length: tokens plus separators */
    uint64_t n_tokens;          /* corpus tokens = suffixes indexed */
    uint64_t n_documents;
    uint64_t file_size;
    int memory_mapped;          /* always 0: loads are private copies */
    char tokenizer_name[SFX_TOKENIZER_NAME_MAX];
    uint8_t tokenizer_digest[SFX_TOKENIZER_DIGEST_SIZE];
} sfx_index_info;

void sfx_index_get_info(const sfx_index *x, sfx_index_info *out);

/* Occurrences of pattern (m ids) in the corpus. */
uint64_t sfx_index_count(const sfx_index *x, const uint32_t *pattern, size_t m);

/* The longest suffix of context (n ids, oldest first; at most max_match of
 * them, 0 = no limit) that occurs in the corpus: returns its length and
 * stores its occurrence count in *count (may be NULL). */
uint32_t sfx_index_match(const sfx_index *x, const uint32_t *context, size_t n,
                         uint32_t max_match, uint64_t *count);

typedef struct {
    uint32_t token;         /* the drafted id */
    uint32_t match;         /* length of the corpus match it continues */
    uint32_t count;         /* occurrences of that match followed by token */
    uint32_t total;         /* occurrences of the match (any continuation,
                               document ends included) */
} sfx_answer;

/* Draft up to k ids after context: find the longest suffix match (at most
 * max_match ids, 0 = no limit; none shorter than min_match), then repeatedly
 * append its most frequent continuation (ties: the lower id) and extend the
 * match by it. Stops early at a document end, or before emitting a token
 * whose count is below min_count or whose count/total is below min_share.
 * Continuations are counted exactly over the occurrences of the match when
 * they are at most SFX_EXACT_SCAN; over more, candidates are the
 * continuations at SFX_SAMPLES evenly spaced occurrences, each then counted
 * exactly (the winner is exact whenever its share is at least
 * 1/SFX_SAMPLES). tokens (and answers, if not NULL) get up to k entries.
 * Returns the number drafted. */
#define SFX_EXACT_SCAN 64u
#define SFX_SAMPLES 64u
size_t sfx_index_draft(const sfx_index *x, const uint32_t *context, size_t n,
                       size_t k, uint32_t max_match, uint32_t min_match,
                       uint32_t min_count, double min_share,
                       uint32_t *tokens, sfx_answer *answers);

/* ---- Matching statistics (provenance) ------------------------------------- */

typedef struct {
    uint32_t length;        /* the longest prefix of out[i..] that occurs in the corpus
                               (0: out[i] occurs nowhere, or is >= vocab_size) */
    uint32_t reserved;      /* 0 */
    uint64_t lo, hi;        /* its suffix-array interval: the hi - lo occurrences are
                               suffixes lo .. hi-1 (lo = hi = 0 when length is 0) */
    uint64_t position;      /* one occurrence: the text position of suffix lo */
} sfx_stat;

/* The matching statistics of out (n ids) against the corpus, in one pass:
 * stats[i] for every output position i. Matches never cross a document
 * boundary (the separator) and never include an id >= vocab_size; at most
 * max_length ids each (0 = no limit). Cost: n narrowings of an interval by
 * one id plus n interval searches of the previous match less its first id
 * (an accelerated binary search: about length + log(corpus) id reads each).
 * OLIF_ERR_ARG for a NULL index, or a NULL out or stats with n > 0. */
sfx_status sfx_index_matching_stats(const sfx_index *x, const uint32_t *out, size_t n,
                                    uint32_t max_length, sfx_stat *stats, sfx_error *err);

typedef struct {
    uint64_t position;      /* text position (each document followed by a separator) */
    uint64_t document;      /* the document: its index among the non-empty documents,
                               in the order they were added */
    uint64_t offset;        /* the token offset in that document */
} sfx_place;

/* The places of suffixes lo .. hi-1 (an interval from sfx_index_matching_stats,
 * or [lo, lo+1) for one suffix), in suffix-array order, at most max of them:
 * writes min(hi - lo, max) entries and stores that number in *n_places.
 * OLIF_ERR_ARG unless lo <= hi <= the number of suffixes, or for NULL
 * pointers where entries are due. */
sfx_status sfx_index_places(const sfx_index *x, uint64_t lo, uint64_t hi, size_t max,
                            sfx_place *places, size_t *n_places, sfx_error *err);

/* The place of a text position (the document holding it and the offset in
 * it). OLIF_ERR_ARG unless position < n_text and not a separator. */
sfx_status sfx_index_locate(const sfx_index *x, uint64_t position, sfx_place *place,
                            sfx_error *err);

/* ---- The static n-gram cache (llama.cpp's llama-lookup static tier) -------- */

typedef struct sfx_ngram sfx_ngram;

/* Count, for every run of order+1 ids inside a document, the last id after
 * the first order (llama.cpp's common_ngram_cache_update with
 * ngram_min = ngram_max = order; LLAMA_NGRAM_STATIC is 2). */
sfx_status sfx_ngram_build(const sfx_corpus *c, uint32_t order, sfx_ngram **out,
                           sfx_progress_fn progress, void *user, sfx_error *err);

sfx_status sfx_ngram_save(const sfx_ngram *g, const char *path, sfx_error *err);
sfx_status sfx_ngram_load(const char *path, uint32_t flags, sfx_ngram **out,
                          sfx_error *err);
sfx_status sfx_ngram_load_buffer(const void *data, size_t size, uint32_t flags,
                                 sfx_ngram **out, sfx_error *err);
void sfx_ngram_free(sfx_ngram *g);

typedef struct {
    uint32_t format_version;
    uint32_t vocab_size;
    uint32_t order;             /* context ids per n-gram, 1..SFX_MAX_ORDER */
    uint64_t n_contexts;        /* distinct contexts */
    uint64_t n_pairs;           /* distinct (context, next id) */
    uint64_t n_instances;       /* n-grams counted */
    uint64_t file_size;
    int memory_mapped;          /* always 0: loads are private copies */
    char tokenizer_name[SFX_TOKENIZER_NAME_MAX];
    uint8_t tokenizer_digest[SFX_TOKENIZER_DIGEST_SIZE];
} sfx_ngram_info;

void sfx_ngram_get_info(const sfx_ngram *g, sfx_ngram_info *out);

typedef struct {
    uint32_t token;         /* the most frequent next id (ties: the lower id) */
    uint32_t count;         /* its count */
    uint32_t total;         /* all counts after the context: the sample size */
    uint32_t n_next;        /* distinct next ids */
} sfx_ngram_answer;

/* The statistics after the last `order` ids of context. Returns 0 (and
 * zeroes *out) when the context is shorter than the order or unseen. */
int sfx_ngram_lookup(const sfx_ngram *g, const uint32_t *context, size_t n,
                     sfx_ngram_answer *out);

/* Next ids after the last `order` ids of context and their counts,
 * ascending by id: writes up to max and returns how many there are. */
size_t sfx_ngram_next(const sfx_ngram *g, const uint32_t *context, size_t n,
                      uint32_t *tokens, uint32_t *counts, size_t max);

/* llama.cpp's static drafting: up to k ids, each the lookup's winner after
 * the context extended by the ids drafted so far; stops before a winner
 * whose sample size is below min_samples or whose share is below
 * min_percent (100 * count < min_percent * total). llama.cpp's static tier
 * uses min_samples 2 and min_percent 50 (draft_min_sample_size_lax and
 * draft_min_percent_lax at LLAMA_NGRAM_STATIC - 1). */
size_t sfx_ngram_draft(const sfx_ngram *g, const uint32_t *context, size_t n,
                       size_t k, uint32_t min_samples, uint32_t min_percent,
                       uint32_t *tokens, sfx_ngram_answer *answers);

#ifdef __cplusplus
}
#endif
#endif /* OLIFANT_SUFFIX_H */
