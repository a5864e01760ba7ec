/* The checksum of every olifant file (.olif draft models, the .sfx suffix index, the .ngc
 * n-gram cache; docs/draft-model.md): FNV-1a style over 8-byte little-endian words, then the
 * tail bytes, seeded with the length. One definition for the libraries and their test drivers,
 * which use it to reseal the images they mutate. */
#ifndef OLIF_CHECKSUM_H
#define OLIF_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t olif_checksum64(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 32;
    }
    for (; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

#endif
