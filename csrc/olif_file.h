/*
 * olif_file.h — the one file layer of every olifant file (.olif draft models, the .sfx suffix
 * index, the .ngc n-gram cache), in plain C99 with POSIX where the system has it: status
 * codes, errors, the library version, reading a file into private memory and writing one
 * atomically. igtree.h and suffix.h build on it: both libraries return these status codes
 * (one set; igt_status/sfx_status and igt_error/sfx_error are these types under their own
 * names), and olif_frame.h (internal to the libraries) holds the header frame and the load path
 * every file format shares.
 *
 * No global state: every call that can fail takes an olif_error* (may be NULL) and returns an
 * olif_status. I/O is bounds-checked: a read never takes more than the file held when it was
 * opened, and a file is refused unless it is a regular file (a FIFO or device never blocks the
 * caller). Reads are private copies: a file rewritten or truncated under a loaded structure
 * cannot change it or raise SIGBUS. Writes go to a fresh temporary file in the target's
 * directory (O_TMPFILE, or a unique name made with O_CREAT|O_EXCL|O_NOFOLLOW), mode 0600,
 * fsync, rename over the path, fsync of the directory: readers see the old file or the whole
 * new one, and a planted symlink is never followed.
 */
#ifndef OLIF_FILE_H
#define OLIF_FILE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define OLIF_PRINTF_3_4 __attribute__((format(printf, 3, 4)))
#else
#define OLIF_PRINTF_3_4
#endif

/* Library version (both libraries): NUMBER = MAJOR*10000 + MINOR*100 + PATCH. */
#define OLIF_VERSION_MAJOR 0
#define OLIF_VERSION_MINOR 2
#define OLIF_VERSION_PATCH 0
#define OLIF_VERSION_NUMBER 200
#define OLIF_VERSION_STRING "0.2.0"

typedef enum {
    OLIF_OK = 0,
    OLIF_ERR_ARG = 1,        /* bad argument: out-of-range id, order, window, NULL ... */
    OLIF_ERR_NOMEM = 2,      /* allocation failed */
    OLIF_ERR_IO = 3,         /* open/read/write failed, or not a regular file */
    OLIF_ERR_FOREIGN = 4,    /* not an olifant file of the kind asked for (bad magic) */
    OLIF_ERR_VERSION = 5,    /* an olifant file of another format version */
    OLIF_ERR_TRUNCATED = 6,  /* file shorter than its header says */
    OLIF_ERR_CORRUPT = 7,    /* inconsistent header or structure */
    OLIF_ERR_CHECKSUM = 8,   /* header or payload checksum mismatch */
    OLIF_ERR_EMPTY = 9,      /* nothing to build from */
    OLIF_ERR_LIMIT = 10,     /* a size limit of the format was exceeded */
    OLIF_ERR_CANCELLED = 11  /* the progress callback asked to stop */
} olif_status;

typedef struct {
    int code;               /* an olif_status */
    char message[256];      /* what went wrong, naming the offending value or file */
} olif_error;

/* Static description of a status code (never NULL). */
const char *olif_status_string(int code);

/* OLIF_VERSION_STRING / OLIF_VERSION_NUMBER of the library linked. */
const char *olif_version(void);
uint32_t olif_version_number(void);

/* The whole regular file at path in a fresh malloc'ed buffer (*data, *size; free() it). what
 * names the kind of file expected in the error ("a model file"). An empty file is
 * OLIF_ERR_TRUNCATED. */
olif_status olif_read_file(const char *path, const char *what, uint8_t **data, size_t *size,
                           olif_error *err);

/* Write size bytes to path atomically, mode 0600 (see above). On failure path is untouched
 * and no temporary file remains. */
olif_status olif_write_file(const char *path, const uint8_t *data, size_t size, olif_error *err);

/* Set *err (code and formatted message) and return code; clear *err. */
olif_status olif_fail(olif_error *err, olif_status code, const char *fmt, ...) OLIF_PRINTF_3_4;
void olif_clear_error(olif_error *err);

#ifdef __cplusplus
}
#endif
#endif /* OLIF_FILE_H */
