/*
 * store_reader._native: the native commitlog scanner, and beside it kernels with NumPy twins
 * (Java string hashes: javahash.py; IndexFile#putKey batches: indexfile.py; the audit's index
 * pair checks: audit/index.py).
 *
 * Validates commitlog records exactly as the broker's recovery does (spec recovery.md §3,
 * CommitLog#checkMessageAndReturnSize) and materialises the requested MESSAGE columns as Arrow
 * buffers (little-endian `bytes`, what pa.Array.from_buffers expects). The pure-Python twin
 * store_reader/_pyscan.py is the reference: for the same inputs both give the same results, which
 * tests/test_native_scanner.py checks on every fixture store and on generated and mutated segments.
 *
 * Safety rules, all enforced in this file:
 *   - every byte read from the segment goes through span_at(), the one bounds check, against
 *     [0, end) of the caller's buffer, whatever TOTALSIZE or a length field says;
 *   - nothing is allocated from a length read from the segment: scratch sizes are constants derived
 *     from the i16 limits of the format, output buffers grow geometrically with what was actually
 *     decoded (first sized from the first VALID record, at most PRESIZE_MAX_ROWS rows);
 *   - the scanning loops run without the GIL; output buffers are the storage of `bytes` objects
 *     (no final copy), created and resized only with the GIL re-taken (buf_grow); every exit path
 *     releases the Py_buffer and frees the temporaries.
 * Speed: a software prefetch stream ahead of the record (prefetch_ahead), a PCLMULQDQ CRC-32 kernel chosen at
 * import (zlib otherwise), SSE2 separator search in the properties, inlined short copies.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "Arrow buffers are produced in native order; this file assumes a little-endian host"
#endif

#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_CLMUL_CRC 1
#include <immintrin.h>
#endif

/* ============================================================================================== */
/* Record layout: store-format.md §3.1 (V1, IPv4/IPv4) and §3.2 (IPv6 shifts), each field's offset */
/* derived from the previous one. Sizes are those of the Java types (§0: big-endian, signed).     */
/* ============================================================================================== */

#define SZ_I8 1
#define SZ_I16 2
#define SZ_I32 4
#define SZ_I64 8

#define OFF_TOTALSIZE 0                                    /* §3.1 #1  i32 TOTALSIZE */
#define OFF_MAGICCODE (OFF_TOTALSIZE + SZ_I32)             /* §3.1 #2  i32 MAGICCODE */
#define OFF_BODYCRC (OFF_MAGICCODE + SZ_I32)               /* §3.1 #3  i32 BODYCRC */
#define OFF_QUEUEID (OFF_BODYCRC + SZ_I32)                 /* §3.1 #4  i32 QUEUEID */
#define OFF_FLAG (OFF_QUEUEID + SZ_I32)                    /* §3.1 #5  i32 FLAG */
#define OFF_QUEUEOFFSET (OFF_FLAG + SZ_I32)                /* §3.1 #6  i64 QUEUEOFFSET */
#define OFF_PHYSICALOFFSET (OFF_QUEUEOFFSET + SZ_I64)      /* §3.1 #7  i64 PHYSICALOFFSET */
#define OFF_SYSFLAG (OFF_PHYSICALOFFSET + SZ_I64)          /* §3.1 #8  i32 SYSFLAG */
#define OFF_BORNTIMESTAMP (OFF_SYSFLAG + SZ_I32)           /* §3.1 #9  i64 BORNTIMESTAMP */
#define OFF_BORNHOST (OFF_BORNTIMESTAMP + SZ_I64)          /* §3.1 #10 BORNHOST, B bytes (§3.2) */
#define HEAD_SIZE OFF_BORNHOST                             /* fixed head read in one piece */

/* §3.2: the born host is B = 8 (IPv4) or 20 (IPv6, SYSFLAG & 0x10) bytes, the store host S = 8 or
 * 20 (SYSFLAG & 0x20); each is the address followed by an i32 port. From BORNHOST on, offsets are
 * relative to the end of the previous field. */
#define HOST_V4_LEN (4 + SZ_I32)
#define HOST_V6_LEN (16 + SZ_I32)
#define OFF_STORETIMESTAMP(B) (OFF_BORNHOST + (B))                  /* §3.1 #11 i64 */
#define OFF_STOREHOST(B) (OFF_STORETIMESTAMP(B) + SZ_I64)           /* §3.1 #12 S bytes */
#define OFF_RECONSUMETIMES(B, S) (OFF_STOREHOST(B) + (S))           /* §3.1 #13 i32 */
#define OFF_PREPAREDTXOFFSET(B, S) (OFF_RECONSUMETIMES(B, S) + SZ_I32) /* §3.1 #14 i64 */
#define OFF_BODYLEN(B, S) (OFF_PREPAREDTXOFFSET(B, S) + SZ_I64)     /* §3.1 #15 i32 BODYLEN */
#define OFF_BODY(B, S) (OFF_BODYLEN(B, S) + SZ_I32)                 /* §3.1 #15b body, max(b,0) */
/* After the body (§3.1 #16-#17b, §3.3): TOPICLEN (i8 for V1, i16 for V2), TOPIC, PROPERTIESLEN
 * (i16), PROPERTIES. The middle block RECONSUMETIMES..BODYLEN is read in one piece: */
#define MID_SIZE (SZ_I32 + SZ_I64 + SZ_I32)
/* §3.2 calMsgLength: every fixed-width field incl. BODYLEN and PROPERTIESLEN, without hosts and
 * the topic length field: 74. */
#define CAL_FIXED (OFF_BODY(0, 0) + SZ_I16)

_Static_assert(OFF_PHYSICALOFFSET == 28, "§3.1 PHYSICALOFFSET at 28");
_Static_assert(OFF_SYSFLAG == 36, "§3.1 SYSFLAG at 36");
_Static_assert(OFF_BORNHOST == 48, "§3.1 BORNHOST at 48");
_Static_assert(OFF_STORETIMESTAMP(HOST_V4_LEN) == 56 && OFF_STORETIMESTAMP(HOST_V6_LEN) == 68,
               "§3.2 STORETIMESTAMP");
_Static_assert(OFF_RECONSUMETIMES(HOST_V6_LEN, HOST_V4_LEN) == 84, "§3.2 RECONSUMETIMES");
_Static_assert(OFF_BODYLEN(HOST_V4_LEN, HOST_V6_LEN) == 96, "§3.2 BODYLEN, store v6");
_Static_assert(OFF_BODY(HOST_V4_LEN, HOST_V4_LEN) == 88 && OFF_BODY(HOST_V6_LEN, HOST_V6_LEN) == 112,
               "§3.2 BODY");
_Static_assert(OFF_BODYLEN(HOST_V4_LEN, HOST_V4_LEN) - OFF_RECONSUMETIMES(HOST_V4_LEN, HOST_V4_LEN)
               + SZ_I32 == MID_SIZE, "MID block");
_Static_assert(CAL_FIXED == 74, "§3.2 calMsgLength constant");
_Static_assert(CAL_FIXED + HOST_V4_LEN + HOST_V4_LEN + SZ_I8 == 91, "§3.1 total 91 + b + t + p");

/* §3.3 magic codes, §3.10 blank marker (as signed i32, like recordformat.py). */
#define MAGIC_V1 ((int32_t)0xDAA320A7)
#define MAGIC_V2 ((int32_t)0xDAA320AB)
#define BLANK_MAGIC ((int32_t)0xCBD43194)
/* §3.5 SYSFLAG host bits */
#define BORNHOST_V6_FLAG 0x10
#define STOREHOSTADDRESS_V6_FLAG 0x20
/* §3.8 "__CRC32#" \x01 10 digits \x02 */
#define CRC32_RESERVED_LEN 20
/* §3.7 separators */
#define NAME_VALUE_SEPARATOR 0x01
#define PROPERTY_SEPARATOR 0x02
#define KEY_SEPARATOR 0x20
/* §3.5 SYSFLAG transaction type: a ROLLBACK record puts no index entries */
#define TRANSACTION_TYPE_MASK 0xC
#define TRANSACTION_ROLLBACK_TYPE 0xC
/* PROPERTIESLEN is an i16: the properties string is at most 32767 bytes, so at most 8192
 * name\x01value\x02 pairs (4 bytes the shortest) fit in one record. Scratch is sized from these. */
#define MAX_PROPS_LEN 32767
#define MAX_PAIRS (MAX_PROPS_LEN / 4 + 1)
/* The smallest VALID record (calMsgLength with everything empty): bounds the record count. */
#define MIN_RECORD_SIZE (CAL_FIXED + HOST_V4_LEN + HOST_V4_LEN + SZ_I8)

static const char SCHEDULE_TOPIC[] = "SCHEDULE_TOPIC_XXXX";

/* F§16.2 DLedger entry: magic 1, size, index, term, pos, channel, chainCrc, bodyCrc, bodySize, then
 * the record at BODY_OFFSET 48; magic -1 is DLedger's blank (F§16.2). */
#define DL_MAGIC_1 1
#define DL_BLANK_MAGIC (-1)
#define DL_HEADER_SIZE 44
#define DL_BODY_OFFSET 48

/* Outcomes and check codes: recordformat.OUTCOMES / CHECKS (a test compares them). */
enum { VALID = 0, END_OF_FILE = 1, INVALID = 2, LENGTH_MISMATCH = 3 };
enum {
    CK_NONE = 0, CK_OUT_OF_BOUNDS, CK_TOTAL_SIZE, CK_BAD_MAGIC, CK_BODY_CRC, CK_TOPIC_LENGTH,
    CK_DELAY_PROPERTY, CK_DUP_INFO, CK_RECORD_CRC, CK_LENGTH_MISMATCH, CK_INNER_BATCH,
    CK_DLEDGER_ENTRY, CK_DLEDGER_BODY_SIZE, CK_COUNT
};
static const char *const CHECK_NAMES[CK_COUNT] = {
    "", "out_of_bounds", "total_size", "bad_magic", "body_crc", "topic_length", "delay_property",
    "dup_info", "record_crc", "length_mismatch", "inner_batch", "dledger_entry", "dledger_body_size",
};
static const char *const OUTCOME_NAMES[4] = {"valid", "end_of_file", "invalid", "length_mismatch"};

/* ============================================================================================== */
/* Bounds-checked reads                                                                           */
/* ============================================================================================== */

typedef struct {
    const uint8_t *base; /* the caller's buffer */
    int64_t end;         /* readable bytes: [0, end) */
} span_t;

/* The one bounds check: a pointer to [p, p+n) if that range lies inside [0, end), else NULL.
 * Every read of segment bytes in this file is through a pointer it returned, within its n. */
static inline const uint8_t *span_at(const span_t *s, int64_t p, int64_t n) {
    if (p < 0 || n < 0 || p > s->end || n > s->end - p) {
        return NULL;
    }
    return s->base + p;
}

static inline int32_t be_i32(const uint8_t *q) {
    uint32_t v;
    memcpy(&v, q, 4);
    return (int32_t)__builtin_bswap32(v);
}
static inline int64_t be_i64(const uint8_t *q) {
    uint64_t v;
    memcpy(&v, q, 8);
    return (int64_t)__builtin_bswap64(v);
}
static inline int16_t be_i16(const uint8_t *q) {
    return (int16_t)(uint16_t)(((uint16_t)q[0] << 8) | q[1]);
}
static inline void put_be32(uint8_t *q, int32_t v) {
    uint32_t u = __builtin_bswap32((uint32_t)v);
    memcpy(q, &u, 4);
}
static inline void put_be64(uint8_t *q, int64_t v) {
    uint64_t u = __builtin_bswap64((uint64_t)v);
    memcpy(q, &u, 8);
}

/* ============================================================================================== */
/* CRC-32 (store-format.md §3.6: java.util.zip.CRC32 & 0x7FFFFFFF)                                */
/* zlib is the portable path; on x86-64 with PCLMULQDQ a carry-less-multiply folding kernel is    */
/* chosen at import (runtime CPU check). Both compute the same standard reflected CRC-32.         */
/* ============================================================================================== */

typedef uint32_t (*crc_fn)(uint32_t crc, const uint8_t *p, size_t n);

static uint32_t crc32_zlib(uint32_t crc, const uint8_t *p, size_t n) {
    return (uint32_t)crc32_z(crc, p, n);
}

#ifdef HAVE_CLMUL_CRC
/* Folding constants for the reflected polynomial 0x104C11DB7 (Intel white paper "Fast CRC
 * Computation for Generic Polynomials Using PCLMULQDQ", as used by zlib-ng and the Linux kernel):
 * k1/k2 fold 4x128 bits, k3/k4 fold 128 bits, k5 folds 96->64, poly/mu drive Barrett reduction. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc32_clmul(uint32_t crc, const uint8_t *p, size_t n) {
    if (n < 64) {
        return (uint32_t)crc32_z(crc, p, n);
    }
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
    const __m128i k5k0 = _mm_set_epi64x(0x0000000000, 0x0163cd6124);
    const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);
    crc = ~crc;
    __m128i x1 = _mm_loadu_si128((const __m128i *)(const void *)(p + 0x00));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(const void *)(p + 0x10));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(const void *)(p + 0x20));
    __m128i x4 = _mm_loadu_si128((const __m128i *)(const void *)(p + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    p += 64;
    n -= 64;
    while (n >= 64) {
        __m128i x5 = _mm_clmulepi64_si128(x1, k1k2, 0x00);
        __m128i x6 = _mm_clmulepi64_si128(x2, k1k2, 0x00);
        __m128i x7 = _mm_clmulepi64_si128(x3, k1k2, 0x00);
        __m128i x8 = _mm_clmulepi64_si128(x4, k1k2, 0x00);
        x1 = _mm_clmulepi64_si128(x1, k1k2, 0x11);
        x2 = _mm_clmulepi64_si128(x2, k1k2, 0x11);
        x3 = _mm_clmulepi64_si128(x3, k1k2, 0x11);
        x4 = _mm_clmulepi64_si128(x4, k1k2, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5),
                           _mm_loadu_si128((const __m128i *)(const void *)(p + 0x00)));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6),
                           _mm_loadu_si128((const __m128i *)(const void *)(p + 0x10)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7),
                           _mm_loadu_si128((const __m128i *)(const void *)(p + 0x20)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8),
                           _mm_loadu_si128((const __m128i *)(const void *)(p + 0x30)));
        p += 64;
        n -= 64;
    }
    /* fold 4x128 -> 128 */
    __m128i x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_clmulepi64_si128(x1, k3k4, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_clmulepi64_si128(x1, k3k4, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_clmulepi64_si128(x1, k3k4, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    /* fold 128-bit blocks left over */
    while (n >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)(const void *)p);
        x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
        x1 = _mm_clmulepi64_si128(x1, k3k4, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        p += 16;
        n -= 16;
    }
    /* 128 -> 64 bits */
    const __m128i mask32 = _mm_setr_epi32(~0, 0, ~0, 0);
    x2 = _mm_clmulepi64_si128(x1, k3k4, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, mask32);
    x1 = _mm_clmulepi64_si128(x1, k5k0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    /* Barrett reduction 64 -> 32 bits */
    x2 = _mm_and_si128(x1, mask32);
    x2 = _mm_clmulepi64_si128(x2, poly, 0x10);
    x2 = _mm_and_si128(x2, mask32);
    x2 = _mm_clmulepi64_si128(x2, poly, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    crc = ~(uint32_t)_mm_extract_epi32(x1, 1);
    return n ? (uint32_t)crc32_z(crc, p, n) : crc;
}
#endif

static crc_fn crc32_impl = crc32_zlib;
static const char *crc32_impl_name = "zlib";

static void choose_crc32(void) {
#ifdef HAVE_CLMUL_CRC
    __builtin_cpu_init();
    if (__builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1")) {
        crc32_impl = crc32_clmul;
        crc32_impl_name = "pclmulqdq";
    }
#endif
}

/* UtilAll#crc32: CRC-32 & 0x7FFFFFFF (never negative). */
static inline int32_t broker_crc(const uint8_t *p, int64_t n) {
    return (int32_t)(crc32_impl(0, p, (size_t)n) & 0x7FFFFFFFu);
}

/* ============================================================================================== */
/* UTF-8 with replacement, exactly like CPython's bytes.decode("utf-8", "replace"): each maximal  */
/* subpart of an ill-formed sequence (incl. one truncated by the end) becomes one U+FFFD.          */
/* ============================================================================================== */

#define REPLACEMENT_CHAR 0xFFFDu

/* Next code point of s[*i..n), *i < n; advances *i. */
static inline uint32_t utf8_next(const uint8_t *s, int64_t n, int64_t *i) {
    uint8_t c = s[*i];
    if (c < 0x80) {
        (*i)++;
        return c;
    }
    int need;
    uint32_t cp;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
        cp = c & 0x1Fu;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        cp = c & 0x0Fu;
        if (c == 0xE0) lo = 0xA0;       /* no overlong forms */
        else if (c == 0xED) hi = 0x9F;  /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        cp = c & 0x07u;
        if (c == 0xF0) lo = 0x90;       /* no overlong forms */
        else if (c == 0xF4) hi = 0x8F;  /* <= U+10FFFF */
    } else {
        (*i)++;
        return REPLACEMENT_CHAR;
    }
    int64_t j = *i + 1;
    for (int k = 0; k < need; k++, j++) {
        if (j >= n || s[j] < lo || s[j] > hi) {
            *i = j;
            return REPLACEMENT_CHAR;
        }
        lo = 0x80;
        hi = 0xBF;
        cp = (cp << 6) | (s[j] & 0x3Fu);
    }
    *i = j;
    return cp;
}

/* True when no byte has the top bit set (word at a time). */
static inline bool all_ascii(const uint8_t *s, int64_t n) {
    int64_t i = 0;
    uint64_t acc = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        acc |= w;
    }
    for (; i < n; i++) acc |= s[i];
    return (acc & 0x8080808080808080ull) == 0;
}

static bool utf8_valid(const uint8_t *s, int64_t n) {
    if (all_ascii(s, n)) return true;
    int64_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int64_t start = i;
        uint32_t cp = utf8_next(s, n, &i);
        if (cp == REPLACEMENT_CHAR &&
            !(i - start == 3 && s[start] == 0xEF && s[start + 1] == 0xBF && s[start + 2] == 0xBD)) {
            return false;
        }
    }
    return true;
}

/* Decode s[0..n) with replacement into out (capacity >= 3n); returns the bytes written. */
static int64_t utf8_replace_into(const uint8_t *s, int64_t n, uint8_t *out) {
    int64_t i = 0, o = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            out[o++] = s[i++];
            continue;
        }
        int64_t start = i;
        uint32_t cp = utf8_next(s, n, &i);
        if (cp == REPLACEMENT_CHAR &&
            !(i - start == 3 && s[start] == 0xEF && s[start + 1] == 0xBF && s[start + 2] == 0xBD)) {
            out[o++] = 0xEF;
            out[o++] = 0xBF;
            out[o++] = 0xBD;
        } else {
            memcpy(out + o, s + start, (size_t)(i - start)); /* a well-formed sequence */
            o += i - start;
        }
    }
    return o;
}

/* Java String.hashCode over the UTF-16 code units of the (replacement-)decoded string. */
static int32_t java_hash_utf8(const uint8_t *s, int64_t n) {
    uint32_t h = 0;
    int64_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            h = 31u * h + s[i++];
            continue;
        }
        uint32_t cp = utf8_next(s, n, &i);
        if (cp < 0x10000u) {
            h = 31u * h + cp;
        } else { /* astral: its surrogate pair */
            cp -= 0x10000u;
            h = 31u * h + (0xD800u + (cp >> 10));
            h = 31u * h + (0xDC00u + (cp & 0x3FFu));
        }
    }
    return (int32_t)h;
}

/* Integer.parseInt / Long.parseLong for the decoded string (ASCII sign and digits only, as the
 * twin's java_parse_int): true and *out when it parses within [lo, hi]. */
static bool java_parse(const uint8_t *s, int64_t n, int64_t lo, int64_t hi, int64_t *out) {
    int64_t i = 0;
    bool neg = false;
    if (n > 0 && (s[0] == '+' || s[0] == '-')) {
        neg = s[0] == '-';
        i = 1;
    }
    if (i >= n) return false;
    const uint64_t limit = neg ? (uint64_t)0 - (uint64_t)lo : (uint64_t)hi;
    uint64_t v = 0;
    bool over = false;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        if (!over) {
            v = v * 10u + (uint64_t)(s[i] - '0');
            if (v > limit) over = true;
        }
    }
    if (over) return false;
    *out = neg ? (int64_t)(0u - v) : (int64_t)v;
    return true;
}

/* ============================================================================================== */
/* Growable output buffers                                                                        */
/* ============================================================================================== */

/* An output buffer is the storage of a `bytes` object from the start, so the result needs no
 * final copy: it is shrunk to size and handed over. Growing it needs the GIL, which the scanning
 * loop has released: the loop keeps its thread state in `released` (thread-local, so scans in
 * several threads are independent) and buf_grow takes the GIL back for the few reallocations a
 * batch needs (capacities double, and grow_rows sizes them from the rows seen so far). */
typedef struct {
    uint8_t *p;
    int64_t len, cap;
    PyObject *obj; /* the bytes object owning p (NULL until first grown) */
} buf_t;

#define HUGE_PAGE ((int64_t)2 << 20)
#define HUGE_BUFFER ((int64_t)8 << 20)

static _Thread_local PyThreadState *released; /* non-NULL while this thread scans without the GIL */

#define LIKELY(x) __builtin_expect(!!(x), 1)

/* Grow so that `extra` more bytes fit: capacity doubles (geometric growth); new bytes are zeroed
 * only for bitmaps and offsets (`zero`). False when memory runs out (no Python error is left set:
 * the caller raises MemoryError once it holds the GIL). */
__attribute__((noinline)) static bool buf_grow(buf_t *b, int64_t extra, bool zero) {
    if (extra < 0 || b->len > INT64_MAX - extra) return false;
    int64_t want = b->len + extra;
    int64_t cap = b->cap ? b->cap : 256;
    while (cap < want) {
        if (cap > PY_SSIZE_T_MAX / 2) return false;
        cap *= 2;
    }
    PyThreadState *ts = released;
    if (ts) PyEval_RestoreThread(ts);
    bool ok;
    if (!b->obj) {
        b->obj = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)cap);
        ok = b->obj != NULL;
    } else {
        ok = _PyBytes_Resize(&b->obj, (Py_ssize_t)cap) == 0; /* on failure obj is released */
    }
    if (!ok) PyErr_Clear();
    if (ts) released = PyEval_SaveThread();
    if (!ok) {
        b->obj = NULL;
        b->p = NULL;
        b->len = b->cap = 0;
        return false;
    }
    b->p = (uint8_t *)PyBytes_AS_STRING(b->obj);
    if (zero) memset(b->p + b->cap, 0, (size_t)(cap - b->cap));
    b->cap = cap;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    /* Big outputs (bodies) are written once into fresh memory: ask for transparent huge pages
     * on the 2 MiB-aligned part, or page faults dominate. Advisory only; errors are ignored. */
    if (cap >= HUGE_BUFFER) {
        uintptr_t lo = ((uintptr_t)b->p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
        uintptr_t hi = ((uintptr_t)b->p + (uintptr_t)cap) & ~(uintptr_t)(HUGE_PAGE - 1);
        if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    }
#endif
    return true;
}

static inline bool buf_reserve(buf_t *b, int64_t extra) {
    return LIKELY(extra <= b->cap - b->len) || buf_grow(b, extra, false);
}

static inline bool bits_reserve(buf_t *b, int64_t bytes) {
    return LIKELY(bytes <= b->cap) || buf_grow(b, bytes - b->len, true);
}

/* memcpy for the short strings of a record, inlined: overlapping word moves, never touching a
 * byte outside [src, src+n) or [dst, dst+n). */
static inline void copy_short(uint8_t *dst, const uint8_t *src, int64_t n) {
    if (n >= 16) {
        if (n > 64) {
            memcpy(dst, src, (size_t)n);
            return;
        }
        uint8_t t[16];
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) {
            memcpy(t, src + i, 16);
            memcpy(dst + i, t, 16);
        }
        if (i < n) {
            memcpy(t, src + n - 16, 16);
            memcpy(dst + n - 16, t, 16);
        }
    } else if (n >= 8) {
        uint64_t a, b;
        memcpy(&a, src, 8);
        memcpy(&b, src + n - 8, 8);
        memcpy(dst, &a, 8);
        memcpy(dst + n - 8, &b, 8);
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, src, 4);
        memcpy(&b, src + n - 4, 4);
        memcpy(dst, &a, 4);
        memcpy(dst + n - 4, &b, 4);
    } else if (n > 0) {
        dst[0] = src[0];
        dst[n / 2] = src[n / 2];
        dst[n - 1] = src[n - 1];
    }
}

static inline bool buf_put(buf_t *b, const void *src, int64_t n) {
    if (!buf_reserve(b, n)) return false;
    copy_short(b->p + b->len, src, n);
    b->len += n;
    return true;
}

/* Append without a capacity check: the caller reserved. */
static inline void buf_put_unchecked(buf_t *b, const void *src, int64_t n) {
    copy_short(b->p + b->len, src, n);
    b->len += n;
}

static inline void buf_put_i32_unchecked(buf_t *b, int32_t v) {
    memcpy(b->p + b->len, &v, 4);
    b->len += 4;
}

static inline bool buf_put_i32(buf_t *b, int32_t v) {
    if (!buf_reserve(b, 4)) return false;
    buf_put_i32_unchecked(b, v);
    return true;
}

/* (GIL held) */
static void buf_free(buf_t *b) {
    Py_CLEAR(b->obj);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* (GIL held) The first n bytes as a bytes object: the buffer's own object, shrunk, handed over. */
static PyObject *buf_take(buf_t *b, int64_t n) {
    if (!b->obj || n > b->cap) return PyBytes_FromStringAndSize("", 0);
    PyObject *o = b->obj;
    b->obj = NULL;
    b->p = NULL;
    b->len = b->cap = 0;
    if (_PyBytes_Resize(&o, (Py_ssize_t)n) < 0) return NULL;
    return o;
}

/* ============================================================================================== */
/* Columns (schemas/store.py MESSAGE, in order)                                                   */
/* ============================================================================================== */

enum col_kind { K_I8, K_I32, K_I64, K_BOOL, K_STR, K_LIST, K_MAP };

enum col_id {
    C_PHY_OFFSET, C_TOTAL_SIZE, C_VERSION, C_BODY_CRC, C_QUEUE_ID, C_FLAG, C_QUEUE_OFFSET,
    C_STORED_PHY_OFFSET, C_SYS_FLAG, C_BORN_TIMESTAMP, C_BORN_HOST, C_STORE_TIMESTAMP, C_STORE_HOST,
    C_RECONSUME_TIMES, C_PREPARED_TX, C_BODY_LENGTH, C_TOPIC, C_PROPERTIES, C_TAGS, C_KEYS,
    C_KEY_LIST, C_UNIQ_KEY, C_REAL_TOPIC, C_REAL_QUEUE_ID, C_DELAY_LEVEL, C_TRANSACTION_PREPARED,
    C_TAGS_CODE, C_MSG_ID, C_BODY_CRC_OK, C_RECORD_CRC_OK, C_BODY, C_COUNT
};

static const struct {
    const char *name;
    enum col_kind kind;
    bool nullable;
} COLS[C_COUNT] = {
    {"phy_offset", K_I64, false},
    {"total_size", K_I32, false},
    {"version", K_I8, false},
    {"body_crc", K_I32, false},
    {"queue_id", K_I32, false},
    {"flag", K_I32, false},
    {"queue_offset", K_I64, false},
    {"stored_phy_offset", K_I64, false},
    {"sys_flag", K_I32, false},
    {"born_timestamp", K_I64, false},
    {"born_host", K_STR, false},
    {"store_timestamp", K_I64, false},
    {"store_host", K_STR, false},
    {"reconsume_times", K_I32, false},
    {"prepared_transaction_offset", K_I64, false},
    {"body_length", K_I32, false},
    {"topic", K_STR, false},
    {"properties", K_MAP, true},
    {"tags", K_STR, true},
    {"keys", K_STR, true},
    {"key_list", K_LIST, false},
    {"uniq_key", K_STR, true},
    {"real_topic", K_STR, true},
    {"real_queue_id", K_I32, true},
    {"delay_level", K_I32, true},
    {"transaction_prepared", K_BOOL, false},
    {"tags_code", K_I64, false},
    {"msg_id", K_STR, false},
    {"body_crc_ok", K_BOOL, true},
    {"record_crc_ok", K_BOOL, true},
    {"body", K_STR, true},
};

/* Columns whose value comes from the parsed properties. */
#define PROPERTY_COLUMNS                                                                          \
    ((1ull << C_PROPERTIES) | (1ull << C_TAGS) | (1ull << C_KEYS) | (1ull << C_KEY_LIST) |         \
     (1ull << C_UNIQ_KEY) | (1ull << C_REAL_TOPIC) | (1ull << C_REAL_QUEUE_ID) |                   \
     (1ull << C_DELAY_LEVEL) | (1ull << C_TRANSACTION_PREPARED) | (1ull << C_TAGS_CODE))

typedef struct {
    bool on;
    buf_t valid;  /* validity bitmap (nullable columns), one bit per row */
    int64_t nulls;
    buf_t data;   /* fixed-width values, bool bits, or string bytes */
    buf_t off;    /* string/list/map: int32 offsets, rows + 1 */
    buf_t c_off;  /* list: child string offsets; map: key offsets */
    buf_t c_data; /* list: child bytes; map: key bytes */
    buf_t v_off;  /* map: value offsets */
    buf_t v_data; /* map: value bytes */
} col_t;

static int fixed_width(enum col_kind k) {
    return k == K_I8 ? 1 : k == K_I32 ? 4 : k == K_I64 ? 8 : 0;
}

/* ============================================================================================== */
/* Scan context                                                                                   */
/* ============================================================================================== */

typedef struct {
    bool check_crc, compute_crc, force_verify_prop_crc, check_dup_info, broker_5x;
    bool dledger; /* F§16: each record inside a DLedger entry */
    bool index_tags; /* 5.4+: buildIndex also puts topic#T#TAGS (F§7.4) */
    int64_t *delay_ms; /* level 1..n_delay */
    int64_t n_delay;
} opts_t;

/* Property names the store looks at (F§3.7). */
enum {
    P_TAGS, P_KEYS, P_UNIQ_KEY, P_DELAY, P_REAL_TOPIC, P_REAL_QID, P_TRAN_MSG, P_DUP_INFO,
    P_INNER_NUM, P_INNER_BASE, P_CRC32, P_COUNT
};

typedef struct {
    const uint8_t *p;
    int64_t n;
} slice_t;

typedef struct {
    slice_t name, value;
    uint32_t hash; /* only once the dedup table is in use */
} pair_t;

/* One formatted host: the raw address + port bytes (len 0: empty slot) and its text. */
#define HOST_CACHE 64
#define HOST_TXT_MAX 64 /* "[ffff:...:ffff]:-2147483648" is 53 */
typedef struct {
    uint8_t raw[HOST_V6_LEN];
    uint8_t len, txt_len;
    char txt[HOST_TXT_MAX];
} host_entry_t;

typedef struct {
    span_t span;
    int64_t file_start;
    opts_t opts;
    bool crc_computed;
    uint64_t want;      /* bit per requested column */
    bool want_pairs;    /* the properties map itself */
    bool want_valid_utf8; /* property strings are output: work on a valid-UTF-8 view */
    bool parse_props;     /* properties matter for every record (else only for DELAY checks) */
    col_t cols[C_COUNT];
    int64_t rows_cap;
    bool nomem;
    /* scratch, sized by the format's constant limits (never by bytes read) */
    uint8_t *props_scratch; /* decoded properties: <= 3 * MAX_PROPS_LEN */
    pair_t *pairs;          /* <= MAX_PAIRS */
    int64_t n_pairs;
    int32_t *dedup;         /* open-addressing table of pair indices (2 * MAX_PAIRS slots) */
    uint32_t *dedup_gen;
    uint32_t gen;
    /* host formatting caches: born host [0], store host [1], direct-mapped by the raw bytes */
    host_entry_t hosts[2][HOST_CACHE];
} scan_t;

#define DEDUP_SLOTS 16384
_Static_assert(DEDUP_SLOTS >= 2 * MAX_PAIRS, "dedup table load factor");
#define LINEAR_DEDUP_MAX 24

/* Everything check_record learns about a record; slices point into the segment or scratch. */
typedef struct {
    int32_t total_size, body_crc, queue_id, flag, sys_flag, reconsume, body_len;
    int32_t topic_len, props_len;
    int8_t version;
    int64_t queue_offset, stored_phy, born_ts, store_ts, prepared_tx;
    const uint8_t *born_host, *store_host;
    int born_len, store_len;
    slice_t body, topic;
    bool has_props;                /* PROPERTIESLEN > 0 */
    slice_t prop[P_COUNT];         /* last value of each known name (p == NULL: absent) */
    int64_t tags_code;
    int8_t body_crc_ok, record_crc_ok; /* -1 = null */
} rec_t;

static inline bool name_is(slice_t s, const char *lit, int64_t n) {
    return s.n == n && memcmp(s.p, lit, (size_t)n) == 0;
}

static int known_property(const uint8_t *p, int64_t n) {
    switch (n) {
    case 4:
        if (!memcmp(p, "TAGS", 4)) return P_TAGS;
        if (!memcmp(p, "KEYS", 4)) return P_KEYS;
        return -1;
    case 5:
        return memcmp(p, "DELAY", 5) ? -1 : P_DELAY;
    case 8:
        if (!memcmp(p, "UNIQ_KEY", 8)) return P_UNIQ_KEY;
        if (!memcmp(p, "REAL_QID", 8)) return P_REAL_QID;
        if (!memcmp(p, "TRAN_MSG", 8)) return P_TRAN_MSG;
        if (!memcmp(p, "DUP_INFO", 8)) return P_DUP_INFO;
        if (!memcmp(p, "__CRC32#", 8)) return P_CRC32;
        return -1;
    case 9:
        return memcmp(p, "INNER_NUM", 9) ? -1 : P_INNER_NUM;
    case 10:
        if (!memcmp(p, "REAL_TOPIC", 10)) return P_REAL_TOPIC;
        if (!memcmp(p, "INNER_BASE", 10)) return P_INNER_BASE;
        return -1;
    default:
        return -1;
    }
}

static inline uint32_t name_hash(const uint8_t *p, int64_t n) {
    uint32_t h = 2166136261u;
    for (int64_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
    return h;
}

/* Equal bytes, for the short strings of a record: overlapping word compares, no byte outside
 * either range is read. */
static inline bool same_bytes(const uint8_t *a, const uint8_t *b, int64_t n) {
    if (n >= 8) {
        if (n > 16) return memcmp(a, b, (size_t)n) == 0;
        uint64_t x0, y0, x1, y1;
        memcpy(&x0, a, 8);
        memcpy(&y0, b, 8);
        memcpy(&x1, a + n - 8, 8);
        memcpy(&y1, b + n - 8, 8);
        return ((x0 ^ y0) | (x1 ^ y1)) == 0;
    }
    if (n >= 4) {
        uint32_t x0, y0, x1, y1;
        memcpy(&x0, a, 4);
        memcpy(&y0, b, 4);
        memcpy(&x1, a + n - 4, 4);
        memcpy(&y1, b + n - 4, 4);
        return ((x0 ^ y0) | (x1 ^ y1)) == 0;
    }
    for (int64_t i = 0; i < n; i++)
        if (a[i] != b[i]) return false;
    return true;
}

static inline bool same_name(slice_t a, slice_t b) {
    return a.n == b.n && same_bytes(a.p, b.p, a.n);
}

static void dedup_insert(scan_t *sc, int64_t k) {
    uint32_t s = sc->pairs[k].hash & (DEDUP_SLOTS - 1);
    while (sc->dedup_gen[s] == sc->gen) s = (s + 1) & (DEDUP_SLOTS - 1);
    sc->dedup_gen[s] = sc->gen;
    sc->dedup[s] = (int32_t)k;
}

/* Add a name/value pair to the ordered map: a repeated name keeps its first position and takes
 * the new value (Python dict assignment in parse_properties). Few pairs: linear search; many
 * (adversarial input): an open-addressing table, so a record costs O(pairs) either way. */
static inline void add_pair(scan_t *sc, slice_t name, slice_t value) {
    int64_t n = sc->n_pairs;
    if (n < LINEAR_DEDUP_MAX) {
        for (int64_t k = 0; k < n; k++) {
            if (same_name(sc->pairs[k].name, name)) {
                sc->pairs[k].value = value;
                return;
            }
        }
    } else {
        if (n == LINEAR_DEDUP_MAX) { /* switch to the table: index what is there */
            if (++sc->gen == 0) {
                memset(sc->dedup_gen, 0, DEDUP_SLOTS * sizeof(uint32_t));
                sc->gen = 1;
            }
            for (int64_t k = 0; k < n; k++) {
                sc->pairs[k].hash = name_hash(sc->pairs[k].name.p, sc->pairs[k].name.n);
                dedup_insert(sc, k);
            }
        }
        uint32_t h = name_hash(name.p, name.n);
        for (uint32_t s = h & (DEDUP_SLOTS - 1); sc->dedup_gen[s] == sc->gen; s = (s + 1) & (DEDUP_SLOTS - 1)) {
            pair_t *q = &sc->pairs[sc->dedup[s]];
            if (q->hash == h && same_name(q->name, name)) {
                q->value = value;
                return;
            }
        }
        sc->pairs[n].hash = h;
        sc->pairs[n].name = name;
        sc->pairs[n].value = value;
        sc->n_pairs = n + 1;
        dedup_insert(sc, n);
        return;
    }
    sc->pairs[n].name = name;
    sc->pairs[n].value = value;
    sc->n_pairs = n + 1;
}

/* One name\x01value segment [s, e) whose first \x01 is at nv (NULL: none). */
static inline void property_segment(scan_t *sc, rec_t *r, const uint8_t *s, const uint8_t *nv,
                                    const uint8_t *e) {
    if (nv && nv > s && nv < e - 1) {
        slice_t name = {s, nv - s};
        slice_t value = {nv + 1, e - nv - 1};
        int k = known_property(name.p, name.n);
        if (k >= 0) r->prop[k] = value; /* a later duplicate wins */
        if (sc->want_pairs) add_pair(sc, name, value);
    }
}

/* MessageDecoder#string2messageProperties (F§3.7) over `view`: split on \x02, first \x01, keep
 * non-empty name and value. Character counts of the decoded string and byte counts agree on
 * emptiness, and the separators are ASCII (never part of a replaced sequence), so splitting the
 * bytes gives the same pairs as the twin's split of the decoded string. The separators are found
 * 16 bytes at a time (SSE2, baseline on x86-64), the tail byte by byte. */
static bool parse_properties(scan_t *sc, rec_t *r, const uint8_t *view, int64_t n) {
    const uint8_t *seg = view, *nv = NULL;
    int64_t i = 0;
    unsigned high = 0; /* any byte >= 0x80 seen (returned: the caller may need a UTF-8 check) */
    sc->n_pairs = 0;
#ifdef __SSE2__
    const __m128i one = _mm_set1_epi8(NAME_VALUE_SEPARATOR), two = _mm_set1_epi8(PROPERTY_SEPARATOR);
    __m128i acc = _mm_setzero_si128();
    for (; i + 16 <= n; i += 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(view + i));
        acc = _mm_or_si128(acc, x);
        unsigned m1 = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, one));
        unsigned m2 = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, two));
        unsigned m = m1 | m2;
        while (m) {
            int b = __builtin_ctz(m);
            m &= m - 1;
            const uint8_t *at = view + i + b;
            if (m2 & (1u << b)) {
                property_segment(sc, r, seg, nv, at);
                seg = at + 1;
                nv = NULL;
            } else if (!nv) {
                nv = at;
            }
        }
    }
    high = (unsigned)_mm_movemask_epi8(acc);
#endif
    for (; i < n; i++) {
        high |= view[i] & 0x80u;
        if (view[i] == PROPERTY_SEPARATOR) {
            property_segment(sc, r, seg, nv, view + i);
            seg = view + i + 1;
            nv = NULL;
        } else if (view[i] == NAME_VALUE_SEPARATOR && !nv) {
            nv = view + i;
        }
    }
    property_segment(sc, r, seg, nv, view + n);
    return high != 0;
}

/* expectedCRC of CommitLog#checkMessageAndReturnSize [5.x] for a __CRC32# value (F§3.8, written
 * least significant digit first by MessageDecoder#createCrc32). The broker validates nothing: from
 * the last UTF-16 code unit of the decoded value to the first, expectedCRC = expectedCRC * 10 +
 * (charAt(i) - '0') in int arithmetic. So any length is accepted, a unit that is not an ASCII digit
 * counts as its code minus 48, and the value wraps; here the same sum is taken first unit first:
 * sum of (unit_i - 48) * 10^i, mod 2^32 (the twin's record_crc_value). */
static int32_t record_crc_value(slice_t v) {
    uint32_t acc = 0, scale = 1;
    int64_t i = 0;
    while (i < v.n) {
        uint32_t cp = v.p[i] < 0x80 ? v.p[i++] : utf8_next(v.p, v.n, &i);
        if (cp < 0x10000u) {
            acc += (cp - (uint32_t)'0') * scale;
            scale *= 10u;
        } else { /* astral: its surrogate pair, high unit first */
            cp -= 0x10000u;
            acc += (0xD800u + (cp >> 10) - (uint32_t)'0') * scale;
            scale *= 10u;
            acc += (0xDC00u + (cp & 0x3FFu) - (uint32_t)'0') * scale;
            scale *= 10u;
        }
    }
    return (int32_t)acc;
}

/* The forceVerifyPropCRC test [5.x] for the record at `pos` whose PROPERTIES end at `cur`: the
 * broker duplicates its buffer, moves it back by TOTALSIZE and limits it to TOTALSIZE - 20 bytes,
 * i.e. CRC of [cur - TOTALSIZE, cur - 20) (for a well-formed record [pos, pos + TOTALSIZE - 20)),
 * and requires expectedCRC > 0 and equal. A start before the buffer (index 0 = the file start)
 * throws: no match; an end before the start (TOTALSIZE < 20) is an empty range, CRC 0. */
__attribute__((noinline)) /* out of check_record's hot path (its inlining budget) */
static bool record_crc_matches(const span_t *sp, int64_t cur, int32_t total_size, slice_t value) {
    int32_t want = record_crc_value(value);
    int64_t lo = cur - total_size, hi = cur - CRC32_RESERVED_LEN;
    if (want <= 0 || lo < 0) return false;
    if (hi <= lo) return want == 0;
    const uint8_t *q = span_at(sp, lo, hi - lo);
    return q && want == broker_crc(q, hi - lo);
}

/* Java String.split("_").length (limit 0): an empty leading part is kept, trailing empty parts
 * are dropped ("a_b_" -> 2, "a_" -> 1, "_" -> 0, "_a" -> 2), no '_' at all is one part. '_' is
 * ASCII, never part of a multi-byte or replaced sequence, so bytes can be counted. */
__attribute__((noinline, cold)) /* duplicationEnable only */
static int64_t java_split_count(slice_t s, uint8_t sep) {
    int64_t last = s.n - 1;
    while (last >= 0 && s.p[last] == sep) last--;
    if (last < 0) return s.n == 0 ? 1 : 0; /* "" has no match: [""]; "__": every part dropped */
    int64_t parts = 1;
    for (int64_t i = 0; i < last; i++) parts += s.p[i] == sep;
    return parts;
}

/* Index keys in KEYS: tokens split on single spaces, empty ones dropped (E#16, as key_list). */
static inline int64_t key_count(slice_t k) {
    int64_t n = 0;
    for (int64_t i = 0; i < k.n; i++)
        n += k.p[i] != KEY_SEPARATOR && (i == 0 || k.p[i - 1] == KEY_SEPARATOR);
    return n;
}

/* F§3.2 calMsgLength. */
static int64_t cal_msg_length(int version, int32_t sys_flag, int32_t body_len, int32_t topic_len,
                              int32_t props_len) {
    int64_t born = (sys_flag & BORNHOST_V6_FLAG) ? HOST_V6_LEN : HOST_V4_LEN;
    int64_t store = (sys_flag & STOREHOSTADDRESS_V6_FLAG) ? HOST_V6_LEN : HOST_V4_LEN;
    return CAL_FIXED + born + store + (body_len > 0 ? body_len : 0) + (version == 2 ? SZ_I16 : SZ_I8)
           + topic_len + (props_len > 0 ? props_len : 0);
}

/*
 * Validate the record at `pos` (recovery.md §3, steps in order; the first failing one decides).
 * Returns the outcome; *check = check code, *declared = TOTALSIZE when it was read (has_declared).
 * `full` = also compute what only the output columns need (tags hash, UTF-8 views).
 */
static int check_record(scan_t *sc, int64_t pos, rec_t *r, int *check, int64_t *declared,
                        bool *has_declared, bool full) {
    const span_t *sp = &sc->span;
    const opts_t *o = &sc->opts;
    const uint8_t *q;
    int64_t remaining = sp->end - pos;
    *has_declared = false;
    *check = CK_NONE;
#define FAIL(outcome, ck) \
    do {                  \
        *check = (ck);    \
        return (outcome); \
    } while (0)
#define TAKE(ptr, at, n)                                \
    do {                                                \
        if (!((ptr) = span_at(sp, (at), (n))))          \
            FAIL(INVALID, CK_OUT_OF_BOUNDS);            \
    } while (0)

    /* step 1: more than 4 bytes left [5.x; 4.9.7 underflows] */
    if (remaining <= 4) FAIL(INVALID, CK_OUT_OF_BOUNDS);
    TAKE(q, pos + OFF_TOTALSIZE, SZ_I32);
    r->total_size = be_i32(q);
    *declared = r->total_size;
    *has_declared = true;
    /* step 2 [5.x]: TOTALSIZE fits in what is left: remaining() < totalSize - 4, the subtraction
     * in Java int arithmetic (wraps: TOTALSIZE in [INT32_MIN, INT32_MIN + 3] fails here) */
    if (o->broker_5x && remaining - 4 < (int64_t)(int32_t)((uint32_t)r->total_size - 4u))
        FAIL(INVALID, CK_TOTAL_SIZE);
    if (remaining < 8) FAIL(INVALID, CK_OUT_OF_BOUNDS);
    /* step 3: magic */
    TAKE(q, pos + OFF_MAGICCODE, SZ_I32);
    int32_t magic = be_i32(q);
    if (magic == BLANK_MAGIC) FAIL(END_OF_FILE, CK_NONE);
    if (magic == MAGIC_V1) r->version = 1;
    else if (magic == MAGIC_V2 && o->broker_5x) r->version = 2;
    else FAIL(INVALID, CK_BAD_MAGIC);
    /* [all] the broker now allocates `new byte[totalSize]`: a negative size throws. It then copies
     * the hosts, the body, the topic and the properties into that array: a field longer than
     * TOTALSIZE throws too (FITS_RECORD, before the field is read). */
    if (r->total_size < 0) FAIL(INVALID, CK_TOTAL_SIZE);
#define FITS_RECORD(n)                                      \
    do {                                                    \
        if ((int64_t)(n) > (int64_t)r->total_size)          \
            FAIL(INVALID, CK_OUT_OF_BOUNDS);                \
    } while (0)

    /* step 4: fixed fields */
    TAKE(q, pos, HEAD_SIZE);
    r->body_crc = be_i32(q + OFF_BODYCRC);
    r->queue_id = be_i32(q + OFF_QUEUEID);
    r->flag = be_i32(q + OFF_FLAG);
    r->queue_offset = be_i64(q + OFF_QUEUEOFFSET);
    r->stored_phy = be_i64(q + OFF_PHYSICALOFFSET);
    r->sys_flag = be_i32(q + OFF_SYSFLAG);
    r->born_ts = be_i64(q + OFF_BORNTIMESTAMP);
    int born_len = (r->sys_flag & BORNHOST_V6_FLAG) ? HOST_V6_LEN : HOST_V4_LEN;
    int store_len = (r->sys_flag & STOREHOSTADDRESS_V6_FLAG) ? HOST_V6_LEN : HOST_V4_LEN;
    r->born_len = born_len;
    r->store_len = store_len;
    FITS_RECORD(born_len);
    TAKE(r->born_host, pos + OFF_BORNHOST, born_len);
    TAKE(q, pos + OFF_STORETIMESTAMP(born_len), SZ_I64);
    r->store_ts = be_i64(q);
    FITS_RECORD(store_len);
    TAKE(r->store_host, pos + OFF_STOREHOST(born_len), store_len);
    TAKE(q, pos + OFF_RECONSUMETIMES(born_len, store_len), MID_SIZE);
    r->reconsume = be_i32(q);
    r->prepared_tx = be_i64(q + (OFF_PREPAREDTXOFFSET(0, 0) - OFF_RECONSUMETIMES(0, 0)));
    r->body_len = be_i32(q + (OFF_BODYLEN(0, 0) - OFF_RECONSUMETIMES(0, 0)));
    int64_t p = pos + OFF_BODY(born_len, store_len);

    /* step 5: body and its CRC */
    r->body_crc_ok = -1;
    r->body.p = NULL;
    r->body.n = 0;
    if (r->body_len > 0) {
        FITS_RECORD(r->body_len);
        TAKE(r->body.p, p, r->body_len);
        r->body.n = r->body_len;
        p += r->body_len;
        if (sc->crc_computed) r->body_crc_ok = broker_crc(r->body.p, r->body.n) == r->body_crc;
        if (o->check_crc && !o->force_verify_prop_crc && r->body_crc_ok != 1)
            FAIL(INVALID, CK_BODY_CRC);
    } else if (sc->crc_computed) {
        r->body_crc_ok = r->body_crc == 0;
    }

    /* step 6: topic (i8 length for V1, i16 for V2; negative fails) */
    if (r->version == 1) {
        TAKE(q, p, SZ_I8);
        r->topic_len = (int8_t)q[0];
        p += SZ_I8;
    } else {
        TAKE(q, p, SZ_I16);
        r->topic_len = be_i16(q);
        p += SZ_I16;
    }
    if (r->topic_len < 0) FAIL(INVALID, CK_TOPIC_LENGTH);
    FITS_RECORD(r->topic_len);
    TAKE(r->topic.p, p, r->topic_len);
    r->topic.n = r->topic_len;
    p += r->topic_len;

    /* step 7: properties */
    TAKE(q, p, SZ_I16);
    r->props_len = be_i16(q);
    p += SZ_I16;
    for (int k = 0; k < P_COUNT; k++) { /* (a loop, not a memset: 11 stores beat `rep stos`) */
        r->prop[k].p = NULL;
        r->prop[k].n = 0;
    }
    r->has_props = r->props_len > 0;
    r->tags_code = 0;
    sc->n_pairs = 0;
    if (r->has_props) {
        const uint8_t *raw;
        FITS_RECORD(r->props_len);
        TAKE(raw, p, r->props_len);
        p += r->props_len;
        int64_t raw_n = r->props_len;
        bool utf8_view = full && sc->want_valid_utf8; /* (parse_props is then set) */
        if (sc->parse_props || name_is(r->topic, SCHEDULE_TOPIC, (int64_t)sizeof(SCHEDULE_TOPIC) - 1)) {
            /* parsed on the raw bytes; when a string is output and the bytes are not all ASCII
             * and turn out ill-formed, parsed again on the decoded text, as the twin does */
            if (parse_properties(sc, r, raw, raw_n) && utf8_view && !utf8_valid(raw, raw_n)) {
                for (int k = 0; k < P_COUNT; k++) {
                    r->prop[k].p = NULL;
                    r->prop[k].n = 0;
                }
                int64_t view_n = utf8_replace_into(raw, raw_n, sc->props_scratch);
                parse_properties(sc, r, sc->props_scratch, view_n);
            }
        }
        if (o->check_dup_info) { /* 5.x duplicationEnable: DUP_INFO split("_") has 2 parts */
            slice_t d = r->prop[P_DUP_INFO];
            if (!d.p || java_split_count(d, '_') != 2) FAIL(INVALID, CK_DUP_INFO);
        }
        if (full && (sc->want & (1ull << C_TAGS_CODE)) && r->prop[P_TAGS].p)
            r->tags_code = java_hash_utf8(r->prop[P_TAGS].p, r->prop[P_TAGS].n); /* F§3.9 */
        slice_t d = r->prop[P_DELAY];
        if (d.p && name_is(r->topic, SCHEDULE_TOPIC, (int64_t)sizeof(SCHEDULE_TOPIC) - 1)) {
            int64_t level;
            if (!java_parse(d.p, d.n, INT32_MIN, INT32_MAX, &level)) FAIL(INVALID, CK_DELAY_PROPERTY);
            if (level > o->n_delay) level = o->n_delay;
            if (level > 0) /* deliver time; Java long arithmetic wraps */
                r->tags_code = (int64_t)((uint64_t)r->store_ts + (uint64_t)o->delay_ms[level - 1]);
        }
    }

    /* __CRC32# (F§3.8): reported when CRCs are computed, enforced in step 8 */
    r->record_crc_ok = -1;
    if (sc->crc_computed && r->prop[P_CRC32].p)
        r->record_crc_ok = record_crc_matches(sp, p, r->total_size, r->prop[P_CRC32]);
    /* step 8 [5.x forceVerifyPropCRC] */
    if (o->check_crc && o->force_verify_prop_crc && r->record_crc_ok != 1) FAIL(INVALID, CK_RECORD_CRC);
    /* step 9: calMsgLength == TOTALSIZE */
    if (cal_msg_length(r->version, r->sys_flag, r->body_len, r->topic_len, r->props_len) != r->total_size)
        FAIL(LENGTH_MISMATCH, CK_LENGTH_MISMATCH);
    /* step 10 [5.x]: INNER_NUM (short) and INNER_BASE (long) parse */
    if (o->broker_5x && r->prop[P_INNER_NUM].p && r->prop[P_INNER_BASE].p) {
        int64_t v;
        if (!java_parse(r->prop[P_INNER_NUM].p, r->prop[P_INNER_NUM].n, -32768, 32767, &v) ||
            !java_parse(r->prop[P_INNER_BASE].p, r->prop[P_INNER_BASE].n, INT64_MIN, INT64_MAX, &v))
            FAIL(INVALID, CK_INNER_BATCH);
    }
    return VALID;
#undef FITS_RECORD
#undef TAKE
#undef FAIL
}

/* ============================================================================================== */
/* Output                                                                                         */
/* ============================================================================================== */

/* Make room for `rows` rows in every fixed-width buffer, bitmap and offsets array (their .len
 * stays 0: rows are written by index). */
/* The DLedger entry at pos, as DLedgerMmapFileStore#recover checks each entry it walks (R§16.1
 * step 3; index continuity and term order span entries: the caller checks them). VALID with the
 * entry's size, END_OF_FILE on DLedger's blank, else INVALID. */
static int check_entry(const scan_t *sc, int64_t pos, int32_t *size, int *check, int64_t *declared,
                       bool *has_declared) {
    *has_declared = false;
    *check = CK_NONE;
    const uint8_t *h = span_at(&sc->span, pos, 8);
    if (!h) {
        *check = CK_OUT_OF_BOUNDS;
        return INVALID;
    }
    int32_t magic = be_i32(h);
    *size = be_i32(h + 4);
    *declared = *size;
    *has_declared = true;
    if (magic == DL_BLANK_MAGIC) return END_OF_FILE;
    if (!(h = span_at(&sc->span, pos, DL_BODY_OFFSET))) {
        *check = CK_OUT_OF_BOUNDS;
        return INVALID;
    }
    int64_t at = (int64_t)((uint64_t)sc->file_start + (uint64_t)pos); /* wraps like a Java long */
    if (*size == 0 || be_i64(h + 24) != at ||
        (int64_t)be_i32(h + 44) + DL_BODY_OFFSET != *size || magic != DL_MAGIC_1 || *size <= DL_HEADER_SIZE) {
        *check = CK_DLEDGER_ENTRY;
        return INVALID;
    }
    return VALID;
}

static bool grow_rows(scan_t *sc, int64_t rows, int64_t done) {
    for (int c = 0; c < C_COUNT; c++) {
        col_t *col = &sc->cols[c];
        if (!col->on) continue;
        enum col_kind k = COLS[c].kind;
        if (done > 0) { /* variable-width data: room for the new rows at the average seen so far */
            int64_t more = rows - done;
            buf_t *var[4] = {&col->data, &col->c_data, &col->c_off, &col->v_data};
            for (int v = (k == K_STR ? 0 : 1); v < (k == K_STR ? 1 : k == K_LIST ? 3 : 4); v++) {
                if (!buf_reserve(var[v], var[v]->len / done * more + var[v]->len / done / 8 * more))
                    return false;
            }
            if (k == K_MAP && !buf_reserve(&col->v_off, col->c_off.len / done * more)) return false;
        }
        if (COLS[c].nullable && !bits_reserve(&col->valid, (rows + 7) / 8)) return false;
        if (k == K_BOOL) {
            if (!bits_reserve(&col->data, (rows + 7) / 8)) return false;
        } else if (fixed_width(k)) {
            if (!buf_reserve(&col->data, rows * fixed_width(k))) return false;
        } else {
            /* offsets: zeroed so that offsets[0] == 0 */
            if (!bits_reserve(&col->off, (rows + 1) * 4)) return false;
        }
    }
    sc->rows_cap = rows;
    return true;
}

static inline void set_bit(buf_t *b, int64_t i) {
    b->p[i >> 3] |= (uint8_t)(1u << (i & 7));
}

static inline void put_valid(col_t *col, int64_t row, bool ok) {
    if (ok) set_bit(&col->valid, row);
    else col->nulls++;
}

static inline void put_i64(col_t *col, int64_t row, int64_t v) {
    memcpy(col->data.p + row * 8, &v, 8);
}
static inline void put_i32(col_t *col, int64_t row, int32_t v) {
    memcpy(col->data.p + row * 4, &v, 4);
}
/* close row `row` of a string/list/map column: offsets[row + 1] = current length */
static inline void end_row(buf_t *off, int64_t row, int64_t len) {
    int32_t v = (int32_t)len;
    memcpy(off->p + (row + 1) * 4, &v, 4);
}

/* Append UTF-8 text, replacing ill-formed sequences. */
static inline bool put_text(buf_t *b, const uint8_t *s, int64_t n) {
    if (all_ascii(s, n)) return buf_put(b, s, n);
    if (!buf_reserve(b, 3 * n)) return false;
    b->len += utf8_replace_into(s, n, b->p + b->len);
    return true;
}

/* An optional string column from a known property (already valid UTF-8 in the view). */
static inline bool put_opt_str(col_t *col, int64_t row, slice_t v) {
    put_valid(col, row, v.p != NULL);
    if (v.p && !buf_put(&col->data, v.p, v.n)) return false;
    end_row(&col->off, row, col->data.len);
    return true;
}

static void put_opt_int(col_t *col, int64_t row, slice_t v) {
    int64_t x = 0;
    bool ok = v.p && java_parse(v.p, v.n, INT32_MIN, INT32_MAX, &x);
    put_valid(col, row, ok);
    put_i32(col, row, ok ? (int32_t)x : 0);
}

static void put_opt_bool(col_t *col, int64_t row, int8_t v) {
    put_valid(col, row, v >= 0);
    if (v == 1) set_bit(&col->data, row);
}

/* Decimal digits of v (no sign) at out; returns the count. */
static inline int put_udec(char *out, uint32_t v) {
    char t[10];
    int n = 0;
    do {
        t[n++] = (char)('0' + v % 10u);
        v /= 10u;
    } while (v);
    for (int i = 0; i < n; i++) out[i] = t[n - 1 - i];
    return n;
}

/* Java int as decimal ("%d"). */
static inline int put_idec(char *out, int32_t v) {
    if (v < 0) {
        out[0] = '-';
        return 1 + put_udec(out + 1, 0u - (uint32_t)v);
    }
    return put_udec(out, (uint32_t)v);
}

/* Lowercase hex without leading zeros ("%x") of a 16-bit group. */
static inline int put_hex16(char *out, unsigned v) {
    static const char digits[] = "0123456789abcdef";
    int n = 0;
    for (int sh = 12; sh > 0; sh -= 4)
        if (n || (v >> sh)) out[n++] = digits[(v >> sh) & 15u];
    out[n++] = digits[v & 15u];
    return n;
}

/* _pyscan.format_host: "a.b.c.d:port", IPv6 uncompressed lowercase in brackets. out holds
 * HOST_TXT_MAX bytes. */
static int format_host(const uint8_t *h, int len, char *out) {
    int32_t port = be_i32(h + len - 4);
    int n = 0;
    if (len == HOST_V4_LEN) {
        for (int i = 0; i < 4; i++) {
            n += put_udec(out + n, h[i]);
            out[n++] = i < 3 ? '.' : ':';
        }
    } else {
        out[n++] = '[';
        for (int i = 0; i < 16; i += 2) {
            n += put_hex16(out + n, ((unsigned)h[i] << 8) | h[i + 1]);
            out[n++] = i < 14 ? ':' : ']';
        }
        out[n++] = ':';
    }
    n += put_idec(out + n, port);
    return n;
}

/* Slot of a host in the cache: a multiplicative hash of its bytes (len is 8 or 20). */
static inline unsigned host_slot(const uint8_t *h, int len) {
    uint64_t a, b = 0;
    memcpy(&a, h, 8);
    if (len > 8) {
        uint64_t c, d;
        memcpy(&c, h + 8, 8);
        memcpy(&d, h + len - 8, 8);
        b = c * 0xC2B2AE3D27D4EB4Full ^ d;
    }
    return (unsigned)(((a ^ b) * 0x9E3779B97F4A7C15ull) >> 58) & (HOST_CACHE - 1);
}

static inline bool put_host(scan_t *sc, int which, col_t *col, int64_t row, const uint8_t *h, int len) {
    host_entry_t *e = &sc->hosts[which][host_slot(h, len)];
    if (e->len != len || !same_bytes(e->raw, h, len)) {
        memcpy(e->raw, h, (size_t)len);
        e->len = (uint8_t)len;
        e->txt_len = (uint8_t)format_host(h, len, e->txt);
    }
    if (!buf_put(&col->data, e->txt, e->txt_len)) return false;
    end_row(&col->off, row, col->data.len);
    return true;
}

/* "00".."FF" for every byte value */
static uint16_t HEX_PAIRS[256];

static void init_hex_pairs(void) {
    static const char digits[] = "0123456789ABCDEF";
    for (int i = 0; i < 256; i++) {
        uint8_t two[2] = {(uint8_t)digits[i >> 4], (uint8_t)digits[i & 15]};
        memcpy(&HEX_PAIRS[i], two, 2);
    }
}

/* F§3.12 offsetMsgId: hex_upper(store host address + port + i64 PHYSICALOFFSET as stored). */
static bool put_msg_id(col_t *col, int64_t row, const uint8_t *store_host, int len, int64_t phy) {
#ifdef __SSE2__
    if (len == HOST_V4_LEN) { /* IPv4: 16 bytes -> 32 hex digits, 16 at a time, in registers */
        if (!buf_reserve(&col->data, 32)) return false;
        uint64_t host;
        memcpy(&host, store_host, 8);
        const __m128i lo_mask = _mm_set1_epi8(0x0F), nine = _mm_set1_epi8(9);
        const __m128i zero = _mm_set1_epi8('0'), gap = _mm_set1_epi8('A' - '0' - 10);
        __m128i x = _mm_set_epi64x((long long)__builtin_bswap64((uint64_t)phy), (long long)host);
        __m128i hi = _mm_and_si128(_mm_srli_epi16(x, 4), lo_mask), lo = _mm_and_si128(x, lo_mask);
        __m128i a = _mm_unpacklo_epi8(hi, lo), b = _mm_unpackhi_epi8(hi, lo);
        a = _mm_add_epi8(_mm_add_epi8(a, zero), _mm_and_si128(_mm_cmpgt_epi8(a, nine), gap));
        b = _mm_add_epi8(_mm_add_epi8(b, zero), _mm_and_si128(_mm_cmpgt_epi8(b, nine), gap));
        uint8_t *o = col->data.p + col->data.len;
        _mm_storeu_si128((__m128i *)(void *)o, a);
        _mm_storeu_si128((__m128i *)(void *)(o + 16), b);
        col->data.len += 32;
        end_row(&col->off, row, col->data.len);
        return true;
    }
#endif
    uint8_t raw[HOST_V6_LEN + 8];
    memcpy(raw, store_host, (size_t)len);
    uint64_t be = __builtin_bswap64((uint64_t)phy);
    memcpy(raw + len, &be, 8);
    int n = len + 8;
    if (!buf_reserve(&col->data, 2 * n)) return false;
    uint8_t *o = col->data.p + col->data.len;
    for (int i = 0; i < n; i++) memcpy(o + 2 * i, &HEX_PAIRS[raw[i]], 2);
    col->data.len += 2 * n;
    end_row(&col->off, row, col->data.len);
    return true;
}

/* Upper bound of the bytes one record adds to any variable-width column other than `body`. */
static int64_t record_text_bound(const rec_t *r) {
    return 3 * ((int64_t)r->topic_len + (r->props_len > 0 ? r->props_len : 0)) + 256;
}

/* Bytes in the largest variable-width column (Arrow string offsets are int32). */
static bool would_overflow(const scan_t *sc, const rec_t *r) {
    int64_t text = record_text_bound(r);
    for (int c = 0; c < C_COUNT; c++) {
        const col_t *col = &sc->cols[c];
        if (!col->on) continue;
        enum col_kind k = COLS[c].kind;
        if (c == C_BODY) {
            if (col->data.len + r->body.n > INT32_MAX) return true;
        } else if (k == K_STR && col->data.len + text > INT32_MAX) {
            return true;
        } else if ((k == K_LIST || k == K_MAP) &&
                   (col->c_data.len + text > INT32_MAX || col->v_data.len + text > INT32_MAX ||
                    col->c_off.len / 4 + MAX_PAIRS > INT32_MAX)) {
            return true;
        }
    }
    return false;
}

/* Write one VALID record's requested columns at `row`. False on allocation failure. */
static bool emit(scan_t *sc, int64_t row, int64_t pos, const rec_t *r) {
    col_t *C = sc->cols;
    if (C[C_PHY_OFFSET].on) /* file start + position (wraps like Java long if absurd) */
        put_i64(&C[C_PHY_OFFSET], row, (int64_t)((uint64_t)sc->file_start + (uint64_t)pos));
    if (C[C_TOTAL_SIZE].on) put_i32(&C[C_TOTAL_SIZE], row, r->total_size);
    if (C[C_VERSION].on) C[C_VERSION].data.p[row] = (uint8_t)r->version;
    if (C[C_BODY_CRC].on) put_i32(&C[C_BODY_CRC], row, r->body_crc);
    if (C[C_QUEUE_ID].on) put_i32(&C[C_QUEUE_ID], row, r->queue_id);
    if (C[C_FLAG].on) put_i32(&C[C_FLAG], row, r->flag);
    if (C[C_QUEUE_OFFSET].on) put_i64(&C[C_QUEUE_OFFSET], row, r->queue_offset);
    if (C[C_STORED_PHY_OFFSET].on) put_i64(&C[C_STORED_PHY_OFFSET], row, r->stored_phy);
    if (C[C_SYS_FLAG].on) put_i32(&C[C_SYS_FLAG], row, r->sys_flag);
    if (C[C_BORN_TIMESTAMP].on) put_i64(&C[C_BORN_TIMESTAMP], row, r->born_ts);
    if (C[C_BORN_HOST].on && !put_host(sc, 0, &C[C_BORN_HOST], row, r->born_host, r->born_len))
        return false;
    if (C[C_STORE_TIMESTAMP].on) put_i64(&C[C_STORE_TIMESTAMP], row, r->store_ts);
    if (C[C_STORE_HOST].on && !put_host(sc, 1, &C[C_STORE_HOST], row, r->store_host, r->store_len))
        return false;
    if (C[C_RECONSUME_TIMES].on) put_i32(&C[C_RECONSUME_TIMES], row, r->reconsume);
    if (C[C_PREPARED_TX].on) put_i64(&C[C_PREPARED_TX], row, r->prepared_tx);
    if (C[C_BODY_LENGTH].on) put_i32(&C[C_BODY_LENGTH], row, r->body_len);
    if (C[C_TOPIC].on) {
        if (!put_text(&C[C_TOPIC].data, r->topic.p, r->topic.n)) return false;
        end_row(&C[C_TOPIC].off, row, C[C_TOPIC].data.len);
    }
    if (C[C_PROPERTIES].on) {
        col_t *col = &C[C_PROPERTIES];
        put_valid(col, row, r->has_props);
        if (r->has_props) {
            /* names and values are slices of the (decoded) properties string: at most its size */
            int64_t text = 3 * (int64_t)r->props_len, entries = 4 * sc->n_pairs;
            if (!buf_reserve(&col->c_data, text) || !buf_reserve(&col->v_data, text) ||
                !buf_reserve(&col->c_off, entries) || !buf_reserve(&col->v_off, entries))
                return false;
            /* locals, not the struct fields: byte stores may alias them and force reloads */
            uint8_t *kd = col->c_data.p, *vd = col->v_data.p;
            uint8_t *ko = col->c_off.p + col->c_off.len, *vo = col->v_off.p + col->v_off.len;
            int64_t kl = col->c_data.len, vl = col->v_data.len;
            const pair_t *pr = sc->pairs, *pe = sc->pairs + sc->n_pairs;
            for (; pr < pe; pr++, ko += 4, vo += 4) {
                copy_short(kd + kl, pr->name.p, pr->name.n);
                kl += pr->name.n;
                int32_t o = (int32_t)kl;
                memcpy(ko, &o, 4);
                copy_short(vd + vl, pr->value.p, pr->value.n);
                vl += pr->value.n;
                o = (int32_t)vl;
                memcpy(vo, &o, 4);
            }
            col->c_data.len = kl;
            col->v_data.len = vl;
            col->c_off.len = ko - col->c_off.p;
            col->v_off.len = vo - col->v_off.p;
        }
        end_row(&col->off, row, col->c_off.len / 4 - 1);
    }
    if (C[C_TAGS].on && !put_opt_str(&C[C_TAGS], row, r->prop[P_TAGS])) return false;
    if (C[C_KEYS].on && !put_opt_str(&C[C_KEYS], row, r->prop[P_KEYS])) return false;
    if (C[C_KEY_LIST].on) { /* KEYS split on single spaces, empty tokens dropped (E#16) */
        col_t *col = &C[C_KEY_LIST];
        slice_t k = r->prop[P_KEYS];
        if (k.p) {
            /* tokens: at most (n + 1) / 2 of them, their bytes at most n */
            if (!buf_reserve(&col->c_data, k.n) || !buf_reserve(&col->c_off, 4 * ((k.n + 1) / 2 + 1)))
                return false;
            int64_t start = 0;
            for (int64_t i = 0; i <= k.n; i++) {
                if (i == k.n || k.p[i] == KEY_SEPARATOR) {
                    if (i > start) {
                        buf_put_unchecked(&col->c_data, k.p + start, i - start);
                        buf_put_i32_unchecked(&col->c_off, (int32_t)col->c_data.len);
                    }
                    start = i + 1;
                }
            }
        }
        end_row(&col->off, row, col->c_off.len / 4 - 1);
    }
    if (C[C_UNIQ_KEY].on && !put_opt_str(&C[C_UNIQ_KEY], row, r->prop[P_UNIQ_KEY])) return false;
    if (C[C_REAL_TOPIC].on && !put_opt_str(&C[C_REAL_TOPIC], row, r->prop[P_REAL_TOPIC])) return false;
    if (C[C_REAL_QUEUE_ID].on) put_opt_int(&C[C_REAL_QUEUE_ID], row, r->prop[P_REAL_QID]);
    if (C[C_DELAY_LEVEL].on) put_opt_int(&C[C_DELAY_LEVEL], row, r->prop[P_DELAY]);
    if (C[C_TRANSACTION_PREPARED].on && name_is(r->prop[P_TRAN_MSG], "true", 4))
        set_bit(&C[C_TRANSACTION_PREPARED].data, row);
    if (C[C_TAGS_CODE].on) put_i64(&C[C_TAGS_CODE], row, r->tags_code);
    if (C[C_MSG_ID].on && !put_msg_id(&C[C_MSG_ID], row, r->store_host, r->store_len, r->stored_phy))
        return false;
    if (C[C_BODY_CRC_OK].on) put_opt_bool(&C[C_BODY_CRC_OK], row, r->body_crc_ok);
    if (C[C_RECORD_CRC_OK].on) put_opt_bool(&C[C_RECORD_CRC_OK], row, r->record_crc_ok);
    if (C[C_BODY].on) {
        col_t *col = &C[C_BODY];
        set_bit(&col->valid, row); /* the twin always yields bytes (b"" without a body) */
        if (!buf_put(&col->data, r->body.p, r->body.n)) return false;
        end_row(&col->off, row, col->data.len);
    }
    return true;
}

/* Rows the first record's sizes are extrapolated to (a batch of the driver fits). */
#define PRESIZE_MAX_ROWS 65536

/* Without CRCs the scan touches only each record's head and tail, one dependent miss after
 * another (the next position is known only once TOTALSIZE is read), and record sizes vary too
 * much to guess where a record some way ahead starts. So every line up to PREFETCH_DISTANCE bytes
 * past the end of the current record is hinted, in order (*next: the first line not hinted yet):
 * a software stream the memory system serves far faster than the chain of misses. A prefetch never
 * faults; the hints stay inside [0, end). */
#ifndef PREFETCH_LOCALITY
#define PREFETCH_LOCALITY 0
#endif
#ifndef PREFETCH_DISTANCE
#define PREFETCH_DISTANCE 4096
#endif
static inline void prefetch_ahead(const span_t *sp, int64_t record_end, int64_t *next) {
    int64_t to = record_end + PREFETCH_DISTANCE;
    if (to > sp->end) to = sp->end;
    int64_t a = *next;
    if (a < record_end) a = record_end & ~(int64_t)63;
    for (; a < to; a += 64) __builtin_prefetch(sp->base + a, 0, PREFETCH_LOCALITY);
    if (a > *next) *next = a;
}

static void scan_free(scan_t *sc) {
    for (int c = 0; c < C_COUNT; c++) {
        col_t *col = &sc->cols[c];
        buf_free(&col->valid);
        buf_free(&col->data);
        buf_free(&col->off);
        buf_free(&col->c_off);
        buf_free(&col->c_data);
        buf_free(&col->v_off);
        buf_free(&col->v_data);
    }
    free(sc->props_scratch);
    free(sc->pairs);
    free(sc->dedup);
    free(sc->dedup_gen);
    free(sc->opts.delay_ms);
    sc->props_scratch = NULL;
    sc->pairs = NULL;
    sc->dedup = NULL;
    sc->dedup_gen = NULL;
    sc->opts.delay_ms = NULL;
}

/* Scratch for property parsing: constant sizes from the i16 PROPERTIESLEN limit. */
static bool scan_alloc_scratch(scan_t *sc) {
    sc->props_scratch = malloc(3 * (size_t)MAX_PROPS_LEN + 16);
    sc->pairs = malloc(sizeof(pair_t) * (MAX_PAIRS + 1));
    sc->dedup = malloc(sizeof(int32_t) * DEDUP_SLOTS);
    sc->dedup_gen = calloc(DEDUP_SLOTS, sizeof(uint32_t));
    return sc->props_scratch && sc->pairs && sc->dedup && sc->dedup_gen;
}

/* ============================================================================================== */
/* Python glue                                                                                    */
/* ============================================================================================== */

/* opts = (check_crc, compute_crc, force_verify_prop_crc, check_dup_info, broker_5x, delay_levels,
 * dledger, index_tags) with delay_levels the little-endian int64 delays of levels 1..n
 * (commitlog._native_opts). */
static int parse_opts(PyObject *obj, opts_t *o) {
    memset(o, 0, sizeof(*o));
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 8) {
        PyErr_SetString(PyExc_ValueError,
                        "opts must be an 8-tuple (check_crc, compute_crc, force_verify_prop_crc, "
                        "check_dup_info, broker_5x, delay_levels, dledger, index_tags)");
        return -1;
    }
    bool *flags[7] = {&o->check_crc, &o->compute_crc, &o->force_verify_prop_crc, &o->check_dup_info,
                      &o->broker_5x, &o->dledger, &o->index_tags};
    for (int i = 0; i < 7; i++) {
        int t = PyObject_IsTrue(PyTuple_GET_ITEM(obj, i < 5 ? i : i + 1));
        if (t < 0) return -1;
        *flags[i] = t != 0;
    }
    Py_buffer d;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(obj, 5), &d, PyBUF_SIMPLE) < 0) return -1;
    if (d.len % 8 != 0) {
        PyBuffer_Release(&d);
        PyErr_SetString(PyExc_ValueError, "delay_levels must be little-endian int64 values");
        return -1;
    }
    o->n_delay = d.len / 8;
    o->delay_ms = malloc((size_t)(o->n_delay ? d.len : 8));
    if (!o->delay_ms) {
        PyBuffer_Release(&d);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(o->delay_ms, d.buf, (size_t)d.len);
    PyBuffer_Release(&d);
    return 0;
}

static int column_id(PyObject *name) {
    if (!PyUnicode_Check(name)) return -2;
    const char *s = PyUnicode_AsUTF8(name);
    if (!s) return -3;
    for (int c = 0; c < C_COUNT; c++)
        if (!strcmp(s, COLS[c].name)) return c;
    return -1;
}

/* validity bitmap, or None when the column has no null */
static PyObject *validity_of(col_t *col, int64_t rows) {
    if (col->nulls == 0) Py_RETURN_NONE;
    return buf_take(&col->valid, (rows + 7) / 8);
}

static PyObject *build_column(int c, col_t *col, int64_t rows) {
    enum col_kind k = COLS[c].kind;
    PyObject *v = COLS[c].nullable ? validity_of(col, rows) : (Py_INCREF(Py_None), Py_None);
    if (!v) return NULL;
    PyObject *res = NULL;
    if (k == K_BOOL) {
        res = Py_BuildValue("(NN)", v, buf_take(&col->data, (rows + 7) / 8));
    } else if (fixed_width(k)) {
        res = Py_BuildValue("(NN)", v, buf_take(&col->data, rows * fixed_width(k)));
    } else if (k == K_STR) {
        res = Py_BuildValue("(NNN)", v, buf_take(&col->off, (rows + 1) * 4),
                            buf_take(&col->data, col->data.len));
    } else if (k == K_LIST) {
        res = Py_BuildValue("(NNNN)", v, buf_take(&col->off, (rows + 1) * 4),
                            buf_take(&col->c_off, col->c_off.len), buf_take(&col->c_data, col->c_data.len));
    } else {
        res = Py_BuildValue("(NNNNNN)", v, buf_take(&col->off, (rows + 1) * 4),
                            buf_take(&col->c_off, col->c_off.len), buf_take(&col->c_data, col->c_data.len),
                            buf_take(&col->v_off, col->v_off.len), buf_take(&col->v_data, col->v_data.len));
    }
    return res; /* Py_BuildValue with N steals even on failure */
}

static int get_segment(PyObject *obj, Py_buffer *view, int64_t start, int64_t end) {
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) return -1;
    if (start < 0 || end < 0 || end > (int64_t)view->len) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError,
                     "positions out of range: start %lld, end %lld, buffer of %zd bytes",
                     (long long)start, (long long)end, view->len);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(scan_doc,
"scan(buf, file_start, pos, end, max_records, opts, columns)\n"
"--\n\n"
"Decode up to max_records VALID records from pos (spec recovery.md §3).\n\n"
"Returns (columns, count, next_pos, stop, stats): columns maps each requested MESSAGE column to\n"
"its Arrow buffers; stop is None when max_records were read (or a string column reached Arrow's\n"
"2 GiB offset limit), else (outcome, check_code, declared_size or None) of the record at\n"
"next_pos; stats = (first_store_ts, last_store_ts, last_record_pos, crc_failures, index_puts,\n"
"max_store_ts): index_puts counts each record's UNIQ_KEY and KEYS tokens (and non-empty TAGS with\n"
"index_tags), ROLLBACK records aside.");

static PyObject *py_scan(PyObject *self, PyObject *args) {
    PyObject *buf_obj, *opts_obj, *columns_obj;
    long long file_start, pos, end, max_records;
    if (!PyArg_ParseTuple(args, "OLLLLOO:scan", &buf_obj, &file_start, &pos, &end, &max_records,
                          &opts_obj, &columns_obj))
        return NULL;

    scan_t *sc = calloc(1, sizeof(scan_t));
    if (!sc) return PyErr_NoMemory();
    Py_buffer view;
    bool have_view = false;
    PyObject *result = NULL, *cols_dict = NULL, *stop = NULL, *stats = NULL;
    PyObject *names[C_COUNT] = {0};

    if (parse_opts(opts_obj, &sc->opts) < 0) goto done;
    PyObject *seq = PySequence_Fast(columns_obj, "columns must be a sequence of column names");
    if (!seq) goto done;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *nm = PySequence_Fast_GET_ITEM(seq, i);
        int c = column_id(nm);
        if (c < 0) {
            if (c != -3)
                PyErr_Format(PyExc_ValueError, "not a scanned MESSAGE column: %R", nm);
            Py_DECREF(seq);
            goto done;
        }
        sc->cols[c].on = true;
        sc->want |= 1ull << c;
        Py_INCREF(nm);
        Py_XSETREF(names[c], nm);
    }
    Py_DECREF(seq);
    if (get_segment(buf_obj, &view, pos, end) < 0) goto done;
    have_view = true;

    sc->span.base = view.buf;
    sc->span.end = end;
    sc->file_start = file_start;
    sc->crc_computed = sc->opts.compute_crc || sc->opts.check_crc;
    sc->want_pairs = sc->cols[C_PROPERTIES].on;
    sc->parse_props = true; /* every record's UNIQ_KEY and KEYS are counted as index puts */
    sc->want_valid_utf8 = (sc->want & (PROPERTY_COLUMNS & ~(1ull << C_TAGS_CODE) &
                                       ~(1ull << C_TRANSACTION_PREPARED) & ~(1ull << C_REAL_QUEUE_ID) &
                                       ~(1ull << C_DELAY_LEVEL))) != 0;
    if (!scan_alloc_scratch(sc)) {
        PyErr_NoMemory();
        goto done;
    }
    /* rows: never more than fit in [pos, end) nor than asked; start modestly, grow by doubling */
    int64_t max_rows = max_records > 0 ? (int64_t)max_records : 0;
    int64_t fit = end > pos ? (end - pos) / MIN_RECORD_SIZE + 1 : 1;
    if (max_rows > fit) max_rows = fit;
    if (!grow_rows(sc, max_rows < 4096 ? max_rows : 4096, 0)) {
        PyErr_NoMemory();
        goto done;
    }
    for (int c = 0; c < C_COUNT; c++) { /* offsets[0] = 0 of child arrays */
        col_t *col = &sc->cols[c];
        if (col->on && (COLS[c].kind == K_LIST || COLS[c].kind == K_MAP)) {
            if (!buf_put_i32(&col->c_off, 0) || (COLS[c].kind == K_MAP && !buf_put_i32(&col->v_off, 0))) {
                PyErr_NoMemory();
                goto done;
            }
        }
    }

    int64_t n = 0, p = pos, pf_next = 0;
    int outcome = VALID, check = CK_NONE;
    int64_t declared = 0, crc_failures = 0, first_ts = 0, last_ts = 0, last_pos = 0;
    int64_t index_puts = 0, max_ts = INT64_MIN;
    bool has_declared = false, stopped = false;
    released = PyEval_SaveThread(); /* buf_grow takes the GIL back when it must */
    rec_t r;
    const bool dl = sc->opts.dledger;
    while (n < max_rows) {
        int64_t at = p; /* the record's position: past the entry header in a DLedger store */
        int32_t entry_size = 0;
        if (dl) {
            outcome = check_entry(sc, p, &entry_size, &check, &declared, &has_declared);
            if (outcome != VALID) {
                stopped = true;
                break;
            }
            /* the record is read within its entry, and must fill it: the broker's reput steps
             * by TOTALSIZE + 48, DLedger by the entry size (R§16.4) */
            at = p + DL_BODY_OFFSET;
            int64_t saved = sc->span.end;
            if (p + entry_size < saved) sc->span.end = p + entry_size;
            outcome = check_record(sc, at, &r, &check, &declared, &has_declared, true);
            sc->span.end = saved;
            if (outcome == VALID && r.total_size != entry_size - DL_BODY_OFFSET) {
                outcome = INVALID;
                check = CK_DLEDGER_BODY_SIZE;
            }
            if (outcome != VALID) {
                declared = entry_size;
                has_declared = true;
                stopped = true;
                break;
            }
        } else {
            outcome = check_record(sc, p, &r, &check, &declared, &has_declared, true);
            if (outcome != VALID) {
                stopped = true;
                break;
            }
        }
        /* Arrow string offsets are int32: each record adds at most 3 * TOTALSIZE + 256 bytes to any
         * variable-width column, so only check columns once that sum could reach 2 GiB. */
        if (n > 0 && 3 * (p - pos + (int64_t)r.total_size) + 256 * (n + 1) > INT32_MAX &&
            would_overflow(sc, &r))
            break; /* leave it to the next batch */
        if (n == sc->rows_cap) {
            int64_t rows = sc->rows_cap * 2 < max_rows ? sc->rows_cap * 2 : max_rows;
            if (!grow_rows(sc, rows, n)) {
                sc->nomem = true;
                break;
            }
        }
        if (!emit(sc, n, at, &r)) {
            sc->nomem = true;
            break;
        }
        int64_t step = dl ? entry_size : r.total_size;
        prefetch_ahead(&sc->span, p + step, &pf_next);
        if (n == 0) {
            first_ts = r.store_ts;
            /* size every buffer once for the rows that fit if records look like the first one:
             * one allocation instead of a chain of reallocations (pages are touched only when
             * written, so an estimate too large costs address space, not memory) */
            int64_t expect = (end - p) / step + 1;
            if (expect > max_rows) expect = max_rows;
            if (expect > PRESIZE_MAX_ROWS) expect = PRESIZE_MAX_ROWS; /* beyond: doubling */
            if (expect > sc->rows_cap && !grow_rows(sc, expect, 1)) {
                sc->nomem = true;
                break;
            }
        }
        last_ts = r.store_ts;
        if (r.store_ts > max_ts) max_ts = r.store_ts;
        last_pos = at;
        crc_failures += r.body_crc_ok == 0 || r.record_crc_ok == 0;
        if ((r.sys_flag & TRANSACTION_TYPE_MASK) != TRANSACTION_ROLLBACK_TYPE)
            index_puts += (r.prop[P_UNIQ_KEY].p != NULL) + key_count(r.prop[P_KEYS])
                          + (sc->opts.index_tags && r.prop[P_TAGS].p != NULL && r.prop[P_TAGS].n > 0);
        n++;
        p += step;
    }
    PyEval_RestoreThread(released);
    released = NULL;
    if (sc->nomem) {
        PyErr_NoMemory();
        goto done;
    }

    cols_dict = PyDict_New();
    if (!cols_dict) goto done;
    for (int c = 0; c < C_COUNT; c++) {
        if (!sc->cols[c].on) continue;
        PyObject *col = build_column(c, &sc->cols[c], n);
        if (!col || PyDict_SetItem(cols_dict, names[c], col) < 0) {
            Py_XDECREF(col);
            goto done;
        }
        Py_DECREF(col);
    }
    if (stopped) {
        stop = has_declared ? Py_BuildValue("(iiL)", outcome, check, (long long)declared)
                            : Py_BuildValue("(iiO)", outcome, check, Py_None);
    } else {
        stop = Py_NewRef(Py_None);
    }
    if (!stop) goto done;
    if (n > 0)
        stats = Py_BuildValue("(LLLLLL)", (long long)first_ts, (long long)last_ts, (long long)last_pos,
                              (long long)crc_failures, (long long)index_puts, (long long)max_ts);
    else
        stats = Py_BuildValue("(OOOLLO)", Py_None, Py_None, Py_None, (long long)crc_failures, 0LL, Py_None);
    if (!stats) goto done;
    result = Py_BuildValue("(OLLOO)", cols_dict, (long long)n, (long long)p, stop, stats);

done:
    Py_XDECREF(cols_dict);
    Py_XDECREF(stop);
    Py_XDECREF(stats);
    for (int c = 0; c < C_COUNT; c++) Py_XDECREF(names[c]);
    if (have_view) PyBuffer_Release(&view);
    scan_free(sc);
    free(sc);
    return result;
}

PyDoc_STRVAR(is_zero_doc,
"is_zero(buf, start, end)\n--\n\n"
"True when every byte of buf[start:end] is zero (positions clamp to the buffer like a slice).");

static PyObject *py_is_zero(PyObject *self, PyObject *args) {
    PyObject *buf_obj;
    long long start, end;
    if (!PyArg_ParseTuple(args, "OLL:is_zero", &buf_obj, &start, &end)) return NULL;
    if (start < 0 || end < 0) {
        PyErr_SetString(PyExc_ValueError, "is_zero: negative position");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(buf_obj, &view, PyBUF_SIMPLE) < 0) return NULL;
    span_t sp = {view.buf, view.len};
    int64_t s = start < sp.end ? start : sp.end;
    int64_t e = end < sp.end ? end : sp.end;
    bool zero = true;
    const uint8_t *q = e > s ? span_at(&sp, s, e - s) : NULL;
    if (q) {
        int64_t n = e - s;
        Py_BEGIN_ALLOW_THREADS
        /* q[0] == 0 and every byte equal to its predecessor: memcmp's vector loop does the work */
        zero = q[0] == 0 && (n == 1 || memcmp(q, q + 1, (size_t)(n - 1)) == 0);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    return PyBool_FromLong(zero);
}

PyDoc_STRVAR(resync_doc,
"resync(buf, file_start, start, end, opts, search_end=end)\n--\n\n"
"First position >= start holding a VALID record whose stored PHYSICALOFFSET equals file_start +\n"
"position (the resync anchor of spec edge-cases E#3), or -1. Records are checked against end;\n"
"only magic codes starting below search_end are candidates (a caller's buffer reads as zeros\n"
"from there on: no record starts there).");

/* First position in [p, p + n) holding bytes DA A3 20 (the prefix both magic codes share), or
   NULL. memchr for the first byte: glibc vectorises it, not memmem for a 3-byte needle, and
   what resync crosses is mostly a preallocated zero tail. */
static const uint8_t *find_magic_prefix(const uint8_t *p, size_t n) {
    const uint8_t *end = p + n;
    while (end - p >= 3) {
        const uint8_t *h = memchr(p, 0xDA, (size_t)(end - p) - 2);
        if (!h) return NULL;
        if (h[1] == 0xA3 && h[2] == 0x20) return h;
        p = h + 1;
    }
    return NULL;
}

static PyObject *py_resync(PyObject *self, PyObject *args) {
    PyObject *buf_obj, *opts_obj;
    long long file_start, start, end, search_end = -1;
    if (!PyArg_ParseTuple(args, "OLLLO|L:resync", &buf_obj, &file_start, &start, &end, &opts_obj,
                          &search_end))
        return NULL;
    if (search_end < 0 || search_end > end) search_end = end;
    scan_t *sc = calloc(1, sizeof(scan_t));
    if (!sc) return PyErr_NoMemory();
    PyObject *result = NULL;
    Py_buffer view;
    bool have_view = false;
    if (parse_opts(opts_obj, &sc->opts) < 0) goto done;
    if (get_segment(buf_obj, &view, start, end) < 0) goto done;
    have_view = true;
    if (!scan_alloc_scratch(sc)) {
        PyErr_NoMemory();
        goto done;
    }
    sc->span.base = view.buf;
    sc->span.end = end;
    sc->file_start = file_start;
    sc->crc_computed = sc->opts.compute_crc || sc->opts.check_crc;
    sc->parse_props = sc->opts.check_dup_info || sc->opts.broker_5x || sc->crc_computed;
    int64_t found = -1;
    Py_BEGIN_ALLOW_THREADS
    /* candidates: the magic at q + 4 (V1 0xDAA320A7; V2 0xDAA320AB on 5.x), both share 3 bytes */
    int64_t search = start + OFF_MAGICCODE;
    rec_t r;
    while (search < search_end) {
        /* a magic code starting below search_end: its prefix may end just past it */
        int64_t upto = search_end + 2 < end ? search_end + 2 : end;
        const uint8_t *from = span_at(&sc->span, search, upto - search);
        if (!from) break;
        const uint8_t *hit = find_magic_prefix(from, (size_t)(upto - search));
        if (!hit) break;
        int64_t h = hit - sc->span.base;
        search = h + 1;
        const uint8_t *m = span_at(&sc->span, h, SZ_I32);
        if (!m) break;
        int32_t magic = be_i32(m);
        if (!(magic == MAGIC_V1 || (magic == MAGIC_V2 && sc->opts.broker_5x))) continue;
        int64_t q = h - OFF_MAGICCODE;
        const uint8_t *phy = span_at(&sc->span, q + OFF_PHYSICALOFFSET, SZ_I64);
        int64_t actual;
        if (!phy || __builtin_add_overflow((int64_t)file_start, q, &actual) || be_i64(phy) != actual)
            continue;
        int check;
        int64_t declared;
        bool has_declared;
        if (sc->opts.dledger) { /* the anchor is the entry holding the record (F§16.2) */
            int32_t entry_size;
            if (q < DL_BODY_OFFSET || q - DL_BODY_OFFSET < start ||
                check_entry(sc, q - DL_BODY_OFFSET, &entry_size, &check, &declared, &has_declared) != VALID)
                continue;
            int64_t saved = sc->span.end;
            if (q - DL_BODY_OFFSET + entry_size < saved) sc->span.end = q - DL_BODY_OFFSET + entry_size;
            int ok = check_record(sc, q, &r, &check, &declared, &has_declared, false);
            sc->span.end = saved;
            if (ok == VALID && r.total_size == entry_size - DL_BODY_OFFSET) {
                found = q - DL_BODY_OFFSET;
                break;
            }
            continue;
        }
        if (check_record(sc, q, &r, &check, &declared, &has_declared, false) == VALID) {
            found = q;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromLongLong(found);
done:
    if (have_view) PyBuffer_Release(&view);
    scan_free(sc);
    free(sc);
    return result;
}

PyDoc_STRVAR(java_hashes_doc,
"java_hashes(offsets, data, length, offset, mode)\n--\n\n"
"Hash every string of a pyarrow StringArray given its int32 offsets buffer and UTF-8 data buffer:\n"
"native int32 per string. mode 0: Java String.hashCode over UTF-16 code units (after UTF-8\n"
"decoding with replacement); mode 1: IndexFile#indexKeyHashMethod (abs, Integer.MIN_VALUE -> 0).");

static PyObject *py_java_hashes(PyObject *self, PyObject *args) {
    PyObject *off_obj, *data_obj;
    long long length, offset;
    int mode;
    if (!PyArg_ParseTuple(args, "OOLLi:java_hashes", &off_obj, &data_obj, &length, &offset, &mode))
        return NULL;
    if (mode != 0 && mode != 1) {
        PyErr_SetString(PyExc_ValueError, "java_hashes: mode must be 0 (hashCode) or 1 (index key hash)");
        return NULL;
    }
    if (length < 0 || offset < 0) {
        PyErr_SetString(PyExc_ValueError, "java_hashes: negative length or offset");
        return NULL;
    }
    if (length == 0) return PyBytes_FromStringAndSize("", 0);
    Py_buffer ob, db;
    if (PyObject_GetBuffer(off_obj, &ob, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(data_obj, &db, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&ob);
        return NULL;
    }
    PyObject *out = NULL;
    span_t offs = {ob.buf, ob.len};
    span_t data = {db.buf, db.len};
    if (length > (INT64_MAX / 4) - offset - 1 || !span_at(&offs, offset * 4, (length + 1) * 4)) {
        PyErr_SetString(PyExc_ValueError, "java_hashes: offsets buffer shorter than offset + length + 1");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(length * 4));
    if (!out) goto done;
    int32_t *res = (int32_t *)(void *)PyBytes_AS_STRING(out);
    int64_t bad = -1;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t i = 0; i < length; i++) {
        const uint8_t *o = span_at(&offs, (offset + i) * 4, 8);
        int32_t a, b;
        memcpy(&a, o, 4);
        memcpy(&b, o + 4, 4);
        const uint8_t *s = b >= a ? span_at(&data, a, (int64_t)b - a) : NULL;
        if (!s && b != a) {
            bad = i;
            break;
        }
        int32_t h = s ? java_hash_utf8(s, (int64_t)b - a) : 0;
        if (mode == 1) h = h == INT32_MIN ? 0 : (h < 0 ? -h : h);
        res[i] = h;
    }
    Py_END_ALLOW_THREADS
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "java_hashes: string %lld has offsets outside the data buffer",
                     (long long)bad);
        Py_CLEAR(out);
    }
done:
    PyBuffer_Release(&db);
    PyBuffer_Release(&ob);
    return out;
}

/* ---- index files: IndexFile#putKey over a batch (F§7.4, R§8) ------------------------------- */

static const char index_put_all_doc[] =
    "index_put_all(data, slots_pos, entries_pos, hash_slot_num, first_entry, key_hash, phy_offset,\n"
    "              time_diff) -> int\n\n"
    "IndexFile#putKey for every put in order, into the index file image ``data`` (writable): put i\n"
    "is entry ``first_entry + i`` (key hash, phy offset, timeDiff, the slot's previous head when\n"
    "0 < head <= the entry number, else 0) and becomes its slot's head. ``key_hash``, ``phy_offset``\n"
    "and ``time_diff`` are native int64 arrays of one length. Returns how many puts found their slot\n"
    "invalid (the header's hashSlotCount increments).";

static PyObject *py_index_put_all(PyObject *self, PyObject *args) {
    PyObject *data_obj, *kh_obj, *phy_obj, *td_obj;
    long long slots_pos, entries_pos, hash_slot_num, first;
    if (!PyArg_ParseTuple(args, "OLLLLOOO:index_put_all", &data_obj, &slots_pos, &entries_pos,
                          &hash_slot_num, &first, &kh_obj, &phy_obj, &td_obj))
        return NULL;
    Py_buffer d, k, p, t;
    if (PyObject_GetBuffer(data_obj, &d, PyBUF_WRITABLE) < 0) return NULL;
    if (PyObject_GetBuffer(kh_obj, &k, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&d);
        return NULL;
    }
    if (PyObject_GetBuffer(phy_obj, &p, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&k);
        PyBuffer_Release(&d);
        return NULL;
    }
    if (PyObject_GetBuffer(td_obj, &t, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&p);
        PyBuffer_Release(&k);
        PyBuffer_Release(&d);
        return NULL;
    }
    PyObject *out = NULL;
    int64_t n = k.len / 8;
    if (k.len % 8 || p.len != k.len || t.len != k.len) {
        PyErr_SetString(PyExc_ValueError, "index_put_all: key_hash, phy_offset and time_diff must be int64 arrays of one length");
        goto done;
    }
    if (hash_slot_num <= 0 || slots_pos < 0 || first < 0 || first > INT32_MAX - n
        || slots_pos > d.len - 4 * hash_slot_num || entries_pos < slots_pos + 4 * hash_slot_num
        || entries_pos > d.len - 20 * (first + n)) {
        PyErr_SetString(PyExc_ValueError, "index_put_all: the slots or entries lie outside the index file image");
        goto done;
    }
    uint8_t *base = d.buf;
    const int64_t *kh = k.buf, *phy = p.buf, *td = t.buf;
    int64_t invalid = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t i = 0; i < n; i++) {
        int64_t slot = kh[i] % hash_slot_num;
        if (slot < 0) slot += hash_slot_num;
        uint8_t *head = base + slots_pos + 4 * slot;
        int64_t entry = first + i;
        int32_t prev = be_i32(head);
        if (prev <= 0 || prev > entry) {
            prev = 0;
            invalid++;
        }
        uint8_t *e = base + entries_pos + 20 * entry;
        put_be32(e, (int32_t)kh[i]);
        put_be64(e + 4, phy[i]);
        put_be32(e + 12, (int32_t)td[i]);
        put_be32(e + 16, prev);
        put_be32(head, (int32_t)entry);
    }
    Py_END_ALLOW_THREADS
    out = PyLong_FromLongLong(invalid);
done:
    PyBuffer_Release(&t);
    PyBuffer_Release(&p);
    PyBuffer_Release(&k);
    PyBuffer_Release(&d);
    return out;
}

/* ---- the audit's index checks: (key hash, phy offset) pairs grouped by phy offset ----------- */

/* Entries and puts come in commitlog order, so the pairs arrive sorted by phy offset and a pair's
 * equals share its group (its record's keys): one walk over the groups replaces a sort of all of
 * them. A group is searched linearly up to SMALL_GROUP pairs, sorted above (a damaged index file
 * can hold any number of entries at one phy offset). Key hashes compare as 32 bits. */
#define SMALL_GROUP 32

typedef struct {
    uint32_t kh;
    int64_t at;
} kh_at_t;

static int cmp_kh_at(const void *x, const void *y) {
    const kh_at_t *a = x, *b = y;
    if (a->kh != b->kh) return a->kh < b->kh ? -1 : 1;
    return (a->at > b->at) - (a->at < b->at);
}

static int cmp_u32(const void *x, const void *y) {
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return (a > b) - (a < b);
}

/* out[i] = 1 where have[0..nh) holds want[i] (i < nw); false: no memory */
static bool group_held(const int64_t *have, int64_t nh, const int64_t *want, int64_t nw, uint8_t *out) {
    if (nh <= SMALL_GROUP) {
        for (int64_t i = 0; i < nw; i++)
            for (int64_t j = 0; j < nh; j++)
                if ((uint32_t)have[j] == (uint32_t)want[i]) {
                    out[i] = 1;
                    break;
                }
        return true;
    }
    uint32_t *s = malloc(nh * sizeof *s);
    if (!s) return false;
    for (int64_t j = 0; j < nh; j++) s[j] = (uint32_t)have[j];
    qsort(s, nh, sizeof *s, cmp_u32);
    for (int64_t i = 0; i < nw; i++) {
        uint32_t k = (uint32_t)want[i];
        out[i] = bsearch(&k, s, nh, sizeof *s, cmp_u32) != NULL;
    }
    free(s);
    return true;
}

/* out[i] = 1 where an earlier pair of the group (kh[0..n), in order) has kh[i]: held by the
 * pairs before it; false: no memory */
static bool group_repeated(const int64_t *kh, int64_t n, uint8_t *out) {
    if (n <= SMALL_GROUP) {
        for (int64_t i = 1; i < n; i++) group_held(kh, i, kh + i, 1, out + i);
        return true;
    }
    kh_at_t *s = malloc(n * sizeof *s);
    if (!s) return false;
    for (int64_t i = 0; i < n; i++) s[i] = (kh_at_t){(uint32_t)kh[i], i};
    qsort(s, n, sizeof *s, cmp_kh_at);
    for (int64_t i = 1; i < n; i++)
        if (s[i].kh == s[i - 1].kh) out[s[i].at] = 1;
    free(s);
    return true;
}

/* the int64 arrays of a pairs call: n key hashes and n phy offsets, the phy offsets ascending */
static int get_pairs(PyObject *kh_obj, PyObject *phy_obj, Py_buffer *k, Py_buffer *p, const char *fn) {
    if (PyObject_GetBuffer(kh_obj, k, PyBUF_SIMPLE) < 0) return -1;
    if (PyObject_GetBuffer(phy_obj, p, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(k);
        return -1;
    }
    const int64_t *phy = p->buf;
    bool ok = k->len % 8 == 0 && p->len == k->len;
    for (int64_t i = 1; ok && i < p->len / 8; i++) ok = phy[i - 1] <= phy[i];
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "%s: key hashes and phy offsets must be int64 arrays of one length, "
                     "the phy offsets ascending", fn);
        PyBuffer_Release(p);
        PyBuffer_Release(k);
        return -1;
    }
    return 0;
}

static const char index_pairs_repeated_doc[] =
    "index_pairs_repeated(key_hash, phy_offset) -> bytes\n\n"
    "One byte per pair: 1 where an earlier pair is equal (key hashes as 32 bits). The pairs are\n"
    "in put order within each phy offset, the phy offsets ascending (int64 arrays).";

static PyObject *py_index_pairs_repeated(PyObject *self, PyObject *args) {
    PyObject *kh_obj, *phy_obj;
    if (!PyArg_ParseTuple(args, "OO:index_pairs_repeated", &kh_obj, &phy_obj)) return NULL;
    Py_buffer k, p;
    if (get_pairs(kh_obj, phy_obj, &k, &p, "index_pairs_repeated") < 0) return NULL;
    int64_t n = k.len / 8;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (out) {
        uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
        const int64_t *kh = k.buf, *phy = p.buf;
        bool ok = true;
        memset(o, 0, n);
        Py_BEGIN_ALLOW_THREADS
        for (int64_t a = 0, b; ok && a < n; a = b) {
            for (b = a + 1; b < n && phy[b] == phy[a]; b++) {}
            ok = group_repeated(kh + a, b - a, o + a);
        }
        Py_END_ALLOW_THREADS
        if (!ok) Py_SETREF(out, PyErr_NoMemory());
    }
    PyBuffer_Release(&p);
    PyBuffer_Release(&k);
    return out;
}

static const char index_pairs_held_doc[] =
    "index_pairs_held(have_key_hash, have_phy_offset, key_hash, phy_offset) -> bytes\n\n"
    "One byte per pair of (key_hash, phy_offset): 1 where the have pairs hold an equal one (key\n"
    "hashes as 32 bits). int64 arrays, each side's phy offsets ascending.";

static PyObject *py_index_pairs_held(PyObject *self, PyObject *args) {
    PyObject *hk_obj, *hp_obj, *wk_obj, *wp_obj;
    if (!PyArg_ParseTuple(args, "OOOO:index_pairs_held", &hk_obj, &hp_obj, &wk_obj, &wp_obj)) return NULL;
    Py_buffer hk, hp, wk, wp;
    if (get_pairs(hk_obj, hp_obj, &hk, &hp, "index_pairs_held") < 0) return NULL;
    if (get_pairs(wk_obj, wp_obj, &wk, &wp, "index_pairs_held") < 0) {
        PyBuffer_Release(&hp);
        PyBuffer_Release(&hk);
        return NULL;
    }
    int64_t nh = hk.len / 8, nw = wk.len / 8;
    PyObject *out = PyBytes_FromStringAndSize(NULL, nw);
    if (out) {
        uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
        const int64_t *hkh = hk.buf, *hphy = hp.buf, *wkh = wk.buf, *wphy = wp.buf;
        bool ok = true;
        memset(o, 0, nw);
        Py_BEGIN_ALLOW_THREADS
        int64_t h = 0;
        for (int64_t a = 0, b; ok && a < nw; a = b) {
            for (b = a + 1; b < nw && wphy[b] == wphy[a]; b++) {}
            while (h < nh && hphy[h] < wphy[a]) h++;
            int64_t e = h;
            while (e < nh && hphy[e] == wphy[a]) e++;
            ok = group_held(hkh + h, e - h, wkh + a, b - a, o + a);
            h = e;
        }
        Py_END_ALLOW_THREADS
        if (!ok) Py_SETREF(out, PyErr_NoMemory());
    }
    PyBuffer_Release(&wp);
    PyBuffer_Release(&wk);
    PyBuffer_Release(&hp);
    PyBuffer_Release(&hk);
    return out;
}

static PyObject *py_crc32(PyObject *self, PyObject *arg) {
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    int32_t crc;
    Py_BEGIN_ALLOW_THREADS
    crc = broker_crc(b.buf, b.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    return PyLong_FromLong(crc);
}

static PyMethodDef methods[] = {
    {"_crc32", py_crc32, METH_O, "UtilAll#crc32 (CRC-32 & 0x7FFFFFFF) with the scanner's kernel."},
    {"scan", py_scan, METH_VARARGS, scan_doc},
    {"is_zero", py_is_zero, METH_VARARGS, is_zero_doc},
    {"resync", py_resync, METH_VARARGS, resync_doc},
    {"java_hashes", py_java_hashes, METH_VARARGS, java_hashes_doc},
    {"index_put_all", py_index_put_all, METH_VARARGS, index_put_all_doc},
    {"index_pairs_repeated", py_index_pairs_repeated, METH_VARARGS, index_pairs_repeated_doc},
    {"index_pairs_held", py_index_pairs_held, METH_VARARGS, index_pairs_held_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "store_reader._native",
    "Native commitlog scanner (C), Java string hashes, index putKey batches and the audit's index "
    "pair checks. Pure twins: store_reader._pyscan, javahash, indexfile and audit.index.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    choose_crc32();
    init_hex_pairs();
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    PyObject *checks = PyTuple_New(CK_COUNT);
    PyObject *outcomes = PyTuple_New(4);
    PyObject *layout = Py_BuildValue(
        "{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i}",
        "TOTALSIZE", OFF_TOTALSIZE, "MAGICCODE", OFF_MAGICCODE, "BODYCRC", OFF_BODYCRC,
        "QUEUEID", OFF_QUEUEID, "FLAG", OFF_FLAG, "QUEUEOFFSET", OFF_QUEUEOFFSET,
        "PHYSICALOFFSET", OFF_PHYSICALOFFSET, "SYSFLAG", OFF_SYSFLAG, "BORNTIMESTAMP", OFF_BORNTIMESTAMP,
        "BORNHOST", OFF_BORNHOST, "MID_SIZE", MID_SIZE, "CAL_FIXED", CAL_FIXED,
        "MAGIC_V1", MAGIC_V1, "MAGIC_V2", MAGIC_V2, "BLANK_MAGIC", BLANK_MAGIC,
        "CRC32_RESERVED_LEN", CRC32_RESERVED_LEN);
    if (!checks || !outcomes || !layout) goto fail;
    for (int i = 0; i < CK_COUNT; i++) {
        PyObject *s = PyUnicode_FromString(CHECK_NAMES[i]);
        if (!s) goto fail;
        PyTuple_SET_ITEM(checks, i, s);
    }
    for (int i = 0; i < 4; i++) {
        PyObject *s = PyUnicode_FromString(OUTCOME_NAMES[i]);
        if (!s) goto fail;
        PyTuple_SET_ITEM(outcomes, i, s);
    }
    if (PyModule_AddObjectRef(m, "CHECKS", checks) < 0 ||
        PyModule_AddObjectRef(m, "OUTCOMES", outcomes) < 0 ||
        PyModule_AddObjectRef(m, "LAYOUT", layout) < 0 ||
        PyModule_AddStringConstant(m, "CRC32_IMPL", crc32_impl_name) < 0)
        goto fail;
    Py_DECREF(checks);
    Py_DECREF(outcomes);
    Py_DECREF(layout);
    return m;
fail:
    Py_XDECREF(checks);
    Py_XDECREF(outcomes);
    Py_XDECREF(layout);
    Py_DECREF(m);
    return NULL;
}
