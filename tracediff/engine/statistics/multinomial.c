/* The bootstrap's resampling counts: rows of multinomial(n, pvals) draws, the same numbers, in
 * the same order from the same bit generator, as numpy's Generator.multinomial(n, pvals, size).
 *
 * Stage: engine (statistics). Python side: tracediff/engine/statistics/resample.py
 * (`multinomial_rows`, for attribute.py's `_resample_weights`), which leaves to numpy what this
 * module does not draw, and all of it where the module is not built. Types: multinomial.pyi.
 *
 * Why native: numpy draws a row as d - 1 conditional binomials, each by inversion with its
 * set-up (a log, an exp, a square root) made again for every draw, since n or p changes from
 * one draw to the next: ~60 ns a draw, 0.4 CPU-s for 1000 resamples of 6,000 cycles. The
 * conditional probabilities p_j are the same in every row (pvals and their running remainder
 * do not depend on the draws), so each category's p, 1 - p and log(1 - p) are made once, not per
 * draw; P(X = 0) = exp(n_j log(1 - p_j)) is still made per draw, n_j being the count left. The
 * same arithmetic on the same operands, so the same bits.
 *
 * Each draw: binomial(n_j, p_j) by inversion (1 - p_j and n_j - X where p_j > 0.5), as numpy
 * does where n_j * min(p_j, 1 - p_j) <= 30; beyond that numpy uses another algorithm (BTPE),
 * which this module does not do: it stops and says so, and the caller draws with numpy from
 * the generator state it saved. With uniform pvals n_j * p_j stays near 1.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* numpy's bitgen_t (numpy/random/bitgen.h), the struct in a BitGenerator's "BitGenerator"
 * capsule: the layout is numpy's public C API for extending numpy.random. */
typedef struct {
    void *state;
    uint64_t (*next_uint64)(void *st);
    uint32_t (*next_uint32)(void *st);
    double (*next_double)(void *st);
    uint64_t (*next_raw)(void *st);
} bitgen_t;

#define SMALL 16 /* counts below this take their weight from a table (`draws`) */

/* a category's draw: binomial(n, p) by inversion, with p <= 0.5 (q = 1 - p, log_q = log(q);
 * the caller takes n - X where it flipped the category's probability). The set-up numpy makes
 * per draw: P(X = 0) = exp(n log q), and the bound past which the search starts again,
 * min(n, np + 10 sqrt(np q + 1)) truncated, which is at least min(n, 10): it is computed, as
 * numpy computes it, only when X gets past that (about once in 10^8 draws at np = 1). */
static int64_t inversion(bitgen_t *bg, int64_t n, double p, double q, double log_q) {
    double qn = exp(n * log_q);
    int64_t bound = n < 10 ? n : 10, x = 0;
    int exact = 0;
    double px = qn;
    double u = bg->next_double(bg->state);
    while (u > px) {
        x++;
        if (x > bound && !exact) {
            double np = n * p;
            double b = np + 10.0 * sqrt(np * q + 1);
            bound = (int64_t)((double)n < b ? (double)n : b);
            exact = 1;
        }
        if (x > bound) {
            x = 0;
            px = qn;
            u = bg->next_double(bg->state);
        } else {
            u -= px;
            px = ((n - x + 1) * p * px) / (x * q);
        }
    }
    return x;
}

/* draws(capsule, n, pvals float64 [d], out int64 [rows x d], zeroed[, per]) -> rows drawn;
 * fewer than rows: the next row needs a draw this module does not make (the caller restores the
 * state). With per > 0, out is float64 and holds each count / per (the bootstrap's weights:
 * the same division numpy makes of the counts cast to float64, with no int64 copy made). With
 * per < 0, out is uint8 and holds the counts, an eighth of the bytes (drawn ahead and held
 * while the rest of a compare runs: resample.py's `Ahead`); a count over 255 stops the rows
 * there, as a draw this module does not make does */
static PyObject *draws(PyObject *self, PyObject *args) {
    PyObject *capsule;
    long long n_total;
    Py_buffer pv, out;
    double per = 0.0;
    if (!PyArg_ParseTuple(args, "OLy*w*|d", &capsule, &n_total, &pv, &out, &per)) return NULL;
    PyObject *result = NULL;
    double *cache = NULL; /* per category: p inverted, its q and log q */
    double *pj = NULL; /* per category: the conditional probability, then the one inverted */
    bitgen_t *bg = PyCapsule_GetPointer(capsule, "BitGenerator");
    Py_ssize_t d = pv.len / (Py_ssize_t)sizeof(double);
    if (bg == NULL) goto done;
    Py_ssize_t item = per < 0 ? 1 : (Py_ssize_t)sizeof(int64_t); /* uint8, or int64 / float64 */
    if (d < 1 || pv.len % (Py_ssize_t)sizeof(double) || out.len % (d * item)) {
        PyErr_SetString(PyExc_ValueError, "draws: pvals float64 [d], out [rows x d]");
        goto done;
    }
    Py_ssize_t rows = out.len / (d * item);
    const double *pix = pv.buf;
    int64_t *mnix = out.buf;
    double *wts = out.buf;    /* per > 0: the same buffer as float64 */
    uint8_t *small8 = out.buf; /* per < 0: as uint8 */
    pj = malloc(sizeof(double) * (size_t)d);
    cache = malloc(sizeof(double) * 3 * (size_t)d);
    if (!pj || !cache) {
        PyErr_NoMemory();
        goto done;
    }
    /* the conditional probabilities, as each row computes them: the same in every row */
    double remaining_p = 1.0;
    for (Py_ssize_t j = 0; j + 1 < d; j++) {
        pj[j] = pix[j] / remaining_p;
        remaining_p -= pix[j];
        double pp = pj[j] <= 0.5 ? pj[j] : 1.0 - pj[j];
        cache[3 * j] = pp;
        cache[3 * j + 1] = 1.0 - pp;
        cache[3 * j + 2] = log(1.0 - pp);
    }
    /* the weights of the counts a draw gives almost always: the same division, made once */
    double small[SMALL];
    for (int i = 0; i < SMALL; i++) small[i] = per > 0 ? (double)i / per : 0.0;
    Py_ssize_t row = 0;
    Py_BEGIN_ALLOW_THREADS;
    for (; row < rows; row++) {
        int64_t *m = mnix + row * d;
        double *w = wts + row * d;
        uint8_t *c8 = small8 + row * d;
        int64_t dn = n_total;
        int stop = 0;
        for (Py_ssize_t j = 0; j + 1 < d; j++) {
            double p = pj[j];
            int64_t x = 0;
            if (p != 0.0 && dn != 0) { /* numpy's binomial: 0, drawing nothing */
                const double *c = cache + 3 * j;
                if (c[0] * dn > 30.0) {
                    stop = 1;
                    break;
                }
                x = inversion(bg, dn, c[0], c[1], c[2]);
                if (!(p <= 0.5)) x = dn - x;
            }
            if (per > 0)
                w[j] = x < SMALL ? small[x] : (double)x / per;
            else if (per < 0 && x > 255) {
                stop = 1;
                break;
            } else if (per < 0)
                c8[j] = (uint8_t)x;
            else
                m[j] = x;
            dn -= x;
            if (dn <= 0) break;
        }
        if (stop) break;
        if (dn > 0) {
            if (per > 0)
                w[d - 1] = (double)dn / per;
            else if (per < 0 && dn > 255)
                break;
            else if (per < 0)
                c8[d - 1] = (uint8_t)dn;
            else
                m[d - 1] = dn;
        }
    }
    Py_END_ALLOW_THREADS;
    result = PyLong_FromSsize_t(row);
done:
    free(pj);
    free(cache);
    PyBuffer_Release(&pv);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"draws", draws, METH_VARARGS, "rows of multinomial draws, as numpy's Generator.multinomial"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "multinomial", NULL, -1, methods};

PyMODINIT_FUNC PyInit_multinomial(void) { return PyModule_Create(&module); }
