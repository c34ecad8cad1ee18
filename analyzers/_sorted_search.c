/* searchsorted for int64 keys that mostly come in order: where each key lies in a sorted int64 array.
 *
 * search(a, v, out, right) writes to out[k] the index numpy.searchsorted(a, v[k], side) gives:
 * the first i with a[i] >= v[k] (left) or a[i] > v[k] (right). a must be sorted ascending; v may be
 * in any order. Each key is searched from where the previous one was found: a gallop (steps 1, 2,
 * 4, ... from there, up to GALLOP) brackets it, a binary search inside the bracket finds it. Keys in ascending
 * order - the starts or ends of an interval set, times in order - then cost a few comparisons on
 * memory the previous key touched, where a binary search over the whole array takes ~20 probes,
 * most of them cache misses (numpy's, for keys in order, bounds only one side by the last key). A
 * key below the previous one gallops downwards the same way. The result is numpy's, exactly.
 *
 * The three arguments are C-contiguous buffers of 8-byte signed integers (the caller checks the
 * dtype: numpy int64 arrays; out is written). The GIL is released while searching.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Steps a gallop doubles up to before it bisects the rest of the array: keys far from the previous
 * one (keys in no order) then cost numpy's binary search and a few probes more. */
#define GALLOP 64

/* first index i in [lo, hi) with a[i] >= x (right == 0) or a[i] > x (right != 0); hi if none */
static inline Py_ssize_t
bisect(const int64_t *a, Py_ssize_t lo, Py_ssize_t hi, int64_t x, int right)
{
    while (lo < hi) {
        Py_ssize_t mid = lo + ((hi - lo) >> 1);
        int below = right ? (a[mid] <= x) : (a[mid] < x);
        if (below)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void
search_all(const int64_t *a, Py_ssize_t n, const int64_t *v, Py_ssize_t m, int64_t *out, int right)
{
    Py_ssize_t i = 0; /* the previous key's answer: a[i-1] is below it, a[i] is not (or i == n) */
    for (Py_ssize_t k = 0; k < m; k++) {
        const int64_t x = v[k];
        /* is a[i] still not below x? then the answer is at or before i: gallop down */
        int up = (i < n) && (right ? (a[i] <= x) : (a[i] < x));
        if (up) {
            /* a[i] is below x: find hi with a[hi] not below x, gallop up from i */
            Py_ssize_t lo = i + 1, step = 1, hi = i + 1;
            while (hi < n && (right ? (a[hi] <= x) : (a[hi] < x))) {
                lo = hi + 1;
                step <<= 1;
                hi = step > GALLOP ? n : i + step; /* far from the previous key: bisect the rest */
            }
            if (hi > n)
                hi = n;
            i = bisect(a, lo, hi, x, right);
        }
        else {
            /* a[i] is not below x (or i == n): the answer is in [0, i]; gallop down from i */
            Py_ssize_t hi = i, step = 1, lo = i - 1;
            while (lo >= 0 && !(right ? (a[lo] <= x) : (a[lo] < x))) {
                hi = lo;
                step <<= 1;
                lo = step > GALLOP ? -1 : i - step;
            }
            if (lo < 0)
                lo = -1;
            i = bisect(a, lo + 1, hi, x, right);
        }
        out[k] = (int64_t)i;
    }
}

static int
int64_buffer(Py_buffer *b, const char *what)
{
    if (b->len % 8 != 0) { /* a simple buffer's itemsize is 1: the caller checks the dtype */
        PyErr_Format(PyExc_TypeError, "%s: 8-byte integers expected", what);
        return -1;
    }
    return 0;
}

static PyObject *
search(PyObject *self, PyObject *args)
{
    Py_buffer a, v, out;
    int right;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*w*p", &a, &v, &out, &right))
        return NULL;
    PyObject *result = NULL;
    if (int64_buffer(&a, "a") < 0 || int64_buffer(&v, "v") < 0 || int64_buffer(&out, "out") < 0)
        goto done;
    if (out.len != v.len) {
        PyErr_SetString(PyExc_ValueError, "out: as many items as v expected");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    search_all((const int64_t *)a.buf, a.len / 8, (const int64_t *)v.buf, v.len / 8, (int64_t *)out.buf, right);
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&a);
    PyBuffer_Release(&v);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"search", search, METH_VARARGS,
     "search(a, v, out, right): out[k] = numpy.searchsorted(a, v[k], 'right' if right else 'left')."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_sorted_search", "searchsorted from the previous key (analyzers/_sorted_search.c).",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__sorted_search(void)
{
    return PyModule_Create(&module);
}
