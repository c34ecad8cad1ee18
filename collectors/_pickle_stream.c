/* A streaming reader of plain-data pickles (CUDA memory snapshots), in two passes over the bytes.
 *
 * scan(readinto) walks the opcode stream and admits only the opcodes plain data is written with
 * (protocols 2-5: dicts, lists, tuples, str, bytes, int, float, bool, None, memo puts and gets).
 * Any other opcode - every one that names a global or calls something (GLOBAL, STACK_GLOBAL,
 * REDUCE, BUILD, INST, OBJ, NEWOBJ, EXT*, PERSID) and the rest (DUP, POP, text opcodes) - is a
 * Decline: no object is built, and the caller falls back to the restricted C unpickler, which
 * refuses or reads it in its own words. scan checks every length, memo index, stack and mark
 * depth, and the truncation the unpickler would find, and records which memo indices are ever
 * read (a bitmap): the Plan.
 *
 * build(readinto, plan, callback, batch, key, each_key) reads the bytes again and builds the
 * objects as the unpickler would, but keeps in the memo only the indices the plan saw read, and
 * streams: the list that is the root dict's `key` value (or the root itself, when it is a list)
 * and every list item of the root dict's `each_key` list are never built. A Stream object stands
 * in the tree for each; the items appended to it are handed to callback(stream, items) in lists
 * of `batch` items (the last one when the list is attached to its parent). The whole object tree
 * is never in memory: only the memoized objects that are read again, the stack and one batch.
 * A stream is guessed where its list is created and checked where it is consumed: anything but
 * the expected SETITEM(S) into the root dict / APPEND(S) at its position into the `each_key`
 * list is a Decline, so the tree built is the unpickler's with those lists replaced.
 *
 * No recursion; every count is bounded; errors raised by readinto or callback propagate.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

static PyObject *Decline;

#define IO_CHUNK (1 << 20)
#define MAX_STACK (1 << 22)   /* objects on the stack at once (pickle writes batches of 1,000) */
#define MAX_MARKS (1 << 12)   /* MARKs open at once (nesting of multi-item containers) */
#define MAX_LONG 4096         /* bytes of a LONG1/LONG4 argument */
#define MAX_FRAME (1LL << 26) /* pickle writes frames of ~64 KiB */

static int
decline(const char *fmt, long long a)
{
    PyErr_Format(Decline, fmt, a);
    return -1;
}

/* ---------------------------------------------------------------- the byte source */

typedef struct {
    PyObject *readinto; /* callable(memoryview) -> int, 0 at the end */
    char *buf;
    Py_ssize_t cap, pos, end;
    long long offset; /* file offset of buf[0] */
    int eof;
} Reader;

static int
reader_init(Reader *r, PyObject *readinto)
{
    r->readinto = readinto;
    r->buf = PyMem_Malloc(IO_CHUNK);
    if (r->buf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    r->cap = IO_CHUNK;
    r->pos = r->end = 0;
    r->offset = 0;
    r->eof = 0;
    return 0;
}

static void
reader_free(Reader *r)
{
    PyMem_Free(r->buf);
    r->buf = NULL;
}

/* Read more bytes after r->end (the buffer has room). */
static int
reader_more(Reader *r)
{
    Py_ssize_t want = r->cap - r->end;
    PyObject *mv = PyMemoryView_FromMemory(r->buf + r->end, want, PyBUF_WRITE);
    if (mv == NULL)
        return -1;
    PyObject *res = PyObject_CallOneArg(r->readinto, mv);
    Py_DECREF(mv);
    if (res == NULL)
        return -1;
    Py_ssize_t got = PyLong_AsSsize_t(res);
    Py_DECREF(res);
    if (got == -1 && PyErr_Occurred())
        return -1;
    if (got < 0 || got > want) {
        PyErr_SetString(PyExc_ValueError, "readinto returned a bad count");
        return -1;
    }
    if (got == 0)
        r->eof = 1;
    r->end += got;
    return 0;
}

/* Make n bytes available at r->buf + r->pos; growing the buffer as bytes arrive (a declared
 * length larger than the file costs at most twice the bytes that are there). */
static int
need(Reader *r, Py_ssize_t n)
{
    if (r->end - r->pos >= n)
        return 0;
    if (r->pos > 0) {
        memmove(r->buf, r->buf + r->pos, r->end - r->pos);
        r->end -= r->pos;
        r->offset += r->pos;
        r->pos = 0;
    }
    while (r->end < n) {
        if (r->eof)
            return decline("ends at offset %lld before its STOP opcode: truncated", r->offset + r->end);
        if (r->end == r->cap) {
            Py_ssize_t cap = r->cap * 2 < n ? n : r->cap * 2;
            char *b = PyMem_Realloc(r->buf, cap);
            if (b == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            r->buf = b;
            r->cap = cap;
        }
        if (reader_more(r) < 0)
            return -1;
    }
    return 0;
}

/* Pass over n bytes without keeping them. */
static int
skip(Reader *r, unsigned long long n)
{
    while (n > 0) {
        if (r->pos == r->end && need(r, 1) < 0)
            return -1;
        Py_ssize_t avail = r->end - r->pos;
        Py_ssize_t take = (unsigned long long)avail < n ? avail : (Py_ssize_t)n;
        r->pos += take;
        n -= take;
    }
    return 0;
}

static inline unsigned long long
le(const unsigned char *p, int n)
{
    unsigned long long v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* The length argument of an opcode: n bytes, little-endian. */
static int
read_len(Reader *r, int n, unsigned long long *out)
{
    if (need(r, n) < 0)
        return -1;
    *out = le((unsigned char *)r->buf + r->pos, n);
    r->pos += n;
    return 0;
}

/* ---------------------------------------------------------------- the plan (pass 1) */

typedef struct {
    PyObject_HEAD
    uint64_t *bits;          /* memo index i is read by a GET */
    uint32_t *rank;          /* set bits in the words before */
    Py_ssize_t nwords;       /* words of bits */
    Py_ssize_t memo_count;   /* memo puts */
    Py_ssize_t n_read;       /* distinct memo indices read */
    Py_ssize_t max_depth;    /* deepest stack */
    Py_ssize_t max_marks;    /* most marks open */
    unsigned long long max_arg; /* longest str/bytes argument */
    long long stop_offset;   /* offset of the STOP opcode */
} Plan;

static void
plan_dealloc(Plan *p)
{
    PyMem_Free(p->bits);
    PyMem_Free(p->rank);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static PyMemberDef plan_members[] = {
    {"memo_count", T_PYSSIZET, offsetof(Plan, memo_count), READONLY, "memo puts"},
    {"memo_read", T_PYSSIZET, offsetof(Plan, n_read), READONLY, "distinct memo indices read by a GET"},
    {"max_depth", T_PYSSIZET, offsetof(Plan, max_depth), READONLY, "deepest stack"},
    {"max_marks", T_PYSSIZET, offsetof(Plan, max_marks), READONLY, "most marks open at once"},
    {"stop_offset", T_LONGLONG, offsetof(Plan, stop_offset), READONLY, "offset of the STOP opcode"},
    {NULL},
};

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "trainscope.collectors._pickle_stream.Plan",
    .tp_basicsize = sizeof(Plan),
    .tp_dealloc = (destructor)plan_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "What scan() found: which memo indices are read, and the stack's depth.",
    .tp_members = plan_members,
};

static int
bits_grow(Plan *p, Py_ssize_t index)
{
    Py_ssize_t words = index / 64 + 1;
    if (words <= p->nwords)
        return 0;
    Py_ssize_t n = p->nwords ? p->nwords * 2 : 1024;
    while (n < words)
        n *= 2;
    uint64_t *b = PyMem_Realloc(p->bits, n * sizeof(uint64_t));
    if (b == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memset(b + p->nwords, 0, (n - p->nwords) * sizeof(uint64_t));
    p->bits = b;
    p->nwords = n;
    return 0;
}

/* Opcodes (pickletools' names). */
enum {
    MARK = '(', STOP = '.', BININT = 'J', BININT1 = 'K', BININT2 = 'M', NONE = 'N',
    BINUNICODE = 'X', APPEND = 'a', APPENDS = 'e', BINGET = 'h', LONG_BINGET = 'j',
    LIST = 'l', DICT = 'd', EMPTY_DICT = '}', EMPTY_LIST = ']', EMPTY_TUPLE = ')',
    BINPUT = 'q', LONG_BINPUT = 'r', SETITEM = 's', SETITEMS = 'u', TUPLE = 't',
    BINFLOAT = 'G', BINBYTES = 'B', SHORT_BINBYTES = 'C',
    PROTO = 0x80, TUPLE1 = 0x85, TUPLE2 = 0x86, TUPLE3 = 0x87, NEWTRUE = 0x88, NEWFALSE = 0x89,
    LONG1 = 0x8a, LONG4 = 0x8b, SHORT_BINUNICODE = 0x8c, BINUNICODE8 = 0x8d, BINBYTES8 = 0x8e,
    MEMOIZE = 0x94, FRAME = 0x95,
};

static PyObject *
scan(PyObject *module, PyObject *readinto)
{
    Plan *p = PyObject_New(Plan, &PlanType);
    if (p == NULL)
        return NULL;
    p->bits = NULL;
    p->rank = NULL;
    p->nwords = p->memo_count = p->n_read = p->max_depth = p->max_marks = 0;
    p->max_arg = 0;
    p->stop_offset = -1;
    Reader r;
    if (reader_init(&r, readinto) < 0) {
        Py_DECREF(p);
        return NULL;
    }
    Py_ssize_t marks[MAX_MARKS];
    int nmarks = 0;
    Py_ssize_t depth = 0;
    PyObject *result = NULL;
    int first = 1;
#undef PUSH1
#define PUSH1()                                                             \
    do {                                                                    \
        if (++depth > MAX_STACK) {                                          \
            decline("more than %lld objects on the stack", MAX_STACK);      \
            goto done;                                                      \
        }                                                                   \
        if (depth > p->max_depth)                                           \
            p->max_depth = depth;                                           \
    } while (0)
#define FENCE (nmarks ? marks[nmarks - 1] : 0)
#define FAIL(msg)                                              \
    do {                                                       \
        decline(msg " at offset %lld", r.offset + r.pos - 1);  \
        goto done;                                             \
    } while (0)
    for (;;) {
        if (need(&r, 1) < 0)
            goto done;
        unsigned char op = (unsigned char)r.buf[r.pos++];
        unsigned long long n;
        if (first && op != PROTO)
            FAIL("not a protocol 2-5 pickle");
        first = 0;
        switch (op) {
        case PROTO:
            if (read_len(&r, 1, &n) < 0)
                goto done;
            if (n < 2 || n > 5)
                FAIL("protocol outside 2-5");
            break;
        case FRAME:
            if (read_len(&r, 8, &n) < 0)
                goto done;
            if (n > (unsigned long long)MAX_FRAME)
                FAIL("frame larger than pickle writes");
            if (need(&r, (Py_ssize_t)n) < 0) /* the unpickler reads a frame whole: truncation */
                goto done;
            break;
        case STOP:
            if (depth != 1 || nmarks)
                FAIL("STOP with other than one object on the stack");
            p->stop_offset = r.offset + r.pos - 1;
            goto stopped;
        case MARK:
            if (nmarks == MAX_MARKS)
                FAIL("too many marks open");
            marks[nmarks++] = depth;
            if (nmarks > p->max_marks)
                p->max_marks = nmarks;
            break;
        case EMPTY_DICT: case EMPTY_LIST: case EMPTY_TUPLE: case NONE: case NEWTRUE: case NEWFALSE:
            PUSH1();
            break;
        case BININT1: case BININT2: case BININT: case BINFLOAT:
            if (skip(&r, op == BININT1 ? 1 : op == BININT2 ? 2 : op == BININT ? 4 : 8) < 0)
                goto done;
            PUSH1();
            break;
        case LONG1: case LONG4:
            if (read_len(&r, op == LONG1 ? 1 : 4, &n) < 0)
                goto done;
            if (n > MAX_LONG) /* LONG4's negative lengths too (as unsigned) */
                FAIL("integer longer than a snapshot holds");
            if (skip(&r, n) < 0)
                goto done;
            PUSH1();
            break;
        case SHORT_BINUNICODE: case SHORT_BINBYTES: case BINUNICODE: case BINBYTES:
        case BINUNICODE8: case BINBYTES8:
            if (read_len(&r, (op == SHORT_BINUNICODE || op == SHORT_BINBYTES) ? 1
                             : (op == BINUNICODE || op == BINBYTES) ? 4 : 8, &n) < 0)
                goto done;
            if (n > (unsigned long long)PY_SSIZE_T_MAX / 2)
                FAIL("declared length beyond any file");
            if (skip(&r, n) < 0)
                goto done;
            if (n > p->max_arg)
                p->max_arg = n;
            PUSH1();
            break;
        case TUPLE: case LIST: case DICT:
            if (!nmarks)
                FAIL("no mark");
            if (op == DICT && ((depth - marks[nmarks - 1]) & 1))
                FAIL("odd number of items for DICT");
            depth = marks[--nmarks];
            PUSH1();
            break;
        case TUPLE1: case TUPLE2: case TUPLE3: {
            int k = op - TUPLE1 + 1;
            if (depth - FENCE < k)
                FAIL("stack underflow");
            depth -= k;
            PUSH1();
            break;
        }
        case APPEND:
            if (depth - FENCE < 2)
                FAIL("stack underflow");
            depth -= 1;
            break;
        case SETITEM:
            if (depth - FENCE < 3)
                FAIL("stack underflow");
            depth -= 2;
            break;
        case APPENDS: case SETITEMS: {
            if (!nmarks)
                FAIL("no mark");
            Py_ssize_t m = marks[--nmarks];
            if (op == SETITEMS && ((depth - m) & 1))
                FAIL("odd number of items for SETITEMS");
            if (m - FENCE < 1)
                FAIL("stack underflow");
            depth = m;
            break;
        }
        case MEMOIZE: case BINPUT: case LONG_BINPUT:
            if (op != MEMOIZE) {
                if (read_len(&r, op == BINPUT ? 1 : 4, &n) < 0)
                    goto done;
                if (n != (unsigned long long)p->memo_count)
                    FAIL("memo put out of sequence");
            }
            if (depth - FENCE < 1)
                FAIL("stack underflow");
            if (bits_grow(p, p->memo_count) < 0)
                goto done;
            p->memo_count++;
            break;
        case BINGET: case LONG_BINGET:
            if (read_len(&r, op == BINGET ? 1 : 4, &n) < 0)
                goto done;
            if (n >= (unsigned long long)p->memo_count)
                FAIL("memo get of an index never put");
            p->bits[n / 64] |= 1ULL << (n % 64);
            PUSH1();
            break;
        default:
            decline("opcode %lld outside plain data", op);
            goto done;
        }
    }
stopped:
    /* the ranks: memo index i of the read ones is kept in slot rank(i) */
    p->rank = PyMem_Malloc((p->nwords + 1) * sizeof(uint32_t));
    if (p->rank == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    {
        unsigned long long total = 0;
        for (Py_ssize_t w = 0; w < p->nwords; w++) {
            p->rank[w] = (uint32_t)total;
            total += __builtin_popcountll(p->bits[w]);
        }
        if (total > UINT32_MAX) {
            decline("%lld memo indices read", (long long)total);
            goto done;
        }
        p->rank[p->nwords] = (uint32_t)total;
        p->n_read = (Py_ssize_t)total;
    }
    result = (PyObject *)p;
    p = NULL;
done:
    reader_free(&r);
    Py_XDECREF(p);
    return result;
#undef FAIL
#undef FENCE
#undef PUSH1
}

/* ---------------------------------------------------------------- streams */

typedef struct {
    PyObject_HEAD
    PyObject *key;      /* the root dict's key it is the value of (or of the list it is an item of) */
    Py_ssize_t index;   /* its position in the each_key list; -1 for the key's own value or the root */
    Py_ssize_t count;   /* items handed over */
    PyObject *batch;    /* items not yet handed over */
    int attached;
} Stream;

static void
stream_dealloc(Stream *s)
{
    Py_XDECREF(s->key);
    Py_XDECREF(s->batch);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyMemberDef stream_members[] = {
    {"key", T_OBJECT, offsetof(Stream, key), READONLY, "the root dict's key (None for a root list)"},
    {"index", T_PYSSIZET, offsetof(Stream, index), READONLY, "position in the key's list, -1 for the key's value"},
    {"count", T_PYSSIZET, offsetof(Stream, count), READONLY, "items handed to the callback"},
    {NULL},
};

static PyTypeObject StreamType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "trainscope.collectors._pickle_stream.Stream",
    .tp_basicsize = sizeof(Stream),
    .tp_dealloc = (destructor)stream_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Stands in the tree for a list whose items were handed to the callback.",
    .tp_members = stream_members,
};

static Stream *
stream_new(PyObject *key, Py_ssize_t index)
{
    Stream *s = PyObject_New(Stream, &StreamType);
    if (s == NULL)
        return NULL;
    s->key = Py_NewRef(key);
    s->index = index;
    s->count = 0;
    s->attached = 0;
    s->batch = PyList_New(0);
    if (s->batch == NULL) {
        Py_DECREF(s);
        return NULL;
    }
    return s;
}

typedef struct {
    PyObject *callback;
    Py_ssize_t batch;
} Sink;

static int
stream_flush(Sink *k, Stream *s)
{
    if (PyList_GET_SIZE(s->batch) == 0)
        return 0;
    PyObject *items = s->batch;
    s->batch = PyList_New(0);
    if (s->batch == NULL) {
        s->batch = items;
        return -1;
    }
    s->count += PyList_GET_SIZE(items);
    PyObject *res = PyObject_CallFunctionObjArgs(k->callback, (PyObject *)s, items, NULL);
    Py_DECREF(items);
    if (res == NULL)
        return -1;
    Py_DECREF(res);
    return 0;
}

/* Append items[0:n] (new references, stolen) to the stream, handing over each full batch. */
static int
stream_extend(Sink *k, Stream *s, PyObject **items, Py_ssize_t n)
{
    int rc = 0;
    Py_ssize_t i = 0;
    for (; i < n; i++) {
        if (Py_IS_TYPE(items[i], &StreamType)) {
            rc = decline("a streamed list inside a streamed list", 0);
            break;
        }
        if (PyList_Append(s->batch, items[i]) < 0) {
            rc = -1;
            break;
        }
        Py_DECREF(items[i]);
        items[i] = NULL;
        if (PyList_GET_SIZE(s->batch) >= k->batch && stream_flush(k, s) < 0) {
            rc = -1;
            i++;
            break;
        }
    }
    for (; i < n; i++)
        Py_XDECREF(items[i]);
    return rc;
}

/* ---------------------------------------------------------------- build (pass 2) */

static PyObject *
decode_long(const unsigned char *p, Py_ssize_t n)
{
    if (n == 0)
        return PyLong_FromLong(0);
    if (n <= 8) {
        unsigned long long v = le(p, (int)n);
        if (n < 8 && (p[n - 1] & 0x80))
            v |= ~0ULL << (8 * n);
        return PyLong_FromLongLong((long long)v);
    }
#if PY_VERSION_HEX >= 0x030D0000
    return PyLong_FromNativeBytes(p, (size_t)n, Py_ASNATIVEBYTES_LITTLE_ENDIAN); /* signed */
#else
    return _PyLong_FromByteArray(p, (size_t)n, 1, 1);
#endif
}

static double
unpack_double(const char *p)
{
#if PY_VERSION_HEX >= 0x030B0000
    return PyFloat_Unpack8(p, 0);
#else
    return _PyFloat_Unpack8((const unsigned char *)p, 0);
#endif
}

typedef struct {
    PyObject **stack;
    Py_ssize_t depth, cap;
    Py_ssize_t *marks;
    int nmarks, mcap;
    PyObject **memo;    /* slots of the read indices */
    Py_ssize_t memo_count;
    PyObject *root;     /* the first object built, when a dict */
    PyObject *key, *each_key;
    PyObject *each_list; /* the root's each_key list */
    Stream *key_stream;  /* the root's key value, or the root list */
    Sink sink;
} Build;

static void
build_clear(Build *b, Plan *p)
{
    if (b->stack) {
        for (Py_ssize_t i = 0; i < b->depth; i++)
            Py_XDECREF(b->stack[i]);
        PyMem_Free(b->stack);
    }
    if (b->memo) {
        for (Py_ssize_t i = 0; i < p->n_read; i++)
            Py_XDECREF(b->memo[i]);
        PyMem_Free(b->memo);
    }
    PyMem_Free(b->marks);
    Py_XDECREF(b->each_list);
    Py_XDECREF(b->key_stream);
}

static inline int
is_read(Plan *p, Py_ssize_t i, Py_ssize_t *slot)
{
    if (i / 64 >= p->nwords || !(p->bits[i / 64] & (1ULL << (i % 64))))
        return 0;
    *slot = p->rank[i / 64] + __builtin_popcountll(p->bits[i / 64] & ((1ULL << (i % 64)) - 1));
    return 1;
}

/* Where a new list will go, guessed from the stack (checked where it is consumed): a Stream for
 * the root's key value, the root list, or an item of the each_key list; else NULL (a plain list). */
static PyObject *
new_list(Build *b)
{
    Py_ssize_t d = b->depth;
    Py_ssize_t top = b->nmarks ? b->marks[b->nmarks - 1] : -1;
    if (d == 0 && b->nmarks == 0 && b->key_stream == NULL && b->root == NULL) {
        Stream *s = stream_new(Py_None, -1); /* the root itself: the oldest snapshots' bare list */
        if (s == NULL)
            return NULL;
        b->key_stream = (Stream *)Py_NewRef(s);
        return (PyObject *)s;
    }
    if (b->root != NULL && d >= 2 && b->stack[0] == b->root &&
        ((b->nmarks == 0 && d == 2) || (b->nmarks == 1 && top == 1 && ((d - 1) & 1))) &&
        PyUnicode_CheckExact(b->stack[d - 1])) {
        PyObject *k = b->stack[d - 1];
        int is_key = PyUnicode_Compare(k, b->key) == 0;
        int is_each = !is_key && PyUnicode_Compare(k, b->each_key) == 0;
        if (PyErr_Occurred())
            return NULL;
        if (is_key) {
            if (b->key_stream != NULL)
                return decline("the root's key twice", 0), NULL;
            Stream *s = stream_new(k, -1);
            if (s == NULL)
                return NULL;
            b->key_stream = (Stream *)Py_NewRef(s);
            return (PyObject *)s;
        }
        if (is_each) {
            if (b->each_list != NULL)
                return decline("the root's list key twice", 0), NULL;
            PyObject *l = PyList_New(0);
            if (l != NULL)
                b->each_list = Py_NewRef(l);
            return l;
        }
    }
    if (b->each_list != NULL) {
        Py_ssize_t index = -1;
        if (d >= 1 && b->stack[d - 1] == b->each_list && d - 1 >= (top < 0 ? 0 : top))
            index = PyList_GET_SIZE(b->each_list); /* APPEND follows */
        else if (top >= 1 && b->stack[top - 1] == b->each_list)
            index = PyList_GET_SIZE(b->each_list) + (d - top); /* an item of MARK ... APPENDS */
        if (index >= 0)
            return (PyObject *)stream_new(b->each_key, index);
    }
    return PyList_New(0);
}

/* A Stream consumed by anything but its parent's append or setitem: the guess was wrong. */
static int
no_stream(PyObject **items, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if (Py_IS_TYPE(items[i], &StreamType))
            return decline("a streamed list consumed out of place", 0);
    return 0;
}

/* Attach Stream s as it goes into its parent: hand over what is left of it. */
static int
attach(Build *b, Stream *s)
{
    if (s->attached)
        return decline("a streamed list attached twice", 0);
    s->attached = 1;
    return stream_flush(&b->sink, s);
}

/* list.extend(items[0:n]) (stolen) for a plain list; streams checked in place. */
static int
list_extend(Build *b, PyObject *list, PyObject **items, Py_ssize_t n)
{
    int rc = 0;
    Py_ssize_t i = 0;
    for (; i < n; i++) {
        PyObject *x = items[i];
        if (Py_IS_TYPE(x, &StreamType)) {
            Stream *s = (Stream *)x;
            if (list != b->each_list || s->index != PyList_GET_SIZE(list) || s->key != b->each_key) {
                rc = decline("a streamed list consumed out of place", 0);
                break;
            }
            if (attach(b, s) < 0) {
                rc = -1;
                break;
            }
        }
        if (PyList_Append(list, x) < 0) {
            rc = -1;
            break;
        }
        Py_DECREF(x);
        items[i] = NULL;
    }
    for (; i < n; i++)
        Py_XDECREF(items[i]);
    return rc;
}

/* dict[k] = v for pairs in items[0:n] (stolen). */
static int
dict_update(Build *b, PyObject *dict, PyObject **items, Py_ssize_t n)
{
    int rc = 0;
    Py_ssize_t i = 0;
    for (; i + 1 < n; i += 2) {
        PyObject *k = items[i], *v = items[i + 1];
        if (Py_IS_TYPE(k, &StreamType)) {
            rc = decline("a streamed list as a key", 0);
            break;
        }
        if (Py_IS_TYPE(v, &StreamType)) {
            Stream *s = (Stream *)v;
            if (dict != b->root || s->index != -1 || s->key == Py_None || !PyUnicode_CheckExact(k) ||
                PyUnicode_Compare(k, s->key) != 0) {
                rc = PyErr_Occurred() ? -1 : decline("a streamed list consumed out of place", 0);
                break;
            }
            if (attach(b, s) < 0) {
                rc = -1;
                break;
            }
        }
        if (PyDict_SetItem(dict, k, v) < 0) {
            rc = decline("a dict key the unpickler would refuse", 0); /* unhashable: let it say so */
            break;
        }
        Py_DECREF(k);
        Py_DECREF(v);
        items[i] = items[i + 1] = NULL;
    }
    for (; i < n; i++)
        Py_XDECREF(items[i]);
    return rc;
}

static PyObject *
build(PyObject *module, PyObject *args)
{
    PyObject *readinto, *callback, *key, *each_key;
    Plan *p;
    Py_ssize_t batch;
    if (!PyArg_ParseTuple(args, "OO!OnUU:build", &readinto, &PlanType, &p, &callback, &batch, &key, &each_key))
        return NULL;
    if (batch < 1) {
        PyErr_SetString(PyExc_ValueError, "batch must be positive");
        return NULL;
    }
    Build b = {0};
    b.key = key;
    b.each_key = each_key;
    b.sink.callback = callback;
    b.sink.batch = batch;
    b.cap = p->max_depth + 1;
    b.mcap = p->max_marks + 1;
    b.stack = PyMem_Calloc(b.cap, sizeof(PyObject *));
    b.marks = PyMem_Calloc(b.mcap, sizeof(Py_ssize_t));
    b.memo = PyMem_Calloc(p->n_read + 1, sizeof(PyObject *));
    Reader r;
    int have_reader = 0;
    PyObject *result = NULL;
    if (b.stack == NULL || b.marks == NULL || b.memo == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (reader_init(&r, readinto) < 0)
        goto done;
    have_reader = 1;

#define FENCE (b.nmarks ? b.marks[b.nmarks - 1] : 0)
#define FAIL(msg)                                              \
    do {                                                       \
        decline(msg " at offset %lld", r.offset + r.pos - 1);  \
        goto done;                                             \
    } while (0)
#define PUSH(x)                                                \
    do {                                                       \
        PyObject *_x = (x);                                    \
        if (_x == NULL)                                        \
            goto done;                                         \
        if (b.depth >= b.cap) {                                \
            Py_DECREF(_x);                                     \
            FAIL("deeper stack than the scan saw");            \
        }                                                      \
        b.stack[b.depth++] = _x;                               \
    } while (0)
    for (;;) {
        if (need(&r, 1) < 0)
            goto done;
        unsigned char op = (unsigned char)r.buf[r.pos++];
        unsigned long long n;
        switch (op) {
        case PROTO:
            if (read_len(&r, 1, &n) < 0)
                goto done;
            break;
        case FRAME:
            if (read_len(&r, 8, &n) < 0)
                goto done;
            if (n > (unsigned long long)MAX_FRAME)
                FAIL("frame larger than the scan saw");
            if (need(&r, (Py_ssize_t)n) < 0)
                goto done;
            break;
        case STOP: {
            if (b.depth != 1 || b.nmarks)
                FAIL("STOP with other than one object on the stack");
            PyObject *top = b.stack[0];
            if (Py_IS_TYPE(top, &StreamType)) {
                if ((Stream *)top != b.key_stream || attach(&b, (Stream *)top) < 0)
                    goto done;
            }
            else if (b.key_stream != NULL || b.each_list != NULL) {
                /* the root dict must hold the streams where they were attached (a later SETITEM
                 * of the same key would have replaced them) */
                if (top != b.root)
                    FAIL("streams outside the root");
                if (b.key_stream != NULL && PyDict_GetItemWithError(top, b.key) != (PyObject *)b.key_stream)
                    FAIL("the root's streamed value replaced");
                if (b.each_list != NULL && PyDict_GetItemWithError(top, b.each_key) != b.each_list)
                    FAIL("the root's list replaced");
                if (PyErr_Occurred())
                    goto done;
            }
            if (b.key_stream != NULL && !b.key_stream->attached)
                FAIL("a streamed list never attached");
            result = top;
            b.stack[0] = NULL;
            b.depth = 0;
            goto done;
        }
        case MARK:
            if (b.nmarks >= b.mcap)
                FAIL("more marks than the scan saw");
            b.marks[b.nmarks++] = b.depth;
            break;
        case EMPTY_DICT: {
            PyObject *d = PyDict_New();
            if (d != NULL && b.depth == 0 && b.root == NULL && b.key_stream == NULL)
                b.root = d; /* borrowed: it stays on the stack's bottom until STOP */
            PUSH(d);
            break;
        }
        case EMPTY_LIST:
            PUSH(new_list(&b));
            break;
        case EMPTY_TUPLE:
            PUSH(PyTuple_New(0));
            break;
        case NONE:
            PUSH(Py_NewRef(Py_None));
            break;
        case NEWTRUE:
            PUSH(Py_NewRef(Py_True));
            break;
        case NEWFALSE:
            PUSH(Py_NewRef(Py_False));
            break;
        case BININT1: case BININT2: case BININT: {
            int k = op == BININT1 ? 1 : op == BININT2 ? 2 : 4;
            if (read_len(&r, k, &n) < 0)
                goto done;
            PUSH(PyLong_FromLong(k == 4 ? (long)(int32_t)(uint32_t)n : (long)n));
            break;
        }
        case BINFLOAT: {
            if (need(&r, 8) < 0)
                goto done;
            double x = unpack_double(r.buf + r.pos);
            r.pos += 8;
            if (x == -1.0 && PyErr_Occurred())
                goto done;
            PUSH(PyFloat_FromDouble(x));
            break;
        }
        case LONG1: case LONG4:
            if (read_len(&r, op == LONG1 ? 1 : 4, &n) < 0)
                goto done;
            if (n > MAX_LONG)
                FAIL("integer longer than the scan saw");
            if (need(&r, (Py_ssize_t)n) < 0)
                goto done;
            r.pos += n;
            PUSH(decode_long((unsigned char *)r.buf + r.pos - n, (Py_ssize_t)n));
            break;
        case SHORT_BINUNICODE: case SHORT_BINBYTES: case BINUNICODE: case BINBYTES:
        case BINUNICODE8: case BINBYTES8: {
            if (read_len(&r, (op == SHORT_BINUNICODE || op == SHORT_BINBYTES) ? 1
                             : (op == BINUNICODE || op == BINBYTES) ? 4 : 8, &n) < 0)
                goto done;
            if (n > p->max_arg)
                FAIL("a longer argument than the scan saw");
            if (need(&r, (Py_ssize_t)n) < 0)
                goto done;
            const char *s = r.buf + r.pos;
            r.pos += n;
            if (op == SHORT_BINBYTES || op == BINBYTES || op == BINBYTES8) {
                PUSH(PyBytes_FromStringAndSize(s, (Py_ssize_t)n));
            }
            else {
                PyObject *u = PyUnicode_DecodeUTF8(s, (Py_ssize_t)n, "surrogatepass");
                if (u == NULL) {
                    if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                        PyErr_Clear();
                        FAIL("a string that is not UTF-8");
                    }
                    goto done;
                }
                PUSH(u);
            }
            break;
        }
        case TUPLE: case LIST: case DICT: case TUPLE1: case TUPLE2: case TUPLE3: {
            Py_ssize_t lo;
            if (op == TUPLE || op == LIST || op == DICT) {
                if (!b.nmarks)
                    FAIL("no mark");
                lo = b.marks[--b.nmarks];
            }
            else {
                lo = b.depth - (op - TUPLE1 + 1);
                if (lo < FENCE)
                    FAIL("stack underflow");
            }
            Py_ssize_t k = b.depth - lo;
            if (no_stream(b.stack + lo, k) < 0)
                goto done;
            PyObject *o;
            if (op == DICT) {
                if (k & 1)
                    FAIL("odd number of items for DICT");
                o = PyDict_New();
                if (o == NULL)
                    goto done;
                for (Py_ssize_t i = lo; i < b.depth; i += 2)
                    if (PyDict_SetItem(o, b.stack[i], b.stack[i + 1]) < 0) {
                        Py_DECREF(o);
                        PyErr_Clear();
                        FAIL("a dict key the unpickler would refuse");
                    }
            }
            else {
                o = op == LIST ? PyList_New(k) : PyTuple_New(k);
                if (o == NULL)
                    goto done;
                for (Py_ssize_t i = 0; i < k; i++) {
                    Py_INCREF(b.stack[lo + i]);
                    if (op == LIST)
                        PyList_SET_ITEM(o, i, b.stack[lo + i]);
                    else
                        PyTuple_SET_ITEM(o, i, b.stack[lo + i]);
                }
            }
            for (Py_ssize_t i = lo; i < b.depth; i++)
                Py_CLEAR(b.stack[i]);
            b.depth = lo;
            PUSH(o);
            break;
        }
        case APPEND: case SETITEM: case APPENDS: case SETITEMS: {
            Py_ssize_t lo;
            if (op == APPEND || op == SETITEM) {
                lo = b.depth - (op == APPEND ? 1 : 2);
                if (lo - 1 < FENCE)
                    FAIL("stack underflow");
            }
            else {
                if (!b.nmarks)
                    FAIL("no mark");
                lo = b.marks[--b.nmarks];
                if (lo - 1 < FENCE)
                    FAIL("stack underflow");
            }
            PyObject *target = b.stack[lo - 1];
            Py_ssize_t k = b.depth - lo;
            b.depth = lo; /* the items' references pass to the helpers */
            int rc;
            if (op == APPEND || op == APPENDS) {
                if (Py_IS_TYPE(target, &StreamType))
                    rc = stream_extend(&b.sink, (Stream *)target, b.stack + lo, k);
                else if (PyList_CheckExact(target))
                    rc = list_extend(&b, target, b.stack + lo, k);
                else {
                    for (Py_ssize_t i = lo; i < lo + k; i++)
                        Py_CLEAR(b.stack[i]);
                    FAIL("append to what is not a list");
                }
            }
            else {
                if (!PyDict_CheckExact(target) || (k & 1)) {
                    for (Py_ssize_t i = lo; i < lo + k; i++)
                        Py_CLEAR(b.stack[i]);
                    FAIL("setitems on what is not a dict, or an odd count");
                }
                rc = dict_update(&b, target, b.stack + lo, k);
            }
            for (Py_ssize_t i = lo; i < lo + k; i++)
                b.stack[i] = NULL;
            if (rc < 0)
                goto done;
            break;
        }
        case MEMOIZE: case BINPUT: case LONG_BINPUT: {
            if (op != MEMOIZE) {
                if (read_len(&r, op == BINPUT ? 1 : 4, &n) < 0)
                    goto done;
                if (n != (unsigned long long)b.memo_count)
                    FAIL("memo put out of sequence");
            }
            if (b.depth - FENCE < 1)
                FAIL("stack underflow");
            if (b.memo_count >= p->memo_count)
                FAIL("more memo puts than the scan saw");
            Py_ssize_t slot;
            if (is_read(p, b.memo_count, &slot)) {
                PyObject *top = b.stack[b.depth - 1];
                if (Py_IS_TYPE(top, &StreamType) || top == b.each_list || top == b.root)
                    FAIL("a streamed list read again from the memo");
                if (slot >= p->n_read || b.memo[slot] != NULL)
                    FAIL("memo slot out of step with the scan");
                b.memo[slot] = Py_NewRef(top);
            }
            b.memo_count++;
            break;
        }
        case BINGET: case LONG_BINGET: {
            if (read_len(&r, op == BINGET ? 1 : 4, &n) < 0)
                goto done;
            Py_ssize_t slot;
            if (n >= (unsigned long long)b.memo_count || !is_read(p, (Py_ssize_t)n, &slot) ||
                slot >= p->n_read || b.memo[slot] == NULL)
                FAIL("memo get the scan did not see");
            PUSH(Py_NewRef(b.memo[slot]));
            break;
        }
        default:
            decline("opcode %lld outside plain data", op);
            goto done;
        }
    }
done:
    if (have_reader)
        reader_free(&r);
    build_clear(&b, p);
    if (result != NULL && PyErr_Occurred()) {
        Py_CLEAR(result);
    }
    return result;
#undef FAIL
#undef FENCE
#undef PUSH
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O,
     "scan(readinto) -> Plan: walk a plain-data pickle's opcodes (Decline on anything else)."},
    {"build", build, METH_VARARGS,
     "build(readinto, plan, callback, batch, key, each_key) -> the root, its big lists streamed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_pickle_stream",
    "A streaming reader of plain-data pickles (see collectors/_pickle_stream.c).", -1, methods,
};

PyMODINIT_FUNC
PyInit__pickle_stream(void)
{
    if (PyType_Ready(&PlanType) < 0 || PyType_Ready(&StreamType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    Decline = PyErr_NewException("trainscope.collectors._pickle_stream.Decline", NULL, NULL);
    if (Decline == NULL || PyModule_AddObjectRef(m, "Decline", Decline) < 0 ||
        PyModule_AddObjectRef(m, "Plan", (PyObject *)&PlanType) < 0 ||
        PyModule_AddObjectRef(m, "Stream", (PyObject *)&StreamType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
