/*
 * olif_frame.h — what the loaders and writers of every olifant file share (.olif draft
 * models, the .sfx suffix index, the .ngc n-gram cache); internal to the libraries, whose API
 * is igtree.h and suffix.h. Implemented in olif_file.c, beside the file reads and writes.
 *
 * The frame. Every header starts with the same 20 bytes: the magic (8 bytes with the NUL), a
 * u32 format version, a u32 header size and the u32 byte-order tag 0x01020304; and holds,
 * where its layout puts them, the u64 file size, the payload checksum (olif_checksum64 of the
 * bytes after the header) and the header checksum (of the header with that field zero).
 * Sections start at 64-byte aligned offsets after the header.
 *
 * One load path. A file (read into private memory), a caller's buffer (copied) or a built
 * image (handed over) goes through the same steps: the magic, the length, the version, then
 * the kind's parser, which checks the frame, its own fields and sections with the functions
 * below and then the structure. A built structure is loaded like a file, so there is one set
 * of checks for everything a library holds.
 */
#ifndef OLIF_FRAME_H
#define OLIF_FRAME_H

#include "olif_file.h"

#ifdef __cplusplus
extern "C" {
#endif

/* C99 has no _Static_assert: a negative array size fails the build. */
#define OLIF_STATIC_ASSERT(cond, name) typedef char olif_static_assert_##name[(cond) ? 1 : -1]

#define OLIF_ENDIAN_TAG 0x01020304u
#define OLIF_ALIGN 64u
#define OLIF_MAX_HEADER 1024u
#define OLIF_SKIP_CHECKSUM 1u       /* = IGT_LOAD_SKIP_CHECKSUM = SFX_LOAD_SKIP_CHECKSUM */

/* One header layout: its size and where its u64 fields are (offsetof in the header). */
typedef struct {
    uint32_t header_size;       /* at most OLIF_MAX_HEADER */
    uint32_t file_size_at, payload_sum_at, header_sum_at;
} olif_frame;

/* Make an object of a validated kind from image (size bytes, format version `version`). The
 * parser owns image: it frees it, or the object keeps it. On success it stores the object in
 * *out, which is the caller's typed pointer (an igt_model **, an sfx_index **, ...). */
typedef olif_status (*olif_parse_fn)(uint8_t *image, size_t size, uint32_t version,
                                     uint32_t flags, void *out, olif_error *err);

/* One kind of file. */
typedef struct {
    const char *magic;          /* 8 bytes with the NUL */
    const char *what;           /* "model": "not an olifant model file" */
    const char *file;           /* "a model file": "PATH is a FIFO, not a model file" */
    uint32_t min_version, max_version;      /* the versions parse reads */
    olif_parse_fn parse;
} olif_kind;

/* Load a kind from the whole regular file at path (olif_read_file), from a copy of the size
 * bytes at data, or from a built image handed over (freed on failure). out is the caller's
 * typed pointer, which the caller has set to NULL; clears *err. */
olif_status olif_load(const olif_kind *k, const char *path, uint32_t flags, void *out,
                      olif_error *err);
olif_status olif_load_buffer(const olif_kind *k, const void *data, size_t size, uint32_t flags,
                             void *out, olif_error *err);
olif_status olif_load_image(const olif_kind *k, uint8_t *image, size_t size, void *out,
                            olif_error *err);

/* The checks of a frame, in this order: the header size field (CORRUPT), the length at least
 * the header (TRUNCATED), the byte-order tag (CORRUPT), the header checksum unless
 * OLIF_SKIP_CHECKSUM (CHECKSUM), the file size: above the length (TRUNCATED), below (CORRUPT). */
olif_status olif_check_frame(const olif_frame *f, const uint8_t *p, size_t size, uint32_t flags,
                             olif_error *err);

/* count sections (offset[k], size[k] bytes): each 64-byte aligned, after the one before (the
 * first after the header) and inside file_size (CORRUPT). *end: where the last one ends. */
olif_status olif_check_sections(const uint64_t *offset, const uint64_t *size, uint32_t count,
                                uint64_t header_size, uint64_t file_size, uint64_t *end,
                                olif_error *err);

/* The payload checksum, unless OLIF_SKIP_CHECKSUM (CHECKSUM: the file is damaged). */
olif_status olif_check_payload(const olif_frame *f, const uint8_t *p, size_t size,
                               uint32_t flags, olif_error *err);

/* Offsets for count sections of the given sizes, each 64-byte aligned after the header;
 * returns where the last one ends. */
uint64_t olif_lay_out(uint64_t header_size, const uint64_t *size, uint32_t count,
                      uint64_t *offset);
uint64_t olif_align(uint64_t x);

/* Write both checksums of a finished image (size bytes, the header in place). */
void olif_seal(const olif_frame *f, uint8_t *image, size_t size);

/* The header checksum of the header at p (its checksum field read as zero). */
uint64_t olif_header_checksum(const olif_frame *f, const uint8_t *p);

/* A u32 / u64 of the header at p, at byte offset `at` (the machine's byte order). */
uint32_t olif_get32(const uint8_t *p, size_t at);
uint64_t olif_get64(const uint8_t *p, size_t at);

#ifdef __cplusplus
}
#endif
#endif /* OLIF_FRAME_H */
