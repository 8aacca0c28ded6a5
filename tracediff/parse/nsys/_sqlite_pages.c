/* Numeric columns of an SQLite table decoded straight from the file's b-tree pages.
 *
 * Stage: parse (nsys), the fast path of nsys/source.py SqliteSource for the big event tables
 * (kernels, CUDA API calls, memcpy, memset, syncs, CUDA events). Python side and the rules for
 * when it is used: tracediff/parse/nsys/pages.py (types: _sqlite_pages.pyi).
 *
 * Why native: SQLite's own stepping costs ~17 ns per value and ADBC's driver ~50 more (1 M
 * kernel rows x 18 columns: ~1.2 CPU-s); a numpy decoder of the same pages was no faster
 * (~45 gathers per row). Here one pass over each leaf page decodes every wanted field of every
 * cell into preallocated column buffers, with the GIL released, so leaf ranges decode on
 * several threads.
 *
 * Only the plain case is decoded: a rowid table whose wanted fields hold integers, reals, text
 * or NULL as asked, and whose records fit in their page (no overflow pages). Anything else --
 * text or a blob in a numeric field, a number in a text field, a real in an integer column, a
 * page that is not a table b-tree page, an offset outside its page, a cycle in the tree --
 * raises ValueError and the caller reads the table through SQLite, so errors and their
 * messages stay SQLite's. Every read is bounds-checked:
 * a corrupt file can make this refuse, never read outside the mapping.
 *
 * File format: https://www.sqlite.org/fileformat2.html (1.3 header, 1.6 b-tree pages,
 * 2.1 record format).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LEAF 0x0D
#define INTERIOR 0x05
#define MAX_DEPTH 64
#define MAX_FIELDS 4096

typedef struct {
    const uint8_t *b;
    Py_ssize_t n;
    uint32_t page;
    uint32_t usable;
    uint32_t npages;
} File;

static const char *file_init(File *f, const uint8_t *b, Py_ssize_t n) {
    if (n < 512 || memcmp(b, "SQLite format 3", 16) != 0) return "not an SQLite file";
    uint32_t ps = ((uint32_t)b[16] << 8) | b[17];
    if (ps == 1) ps = 65536;
    if (ps < 512 || (ps & (ps - 1)) != 0) return "bad page size";
    if (ps <= b[20] || ps - b[20] < 480) return "bad reserved space";
    f->b = b;
    f->n = n;
    f->page = ps;
    f->usable = ps - b[20];
    f->npages = (uint32_t)((uint64_t)n / ps > UINT32_MAX ? UINT32_MAX : (uint64_t)n / ps);
    return NULL;
}

static inline uint32_t be16(const uint8_t *p) { return ((uint32_t)p[0] << 8) | p[1]; }

static inline uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* SQLite varint at p (at most 9 bytes, none at or past end): its length, 0 if cut off. */
static inline int varint(const uint8_t *p, const uint8_t *end, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        if (p + i >= end) return 0;
        v = (v << 7) | (p[i] & 0x7F);
        if (!(p[i] & 0x80)) {
            *out = v;
            return i + 1;
        }
    }
    if (p + 8 >= end) return 0;
    *out = (v << 8) | p[8];
    return 9;
}

/* A b-tree page: start of the page, its header, and its type; NULL if out of the file. */
static const char *page_at(const File *f, uint32_t pgno, const uint8_t **base,
                           const uint8_t **hdr) {
    if (pgno < 1 || pgno > f->npages) return "page number outside the file";
    *base = f->b + (size_t)(pgno - 1) * f->page;
    *hdr = *base + (pgno == 1 ? 100 : 0);
    return NULL;
}

/* Cell i of a page (header at hdr, `head` header bytes): its offset, checked to lie in the
 * page's cell content area. */
static inline const char *cell_at(const File *f, const uint8_t *base, const uint8_t *hdr,
                                  int head, uint32_t i, const uint8_t **cell) {
    const uint8_t *ptr = hdr + head + 2 * (size_t)i;
    if (ptr + 2 > base + f->usable) return "cell pointer array past the page";
    uint32_t off = be16(ptr);
    if (off < (uint32_t)(hdr - base) + (uint32_t)head || off >= f->usable)
        return "cell offset outside the page";
    *cell = base + off;
    return NULL;
}

typedef struct {
    uint32_t *v;
    size_t n, cap;
} U32s;

static int push(U32s *a, uint32_t x) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 1024;
        uint32_t *v = realloc(a->v, cap * sizeof(uint32_t));
        if (!v) return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

/* Leaf pages of the table b-tree rooted at `root`, in key order, with their cell counts. */
static const char *walk(const File *f, uint32_t root, U32s *leaves, U32s *cells) {
    uint32_t stack_page[MAX_DEPTH];
    uint32_t stack_next[MAX_DEPTH];
    int depth = 0;
    uint64_t visited = 0;
    stack_page[0] = root;
    stack_next[0] = 0;
    depth = 1;
    while (depth > 0) {
        uint32_t pgno = stack_page[depth - 1];
        const uint8_t *base, *hdr;
        const char *err = page_at(f, pgno, &base, &hdr);
        if (err) return err;
        uint32_t ncell = be16(hdr + 3);
        if (hdr[0] == LEAF) {
            if (push(leaves, pgno) || push(cells, ncell)) return "out of memory";
            depth--;
            continue;
        }
        if (hdr[0] != INTERIOR) return "not a table b-tree page";
        uint32_t next = stack_next[depth - 1];
        uint32_t child;
        if (next < ncell) {
            const uint8_t *cell;
            err = cell_at(f, base, hdr, 12, next, &cell);
            if (err) return err;
            if (cell + 4 > base + f->usable) return "cell past the page";
            child = be32(cell);
        } else if (next == ncell) {
            child = be32(hdr + 8);
        } else {
            depth--;
            continue;
        }
        stack_next[depth - 1] = next + 1;
        if (++visited > f->npages) return "a page is reached twice (cycle in the b-tree)";
        if (depth == MAX_DEPTH) return "b-tree too deep";
        stack_page[depth] = child;
        stack_next[depth] = 0;
        depth++;
    }
    return NULL;
}

static PyObject *py_leaves(PyObject *self, PyObject *args) {
    Py_buffer buf;
    unsigned long root;
    if (!PyArg_ParseTuple(args, "y*k", &buf, &root)) return NULL;
    File f;
    U32s leaves = {0}, cells = {0};
    const char *err = file_init(&f, buf.buf, buf.len);
    if (!err) {
        Py_BEGIN_ALLOW_THREADS
        err = walk(&f, (uint32_t)root, &leaves, &cells);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&buf);
    PyObject *out = NULL;
    if (err) {
        PyErr_SetString(PyExc_ValueError, err);
    } else {
        out = Py_BuildValue("y#y#", (const char *)leaves.v, (Py_ssize_t)(leaves.n * 4),
                            (const char *)cells.v, (Py_ssize_t)(cells.n * 4));
    }
    free(leaves.v);
    free(cells.v);
    return out;
}

static const uint8_t SIZE[10] = {0, 1, 2, 3, 4, 6, 8, 8, 0, 0};

typedef struct {
    char *v;
    size_t n, cap;
} Bytes;

static int append(Bytes *a, const void *p, size_t n) {
    if (n == 0) return 0; /* an empty text: nothing to copy (and no buffer yet, maybe) */
    if (a->n + n > a->cap) {
        size_t cap = a->cap ? a->cap : 4096;
        while (cap < a->n + n) cap *= 2;
        char *v = realloc(a->v, cap);
        if (!v) return -1;
        a->v = v;
        a->cap = cap;
    }
    memcpy(a->v + a->n, p, n);
    a->n += n;
    return 0;
}

/* Outputs of one decode call. Values go to one 8-byte slot per row and column (a text column
 * gets the end offset of the row's bytes); NULLs are not flagged per row but listed (the rows,
 * as int64), so a column without NULLs costs no second stream of writes. */
typedef struct {
    int nwant;
    int maxfield;
    int ipk;            /* record field that aliases the rowid, or -1 */
    int16_t *slot;      /* record field -> output column, or -1 */
    const char *kinds;  /* per output column: 'i' int64, 'w' int32, 'f' float64, 's' text */
    uint8_t **vals;     /* per output column, 8 bytes a row (int32: 4), from row0 on */
    Bytes *text;        /* per output column: the bytes of a text column */
    Bytes *nulls;       /* per output column: int64 rows (counted from 0 of the whole table) */
    Py_ssize_t row0;
    Py_ssize_t rows;    /* capacity of the outputs from row0 on */
} Out;

static inline const char *put_int(Out *o, int j, Py_ssize_t r, int64_t iv) {
    switch (o->kinds[j]) {
    case 'f': {
        double dv = (double)iv;
        memcpy(o->vals[j] + 8 * r, &dv, 8);
        return NULL;
    }
    case 'w': {
        if (iv < INT32_MIN || iv > INT32_MAX) return "value outside int32 in an int32 column";
        int32_t w = (int32_t)iv;
        memcpy(o->vals[j] + 4 * r, &w, 4);
        return NULL;
    }
    default:
        memcpy(o->vals[j] + 8 * r, &iv, 8);
        return NULL;
    }
}

static inline const char *put_null(Out *o, int j, Py_ssize_t r) {
    if (o->kinds[j] == 'w') {
        memset(o->vals[j] + 4 * r, 0, 4);
    } else {
        int64_t v = o->kinds[j] == 's' ? (int64_t)o->text[j].n : 0; /* text: offsets stay */
        memcpy(o->vals[j] + 8 * r, &v, 8);
    }
    int64_t row = (int64_t)(o->row0 + r);
    return append(&o->nulls[j], &row, 8) ? "out of memory" : NULL;
}

/* Field of serial type st (not NULL) at p, into output column j, row r. */
static inline const char *put(Out *o, int j, Py_ssize_t r, uint64_t st, const uint8_t *p,
                              uint64_t size) {
    char kind = o->kinds[j];
    if (kind == 's') {
        if (st < 13 || (st & 1) == 0) return "a number or blob in a text column";
        if (append(&o->text[j], p, size)) return "out of memory";
        int64_t end = (int64_t)o->text[j].n;
        memcpy(o->vals[j] + 8 * r, &end, 8);
        return NULL;
    }
    if (st >= 10) return "text or blob in a numeric column";
    if (st == 7) {
        if (kind != 'f') return "real value in an integer column";
        uint64_t u = 0;
        for (int k = 0; k < 8; k++) u = (u << 8) | p[k];
        memcpy(o->vals[j] + 8 * r, &u, 8); /* IEEE 754 bits, big-endian on disk */
        return NULL;
    }
    int64_t iv = st == 9;
    if (st >= 1 && st <= 6) {
        uint64_t u = (uint64_t)(int64_t)(int8_t)p[0];
        for (uint64_t k = 1; k < size; k++) u = (u << 8) | p[k];
        iv = (int64_t)u;
    }
    return put_int(o, j, r, iv);
}

/* Every cell of the leaf pages into rows 0.. of the outputs; the number of rows written. */
static const char *decode(const File *f, const uint32_t *leaves, Py_ssize_t nleaves, Out *o,
                          Py_ssize_t *rows_out) {
    Py_ssize_t r = 0;
    const char *err;
    for (Py_ssize_t li = 0; li < nleaves; li++) {
        const uint8_t *base, *hdr;
        err = page_at(f, leaves[li], &base, &hdr);
        if (err) return err;
        if (hdr[0] != LEAF) return "not a table leaf page";
        const uint8_t *pend = base + f->usable;
        uint32_t ncell = be16(hdr + 3);
        if ((Py_ssize_t)ncell > o->rows - r) return "more rows than counted";
        for (uint32_t i = 0; i < ncell; i++, r++) {
            const uint8_t *cell;
            err = cell_at(f, base, hdr, 8, i, &cell);
            if (err) return err;
            uint64_t payload, rowid, hsize;
            int a = varint(cell, pend, &payload);
            if (!a) return "cell past the page";
            int b = varint(cell + a, pend, &rowid);
            if (!b) return "cell past the page";
            if (payload > f->usable - 35) return "record with overflow pages";
            const uint8_t *rec = cell + a + b;
            if (rec + payload > pend) return "record past the page";
            int h = varint(rec, rec + payload, &hsize);
            if (!h || hsize < (uint64_t)h || hsize > payload) return "bad record header";
            const uint8_t *tp = rec + h, *tend = rec + hsize, *body = tend;
            uint64_t room = payload - hsize; /* bytes of the record body */
            uint64_t off = 0;
            int nseen = 0;
            for (int k = 0; k <= o->maxfield; k++) {
                uint64_t st = 0; /* fields past the record's end are NULL (ADD COLUMN) */
                if (tp < tend) {
                    if (*tp < 0x80) { /* nearly every serial type is one byte */
                        st = *tp++;
                    } else {
                        int t = varint(tp, tend, &st);
                        if (!t) return "bad record header";
                        tp += t;
                    }
                }
                uint64_t size;
                if (st < 10) size = SIZE[st];
                else if (st >= 12) size = (st - 12) / 2;
                else return "reserved serial type";
                /* off <= room holds throughout, so neither side can wrap around */
                if (size > room - off) return "field past the record";
                int j = o->slot[k];
                if (j >= 0) {
                    char kind = o->kinds[j];
                    if (st >= 1 && st <= 6 && kind == 'i') { /* the common cases */
                        const uint8_t *p = body + off;
                        uint64_t u = (uint64_t)(int64_t)(int8_t)p[0];
                        for (uint64_t q = 1; q < size; q++) u = (u << 8) | p[q];
                        memcpy(o->vals[j] + 8 * r, &u, 8);
                    } else if (st >= 1 && st <= 4 && kind == 'w') {
                        const uint8_t *p = body + off;
                        uint32_t u = (uint32_t)(int32_t)(int8_t)p[0];
                        for (uint64_t q = 1; q < size; q++) u = (u << 8) | p[q];
                        memcpy(o->vals[j] + 4 * r, &u, 4);
                    } else if (st == 0 && k == o->ipk && kind != 's') {
                        err = put_int(o, j, r, (int64_t)rowid);
                        if (err) return err;
                    } else {
                        err = st == 0 ? put_null(o, j, r) : put(o, j, r, st, body + off, size);
                        if (err) return err;
                    }
                    if (++nseen == o->nwant) break;
                }
                off += size;
            }
        }
    }
    *rows_out = r;
    return NULL;
}

static PyObject *bytes_of(const Bytes *a) {
    return PyBytes_FromStringAndSize(a->v ? a->v : "", (Py_ssize_t)a->n);
}

/* decode(file, leaves_u32, fields, kinds, ipk, values, row0) -> (rows, null rows, text bytes)
 *
 * file: the whole SQLite file (a read-only buffer); leaves_u32: leaf page numbers (uint32,
 * native order) from leaves(); fields: record field index per output column; kinds: bytes,
 * b'i' (int64), b'w' (int32: a larger value is refused), b'f' (float64) or b's' (text) per
 * output column; ipk: the field that aliases the rowid, or -1; values: a writable buffer per
 * output column, 8 bytes a row (int32: 4), written from row row0 on. Returns the rows decoded and, per output column, the rows that are NULL (int64
 * bytes, counted from row 0 of `values`) and a text column's bytes (b"" for numeric columns);
 * a text column's values are the end offsets of each row's bytes in those, counted from this
 * call's first byte.
 */
static PyObject *py_decode(PyObject *self, PyObject *args) {
    Py_buffer file, leaves, kinds;
    PyObject *fields, *values;
    int ipk;
    Py_ssize_t row0;
    if (!PyArg_ParseTuple(args, "y*y*O!y*iO!n", &file, &leaves, &PyTuple_Type, &fields, &kinds,
                          &ipk, &PyTuple_Type, &values, &row0))
        return NULL;
    PyObject *result = NULL;
    int nwant = (int)PyTuple_GET_SIZE(fields);
    size_t nalloc = nwant ? (size_t)nwant : 1;
    Py_buffer *vb = calloc(nalloc, sizeof(Py_buffer));
    uint8_t **vals = calloc(nalloc, sizeof(uint8_t *));
    Bytes *text = calloc(nalloc, sizeof(Bytes));
    Bytes *nulls = calloc(nalloc, sizeof(Bytes));
    int16_t *slot = malloc(MAX_FIELDS * sizeof(int16_t));
    int got_v = 0;
    if (!vb || !vals || !text || !nulls || !slot) {
        PyErr_NoMemory();
        goto done;
    }
    if (nwant == 0 || PyTuple_GET_SIZE(values) != nwant || kinds.len != nwant ||
        leaves.len % 4 != 0 || row0 < 0) {
        PyErr_SetString(PyExc_ValueError, "decode: arguments do not match");
        goto done;
    }
    for (int k = 0; k < MAX_FIELDS; k++) slot[k] = -1;
    int maxfield = -1;
    for (int j = 0; j < nwant; j++) {
        long k = PyLong_AsLong(PyTuple_GET_ITEM(fields, j));
        if (k == -1 && PyErr_Occurred()) goto done;
        if (k < 0 || k >= MAX_FIELDS || slot[k] != -1) {
            PyErr_SetString(PyExc_ValueError, "decode: bad field index");
            goto done;
        }
        char kind = ((const char *)kinds.buf)[j];
        if (kind != 'i' && kind != 'w' && kind != 'f' && kind != 's') {
            PyErr_SetString(PyExc_ValueError, "decode: kinds are b'i', b'w', b'f' or b's'");
            goto done;
        }
        slot[k] = (int16_t)j;
        if (k > maxfield) maxfield = (int)k;
    }
    Py_ssize_t cap = PY_SSIZE_T_MAX;
    for (int j = 0; j < nwant; j++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(values, j), &vb[j], PyBUF_WRITABLE) < 0)
            goto done;
        got_v++;
        Py_ssize_t width = ((const char *)kinds.buf)[j] == 'w' ? 4 : 8;
        if (vb[j].len / width < cap) cap = vb[j].len / width;
    }
    if (row0 > cap) {
        PyErr_SetString(PyExc_ValueError, "decode: row0 past the outputs");
        goto done;
    }
    for (int j = 0; j < nwant; j++)
        vals[j] = (uint8_t *)vb[j].buf + (((const char *)kinds.buf)[j] == 'w' ? 4 : 8) * row0;
    File f;
    const char *err = file_init(&f, file.buf, file.len);
    Py_ssize_t rows = 0;
    if (!err) {
        Out o = {nwant, maxfield, ipk, slot, kinds.buf, vals, text, nulls, row0, cap - row0};
        Py_BEGIN_ALLOW_THREADS
        err = decode(&f, leaves.buf, leaves.len / 4, &o, &rows);
        Py_END_ALLOW_THREADS
    }
    if (err) {
        PyErr_SetString(PyExc_ValueError, err);
        goto done;
    }
    PyObject *nulled = PyTuple_New(nwant);
    PyObject *texts = PyTuple_New(nwant);
    if (!nulled || !texts) {
        Py_XDECREF(nulled);
        Py_XDECREF(texts);
        goto done;
    }
    for (int j = 0; j < nwant; j++) {
        PyTuple_SET_ITEM(nulled, j, bytes_of(&nulls[j]));
        PyTuple_SET_ITEM(texts, j, bytes_of(&text[j]));
    }
    result = Py_BuildValue("nNN", rows, nulled, texts);
done:
    for (int j = 0; j < got_v; j++) PyBuffer_Release(&vb[j]);
    if (text)
        for (int j = 0; j < nwant; j++) free(text[j].v);
    if (nulls)
        for (int j = 0; j < nwant; j++) free(nulls[j].v);
    free(vb);
    free(vals);
    free(text);
    free(nulls);
    free(slot);
    PyBuffer_Release(&file);
    PyBuffer_Release(&leaves);
    PyBuffer_Release(&kinds);
    return result;
}

static PyMethodDef methods[] = {
    {"leaves", py_leaves, METH_VARARGS,
     "leaves(file, root) -> (leaf pages as uint32 bytes, cell counts as uint32 bytes)"},
    {"decode", py_decode, METH_VARARGS,
     "decode(file, leaves, fields, kinds, ipk, values, row0) -> (rows, null rows, texts)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_sqlite_pages",
    "Columns of SQLite tables decoded from the file's pages (see parse/nsys/pages.py).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__sqlite_pages(void) { return PyModule_Create(&module); }
