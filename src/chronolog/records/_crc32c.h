/* CRC-32C (Castagnoli) for the C extensions that check or write record batches (storage/_headers.c,
 * records/_clean.c): a table walk, and the SSE4.2 instruction where the CPU has it. Each extension sets
 * `use_sse42` and calls crc_table_init() in its module init. Static: every extension gets its own copy of
 * the code, from one source. */
#ifndef CHRONOLOG_CRC32C_H
#define CHRONOLOG_CRC32C_H
#include <stdint.h>
#include <stddef.h>
#include <string.h>

static uint32_t crc_table[256];

static void crc_table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc32c_table(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    while (n--)
        c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_SSE42_CRC 1
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(const uint8_t *p, size_t n)
{
    uint64_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32 ^ 0xFFFFFFFFu;
}
#endif

static int use_sse42 = 0;

static inline uint32_t crc32c(const uint8_t *p, size_t n)
{
#ifdef HAVE_SSE42_CRC
    if (use_sse42)
        return crc32c_sse42(p, n);
#endif
    return crc32c_table(p, n);
}

#endif
