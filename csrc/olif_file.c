/*
 * olif_file.c — the file layer of every olifant file: status codes, errors, version, private
 * reads and atomic 0600 writes (API in olif_file.h), and the frame and load path every
 * format shares (olif_frame.h).
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* O_TMPFILE; everything else used here is POSIX.1-2008 */
#endif
#define _POSIX_C_SOURCE 200809L
#include "olif_file.h"
#include "olif_frame.h"
#include "olif_checksum.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__unix__) || defined(__APPLE__)
#define OLIF_POSIX_IO 1
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#else
#define OLIF_POSIX_IO 0
#endif

/* ---- version, errors ----------------------------------------------------------------- */

const char *olif_version(void) { return OLIF_VERSION_STRING; }

uint32_t olif_version_number(void) { return OLIF_VERSION_NUMBER; }

const char *olif_status_string(int code) {
    switch (code) {
    case OLIF_OK: return "ok";
    case OLIF_ERR_ARG: return "invalid argument";
    case OLIF_ERR_NOMEM: return "out of memory";
    case OLIF_ERR_IO: return "i/o error";
    case OLIF_ERR_FOREIGN: return "not an olifant file of this kind";
    case OLIF_ERR_VERSION: return "unsupported file format version";
    case OLIF_ERR_TRUNCATED: return "file is truncated";
    case OLIF_ERR_CORRUPT: return "file is corrupt";
    case OLIF_ERR_CHECKSUM: return "file checksum mismatch";
    case OLIF_ERR_EMPTY: return "nothing to build from";
    case OLIF_ERR_LIMIT: return "size limit exceeded";
    case OLIF_ERR_CANCELLED: return "cancelled";
    default: return "unknown error";
    }
}

olif_status olif_fail(olif_error *err, olif_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        err->code = (int)code;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}

void olif_clear_error(olif_error *err) {
    if (err) {
        err->code = OLIF_OK;
        err->message[0] = '\0';
    }
}

/* ---- reading ------------------------------------------------------------------------- */

#if OLIF_POSIX_IO
static const char *file_kind(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}
#endif

/* Read the whole file into private memory: a structure must not change when
 * its file does (truncation would SIGBUS a mapping; a rewritten file would
 * feed unvalidated bytes to queries), so validation and queries see only
 * this copy. */
olif_status olif_read_file(const char *path, const char *what, uint8_t **data, size_t *size,
                           olif_error *err) {
    olif_clear_error(err);
    if (!path || !data || !size) return olif_fail(err, OLIF_ERR_ARG, "NULL path or out");
    *data = NULL;
    *size = 0;
    if (!what) what = "an olifant file";
#if OLIF_POSIX_IO
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then
     * refuses anything but a regular file before a byte is read */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY
#ifdef O_CLOEXEC
                            | O_CLOEXEC
#endif
    );
    if (fd < 0) return olif_fail(err, OLIF_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat stt;
    if (fstat(fd, &stt) != 0) {
        int e = errno;
        close(fd);
        return olif_fail(err, OLIF_ERR_IO, "cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(stt.st_mode)) {
        close(fd);
        return olif_fail(err, OLIF_ERR_IO, "%s is %s, not %s", path, file_kind(stt.st_mode), what);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl != -1) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    if (stt.st_size == 0) {
        close(fd);
        return olif_fail(err, OLIF_ERR_TRUNCATED, "%s is empty", path);
    }
    if ((uint64_t)stt.st_size > (uint64_t)SIZE_MAX / 2) {
        close(fd);
        return olif_fail(err, OLIF_ERR_LIMIT, "%s: %lld bytes is too large to load", path,
                         (long long)stt.st_size);
    }
    size_t want = (size_t)stt.st_size, got = 0;
    uint8_t *buf = malloc(want);
    if (!buf) {
        close(fd);
        return olif_fail(err, OLIF_ERR_NOMEM, "cannot allocate %zu bytes for %s", want, path);
    }
    while (got < want) {
        size_t ask = want - got > ((size_t)1 << 30) ? (size_t)1 << 30 : want - got;
        ssize_t r = read(fd, buf + got, ask);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            free(buf);
            return olif_fail(err, OLIF_ERR_IO, "cannot read %s: %s", path, strerror(e));
        }
        if (r == 0) break;          /* shrank since fstat: validation sees what is there */
        got += (size_t)r;
    }
    close(fd);
    if (got == 0) {
        free(buf);
        return olif_fail(err, OLIF_ERR_TRUNCATED, "%s is empty", path);
    }
    *data = buf;
    *size = got;
    return OLIF_OK;
#else
    FILE *f = fopen(path, "rb");
    if (!f) return olif_fail(err, OLIF_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : (size_t)1 << 20;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return olif_fail(err, OLIF_ERR_NOMEM, "reading %s", path);
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return olif_fail(err, OLIF_ERR_IO, "cannot read %s", path);
    }
    if (n == 0) {
        free(buf);
        return olif_fail(err, OLIF_ERR_TRUNCATED, "%s is empty", path);
    }
    *data = buf;
    *size = n;
    return OLIF_OK;
#endif
}


/* ---- writing ------------------------------------------------------------------------- */

#if OLIF_POSIX_IO
static int write_all(int fd, const uint8_t *p, size_t n) {
    while (n) {
        size_t ask = n > ((size_t)1 << 30) ? (size_t)1 << 30 : n;
        ssize_t w = write(fd, p, ask);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? errno : EIO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* A temporary name in the target's directory; unique per process, time and
 * attempt (created with O_EXCL, so a clash only costs a retry). */
static void temp_name(char *buf, size_t cap, const char *base, unsigned attempt) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_nsec ^
                 (uint64_t)ts.tv_sec << 30 ^ (uint64_t)(uintptr_t)buf ^ (uint64_t)attempt << 48;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    snprintf(buf, cap, ".%.180s.%016llx.tmp", base, (unsigned long long)x);
}

/* Write data to path so that readers see the old file or the whole new one:
 * a private temporary file in the same directory (O_TMPFILE where the
 * system has it, so a kill mid-write leaves nothing; else a fresh name made
 * with O_EXCL|O_NOFOLLOW, never following a planted link), mode 0600 (the files
 * hold a corpus's n-grams or its token ids), fsync, rename over path, fsync the
 * directory. On failure the temporary file is gone and path is untouched. */
olif_status olif_write_file(const char *path, const uint8_t *data, size_t size, olif_error *err) {
    olif_clear_error(err);
    if (!path || (!data && size)) return olif_fail(err, OLIF_ERR_ARG, "NULL path or data");
    size_t len = strlen(path);
    if (len == 0 || path[len - 1] == '/')
        return olif_fail(err, OLIF_ERR_ARG, "save path '%s' names a directory", path);
    char *dir = malloc(len + 2);
    if (!dir) return olif_fail(err, OLIF_ERR_NOMEM, "path");
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!slash) {
        strcpy(dir, ".");
    } else if (slash == path) {
        strcpy(dir, "/");
    } else {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
    }
    olif_status st = OLIF_OK;
    char name[256];
    name[0] = '\0';
    int named = 0, fd = -1, e = 0;
    int dfd = open(dir, O_RDONLY
#ifdef O_DIRECTORY
                            | O_DIRECTORY
#endif
#ifdef O_CLOEXEC
                            | O_CLOEXEC
#endif
    );
    if (dfd < 0) {
        st = olif_fail(err, OLIF_ERR_IO, "cannot save %s: directory %s: %s", path, dir,
                       strerror(errno));
        goto out;
    }
    for (int use_tmpfile = 1; use_tmpfile >= 0; use_tmpfile--) {
        named = 0;
        if (use_tmpfile) {
#ifdef O_TMPFILE
            fd = openat(dfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
#endif
            if (fd < 0) continue;   /* no O_TMPFILE here: a named file */
        } else {
            for (unsigned attempt = 0; attempt < 64; attempt++) {
                temp_name(name, sizeof name, base, attempt);
                fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW
#ifdef O_CLOEXEC
                                           | O_CLOEXEC
#endif
                            , 0600);
                if (fd >= 0 || errno != EEXIST) break;
            }
            if (fd < 0) {
                st = olif_fail(err, OLIF_ERR_IO, "cannot create a temporary file for %s in %s: %s",
                               path, dir, strerror(errno));
                goto out;
            }
            named = 1;
        }
        if (fchmod(fd, 0600) != 0 || (e = write_all(fd, data, size)) != 0 || fsync(fd) != 0) {
            if (!e) e = errno;
            st = olif_fail(err, OLIF_ERR_IO, "cannot write %s: %s", path, strerror(e));
            goto out;
        }
        if (named) break;
        /* give the finished unnamed file a name (a unique one: linkat never
         * replaces), then rename it over path below */
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        int linked = 0;
        for (unsigned attempt = 0; attempt < 64 && !linked; attempt++) {
            temp_name(name, sizeof name, base, attempt);
            if (linkat(AT_FDCWD, proc, dfd, name, AT_SYMLINK_FOLLOW) == 0) linked = 1;
            else if (errno != EEXIST) break;
        }
        if (linked) {
            named = 1;
            break;
        }
        close(fd);      /* no /proc, or a filesystem that refuses: start over named */
        fd = -1;
    }
    if (renameat(dfd, name, dfd, base) != 0) {
        st = olif_fail(err, OLIF_ERR_IO, "cannot rename the temporary file to %s: %s", path,
                       strerror(errno));
        goto out;
    }
    named = 0;          /* it is path now */
    if (fsync(dfd) != 0 && errno != EINVAL && errno != ENOTSUP && errno != EBADF)
        st = olif_fail(err, OLIF_ERR_IO, "saved %s, but cannot sync directory %s: %s", path, dir,
                       strerror(errno));
out:
    if (fd >= 0) close(fd);
    if (named) unlinkat(dfd, name, 0);
    if (dfd >= 0) close(dfd);
    free(dir);
    return st;
}
#else
olif_status olif_write_file(const char *path, const uint8_t *data, size_t size, olif_error *err) {
    olif_clear_error(err);
    if (!path || (!data && size)) return olif_fail(err, OLIF_ERR_ARG, "NULL path or data");
    /* no POSIX: best effort with stdio (a stale path.tmp may remain) */
    size_t len = strlen(path);
    char *tmp = malloc(len + 5);
    if (!tmp) return olif_fail(err, OLIF_ERR_NOMEM, "path");
    memcpy(tmp, path, len);
    memcpy(tmp + len, ".tmp", 5);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        free(tmp);
        return olif_fail(err, OLIF_ERR_IO, "cannot create %s.tmp: %s", path, strerror(errno));
    }
    int bad = fwrite(data, 1, size, f) != size || fflush(f) != 0;
    if (fclose(f) != 0) bad = 1;
    remove(path);
    if (bad || rename(tmp, path) != 0) {
        remove(tmp);
        free(tmp);
        return olif_fail(err, OLIF_ERR_IO, "cannot write %s", path);
    }
    free(tmp);
    return OLIF_OK;
}
#endif


/* ---- the frame every format shares (olif_frame.h) ---------------------------------- */

uint32_t olif_get32(const uint8_t *p, size_t at) {
    uint32_t v;
    memcpy(&v, p + at, 4);
    return v;
}

uint64_t olif_get64(const uint8_t *p, size_t at) {
    uint64_t v;
    memcpy(&v, p + at, 8);
    return v;
}

uint64_t olif_align(uint64_t x) { return (x + OLIF_ALIGN - 1) / OLIF_ALIGN * OLIF_ALIGN; }

uint64_t olif_header_checksum(const olif_frame *f, const uint8_t *p) {
    uint8_t h[OLIF_MAX_HEADER];
    memcpy(h, p, f->header_size);
    memset(h + f->header_sum_at, 0, 8);
    return olif_checksum64(h, f->header_size);
}

void olif_seal(const olif_frame *f, uint8_t *image, size_t size) {
    uint64_t sum = olif_checksum64(image + f->header_size, size - f->header_size);
    memcpy(image + f->payload_sum_at, &sum, 8);
    sum = olif_header_checksum(f, image);
    memcpy(image + f->header_sum_at, &sum, 8);
}

uint64_t olif_lay_out(uint64_t header_size, const uint64_t *size, uint32_t count,
                      uint64_t *offset) {
    uint64_t end = header_size;
    for (uint32_t k = 0; k < count; k++) {
        offset[k] = olif_align(end);
        end = offset[k] + size[k];
    }
    return end;
}

olif_status olif_check_frame(const olif_frame *f, const uint8_t *p, size_t size, uint32_t flags,
                             olif_error *err) {
    uint32_t hsize = olif_get32(p, 12);
    if (hsize != f->header_size)
        return olif_fail(err, OLIF_ERR_CORRUPT, "header size %u, expected %u", hsize,
                         f->header_size);
    if (size < f->header_size)
        return olif_fail(err, OLIF_ERR_TRUNCATED, "file of %zu bytes ends inside the %u-byte header",
                         size, f->header_size);
    uint32_t tag = olif_get32(p, 16);
    if (tag != OLIF_ENDIAN_TAG)
        return olif_fail(err, OLIF_ERR_CORRUPT,
                         "byte order tag 0x%08x: file from another byte order", tag);
    if (!(flags & OLIF_SKIP_CHECKSUM) &&
        olif_header_checksum(f, p) != olif_get64(p, f->header_sum_at))
        return olif_fail(err, OLIF_ERR_CHECKSUM, "header checksum mismatch");
    uint64_t file_size = olif_get64(p, f->file_size_at);
    if (file_size != size)
        return olif_fail(err, file_size > size ? OLIF_ERR_TRUNCATED : OLIF_ERR_CORRUPT,
                         "file has %zu bytes, header says %llu", size,
                         (unsigned long long)file_size);
    return OLIF_OK;
}

olif_status olif_check_sections(const uint64_t *offset, const uint64_t *size, uint32_t count,
                                uint64_t header_size, uint64_t file_size, uint64_t *end,
                                olif_error *err) {
    uint64_t prev_end = header_size;
    for (uint32_t k = 0; k < count; k++) {
        uint64_t o = offset[k];
        if (o % OLIF_ALIGN || o < prev_end || o > file_size || size[k] > file_size - o)
            return olif_fail(err, OLIF_ERR_CORRUPT,
                             "section %u at offset %llu (%llu bytes) out of bounds", k,
                             (unsigned long long)o, (unsigned long long)size[k]);
        prev_end = o + size[k];
    }
    *end = prev_end;
    return OLIF_OK;
}

olif_status olif_check_payload(const olif_frame *f, const uint8_t *p, size_t size,
                               uint32_t flags, olif_error *err) {
    if (!(flags & OLIF_SKIP_CHECKSUM) &&
        olif_checksum64(p + f->header_size, size - f->header_size) !=
            olif_get64(p, f->payload_sum_at))
        return olif_fail(err, OLIF_ERR_CHECKSUM, "payload checksum mismatch: the file is damaged");
    return OLIF_OK;
}

/* ---- one load path ------------------------------------------------------------------ */

/* Every olifant kind, so that a file of one given for another says what it is. */
static const struct {
    const char *magic, *name;
} KINDS[] = {{"OLIFIGT", "a draft model (.olif)"},
             {"OLIFSFX", "a suffix index (.sfx)"},
             {"OLIFNGC", "an n-gram cache (.ngc)"}};

/* The magic, the length and the version, then the kind's parser, which owns image. */
static olif_status parse_image(const olif_kind *k, uint8_t *image, size_t size, uint32_t flags,
                               void *out, olif_error *err) {
    if (size < 8 || memcmp(image, k->magic, 8) != 0) {
        const char *other = NULL;
        for (size_t i = 0; size >= 8 && i < sizeof KINDS / sizeof *KINDS; i++)
            if (memcmp(image, KINDS[i].magic, 8) == 0) other = KINDS[i].name;
        free(image);
        if (other)
            return olif_fail(err, OLIF_ERR_FOREIGN, "not an olifant %s file (bad magic: it is %s)",
                             k->what, other);
        return olif_fail(err, OLIF_ERR_FOREIGN, "not an olifant %s file (bad magic)", k->what);
    }
    if (size < 16) {
        free(image);
        return olif_fail(err, OLIF_ERR_TRUNCATED, "file of %zu bytes ends inside the header", size);
    }
    uint32_t version = olif_get32(image, 8);
    if (version < k->min_version || version > k->max_version) {
        free(image);
        if (k->min_version == k->max_version)
            return olif_fail(err, OLIF_ERR_VERSION, "%s format version %u, this library reads "
                             "version %u", k->what, version, k->max_version);
        return olif_fail(err, OLIF_ERR_VERSION, "%s format version %u, this library reads "
                         "versions %u %s %u", k->what, version, k->min_version,
                         k->max_version == k->min_version + 1 ? "and" : "to", k->max_version);
    }
    return k->parse(image, size, version, flags, out, err);
}

olif_status olif_load(const olif_kind *k, const char *path, uint32_t flags, void *out,
                      olif_error *err) {
    olif_clear_error(err);
    if (!path || !out) return olif_fail(err, OLIF_ERR_ARG, "NULL path or out");
    uint8_t *image = NULL;
    size_t size = 0;
    olif_status st = olif_read_file(path, k->file, &image, &size, err);
    return st ? st : parse_image(k, image, size, flags, out, err);
}

olif_status olif_load_buffer(const olif_kind *k, const void *data, size_t size, uint32_t flags,
                             void *out, olif_error *err) {
    olif_clear_error(err);
    if (!out || (!data && size)) return olif_fail(err, OLIF_ERR_ARG, "NULL data or out");
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return olif_fail(err, OLIF_ERR_NOMEM, "cannot allocate %zu bytes for %s", size, k->file);
    if (size) memcpy(copy, data, size);
    return parse_image(k, copy, size, flags, out, err);
}

olif_status olif_load_image(const olif_kind *k, uint8_t *image, size_t size, void *out,
                            olif_error *err) {
    return parse_image(k, image, size, 0, out, err);
}
