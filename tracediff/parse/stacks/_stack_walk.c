/* Launch stacks: depth, caller and stack hash of every frame call, and each API call's
 * launching frame call, in one pass over the frame calls in start order.
 *
 * Stage: parse (launch-stack resolution). Python side and the rules: tracediff/parse/
 * launch_stacks.py, whose numpy walk (`_walk_numpy`) gives the same arrays and is used where
 * this module is not built. Types: _stack_walk.pyi.
 *
 * Why native: the numpy walk needs a sort by level, a search per level and one numpy step per
 * nesting level for the hashes (about 0.4 s of a 1 M-kernel trace's 2.4 M Python calls); here it
 * is one forward pass, since a call's caller always comes before it in start order.
 *
 * holding() picks the frame calls whose interval holds some API call's midpoint (a search
 * from the last answer, since starts come nearly sorted), pick() the same from one chunk of
 * the Kineto scanner's columns on one launching thread, writing the picked calls' fields;
 * walk() does the rest; launches()
 * then gives each API call its stack id and one frame call per distinct stack (numpy's unique
 * and searchsorted over a million API calls took 0.1 s).
 *
 * Input (all int64 unless said, C-contiguous, checked for length): s, e (keys of the frame
 * calls' starts and ends, sorted by s, e >= s), e_sorted (e sorted), thr (thread code per
 * frame call, or empty: one thread), fh (uint64 frame hash per call), mids (API calls'
 * midpoint keys, sorted), mthr (their thread codes, or empty). Output, written into the
 * caller's arrays: parent (caller's position or -1), h (uint64 stack hash, never 0), cur
 * (each midpoint's launching frame call or -1).
 *
 * The rules, as the numpy walk states them: depth = position - #calls ended at or before the
 * start (a zero-length call starting there excepted); caller = the latest earlier call one
 * level up, kept only if on the same thread; hash = mix(caller's hash or 0, frame hash);
 * launching call = the latest start at or before the midpoint on the midpoint's thread, then up
 * the callers while it had ended before the midpoint. No input can make it read out of bounds:
 * lengths are checked and every depth is checked to lie in [0, position].
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline uint64_t mix(uint64_t parent, uint64_t frame) {
    /* launch_stacks._mix: splitmix64's finaliser over a FNV-style combination */
    uint64_t z = parent * 0x100000001B3ULL;
    z ^= frame;
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ULL;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return z ? z : 1; /* 0 is "no parent" */
}

static int check(Py_buffer *b, Py_ssize_t n, const char *what) {
    if (b->len != n * 8) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, want %zd", what, b->len, n * 8);
        return -1;
    }
    return 0;
}

/* walk(s, e, e_sorted, thr, fh, mids, mthr, parent, h, cur) -> None */
static PyObject *py_walk(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer b[10];
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*w*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5],
                          &b[6], &b[7], &b[8], &b[9]))
        return NULL;
    PyObject *result = NULL;
    int64_t *last = NULL;
    Py_ssize_t n = b[0].len / 8, m = b[5].len / 8;
    int one_thread = b[3].len == 0, one_mthread = b[6].len == 0;
    if (b[0].len % 8 || b[5].len % 8 || check(&b[1], n, "e") || check(&b[2], n, "e_sorted") ||
        (!one_thread && check(&b[3], n, "thr")) || check(&b[4], n, "fh") ||
        (!one_mthread && check(&b[6], m, "mthr")) || check(&b[7], n, "parent") ||
        check(&b[8], n, "h") || check(&b[9], m, "cur"))
        goto out;
    if (one_thread != one_mthread) {
        PyErr_SetString(PyExc_ValueError, "thr and mthr: both or neither");
        goto out;
    }
    const int64_t *s = b[0].buf, *e = b[1].buf, *es = b[2].buf, *thr = b[3].buf;
    const uint64_t *fh = b[4].buf;
    const int64_t *mids = b[5].buf, *mthr = b[6].buf;
    int64_t *parent = b[7].buf, *cur = b[9].buf;
    uint64_t *h = b[8].buf;
    /* last[d]: the latest call at depth d so far (-1: none), as deep as the nesting goes (not
     * one per call: a million calls' worth was fresh memory, its page faults a tenth of the
     * walk of a 1 M-kernel trace) */
    Py_ssize_t cap = 64;
    last = malloc((size_t)cap * sizeof *last);
    if (!last) {
        PyErr_NoMemory();
        goto out;
    }
    int bad = 0, nomem = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < cap; i++) last[i] = -1;
    Py_ssize_t ended = 0, zeros = 0, group_end = 0;
    for (Py_ssize_t i = 0; i < n && !bad; i++) {
        if (i == group_end) { /* a new start: its zero-length calls, counted once */
            zeros = 0;
            group_end = i;
            while (group_end < n && s[group_end] == s[i]) zeros += e[group_end] == s[group_end], group_end++;
        }
        if (i && s[i] < s[i - 1]) bad = 1;
        while (ended < n && es[ended] <= s[i]) ended++;
        Py_ssize_t d = i - (ended - zeros);
        if (d < 0 || d > i) {
            bad = 1;
            break;
        }
        if (d >= cap) {
            Py_ssize_t nc = cap * 2 > d ? cap * 2 : d + 1;
            int64_t *nl = realloc(last, (size_t)nc * sizeof *last);
            if (!nl) {
                nomem = 1;
                break;
            }
            for (Py_ssize_t k = cap; k < nc; k++) nl[k] = -1;
            last = nl;
            cap = nc;
        }
        int64_t p = d ? last[d - 1] : -1;
        if (p >= 0 && !one_thread && thr[p] != thr[i]) p = -1;
        parent[i] = p;
        h[i] = mix(p >= 0 ? h[p] : 0, fh[i]);
        last[d] = i;
    }
    Py_ssize_t q = 0;
    for (Py_ssize_t k = 0; k < m && !bad && !nomem; k++) {
        if (k && mids[k] < mids[k - 1]) bad = 1;
        while (q < n && s[q] <= mids[k]) q++;
        int64_t c = q - 1;
        if (c >= 0 && !one_thread && thr[c] != mthr[k]) c = -1;
        while (c >= 0 && e[c] < mids[k]) c = parent[c];
        cur[k] = c;
    }
    Py_END_ALLOW_THREADS
    if (nomem) {
        PyErr_NoMemory();
        goto out;
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "starts or midpoints not sorted, or ends before starts");
        goto out;
    }
    result = Py_None;
    Py_INCREF(result);
out:
    free(last);
    for (int i = 0; i < 10; i++)
        if (b[i].obj) PyBuffer_Release(&b[i]);
    return result;
}

/* The first j with a[j] >= x (m if none), searched outward from hint: frame calls come nearly
 * in start order, so the answer is usually at or next to the last one (a gallop, then a binary
 * search: O(log distance) whatever the order). */
static Py_ssize_t lower_bound_from(const int64_t *a, Py_ssize_t m, int64_t x, Py_ssize_t hint) {
    Py_ssize_t lo, hi, step = 1;
    if (hint > m) hint = m;
    if (hint < m && a[hint] < x) { /* right of hint: a[lo - 1] < x */
        lo = hint + 1;
        hi = lo;
        while (hi < m && a[hi] < x) {
            lo = hi + 1;
            hi += step;
            step <<= 1;
        }
        if (hi > m) hi = m;
    } else { /* at or left of hint: a[hi] >= x, or hi == m */
        hi = hint;
        for (;;) {
            if (hi == 0) {
                lo = 0;
                break;
            }
            Py_ssize_t p = hi > step ? hi - step : 0;
            if (a[p] >= x) {
                hi = p;
                step <<= 1;
            } else {
                lo = p + 1;
                break;
            }
        }
    }
    while (lo < hi) { /* the answer is in [lo, hi] */
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (a[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* holding(mids, s, e, out[, ok]) -> k: out[:k] = the positions i (ascending) whose interval
 * [s[i], e[i]] holds some midpoint (mids sorted): the first midpoint at or after s[i] is at
 * most e[i] (so e[i] >= s[i]); with ok (one byte per call), only those where ok[i] is not 0
 * (the frame calls on the API calls' thread: no gather of the others first). */
static PyObject *py_holding(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer b[5];
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "y*y*y*w*|y*", &b[0], &b[1], &b[2], &b[3], &b[4])) return NULL;
    PyObject *result = NULL;
    Py_ssize_t m = b[0].len / 8, n = b[1].len / 8, k = 0;
    if (b[0].len % 8 || b[1].len % 8 || check(&b[2], n, "e") || check(&b[3], n, "out")) goto out;
    if (b[4].obj && b[4].len != n) {
        PyErr_Format(PyExc_ValueError, "ok: %zd bytes, want %zd", b[4].len, n);
        goto out;
    }
    const int64_t *mids = b[0].buf, *s = b[1].buf, *e = b[2].buf;
    const uint8_t *ok = b[4].obj ? b[4].buf : NULL;
    int64_t *keep = b[3].buf;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 1; i < m; i++)
        if (mids[i] < mids[i - 1]) bad = 1;
    Py_ssize_t j = 0;
    for (Py_ssize_t i = 0; i < n && !bad; i++) {
        if (ok && !ok[i]) continue;
        j = lower_bound_from(mids, m, s[i], j);
        if (j < m && mids[j] <= e[i]) keep[k++] = i;
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "midpoints not sorted");
        goto out;
    }
    result = PyLong_FromSsize_t(k);
out:
    for (int i = 0; i < 5; i++)
        if (b[i].obj) PyBuffer_Release(&b[i]);
    return result;
}

/* pick(mids, s, e, pid, tid, code, p0, t0, out_s, out_e, out_code, at[, ok]) -> k: holding's
 * pick over one chunk of the frame calls, of those on the launching thread (pid p0, tid t0)
 * only, their s, e and code (int32) written at out_*[at:k] in the chunk's order: the Python
 * calls' columns are read once, as the scanner left them, with no join of the chunks, no mask
 * and no gathers first. mids must be sorted (holding checks; here the caller's own sort,
 * checked once, not per chunk: unsorted, the picks are wrong but no read goes out of bounds);
 * ok (a byte per call) leaves out the calls whose fields are null. */
static PyObject *py_pick(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer b[11];
    memset(b, 0, sizeof b);
    long long p0, t0;
    Py_ssize_t at;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*LLw*w*w*n|y*", &b[0], &b[1], &b[2], &b[3], &b[4],
                          &b[5], &p0, &t0, &b[6], &b[7], &b[8], &at, &b[9]))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t m = b[0].len / 8, n = b[1].len / 8, cap = b[6].len / 8, k = at;
    if (b[0].len % 8 || b[1].len % 8 || b[6].len % 8 || check(&b[2], n, "e") ||
        check(&b[3], n, "pid") || check(&b[4], n, "tid") || check(&b[7], cap, "out_e"))
        goto out;
    if (b[5].len != n * 4 || b[8].len != cap * 4) {
        PyErr_SetString(PyExc_ValueError, "code and out_code: int32, as long as s and out_s");
        goto out;
    }
    if (at < 0 || at > cap || n > cap - at) {
        PyErr_Format(PyExc_ValueError, "at %zd: %zd calls do not fit in %zd", at, n, cap);
        goto out;
    }
    if (b[9].obj && b[9].len != n) {
        PyErr_Format(PyExc_ValueError, "ok: %zd bytes, want %zd", b[9].len, n);
        goto out;
    }
    const int64_t *mids = b[0].buf, *s = b[1].buf, *e = b[2].buf, *pid = b[3].buf,
                  *tid = b[4].buf;
    const int32_t *code = b[5].buf;
    const uint8_t *ok = b[9].obj ? b[9].buf : NULL;
    int64_t *os = b[6].buf, *oe = b[7].buf;
    int32_t *oc = b[8].buf;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t j = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (pid[i] != p0 || tid[i] != t0 || (ok && !ok[i])) continue;
        j = lower_bound_from(mids, m, s[i], j);
        if (j < m && mids[j] <= e[i]) {
            os[k] = s[i];
            oe[k] = e[i];
            oc[k] = code[i];
            k++;
        }
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(k);
out:
    for (int i = 0; i < 11; i++)
        if (b[i].obj) PyBuffer_Release(&b[i]);
    return result;
}

/* launches(cur, h, sid, leaves) -> k: per midpoint its stack id (sid[i] = h[cur[i]], 0 where
 * cur[i] < 0), and leaves[:k] one launching frame call per distinct stack hash (the first in
 * midpoint order): the stacks' table is built from those only. A set of the hashes seen
 * (open addressing, grown at half full; h is never 0, so 0 marks an empty slot). */
static PyObject *py_launches(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer b[4];
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "y*y*w*w*", &b[0], &b[1], &b[2], &b[3])) return NULL;
    PyObject *result = NULL;
    uint64_t *set = NULL;
    Py_ssize_t m = b[0].len / 8, n = b[1].len / 8, k = 0;
    if (b[0].len % 8 || b[1].len % 8 || check(&b[2], m, "sid") || check(&b[3], m, "leaves"))
        goto out;
    const int64_t *cur = b[0].buf;
    const uint64_t *h = b[1].buf;
    uint64_t *sid = b[2].buf;
    int64_t *leaves = b[3].buf;
    size_t cap = 1024, used = 0;
    if (!(set = calloc(cap, sizeof *set))) {
        PyErr_NoMemory();
        goto out;
    }
    int bad = 0, nomem = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < m && !bad && !nomem; i++) {
        int64_t c = cur[i];
        if (c < 0) {
            sid[i] = 0;
            continue;
        }
        if (c >= n || !h[c]) {
            bad = 1;
            break;
        }
        uint64_t v = h[c];
        sid[i] = v;
        size_t at = (size_t)(v ^ (v >> 29)) & (cap - 1);
        while (set[at] && set[at] != v) at = (at + 1) & (cap - 1);
        if (set[at]) continue;
        set[at] = v;
        leaves[k++] = c;
        if (++used * 2 > cap) { /* twice as large, the hashes placed again */
            size_t nc = cap * 2;
            uint64_t *ns = calloc(nc, sizeof *ns);
            if (!ns) {
                nomem = 1;
                break;
            }
            for (size_t q = 0; q < cap; q++)
                if (set[q]) {
                    size_t a = (size_t)(set[q] ^ (set[q] >> 29)) & (nc - 1);
                    while (ns[a]) a = (a + 1) & (nc - 1);
                    ns[a] = set[q];
                }
            free(set);
            set = ns;
            cap = nc;
        }
    }
    Py_END_ALLOW_THREADS
    if (nomem) {
        PyErr_NoMemory();
        goto out;
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "a launching call outside the frame calls, or a 0 hash");
        goto out;
    }
    result = PyLong_FromSsize_t(k);
out:
    free(set);
    for (int i = 0; i < 4; i++)
        if (b[i].obj) PyBuffer_Release(&b[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"holding", py_holding, METH_VARARGS,
     "holding(mids, s, e, out[, ok]) -> k: out[:k] the frame calls holding some midpoint"},
    {"pick", py_pick, METH_VARARGS,
     "pick(mids, s, e, pid, tid, code, p0, t0, out_s, out_e, out_code, at[, ok]) -> k: one "
     "chunk's frame calls on the launching thread holding some midpoint, written at out_*[at:k]"},
    {"launches", py_launches, METH_VARARGS,
     "launches(cur, h, sid, leaves) -> k: each midpoint's stack id, leaves[:k] one frame call "
     "per distinct stack"},
    {"walk", py_walk, METH_VARARGS,
     "walk(s, e, e_sorted, thr, fh, mids, mthr, parent, h, cur) -> None: callers, stack hashes "
     "and launching frame calls (see the C source)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_stack_walk",
                                    "Launch-stack walk (see the C source)", -1, methods};

PyMODINIT_FUNC PyInit__stack_walk(void) { return PyModule_Create(&module); }
