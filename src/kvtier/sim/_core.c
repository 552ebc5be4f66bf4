/* The simulator's replay loop compiled: the same rules as kvtier.sim.TieredCache (the readable
 * reference; tests require equal outcomes per request), as plain loops over arrays.
 *
 * GPU tier: vLLM's block pool as an LRU queue of physical copies (a doubly linked list in
 * arrays); block ids are dense (0 .. universe - 1, kvtier.sim.fast.flatten renumbers them), so
 * an array maps an id to its first copy; each id's copies are chained in hash-map order.
 * CPU tier: an LRU of chunk keys (block ids), same structures.
 * Built at install (setup: ext-modules in pyproject.toml); no numpy headers, buffers only.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int64_t i64;
typedef int32_t i32;

/* ---- LRU list in arrays: node 0 is the sentinel (front = next[0], back = prev[0]) ---- */
typedef struct { i32 *prev, *next, *chain; i64 *key, *stamp, *pin; char *real; i32 cap, used, free_head; i64 len; } List;

static int list_init(List *l, i32 cap) {
    l->cap = cap < 16 ? 16 : cap;
    l->prev = malloc(sizeof(i32) * l->cap); l->next = malloc(sizeof(i32) * l->cap);
    l->chain = malloc(sizeof(i32) * l->cap); l->key = malloc(sizeof(i64) * l->cap);
    l->real = malloc(l->cap); l->stamp = malloc(sizeof(i64) * l->cap); l->pin = malloc(sizeof(i64) * l->cap);
    if (!l->prev || !l->next || !l->chain || !l->key || !l->real || !l->stamp || !l->pin) return -1;
    l->prev[0] = l->next[0] = 0;
    l->used = 1; l->free_head = -1; l->len = 0;
    return 0;
}

static void list_free(List *l) { free(l->prev); free(l->next); free(l->chain); free(l->key); free(l->real); free(l->stamp); free(l->pin); }

static i32 list_new(List *l, i64 key, char real) {
    i32 x;
    if (l->free_head >= 0) { x = l->free_head; l->free_head = l->next[x]; }
    else {
        if (l->used == l->cap) {
            i32 c = l->cap * 2;
            l->prev = realloc(l->prev, sizeof(i32) * c); l->next = realloc(l->next, sizeof(i32) * c);
            l->chain = realloc(l->chain, sizeof(i32) * c); l->key = realloc(l->key, sizeof(i64) * c);
            l->real = realloc(l->real, c); l->stamp = realloc(l->stamp, sizeof(i64) * c);
            l->pin = realloc(l->pin, sizeof(i64) * c);
            if (!l->prev || !l->next || !l->chain || !l->key || !l->real || !l->stamp || !l->pin) return -1;
            l->cap = c;
        }
        x = l->used++;
    }
    l->key[x] = key; l->real[x] = real; l->chain[x] = -1; l->stamp[x] = 0; l->pin[x] = -2;
    i32 b = l->prev[0];  /* append at the back */
    l->prev[x] = b; l->next[x] = 0; l->next[b] = x; l->prev[0] = x;
    l->len++;
    return x;
}

static inline void list_unlink(List *l, i32 x) {
    l->next[l->prev[x]] = l->next[x];
    l->prev[l->next[x]] = l->prev[x];
}

static inline void list_to_back(List *l, i32 x) {
    list_unlink(l, x);
    i32 b = l->prev[0];
    l->prev[x] = b; l->next[x] = 0; l->next[b] = x; l->prev[0] = x;
}

static inline void list_release(List *l, i32 x) {
    list_unlink(l, x);
    l->next[x] = l->free_head; l->free_head = x;
    l->len--;
}

/* ---- the CPU tier ---- */
typedef struct { List l; i32 *node; i64 cap; } Cpu;  /* node[id]: its list node, -1 if absent */

static int cpu_touch_in_order(Cpu *c, i64 key) {  /* move or insert; trimming is the caller's */
    i32 x = c->node[key];
    if (x >= 0) { list_to_back(&c->l, x); return 0; }
    x = list_new(&c->l, key, 1);
    if (x < 0) return -1;
    c->node[key] = x;
    return 0;
}

static void cpu_trim(Cpu *c) {
    while (c->l.len > c->cap) {
        i32 x = c->l.next[0];
        c->node[c->l.key[x]] = -1;
        list_release(&c->l, x);
    }
}

static PyObject *replay(PyObject *self, PyObject *args) {
    Py_buffer ids_b, off_b, maxhit_b, scratch_b, unique_b, tokens_b, g_b, loaded_b, chunks_b, stored_b;
    long long universe, gpu_cap, cpu_cap, k, block_tokens, step_tokens;
    int soe, vllm_flavor, unhashed_first;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*LLLLLLpppw*w*w*w*", &ids_b, &off_b, &maxhit_b, &scratch_b, &unique_b, &tokens_b,
                          &universe, &gpu_cap, &cpu_cap, &k, &block_tokens, &step_tokens, &soe, &vllm_flavor, &unhashed_first,
                          &g_b, &loaded_b, &chunks_b, &stored_b))
        return NULL;
    const i64 *ids = ids_b.buf, *off = off_b.buf, *max_hit = maxhit_b.buf, *scratch = scratch_b.buf, *unique = unique_b.buf;
    const i64 *tokens = tokens_b.buf;
    i64 *out_g = g_b.buf, *out_loaded = loaded_b.buf, *out_chunks = chunks_b.buf, *out_stored = stored_b.buf;
    i64 R = (i64)(off_b.len / sizeof(i64)) - 1;
    int err = 0, has_cpu = cpu_cap >= 0;
    List q; Cpu cpu;
    memset(&cpu, 0, sizeof cpu);
    char *seen = NULL;                                    /* vllm flavor: per chunk of a request */
    i64 seen_cap = 0, clock = 0, offer_id = 0;            /* scheduler steps; offers (stamp marks an offer's keys) */
    i32 *first = malloc(sizeof(i32) * (universe + 1));  /* first[id]: its first copy, -1 if none */
    char *ends = calloc(universe + 1, 1);                 /* store_on_evict: chunk ends not stored yet */
    err |= !first || !ends;
    if (first) memset(first, 0xff, sizeof(i32) * (universe + 1));
    err |= list_init(&q, (i32)(gpu_cap + 64));
    if (has_cpu) {
        cpu.node = malloc(sizeof(i32) * (universe + 1));
        err |= !cpu.node || list_init(&cpu.l, (i32)((cpu_cap < universe ? cpu_cap : universe) + 64));
        if (cpu.node) memset(cpu.node, 0xff, sizeof(i32) * (universe + 1));
        cpu.cap = cpu_cap;
    }
    Py_BEGIN_ALLOW_THREADS
    for (i64 r = 0; r < R && !err; r++) {
        const i64 *b = ids + off[r];
        i64 n = off[r + 1] - off[r], mh = max_hit[r], lim = mh < n ? mh : n, g = 0, loaded = 0, chunks = 0, stored = 0;
        while (g < lim && first[b[g]] >= 0) g++;
        if (has_cpu) {
            i64 m = n / k;  /* chunk j is named by block (j + 1) k - 1 */
#define KEY(j) b[((j) + 1) * k - 1]
            if (vllm_flavor) {  /* vLLM 0.32 native offloading: see TieredCache._native */
                i64 start = g / k, c = 0;
                while (start + c < m && cpu.node[KEY(start + c)] >= 0) c++;
                if (c && (start + c) * k - g >= k) { loaded = (start + c) * k - g; chunks = c; }
                if (m > seen_cap) {  /* seen[j]: chunk j loaded or recorded by an offer */
                    seen_cap = 2 * m;
                    char *t = realloc(seen, seen_cap);
                    if (!t) { err = 1; break; }
                    seen = t;
                }
                memset(seen, 0, m);
                if (loaded) memset(seen + start, 1, c);
                if (!soe) {
                    i64 nxt = loaded ? start + c : 0, steps = 0, done = 0, tpc = k * block_tokens;
                    if (step_tokens > 0) {
                        done = (g + loaded) * block_tokens;
                        i64 cap = loaded ? tokens[r] - 1 : tokens[r];
                        if (done > cap) done = cap;
                        steps = done < tokens[r] ? (tokens[r] - done + step_tokens - 1) / step_tokens : 0;
                    }
                    clock += 2;  /* the previous request's copies are done */
                    i64 npinned = 0;  /* keys stored by the previous step: pin == clock - 1 */
                    for (i64 s = 0; s <= steps && !err; s++, clock++) {
                        i64 n = m;
                        if (s < steps) {
                            i64 d = done + (s + 1) * step_tokens;
                            if (d > tokens[r]) d = tokens[r];
                            n = d / tpc < m ? d / tpc : m;
                        } else npinned = 0;  /* the end's offer: a step after the last decode step */
                        i64 stored_now = 0;
                        if (n > nxt) {
                            i64 absent = 0, ready = 0;
                            offer_id++;
                            for (i64 j = nxt; j < n; j++) {
                                i32 x = cpu.node[KEY(j)];
                                if (x < 0) { absent++; seen[j] = 1; continue; }
                                cpu.l.stamp[x] = offer_id;
                                if (cpu.l.pin[x] != clock - 1) { ready++; seen[j] = 1; }
                            }
                            int ok = 1;
                            if (absent) {
                                i64 need = cpu.l.len + absent - cpu.cap;
                                if (need > 0) {  /* evict the least recent chunks neither offered nor in flight */
                                    ok = need <= cpu.l.len - ready - npinned;
                                    i32 x = cpu.l.next[0];
                                    while (ok && need > 0 && x != 0) {
                                        i32 nx = cpu.l.next[x];
                                        if (cpu.l.stamp[x] != offer_id && cpu.l.pin[x] != clock - 1) {
                                            cpu.node[cpu.l.key[x]] = -1; list_release(&cpu.l, x); need--;
                                        }
                                        x = nx;
                                    }
                                }
                                if (ok) {
                                    for (i64 j = nxt; j < n && !err; j++)
                                        if (cpu.node[KEY(j)] < 0) {
                                            err |= cpu_touch_in_order(&cpu, KEY(j));
                                            if (!err) cpu.l.pin[cpu.node[KEY(j)]] = clock;
                                        }
                                    stored += absent;  /* TieredCache.stored_chunks counts these */
                                    stored_now = absent;
                                }
                            }
                            if (ok) nxt = n;
                        }
                        npinned = stored_now;
                    }
                }
                for (i64 j = m - 1; j >= 0; j--) {  /* at the end: re-ranked tail first, head most recent */
                    if (!seen[j]) continue;
                    i32 x = cpu.node[KEY(j)];
                    if (x >= 0) list_to_back(&cpu.l, x);
                }
            } else if (g < mh) {  /* LMCache, on a GPU miss only */
                i64 c = 0;
                while (c < m && cpu.node[KEY(c)] >= 0) c++;
                for (i64 j = c - 1; j >= 0; j--) list_to_back(&cpu.l, cpu.node[KEY(j)]);  /* touch_cache */
                if (c) {
                    i64 reach = c * k < mh ? c * k : mh;
                    if (reach > g) { loaded = reach - g; chunks = c - g / k; }
                }
                if (!soe) {  /* puts of the absent chunks */
                    for (i64 j = c; j < m && !err; j++)
                        if (cpu.node[KEY(j)] < 0) err |= cpu_touch_in_order(&cpu, KEY(j));
                    cpu_trim(&cpu);
                }
            }
            if (soe) for (i64 j = 0; j < m; j++) ends[KEY(j)] = 1;
#undef KEY
        }
        /* release: fresh copies (the partial block when it joins the LRU, generated blocks, the
         * computed blocks last to first), then the hit blocks' first copies, last to first */
        i64 fresh_unique = unique[r] + (unhashed_first ? 0 : scratch[r]);
        for (i64 j = 0; j < fresh_unique && !err; j++) err |= list_new(&q, 0, 0) < 0;
        for (i64 j = n - 1; j >= g && !err; j--) {
            i32 x = list_new(&q, b[j], 1);
            if (x < 0) { err = 1; break; }
            i32 h = first[b[j]];
            if (h < 0) first[b[j]] = x;
            else { while (q.chain[h] >= 0) h = q.chain[h]; q.chain[h] = x; }
        }
        for (i64 j = g - 1; j >= 0; j--) list_to_back(&q, first[b[j]]);
        i64 limit = gpu_cap - (unhashed_first ? scratch[r] : 0);
        if (limit < 0) limit = 0;
        while (q.len > limit && !err) {
            i32 x = q.next[0];
            if (q.real[x]) {
                i64 id = q.key[x];
                i32 h = first[id];
                if (h == x) {
                    if (q.chain[x] >= 0) first[id] = q.chain[x];
                    else {
                        first[id] = -1;
                        if (has_cpu && soe && ends[id]) {  /* its last copy: store the chunk */
                            ends[id] = 0;
                            err |= cpu_touch_in_order(&cpu, id);
                            cpu_trim(&cpu);
                        }
                    }
                } else {
                    while (q.chain[h] != x) h = q.chain[h];
                    q.chain[h] = q.chain[x];
                }
            }
            list_release(&q, x);
        }
        out_g[r] = g; out_loaded[r] = loaded; out_chunks[r] = chunks; out_stored[r] = stored;
    }
    Py_END_ALLOW_THREADS
    list_free(&q); free(first); free(ends); free(seen);
    if (has_cpu) { list_free(&cpu.l); free(cpu.node); }
    PyBuffer_Release(&ids_b); PyBuffer_Release(&off_b); PyBuffer_Release(&maxhit_b); PyBuffer_Release(&scratch_b);
    PyBuffer_Release(&unique_b); PyBuffer_Release(&tokens_b); PyBuffer_Release(&g_b); PyBuffer_Release(&loaded_b); PyBuffer_Release(&chunks_b);
    PyBuffer_Release(&stored_b);
    if (err) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"replay", replay, METH_VARARGS, "replay(ids, offsets, max_hit, scratch, unique, tokens, universe, gpu_cap, cpu_cap, k, "
     "block_tokens, step_tokens, store_on_evict, vllm_flavor, unhashed_first, out_gpu_blocks, out_loaded, out_chunks, "
     "out_stored); step_tokens <= 0: all of a request's chunks offered at once"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_core", "Compiled replay loop of kvtier.sim", -1, methods};

PyMODINIT_FUNC PyInit__core(void) { return PyModule_Create(&module); }
