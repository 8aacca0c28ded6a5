/* Kineto trace JSON -> Arrow column buffers, one piece of the traceEvents array at a time.
 *
 * Stage: parse (Kineto), the fast path of roles.Roles for the events it reads: kernels, copies,
 * memsets, CUDA runtime/driver calls and annotations. Python side, and the rules for when it is
 * used: tracediff/parse/kineto/scan.py (types: _kineto_scan.pyi).
 *
 * Why native: msgspec decoding a piece into event records, then one C-level pass per field to
 * build Arrow arrays, costs ~1.5 us per event of a real trace (bench/README.md, "Kineto
 * ingest"); issue #3 asks for 1 us for everything. Here one pass over the JSON text validates
 * it and writes the wanted fields of each wanted event straight into column buffers.
 *
 * Only the plain case is decoded, and nothing is guessed: the piece must be strict JSON (RFC
 * 8259, UTF-8 checked, nesting <= 32), every element an object, ph/cat strings or null, ts/dur
 * numbers or null that a double holds as msgspec + pyarrow would read them. In a wanted event
 * (its cat is one of Python's roles, ph "X") name must be a string or null, pid/tid integers,
 * id strings ("25738", "stream 7") or null, ts present, and each wanted args key an integer /
 * string / list of integers as its column asks. Anything else -- an escaped key, a duplicate
 * key, a float where an id is wanted, a number beyond int64 or a double's exact integers, an
 * args that is not an object -- refuses the piece (a reason string is returned) and Python
 * decodes that piece with msgspec as before, so values, errors and warnings stay the Python
 * path's. Refusing is always safe: the C side only has to be at least as strict as msgspec.
 *
 * cpu_op events are not decoded: those Python reads (ProfilerStep#N, record_param_comms) are
 * returned as (start, end) byte spans for msgspec. Times: start/duration/end in int64 ns, through
 * the double as clock.Clock.ns_of rounds it, or (exact) from the decimal text as Clock.ns does.
 * A piece of >= 1 MB may be scanned as two parts on two threads (GIL released). Column buffers
 * are handed to Python without a copy (a capsule frees them). One role's names (Python calls:
 * millions of events, a few thousand distinct names) may be dictionary-encoded: int32 codes
 * and each distinct decoded string once, per part, instead of every name's bytes; that role has
 * no duration_ns column (its calls' ends suffice). Every read is bounds-checked;
 * `make fuzz-kineto` runs it under ASan + UBSan on damaged pieces of real traces.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define MAX_DEPTH 32
/* small helpers of the per-event path: gcc -O2 declines to inline them into the large event() */
#define HOT static inline __attribute__((always_inline))
#define MAX_ROLES 16
#define MAX_ARGS 16
#define MAX_CATS 64
#define BASE_COLS 6 /* name, pid, tid, start_ns, duration_ns, end_ns */
#define EXACT_LIMIT 8796093022208.0 /* 2**43 us: below it a double holds ts to the ns */
#define TIME_LIMIT 9.2e15

/* ---- growable buffers and columns ---- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} Buf;

static int buf_grow(Buf *b, size_t extra) {
    if (b->n + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + extra) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, size_t n) {
    if (!n) return 0; /* an empty string: no buffer yet, and memcpy's pointers must not be null */
    if (buf_grow(b, n)) return -1;
    memcpy(b->p + b->n, src, n);
    b->n += n;
    return 0;
}

/* column kinds: 's' string (offsets int32 + data), 'i' int64, 'f' float64, 'l' list<int64>,
 * 'd' dictionary-encoded string (int32 codes into the distinct strings, in first-seen order) */
typedef struct {
    char kind;
    size_t rows, nulls;
    Buf valid, a, b; /* a: values, offsets or codes; b: string bytes (of the distinct ones for
                        'd') or list values */
    Buf c, hashes, tmp; /* 'd': the distinct strings' offsets, their hashes, unescaped text */
    uint32_t *slot;     /* 'd': open-addressing table, distinct index + 1 (0: empty) */
    size_t nslot;
} Col;

/* The validity bitmap is written only from a column's first null on (before it, every row is
 * valid and the bitmap would be all ones: col_out hands Python none), so a column without nulls
 * costs a count per row, not a bit. */
static int col_valid_slow(Col *c, int ok) {
    if (!c->nulls) { /* the first null: the rows so far, all valid */
        size_t full = c->rows >> 3, bytes = (c->rows + 7) >> 3;
        if (buf_grow(&c->valid, bytes + 1)) return -1;
        memset(c->valid.p, 0xFF, full);
        if (bytes > full) c->valid.p[full] = (uint8_t)((1u << (c->rows & 7)) - 1);
        c->valid.n = bytes;
    }
    size_t byte = c->rows >> 3;
    if (byte >= c->valid.n) {
        if (buf_grow(&c->valid, 1)) return -1;
        c->valid.p[c->valid.n++] = 0;
    }
    if (ok)
        c->valid.p[byte] |= (uint8_t)(1u << (c->rows & 7));
    else
        c->nulls++;
    c->rows++;
    return 0;
}

static inline int col_valid(Col *c, int ok) {
    if (ok && !c->nulls) {
        c->rows++;
        return 0;
    }
    return col_valid_slow(c, ok);
}

static int col_offset(Col *c, size_t end) {
    if (end > INT32_MAX) return -1;
    int32_t o = (int32_t)end;
    return buf_put(&c->a, &o, 4);
}

static int col_init(Col *c, char kind) {
    memset(c, 0, sizeof *c);
    c->kind = kind;
    if (kind == 's' || kind == 'l') return col_offset(c, 0);
    if (kind == 'd') {
        int32_t zero = 0;
        return buf_put(&c->c, &zero, 4);
    }
    return 0;
}

static void col_free(Col *c) {
    free(c->valid.p);
    free(c->a.p);
    free(c->b.p);
    free(c->c.p);
    free(c->hashes.p);
    free(c->tmp.p);
    free(c->slot);
}

/* ---- the JSON scanner ---- */

typedef struct {
    const uint8_t *p, *end, *base;
    const char *why; /* refusal reason */
    const uint8_t *at;
    int exact; /* times by the exact clock (decimal text), not through a double */
} S;

static inline int refuse(S *s, const char *why) {
    if (!s->why) {
        s->why = why;
        s->at = s->p;
    }
    return -1;
}

static inline void ws(S *s) {
    const uint8_t *p = s->p, *e = s->end;
    /* JSON whitespace: space, \t, \n, \r (bits of a 64-bit mask) */
    while (p < e && *p <= ' ' && ((1ULL << *p) & 0x100002600ULL)) p++;
    s->p = p;
}

static inline int hexval(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    c |= 0x20;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static int hex4(const uint8_t *p, const uint8_t *e, uint32_t *out) {
    if (e - p < 4) return -1;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return -1;
        v = (v << 4) | (uint32_t)h;
    }
    *out = v;
    return 0;
}

/* Length of one well-formed UTF-8 sequence at p (RFC 3629, no surrogates), 0 if ill-formed. */
static inline int utf8_len(const uint8_t *p, const uint8_t *e) {
    uint8_t c = p[0];
    if (c < 0x80) return 1;
#define CONT(i) (e - p > (i) && (p[i] & 0xC0) == 0x80)
    if (c >= 0xC2 && c <= 0xDF) return CONT(1) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (!(CONT(1) && CONT(2))) return 0;
        if (c == 0xE0 && p[1] < 0xA0) return 0;
        if (c == 0xED && p[1] > 0x9F) return 0;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (!(CONT(1) && CONT(2) && CONT(3))) return 0;
        if (c == 0xF0 && p[1] < 0x90) return 0;
        if (c == 0xF4 && p[1] > 0x8F) return 0;
        return 4;
    }
#undef CONT
    return 0;
}

/* A string whose opening quote is at s->p: validated and skipped. On return body and len span
 * its raw text (escapes undecoded) and *esc says whether it has any. */
static int string(S *s, const uint8_t **body, size_t *len, int *esc) {
    const uint8_t *p = s->p + 1, *e = s->end;
    *body = p;
    *esc = 0;
    for (;;) {
#ifdef __SSE2__
        const __m128i q = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\'), sp = _mm_set1_epi8(0x20);
        while (e - p >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)p);
            /* signed compare: bytes < 0x20 and bytes >= 0x80 (negative) both flag */
            __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, q), _mm_cmpeq_epi8(v, bs)),
                                     _mm_cmplt_epi8(v, sp));
            int mask = _mm_movemask_epi8(m);
            if (mask) {
                p += __builtin_ctz((unsigned)mask);
                goto special;
            }
            p += 16;
        }
#endif
        while (p < e && *p != '"' && *p != '\\' && *p >= 0x20 && *p < 0x80) p++;
        if (p >= e) {
            s->p = p;
            return refuse(s, "unterminated string");
        }
#ifdef __SSE2__
    special:
#endif
        if (*p == '"') {
            *len = (size_t)(p - *body);
            s->p = p + 1;
            return 0;
        }
        if (*p == '\\') {
            *esc = 1;
            if (e - p < 2) {
                s->p = p;
                return refuse(s, "unterminated string");
            }
            uint8_t c = p[1];
            if (c == 'u') {
                uint32_t u;
                if (hex4(p + 2, e, &u)) {
                    s->p = p;
                    return refuse(s, "bad \\u escape");
                }
                p += 6;
                if (u >= 0xDC00 && u <= 0xDFFF) {
                    s->p = p;
                    return refuse(s, "lone surrogate escape");
                }
                if (u >= 0xD800 && u <= 0xDBFF) {
                    uint32_t lo;
                    if (e - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, e, &lo) ||
                        lo < 0xDC00 || lo > 0xDFFF) {
                        s->p = p;
                        return refuse(s, "lone surrogate escape");
                    }
                    p += 6;
                }
                continue;
            }
            if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' ||
                c == 'r' || c == 't') {
                p += 2;
                continue;
            }
            s->p = p;
            return refuse(s, "bad escape");
        }
        if (*p < 0x20) {
            s->p = p;
            return refuse(s, "control character in string");
        }
        int n = utf8_len(p, e);
        if (!n) {
            s->p = p;
            return refuse(s, "invalid UTF-8");
        }
        p += n;
    }
}

/* Decoded text of a validated string (escapes resolved) appended to b. */
static int unescape(Buf *b, const uint8_t *p, size_t n) {
    const uint8_t *e = p + n;
    if (buf_grow(b, n)) return -1; /* decoded text is never longer than the raw */
    uint8_t *o = b->p + b->n;
    while (p < e) {
        if (*p != '\\') {
            *o++ = *p++;
            continue;
        }
        uint8_t c = p[1];
        p += 2;
        switch (c) {
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            uint32_t u, lo;
            hex4(p, e, &u);
            p += 4;
            if (u >= 0xD800 && u <= 0xDBFF) {
                hex4(p + 2, e, &lo);
                p += 6;
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (u < 0x80) {
                *o++ = (uint8_t)u;
            } else if (u < 0x800) {
                *o++ = (uint8_t)(0xC0 | (u >> 6));
                *o++ = (uint8_t)(0x80 | (u & 0x3F));
            } else if (u < 0x10000) {
                *o++ = (uint8_t)(0xE0 | (u >> 12));
                *o++ = (uint8_t)(0x80 | ((u >> 6) & 0x3F));
                *o++ = (uint8_t)(0x80 | (u & 0x3F));
            } else {
                *o++ = (uint8_t)(0xF0 | (u >> 18));
                *o++ = (uint8_t)(0x80 | ((u >> 12) & 0x3F));
                *o++ = (uint8_t)(0x80 | ((u >> 6) & 0x3F));
                *o++ = (uint8_t)(0x80 | (u & 0x3F));
            }
            break;
        }
        default: *o++ = c; /* " \ / */
        }
    }
    b->n = (size_t)(o - b->p);
    return 0;
}

/* A number: its value where msgspec and pyarrow read it exactly as computed here. */
typedef struct {
    int is_int;   /* no fraction, no exponent */
    int ok_int;   /* is_int and within +-(10^18 - 1): msgspec's int, pyarrow's int64 */
    int ok_dbl;   /* the double is msgspec's float (or pyarrow's float64 of its int) */
    int64_t i;
    double d;
    int huge; /* >= 1e300: a double may overflow */
    int neg, has_exp, ilen, flen; /* the text, for the exact clock */
    const uint8_t *ip, *fp;
} Num;

static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                               1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                               1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static inline int is_digit(const uint8_t *p, const uint8_t *e) {
    return p < e && (unsigned)(*p - '0') < 10;
}

/* A digit was wanted at p (JSON numbers: -? int frac? exp?, each part with digits). */
static int bad_number(S *s, const uint8_t *p) {
    s->p = p;
    return refuse(s, "invalid number");
}

static int number(S *s, Num *out) {
    const uint8_t *p = s->p, *e = s->end;
    int neg = 0, frac = 0, exp = 0, exp_digits = 0, is_int = 1, lead = 0;
    uint64_t m = 0; /* the digits' value; wraps beyond 19 significant digits (then unused) */
    if (p < e && *p == '-') {
        neg = 1;
        p++;
    }
    if (!is_digit(p, e)) return bad_number(s, p);
    const uint8_t *d0 = p;
    if (*p == '0') {
        p++;
        lead = 1; /* a zero integer part: not a significant digit */
    } else {
        while (is_digit(p, e)) m = m * 10 + (uint64_t)(*p++ - '0');
    }
    int digits = (int)(p - d0);
    out->ip = d0;
    out->ilen = digits;
    out->fp = NULL;
    if (p < e && *p == '.') {
        is_int = 0;
        p++;
        if (!is_digit(p, e)) return bad_number(s, p);
        const uint8_t *f0 = p;
        out->fp = f0;
        if (lead)
            while (p < e && *p == '0') p++; /* leading zeros of a fraction of 0.x */
        lead += (int)(p - f0);
        while (is_digit(p, e)) m = m * 10 + (uint64_t)(*p++ - '0');
        frac = (int)(p - f0);
        digits += frac;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        is_int = 0;
        p++;
        int eneg = 0;
        if (p < e && (*p == '+' || *p == '-')) eneg = *p++ == '-';
        if (!is_digit(p, e)) return bad_number(s, p);
        const uint8_t *x0 = p;
        while (is_digit(p, e)) {
            if (p - x0 < 6) exp = exp * 10 + (*p - '0');
            p++;
        }
        exp_digits = (int)(p - x0);
        if (eneg) exp = -exp;
    }
    s->p = p;
    /* msgspec refuses doubles beyond range ("Number out of range"): never accept one here */
    if (exp_digits > 3 || digits > 300) return refuse(s, "number of extreme size");
    int sig = digits - lead; /* significant digits: m is exact up to 19 */
    out->neg = neg;
    out->huge = sig > 0 && sig + exp - frac > 300;
    out->has_exp = exp_digits > 0;
    out->flen = frac;
    out->is_int = is_int;
    out->ok_int = is_int && sig <= 18;
    out->i = out->ok_int ? (neg ? -(int64_t)m : (int64_t)m) : 0; /* m < 10**18 there */
    out->ok_dbl = 0;
    int e10 = exp - frac;
    if (sig <= 19 && m <= (1ULL << 53)) {
        if (m == 0) {
            out->d = 0.0;
            out->ok_dbl = 1;
        } else if (e10 >= 0 && e10 <= 22) {
            out->d = (double)m * POW10[e10]; /* one correctly rounded operation */
            out->ok_dbl = 1;
        } else if (e10 < 0 && e10 >= -22) {
            out->d = (double)m / POW10[-e10];
            out->ok_dbl = 1;
        }
        if (neg && !(is_int && m == 0)) out->d = -out->d; /* msgspec's int -0 is 0 */
    }
    return 0;
}

static int skip(S *s, int depth, int strict);

static int literal(S *s, const char *word, size_t n) {
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0) return refuse(s, "invalid literal");
    s->p += n;
    return 0;
}

/* Validates and skips a value. strict: numbers must be ones msgspec decodes into a Python
 * int/float (an Any field), not only skips (a Raw args, an unknown key). */
static int skip(S *s, int depth, int strict) {
    if (s->p >= s->end) return refuse(s, "truncated value");
    const uint8_t *body;
    size_t len;
    int esc;
    Num num;
    switch (*s->p) {
    case '"': return string(s, &body, &len, &esc);
    case 't': return literal(s, "true", 4);
    case 'f': return literal(s, "false", 5);
    case 'n': return literal(s, "null", 4);
    case '{':
    case '[': {
        if (depth >= MAX_DEPTH) return refuse(s, "nested too deeply");
        uint8_t close = *s->p == '{' ? '}' : ']';
        int obj = close == '}';
        s->p++;
        ws(s);
        if (s->p < s->end && *s->p == close) {
            s->p++;
            return 0;
        }
        for (;;) {
            if (obj) {
                if (s->p >= s->end || *s->p != '"') return refuse(s, "expected a key");
                if (string(s, &body, &len, &esc)) return -1;
                ws(s);
                if (s->p >= s->end || *s->p != ':') return refuse(s, "expected ':'");
                s->p++;
                ws(s);
            }
            if (skip(s, depth + 1, strict)) return -1;
            ws(s);
            if (s->p >= s->end) return refuse(s, "truncated value");
            if (*s->p == ',') {
                s->p++;
                ws(s);
                continue;
            }
            if (*s->p == close) {
                s->p++;
                return 0;
            }
            return refuse(s, "expected ',' or a close");
        }
    }
    default:
        if (*s->p == '-' || (*s->p >= '0' && *s->p <= '9')) {
            if (number(s, &num)) return -1;
            /* beyond a double: msgspec's plain decode refuses it (its skip would not): refused */
            if (strict ? !num.ok_int && !num.ok_dbl : num.huge)
                return refuse(s, "a number Python may not hold");
            return 0;
        }
        return refuse(s, "invalid value");
    }
}

/* ---- typed values of an event ---- */

enum { V_MISSING, V_NULL, V_STR, V_NUM, V_ARR, V_OTHER };

typedef struct {
    int type;
    const uint8_t *s; /* V_STR: raw body; V_ARR: the '[' */
    size_t n;
    int esc;
    Num num;
} Val;

/* One value, typed as far as the columns need (objects and literals other than null: V_OTHER,
 * arrays: V_ARR, checked when read). */
static int value(S *s, Val *v, int strict) {
    if (s->p >= s->end) return refuse(s, "truncated value");
    uint8_t c = *s->p;
    if (c == '"') {
        v->type = V_STR;
        return string(s, &v->s, &v->n, &v->esc);
    }
    if (c == 'n') {
        v->type = V_NULL;
        return literal(s, "null", 4);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        v->type = V_NUM;
        if (number(s, &v->num)) return -1;
        if (strict ? !v->num.ok_int && !v->num.ok_dbl : v->num.huge)
            return refuse(s, "a number Python may not hold");
        return 0;
    }
    v->type = c == '[' ? V_ARR : V_OTHER;
    v->s = s->p;
    return skip(s, 1, 1);
}

typedef struct {
    const uint8_t *key;
    size_t klen;
    char kind;
} ArgSpec;

typedef struct {
    int used;
    int no_dur; /* the dictionary role: no duration_ns column (its calls need only the end) */
    int nargs;
    ArgSpec args[MAX_ARGS];
    Col cols[BASE_COLS + MAX_ARGS];
} Role;

typedef struct {
    const uint8_t *name;
    size_t len;
    int code;
} Cat;

typedef struct {
    int ncats;
    Cat cats[MAX_CATS];
    int cpu_op; /* role code of operators: spans only */
    Role roles[MAX_ROLES];
    Buf spans;
    Py_ssize_t events;
} Scan;

/* After an object member: 1 at a `,` (the next member follows), 0 past the closing `}`. */
static int next_member(S *s, const char *truncated) {
    ws(s);
    if (s->p >= s->end) return refuse(s, truncated);
    if (*s->p == ',') {
        s->p++;
        ws(s);
        return 1;
    }
    if (*s->p == '}') {
        s->p++;
        return 0;
    }
    return refuse(s, "expected ',' or '}'");
}

/* args of an event of role r: the wanted keys' values into vals (V_MISSING where absent) */
static int args_object(S *s, Role *r, Val *vals) {
    if (s->p >= s->end || *s->p != '{') return refuse(s, "args is not an object");
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return 0;
    }
    for (;;) {
        const uint8_t *key;
        size_t klen;
        int esc;
        if (s->p >= s->end || *s->p != '"') return refuse(s, "expected a key");
        if (string(s, &key, &klen, &esc)) return -1;
        if (esc) return refuse(s, "escaped key");
        ws(s);
        if (s->p >= s->end || *s->p != ':') return refuse(s, "expected ':'");
        s->p++;
        ws(s);
        int k = -1;
        for (int i = 0; i < r->nargs; i++)
            if (r->args[i].klen == klen && memcmp(r->args[i].key, key, klen) == 0) {
                k = i;
                break;
            }
        if (k >= 0) {
            if (vals[k].type != V_MISSING) return refuse(s, "duplicate args key");
            if (value(s, &vals[k], 1)) return -1;
        } else if (skip(s, 2, 0)) {
            return -1;
        }
        int more = next_member(s, "truncated args");
        if (more <= 0) return more;
    }
}

static int put_string(S *s, Col *c, const Val *v) {
    if (v->type == V_MISSING || v->type == V_NULL) {
        if (col_valid(c, 0)) return refuse(s, "out of memory");
    } else if (v->type == V_STR) {
        if ((v->esc ? unescape(&c->b, v->s, v->n) : buf_put(&c->b, v->s, v->n)) ||
            col_valid(c, 1))
            return refuse(s, "out of memory");
    } else {
        return refuse(s, "a string column holds another type");
    }
    if (col_offset(c, c->b.n)) return refuse(s, "string column beyond 2 GB");
    return 0;
}

static inline uint64_t hash_lane(uint64_t h, uint64_t w) {
    h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
    return h ^ (h >> 32);
}

/* A hash of a string's bytes for the dictionary's table (never stored: codes are positions).
 * Four independent lanes over 32-byte blocks: one chain of multiplies was most of a name's
 * lookup (~60 cycles for a 90-byte Python frame name); the last 1..31 bytes by 8-byte loads,
 * the final one ending at the string's end (overlapping the one before: the length is hashed). */
static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t a = 0x9E3779B97F4A7C15ULL ^ n, b = 0xC2B2AE3D27D4EB4FULL, c = 0x165667B19E3779F9ULL,
             d = 0x27D4EB2F165667C5ULL, w;
    const uint8_t *e = p + n;
    for (; e - p >= 32; p += 32) {
        memcpy(&w, p, 8);
        a = hash_lane(a, w);
        memcpy(&w, p + 8, 8);
        b = hash_lane(b, w);
        memcpy(&w, p + 16, 8);
        c = hash_lane(c, w);
        memcpy(&w, p + 24, 8);
        d = hash_lane(d, w);
    }
    size_t r = (size_t)(e - p); /* 0..31 */
    if (r >= 8) {
        memcpy(&w, p, 8);
        a = hash_lane(a, w);
    }
    if (r >= 16) {
        memcpy(&w, p + 8, 8);
        b = hash_lane(b, w);
    }
    if (r >= 24) {
        memcpy(&w, p + 16, 8);
        c = hash_lane(c, w);
    }
    if (r & 7) {
        w = 0;
        if (n >= 8)
            memcpy(&w, e - 8, 8);
        else
            for (size_t i = 0; i < n; i++) w |= (uint64_t)p[i] << (8 * i);
        d = hash_lane(d, w);
    }
    uint64_t h = (a ^ (b << 21 | b >> 43)) * 0xC4CEB9FE1A85EC53ULL + (c ^ (d << 43 | d >> 21));
    h *= 0xFF51AFD7ED558CCDULL;
    return h ^ (h >> 29);
}

/* The table twice as large (1024 slots at first), the distinct strings placed again. */
static int dict_grow(Col *c) {
    size_t ns = c->nslot ? c->nslot * 2 : 1024;
    uint32_t *slot = calloc(ns, sizeof *slot);
    if (!slot) return -1;
    const uint64_t *hs = (const uint64_t *)c->hashes.p;
    size_t nd = c->hashes.n / 8;
    for (size_t k = 0; k < nd; k++) {
        size_t i = hs[k] & (ns - 1);
        while (slot[i]) i = (i + 1) & (ns - 1);
        slot[i] = (uint32_t)(k + 1);
    }
    free(c->slot);
    c->slot = slot;
    c->nslot = ns;
    return 0;
}

/* The code of a text in a 'd' column's distinct strings, added if new: 0, or -1 out of
 * memory, -2 beyond 2 GB of text or int32 codes. */
static int dict_code(Col *c, const uint8_t *p, size_t n, int32_t *code) {
    size_t nd = c->hashes.n / 8;
    if ((nd + 1) * 2 > c->nslot && dict_grow(c)) return -1;
    uint64_t h = hash_bytes(p, n);
    const int32_t *off = (const int32_t *)c->c.p;
    const uint64_t *hs = (const uint64_t *)c->hashes.p;
    size_t i = h & (c->nslot - 1);
    for (;;) {
        uint32_t k = c->slot[i];
        if (!k) break;
        k--;
        if (hs[k] == h && (size_t)(off[k + 1] - off[k]) == n &&
            (!n || !memcmp(c->b.p + off[k], p, n))) {
            *code = (int32_t)k;
            return 0;
        }
        i = (i + 1) & (c->nslot - 1);
    }
    /* a new string: appended to the distinct ones */
    if (nd >= INT32_MAX - 1) return -2;
    if ((n && buf_put(&c->b, p, n)) || buf_put(&c->hashes, &h, 8)) return -1;
    if (c->b.n > INT32_MAX) return -2;
    int32_t o = (int32_t)c->b.n;
    if (buf_put(&c->c, &o, 4)) return -1;
    c->slot[i] = (uint32_t)(nd + 1);
    *code = (int32_t)nd;
    return 0;
}

/* A 'd' column's value: the code of its decoded text (added if new), or null. Python turns the
 * codes and the distinct strings into an Arrow dictionary array: the same strings as 's'. */
static int put_dict(S *s, Col *c, const Val *v) {
    int32_t code = 0;
    int ok = 0;
    if (v->type == V_STR) {
        const uint8_t *p = v->s;
        size_t n = v->n;
        if (v->esc) {
            c->tmp.n = 0;
            if (unescape(&c->tmp, v->s, v->n)) return refuse(s, "out of memory");
            p = c->tmp.p;
            n = c->tmp.n;
        }
        int rc = dict_code(c, p, n, &code);
        if (rc) return refuse(s, rc == -1 ? "out of memory" : "string column beyond 2 GB");
        ok = 1;
    } else if (v->type != V_MISSING && v->type != V_NULL) {
        return refuse(s, "a string column holds another type");
    }
    if (buf_put(&c->a, &code, 4) || col_valid(c, ok)) return refuse(s, "out of memory");
    return 0;
}

static inline int is_space(uint8_t c) { return c == ' '; }

/* An id string as clock.to_int64 reads it: ^\s*(?:stream\s*)?(-?\d+)\s*$, here only over
 * printable ASCII with plain spaces (other whitespace or non-ASCII text: refused, since
 * Python's and polars' regex engines disagree on them). */
static int id_string(S *s, const Val *v, int64_t *out, int *ok) {
    const uint8_t *p = v->s, *e = v->s + v->n;
    if (v->esc) return refuse(s, "escaped id string");
    for (const uint8_t *q = p; q < e; q++)
        if (*q < 0x21 ? *q != ' ' : *q > 0x7E) return refuse(s, "id string with odd characters");
    *ok = 0;
    while (p < e && is_space(*p)) p++;
    if (e - p >= 6 && memcmp(p, "stream", 6) == 0) {
        p += 6;
        while (p < e && is_space(*p)) p++;
    }
    int neg = 0;
    if (p < e && *p == '-') {
        neg = 1;
        p++;
    }
    const uint8_t *d = p;
    uint64_t m = 0;
    while (p < e && *p >= '0' && *p <= '9') m = m * 10 + (uint64_t)(*p++ - '0');
    if (p == d) return 0; /* no digits: null */
    while (p < e && is_space(*p)) p++;
    if (p != e) return 0;
    const uint8_t *nz = d;
    while (nz < p && *nz == '0') nz++;
    if (p - nz > 18) return refuse(s, "id string beyond int64");
    *out = neg ? -(int64_t)m : (int64_t)m;
    *ok = 1;
    return 0;
}

static int put_int(S *s, Col *c, const Val *v) {
    int64_t x = 0;
    int ok = 0;
    if (v->type == V_NUM) {
        if (!v->num.ok_int) return refuse(s, "an int64 column holds a float or a huge number");
        x = v->num.i;
        ok = 1;
    } else if (v->type == V_STR) {
        if (id_string(s, v, &x, &ok)) return -1;
    } else if (v->type != V_MISSING && v->type != V_NULL) {
        return refuse(s, "an int64 column holds another type");
    }
    if (buf_put(&c->a, &x, 8) || col_valid(c, ok)) return refuse(s, "out of memory");
    return 0;
}

static int put_list(S *s, Col *c, const Val *v) {
    if (v->type == V_ARR) {
        S t = {v->s + 1, s->end, s->base, NULL, NULL, 0};
        ws(&t);
        if (t.p < t.end && *t.p == ']') {
            t.p++;
        } else {
            for (;;) {
                Num n;
                if (t.p >= t.end || !(*t.p == '-' || (*t.p >= '0' && *t.p <= '9')) ||
                    number(&t, &n) || !n.ok_int)
                    return refuse(s, "a list column holds other than integers");
                if (buf_put(&c->b, &n.i, 8)) return refuse(s, "out of memory");
                ws(&t);
                if (t.p < t.end && *t.p == ',') {
                    t.p++;
                    ws(&t);
                    continue;
                }
                if (t.p < t.end && *t.p == ']') break;
                return refuse(s, "bad list");
            }
        }
        if (col_valid(c, 1)) return refuse(s, "out of memory");
    } else if (v->type == V_MISSING || v->type == V_NULL) {
        if (col_valid(c, 0)) return refuse(s, "out of memory");
    } else {
        return refuse(s, "a list column holds another type");
    }
    if (col_offset(c, c->b.n / 8)) return refuse(s, "list column beyond 2**31 values");
    return 0;
}

/* A time in us -> int64 ns as clock.Clock.ns_of computes it from the double: floor(x) * 1000 +
 * round-half-even((x - floor(x)) * 1000) (polars' round). Times a double holds coarser than 1
 * ns (fractional beyond 2**43 us) and times beyond int64 ns are refused: Python notes them
 * (NeedExact, or an error) for the whole trace. */
/* The exact clock (clock.Clock.ns): the decimal text quantized to 0.001 us, half to even (as
 * Python's Decimal.quantize), times 1000. Exponents and times beyond any clock are refused. */
static int ns_exact(S *s, const Num *n, int64_t *ns) {
    if (n->has_exp) return refuse(s, "a time in exponent notation (exact clock)");
    if (n->ilen > 16) return refuse(s, "a time beyond any clock");
    int64_t ip = 0, f = 0;
    for (int i = 0; i < n->ilen; i++) ip = ip * 10 + (n->ip[i] - '0');
    if ((double)ip >= TIME_LIMIT) return refuse(s, "a time beyond any clock"); /* ns: int64 */
    for (int i = 0; i < 3; i++) f = f * 10 + (i < n->flen ? n->fp[i] - '0' : 0);
    if (n->flen > 3) {
        int d4 = n->fp[3] - '0', rest = 0;
        for (int i = 4; i < n->flen; i++) rest |= n->fp[i] != '0';
        if (d4 > 5 || (d4 == 5 && (rest || (f & 1)))) f++;
    }
    int64_t v = ip * 1000 + f;
    *ns = n->neg ? -v : v;
    return 0;
}

/* A time in us (|d| < TIME_LIMIT) -> ns: floor(d) * 1000 + round-half-even of the fraction's ns.
 * floor by truncation (d fits int64; one step down for a negative fraction); nearbyint's round
 * half to even (the default rounding mode) by adding and taking away 1.5 * 2**52: the same for
 * 0 <= x <= 1000, without the libm call, which saves and restores the floating-point
 * environment on every time. */
HOT int64_t ns_plain(double d) {
    int64_t w = (int64_t)d;
    if ((double)w > d) w--;
    double x = (d - (double)w) * 1000.0;
    double r = (x + 6755399441055744.0) - 6755399441055744.0;
    return w * 1000 + (int64_t)r;
}

static int ns_of(S *s, const Val *v, int required, int64_t *ns, int *ok) {
    *ok = 0;
    *ns = 0;
    if (v->type == V_NUM && s->exact) {
        if (ns_exact(s, &v->num, ns)) return -1;
        *ok = 1;
    } else if (v->type == V_NUM) {
        if (!v->num.ok_dbl) return refuse(s, "a time a double does not hold as Python reads it");
        double d = v->num.d;
        if (!(fabs(d) < TIME_LIMIT)) return refuse(s, "a time beyond any clock");
        if (fabs(d) >= EXACT_LIMIT && d != floor(d)) return refuse(s, "a time coarser than 1 ns");
        *ns = ns_plain(d);
        *ok = 1;
    } else if (v->type == V_MISSING || v->type == V_NULL) {
        if (required) return refuse(s, "an event without ts");
    } else {
        return refuse(s, "a time that is not a number");
    }
    return 0;
}

static int put_ns(S *s, Col *c, int64_t ns, int ok) {
    if (buf_put(&c->a, &ns, 8) || col_valid(c, ok)) return refuse(s, "out of memory");
    return 0;
}

/* The Python calls' columns sized at their role's first event for the rest of the part (a
 * row per 128 bytes, more than they take): growing them from 4 KB by doubling copied each
 * and touched fresh pages for every size on the way; pages reserved but not written cost
 * nothing. A failure here only leaves the growth to the writes (which report it). */
static void reserve(Role *r, size_t rows) {
    for (int i = 0; i < BASE_COLS; i++)
        if (!(i == 4 && r->no_dur)) (void)buf_grow(&r->cols[i].a, rows * (i ? 8 : 4));
}

HOT int plain_time(const Val *v) {
    return v->type == V_NUM && v->num.ok_dbl && fabs(v->num.d) < EXACT_LIMIT;
}

HOT int plain_id(const Val *v) { return v->type == V_NUM && v->num.ok_int; }

HOT int room(const Col *c, size_t n) { return !c->nulls && c->a.n + n <= c->a.cap; }

HOT void put_raw(Col *c, const void *x, size_t n) {
    memcpy(c->a.p + c->a.n, x, n);
    c->a.n += n;
    c->rows++;
}

/* emit for a Python call of the usual shape (the dictionary role without args: ts and dur
 * numbers below 2**43 us, integer pid and tid, an unescaped name, no nulls so far, room in the
 * reserved columns): the same values as emit's general path, without its per-value type
 * checks, null bitmaps and growth (~575 instructions a call there, most of what reading the
 * Python calls adds to a scan). 1: written; 0: not this shape (emit's path takes it); -1. */
static int emit_call(S *s, Role *r, const Val *base) {
    Col *c = r->cols;
    if (s->exact || r->nargs || c[0].kind != 'd' || base[0].type != V_STR || base[0].esc ||
        !plain_time(&base[3]) || !plain_time(&base[4]) || !plain_id(&base[1]) ||
        !plain_id(&base[2]) || !room(&c[0], 4) || !room(&c[1], 8) || !room(&c[2], 8) ||
        !room(&c[3], 8) || !room(&c[5], 8))
        return 0;
    int32_t code;
    int rc = dict_code(&c[0], base[0].s, base[0].n, &code);
    if (rc) return refuse(s, rc == -1 ? "out of memory" : "string column beyond 2 GB");
    int64_t ts = ns_plain(base[3].num.d), dur = ns_plain(base[4].num.d);
    int64_t end = (int64_t)((uint64_t)ts + (uint64_t)dur);
    put_raw(&c[0], &code, 4);
    put_raw(&c[1], &base[1].num.i, 8);
    put_raw(&c[2], &base[2].num.i, 8);
    put_raw(&c[3], &ts, 8);
    put_raw(&c[5], &end, 8);
    return 1;
}

static int emit(S *s, Role *r, const Val *base, const Val *vals) {
    if (!r->used && r->no_dur) reserve(r, (size_t)(s->end - s->p) / 128 + 1);
    r->used = 1;
    if (r->no_dur) {
        int fast = emit_call(s, r, base);
        if (fast) return fast < 0 ? -1 : 0;
    }
    int64_t ts, dur;
    int ts_ok, dur_ok;
    if (ns_of(s, &base[3], 1, &ts, &ts_ok) || ns_of(s, &base[4], 0, &dur, &dur_ok) ||
        (r->cols[0].kind == 'd' ? put_dict(s, &r->cols[0], &base[0])
                                : put_string(s, &r->cols[0], &base[0])) ||
        put_int(s, &r->cols[1], &base[1]) ||
        put_int(s, &r->cols[2], &base[2]) || put_ns(s, &r->cols[3], ts, ts_ok) ||
        (!r->no_dur && put_ns(s, &r->cols[4], dur, dur_ok)) ||
        /* end_ns wraps past int64 as polars' start + duration does (no undefined overflow) */
        put_ns(s, &r->cols[5], dur_ok ? (int64_t)((uint64_t)ts + (uint64_t)dur) : 0, dur_ok))
        return -1;
    for (int i = 0; i < r->nargs; i++) {
        Col *c = &r->cols[BASE_COLS + i];
        int rc = c->kind == 'i'   ? put_int(s, c, &vals[i])
                 : c->kind == 's' ? put_string(s, c, &vals[i])
                                  : put_list(s, c, &vals[i]);
        if (rc) return -1;
    }
    return 0;
}

static int cat_code(const Scan *sc, const Val *v) {
    if (v->type != V_STR) return 0;
    for (int i = 0; i < sc->ncats; i++)
        if (sc->cats[i].len == v->n && memcmp(sc->cats[i].name, v->s, v->n) == 0)
            return sc->cats[i].code;
    return 0;
}

/* One event object at s->p. */
static int event(S *s, Scan *sc) {
    enum { K_NAME, K_PID, K_TID, K_TS, K_DUR, K_PH, K_CAT, K_ARGS, NKEYS };
    Val v[NKEYS];
    Val av[MAX_ARGS];
    const uint8_t *start = s->p, *args_at = NULL;
    int code = -1; /* -1: cat not seen yet */
    for (int i = 0; i < NKEYS; i++) v[i].type = V_MISSING;
    for (int i = 0; i < MAX_ARGS; i++) av[i].type = V_MISSING;
    if (s->p >= s->end || *s->p != '{') return refuse(s, "an element that is not an object");
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        goto done;
    }
    for (;;) {
        const uint8_t *key;
        size_t klen;
        int esc, k = -1;
        if (s->p >= s->end || *s->p != '"') return refuse(s, "expected a key");
        if (string(s, &key, &klen, &esc)) return -1;
        if (esc) return refuse(s, "escaped key");
        ws(s);
        if (s->p >= s->end || *s->p != ':') return refuse(s, "expected ':'");
        s->p++;
        ws(s);
        switch (klen) { /* the eight keys Python reads, by length and bytes */
        case 2:
            k = key[0] == 'p' && key[1] == 'h' ? K_PH : key[0] == 't' && key[1] == 's' ? K_TS : -1;
            break;
        case 3:
            k = !memcmp(key, "pid", 3)   ? K_PID
                : !memcmp(key, "tid", 3) ? K_TID
                : !memcmp(key, "dur", 3) ? K_DUR
                : !memcmp(key, "cat", 3) ? K_CAT
                                         : -1;
            break;
        case 4:
            k = !memcmp(key, "name", 4) ? K_NAME : !memcmp(key, "args", 4) ? K_ARGS : -1;
            break;
        }
        if (k >= 0 && v[k].type != V_MISSING) return refuse(s, "duplicate key");
        if (k == K_ARGS) {
            v[k].type = V_OTHER;
            if (code > 0 && code != sc->cpu_op && sc->roles[code].nargs) {
                if (args_object(s, &sc->roles[code], av)) return -1;
            } else {
                args_at = s->p;
                if (skip(s, 1, 0)) return -1;
            }
        } else if (k >= 0) {
            /* ts and dur: msgspec's float or Decimal reads any number short of overflow */
            if (value(s, &v[k], k != K_TS && k != K_DUR)) return -1;
            if (k == K_CAT) {
                if (v[k].type != V_STR && v[k].type != V_NULL)
                    return refuse(s, "cat is not a string");
                if (v[k].type == V_STR && v[k].esc) return refuse(s, "escaped cat");
                code = cat_code(sc, &v[k]);
            } else if (k == K_PH) {
                if (v[k].type != V_STR && v[k].type != V_NULL)
                    return refuse(s, "ph is not a string");
                if (v[k].type == V_STR && v[k].esc) return refuse(s, "escaped ph");
            } else if ((k == K_TS || k == K_DUR) && v[k].type != V_NULL && v[k].type != V_NUM) {
                return refuse(s, "ts or dur is not a number");
            }
        } else if (skip(s, 1, 0)) {
            return -1;
        }
        int more = next_member(s, "truncated event");
        if (more < 0) return -1;
        if (!more) break;
    }
done:
    sc->events++;
    if (code <= 0) return 0;
    if (!(v[K_PH].type == V_STR && v[K_PH].n == 1 && v[K_PH].s[0] == 'X')) return 0;
    if (code == sc->cpu_op) {
        const Val *n = &v[K_NAME];
        if (n->type != V_STR) {
            if (n->type == V_NULL || n->type == V_MISSING) return 0;
            return refuse(s, "an operator name that is not a string");
        }
        if (n->esc) { /* compare the decoded name */
            Buf b = {0};
            if (unescape(&b, n->s, n->n)) return refuse(s, "out of memory");
            int hit = (b.n >= 13 && memcmp(b.p, "ProfilerStep#", 13) == 0) ||
                      (b.n == 18 && memcmp(b.p, "record_param_comms", 18) == 0);
            free(b.p);
            if (!hit) return 0;
        } else if (!((n->n >= 13 && memcmp(n->s, "ProfilerStep#", 13) == 0) ||
                     (n->n == 18 && memcmp(n->s, "record_param_comms", 18) == 0))) {
            return 0;
        }
        int64_t span[2] = {start - s->base, s->p - s->base};
        if (buf_put(&sc->spans, span, sizeof span)) return refuse(s, "out of memory");
        return 0;
    }
    Role *r = &sc->roles[code];
    if (args_at && r->nargs) {
        const uint8_t *here = s->p;
        s->p = args_at;
        if (args_object(s, r, av)) return -1;
        s->p = here;
    }
    return emit(s, r, v, av);
}

/* The elements up to s->end, or (closing) up to the array's `]`, left at s->p. */
static int elements(S *s, Scan *sc, int closing) {
    ws(s);
    if (closing ? s->p < s->end && *s->p == ']' : s->p >= s->end) return 0;
    for (;;) {
        if (event(s, sc)) return -1;
        ws(s);
        if (closing ? s->p < s->end && *s->p == ']' : s->p >= s->end) return 0;
        if (s->p >= s->end || *s->p != ',') return refuse(s, "expected ',' between events");
        s->p++;
        ws(s);
    }
}

/* ---- Python interface ---- */

static void scan_free(Scan *sc) {
    if (!sc) return;
    for (int r = 0; r < MAX_ROLES; r++)
        for (int i = 0; i < BASE_COLS + MAX_ARGS; i++) col_free(&sc->roles[r].cols[i]);
    free(sc->spans.p);
    free(sc);
}

/* A Scan set up from the Python spec (see py_scan); NULL with an exception set. */
static Scan *scan_new(PyObject *cats, PyObject *roles, int cpu_op, int dict_role) {
    Scan *sc = calloc(1, sizeof(Scan));
    if (!sc) return (Scan *)PyErr_NoMemory();
    sc->cpu_op = cpu_op;
    Py_ssize_t nc = PyTuple_GET_SIZE(cats);
    if (nc > MAX_CATS) {
        PyErr_SetString(PyExc_ValueError, "too many categories");
        goto fail;
    }
    for (Py_ssize_t i = 0; i < nc; i++) {
        const char *name;
        Py_ssize_t len;
        int code;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(cats, i), "y#i", &name, &len, &code)) goto fail;
        if (code <= 0 || code >= MAX_ROLES) {
            PyErr_SetString(PyExc_ValueError, "role code out of range");
            goto fail;
        }
        sc->cats[i] = (Cat){(const uint8_t *)name, (size_t)len, code};
    }
    sc->ncats = (int)nc;
    static const char BASE[BASE_COLS] = {'s', 'i', 'i', 'i', 'i', 'i'};
    for (int r = 0; r < MAX_ROLES; r++)
        for (int i = 0; i < BASE_COLS; i++)
            if (col_init(&sc->roles[r].cols[i], i == 0 && r == dict_role ? 'd' : BASE[i]))
                goto nomem;
    if (dict_role > 0 && dict_role < MAX_ROLES) sc->roles[dict_role].no_dur = 1;
    PyObject *key, *spec;
    Py_ssize_t pos = 0;
    while (PyDict_Next(roles, &pos, &key, &spec)) {
        long r = PyLong_AsLong(key);
        if (r <= 0 || r >= MAX_ROLES || !PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) > MAX_ARGS) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad role spec");
            goto fail;
        }
        Role *ro = &sc->roles[r];
        ro->nargs = (int)PyTuple_GET_SIZE(spec);
        for (int i = 0; i < ro->nargs; i++) {
            const char *k;
            Py_ssize_t kl;
            int kind;
            if (!PyArg_ParseTuple(PyTuple_GET_ITEM(spec, i), "y#C", &k, &kl, &kind)) goto fail;
            if (kind != 'i' && kind != 's' && kind != 'l') {
                PyErr_SetString(PyExc_ValueError, "bad column kind");
                goto fail;
            }
            ro->args[i] = (ArgSpec){(const uint8_t *)k, (size_t)kl, (char)kind};
            if (col_init(&ro->cols[BASE_COLS + i], (char)kind)) goto nomem;
        }
    }
    return sc;
nomem:
    PyErr_NoMemory();
fail:
    scan_free(sc);
    return NULL;
}

static PyObject *bytes_of(const Buf *b) {
    return PyBytes_FromStringAndSize((const char *)b->p, (Py_ssize_t)b->n);
}

static void free_owned(PyObject *cap) { free(PyCapsule_GetPointer(cap, "tracediff.buffer")); }

/* A column buffer handed to Python without a copy: (address, bytes, capsule that frees it);
 * pyarrow.foreign_buffer keeps the capsule alive with the Arrow buffer. */
static PyObject *owned(Buf *b) {
    if (!b->p && !(b->p = malloc(1))) return PyErr_NoMemory();
    PyObject *cap = PyCapsule_New(b->p, "tracediff.buffer", free_owned);
    if (!cap) return NULL;
    PyObject *out = Py_BuildValue("(KnN)", (unsigned long long)(uintptr_t)b->p, (Py_ssize_t)b->n, cap);
    if (out) *b = (Buf){0}; /* the capsule owns it now (scan_free skips it) */
    return out;
}

/* (kind, rows, nulls, validity | None, a, b | None), each buffer `owned` */
static PyObject *col_out(Col *c) {
    PyObject *valid = c->nulls ? owned(&c->valid) : (Py_INCREF(Py_None), Py_None);
    PyObject *a = owned(&c->a);
    PyObject *b = c->kind == 's' || c->kind == 'l' || c->kind == 'd' ? owned(&c->b) : (Py_INCREF(Py_None), Py_None);
    PyObject *d = c->kind == 'd' ? owned(&c->c) : NULL;
    if (!valid || !a || !b || (c->kind == 'd' && !d)) {
        Py_XDECREF(valid);
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(d);
        return NULL;
    }
    if (d)
        return Py_BuildValue("(CnnNNNN)", c->kind, (Py_ssize_t)c->rows, (Py_ssize_t)c->nulls,
                             valid, a, b, d);
    return Py_BuildValue("(CnnNNN)", c->kind, (Py_ssize_t)c->rows, (Py_ssize_t)c->nulls, valid, a,
                         b);
}

/* (events, {code: (column, ...)}, spans) of one part */
static PyObject *scan_out(Scan *sc) {
    PyObject *out_roles = PyDict_New();
    if (!out_roles) return NULL;
    for (int r = 1; r < MAX_ROLES; r++) {
        Role *ro = &sc->roles[r];
        if (!ro->used) continue;
        int ncol = BASE_COLS + ro->nargs;
        PyObject *cols = PyTuple_New(ncol - ro->no_dur);
        if (!cols) goto fail;
        for (int i = 0, j = 0; i < ncol; i++) {
            if (i == 4 && ro->no_dur) continue; /* duration_ns */
            PyObject *c = col_out(&ro->cols[i]);
            if (!c) {
                Py_DECREF(cols);
                goto fail;
            }
            PyTuple_SET_ITEM(cols, j++, c);
        }
        PyObject *k = PyLong_FromLong(r);
        int bad = !k || PyDict_SetItem(out_roles, k, cols);
        Py_XDECREF(k);
        Py_DECREF(cols);
        if (bad) goto fail;
    }
    PyObject *spans = bytes_of(&sc->spans);
    if (!spans) goto fail;
    return Py_BuildValue("(nNN)", sc->events, out_roles, spans);
fail:
    Py_DECREF(out_roles);
    return NULL;
}

typedef struct {
    S s;
    Scan *sc;
    int closing, rc;
} Part;

static void *run_part(void *arg) {
    Part *pt = arg;
    S s = pt->s; /* on this thread's stack: the two parts' cursors sat in one cache line,
                    and every token's write to one stalled the other thread (false sharing) */
    pt->rc = elements(&s, pt->sc, pt->closing);
    pt->s = s;
    return NULL;
}

/* Where a piece splits in two near its middle: the end of an element (just past its `}`)
 * followed by `,` and the next `{`, whitespace aside; NULL if none. A split inside a string
 * (the bytes also occur there) leaves the first part's last string open: that part refuses,
 * and the piece is scanned whole instead. */
static const uint8_t *split_point(const uint8_t *a, const uint8_t *e) {
    const uint8_t *p = a + (e - a) / 2;
    while (p < e && (p = memchr(p, '}', (size_t)(e - p))) != NULL) {
        const uint8_t *q = p + 1;
        while (q < e && *q <= ' ' && ((1ULL << *q) & 0x100002600ULL)) q++;
        if (q < e && *q == ',') {
            q++;
            while (q < e && *q <= ' ' && ((1ULL << *q) & 0x100002600ULL)) q++;
            if (q < e && *q == '{') return p + 1;
        }
        p++;
    }
    return NULL;
}

#define SPLIT_MIN (1 << 20) /* smaller pieces: one thread (starting one costs more) */

/* scan(buf, start, stop, cats, roles, cpu_op, closing, threads, exact[, dict_role])
 *   buf: bytes-like; buf[start:stop]: the elements of a JSON array (no brackets), or with
 *   closing, the elements and the array's `]` somewhere before stop
 *   cats: ((category bytes, role code), ...); codes 1..MAX_ROLES-1
 *   roles: {code: ((args key bytes, kind 'i'|'s'|'l'), ...)} for the decoded roles
 *   cpu_op: the code whose events are only returned as spans
 *   threads: 2 scans a piece of >= 1 MB as two parts at once (GIL released)
 *   exact: times by the exact clock (the decimal text), else through a double as Python does
 *   dict_role: the role code whose name column is dictionary-encoded ('d'; 0: none); that
 *   role's columns have no duration_ns (name, pid, tid, start_ns, end_ns)
 * -> ([(events, {code: (column, ...)}, spans bytes (int64 start/end pairs, offsets in buf)),
 *      ...one per part, in order], offset of the `]` or -1)
 *    or (reason str, offset) when the piece is refused */
static PyObject *py_scan(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buf;
    Py_ssize_t start, stop;
    PyObject *cats, *roles;
    int cpu_op, closing, threads, exact, dict_role = 0;
    if (!PyArg_ParseTuple(args, "y*nnO!O!ipip|i", &buf, &start, &stop, &PyTuple_Type, &cats,
                          &PyDict_Type, &roles, &cpu_op, &closing, &threads, &exact, &dict_role))
        return NULL;
    PyObject *result = NULL, *parts = NULL;
    Scan *sc[2] = {NULL, NULL};
    if (start < 0 || stop > buf.len || start > stop) {
        PyErr_SetString(PyExc_ValueError, "start/stop outside the buffer");
        goto out;
    }
    const uint8_t *b = buf.buf;
    const uint8_t *mid = threads > 1 && stop - start >= SPLIT_MIN
                             ? split_point(b + start, b + stop)
                             : NULL;
    int n = mid ? 2 : 1;
    for (int i = 0; i < n; i++)
        if (!(sc[i] = scan_new(cats, roles, cpu_op, dict_role))) goto out;
    Part pt[2];
    if (n == 2) {
        const uint8_t *second = mid;
        while (*second != ',') second++; /* split_point saw it: `}` ws `,` ws `{` */
        pt[0] = (Part){{b + start, mid, b, NULL, NULL, exact}, sc[0], 0, 0};
        pt[1] = (Part){{second + 1, b + stop, b, NULL, NULL, exact}, sc[1], closing, 0};
    } else {
        pt[0] = (Part){{b + start, b + stop, b, NULL, NULL, exact}, sc[0], closing, 0};
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    pthread_t t;
    int started = n == 2 && pthread_create(&t, NULL, run_part, &pt[1]) == 0;
    run_part(&pt[0]);
    if (started)
        pthread_join(t, NULL);
    else if (n == 2)
        run_part(&pt[1]);
    Py_END_ALLOW_THREADS
    rc = pt[0].rc || (n == 2 && pt[1].rc);
    if (rc && n == 2) { /* a split inside a value, or a refusal: the piece whole, to be sure */
        scan_free(sc[0]);
        scan_free(sc[1]);
        sc[1] = NULL;
        n = 1;
        if (!(sc[0] = scan_new(cats, roles, cpu_op, dict_role))) goto out;
        pt[0] = (Part){{b + start, b + stop, b, NULL, NULL, exact}, sc[0], closing, 0};
        Py_BEGIN_ALLOW_THREADS
        run_part(&pt[0]);
        Py_END_ALLOW_THREADS
        rc = pt[0].rc;
    }
    if (rc) {
        result = Py_BuildValue("(sn)", pt[0].s.why, (Py_ssize_t)(pt[0].s.at - b));
        goto out;
    }
    parts = PyList_New(n);
    if (!parts) goto out;
    for (int i = 0; i < n; i++) {
        PyObject *o = scan_out(sc[i]);
        if (!o) goto out;
        PyList_SET_ITEM(parts, i, o);
    }
    result = Py_BuildValue("(On)", parts,
                           closing ? (Py_ssize_t)(pt[n - 1].s.p - b) : (Py_ssize_t)-1);
out:
    Py_XDECREF(parts);
    scan_free(sc[0]);
    scan_free(sc[1]);
    PyBuffer_Release(&buf);
    return result;
}

/* unify(parts) -> (codes, offsets, data, distinct): the parts' dictionary-encoded columns as
 * one, codes into one set of distinct strings (each part's scanned on its own gives codes into
 * its own). parts: ((codes, rows, offsets, words, data), ...): int32 codes (rows of them),
 * the part's distinct strings as Arrow holds them (words + 1 int32 offsets into data). A code
 * outside its part's strings (a null row's, whatever it holds) becomes 0; Python masks the
 * nulls. Buffers come back `owned`. Pyarrow's own unification of the parts' dictionaries
 * (pa.concat_arrays) cost 0.5 ms on the SGLang prefill-decode trace and, in some fresh
 * processes, 5-7 ms. */
static PyObject *py_unify(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *parts;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &parts)) return NULL;
    PyObject *result = NULL;
    Col out;
    if (col_init(&out, 'd')) return PyErr_NoMemory();
    int32_t *remap = NULL;
    Buf codes = {0};
    Py_ssize_t np_ = PyList_GET_SIZE(parts);
    for (Py_ssize_t q = 0; q < np_; q++) {
        Py_buffer cb, ob, db;
        Py_ssize_t rows, words;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(parts, q), "y*ny*ny*", &cb, &rows, &ob, &words, &db))
            goto out;
        const char *err = NULL;
        if (rows < 0 || words < 0 || cb.len / 4 < rows || ob.len / 4 < words + 1)
            err = "a part's buffers are shorter than its rows or strings";
        const int32_t *off = ob.buf;
        for (Py_ssize_t k = 0; !err && k < words; k++)
            if (off[k] < 0 || off[k + 1] < off[k] || off[k + 1] > db.len)
                err = "a part's string offsets are out of order or beyond its data";
        int32_t *r = err ? NULL : realloc(remap, (size_t)(words ? words : 1) * sizeof *remap);
        int rc = 0;
        if (!err && !r) rc = -1;
        if (r) remap = r;
        for (Py_ssize_t k = 0; !err && !rc && k < words; k++)
            rc = dict_code(&out, (const uint8_t *)db.buf + off[k], (size_t)(off[k + 1] - off[k]),
                           &remap[k]);
        if (!err && !rc && buf_grow(&codes, (size_t)rows * 4)) rc = -1;
        if (!err && !rc) {
            const int32_t *in = cb.buf;
            int32_t *o = (int32_t *)(codes.p + codes.n);
            for (Py_ssize_t i = 0; i < rows; i++)
                o[i] = in[i] >= 0 && in[i] < words ? remap[in[i]] : 0;
            codes.n += (size_t)rows * 4;
        }
        PyBuffer_Release(&cb);
        PyBuffer_Release(&ob);
        PyBuffer_Release(&db);
        if (err) {
            PyErr_SetString(PyExc_ValueError, err);
            goto out;
        }
        if (rc) {
            if (rc == -1)
                PyErr_NoMemory();
            else
                PyErr_SetString(PyExc_ValueError, "strings beyond 2 GB");
            goto out;
        }
    }
    {
        Py_ssize_t distinct = (Py_ssize_t)(out.hashes.n / 8);
        PyObject *a = owned(&codes), *c = owned(&out.c), *b = owned(&out.b);
        if (a && c && b) result = Py_BuildValue("(NNNn)", a, c, b, distinct);
        if (!result) {
            Py_XDECREF(a);
            Py_XDECREF(c);
            Py_XDECREF(b);
        }
    }
out:
    free(remap);
    free(codes.p);
    col_free(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"unify", py_unify, METH_VARARGS,
     "unify(parts) -> (codes, offsets, data, distinct): dictionary-encoded parts "
     "[(codes, rows, offsets, words, data), ...] as one"},
    {"scan", py_scan, METH_VARARGS,
     "scan(buf, start, stop, cats, roles, cpu_op, closing, threads, exact[, dict_role]) -> "
     "(dict_role: no duration_ns) "
     "([(events, {role: columns}, "
     "spans), ...], close) or "
     "(reason, offset): the wanted columns of a piece of a Kineto traceEvents array"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kineto_scan",
                                    "Kineto JSON -> Arrow column buffers (see the C source)", -1,
                                    methods};

PyMODINIT_FUNC PyInit__kineto_scan(void) { return PyModule_Create(&module); }
