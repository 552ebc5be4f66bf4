/* The simulator's replay loops compiled: the same rules as kvtier.sim.TieredCache (`replay`) and
 * kvtier.sim.resident.replay_admitted (`replay_admitted`), the readable references (tests require
 * equal outcomes per request), as plain loops over arrays.
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
/* refs[x]: running requests holding node x (the admitted replay's GPU pool: a held copy is out of the queue) */
typedef struct { i32 *prev, *next, *chain, *refs; i64 *key, *stamp, *pin; char *real; i32 cap, used, free_head; i64 len; } List;

static int list_init(List *l, i32 cap) {
    l->cap = cap < 16 ? 16 : cap;
    l->prev = malloc(sizeof(i32) * l->cap); l->next = malloc(sizeof(i32) * l->cap);
    l->chain = malloc(sizeof(i32) * l->cap); l->key = malloc(sizeof(i64) * l->cap); l->refs = malloc(sizeof(i32) * l->cap);
    l->real = malloc(l->cap); l->stamp = malloc(sizeof(i64) * l->cap); l->pin = malloc(sizeof(i64) * l->cap);
    if (!l->prev || !l->next || !l->chain || !l->refs || !l->key || !l->real || !l->stamp || !l->pin) return -1;
    l->prev[0] = l->next[0] = 0;
    l->used = 1; l->free_head = -1; l->len = 0;
    return 0;
}

static void list_free(List *l) {
    free(l->prev); free(l->next); free(l->chain); free(l->refs); free(l->key); free(l->real); free(l->stamp); free(l->pin);
}

static i32 list_new(List *l, i64 key, char real) {
    i32 x;
    if (l->free_head >= 0) { x = l->free_head; l->free_head = l->next[x]; }
    else {
        if (l->used == l->cap) {
            i32 c = l->cap * 2;
            l->prev = realloc(l->prev, sizeof(i32) * c); l->next = realloc(l->next, sizeof(i32) * c);
            l->chain = realloc(l->chain, sizeof(i32) * c); l->key = realloc(l->key, sizeof(i64) * c);
            l->refs = realloc(l->refs, sizeof(i32) * c);
            l->real = realloc(l->real, c); l->stamp = realloc(l->stamp, sizeof(i64) * c);
            l->pin = realloc(l->pin, sizeof(i64) * c);
            if (!l->prev || !l->next || !l->chain || !l->refs || !l->key || !l->real || !l->stamp || !l->pin) return -1;
            l->cap = c;
        }
        x = l->used++;
    }
    l->key[x] = key; l->real[x] = real; l->chain[x] = -1; l->refs[x] = 0; l->stamp[x] = 0; l->pin[x] = -2;
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

/* ---- one simulated server: both tiers and what the lookups share ---- */
typedef struct {
    i64 gpu_cap, k, block_tokens, step_tokens;
    int has_cpu, soe, vllm_flavor;
    List q;             /* GPU: free queue of copies (front = next victim) */
    i32 *first;         /* first[id]: its first copy (queued or held), -1 if none */
    char *ends;         /* store_on_evict: chunk ends not stored yet */
    Cpu cpu;
    i64 clock, offer_id;  /* scheduler steps; offers (stamp marks an offer's keys) */
} Sim;

static int sim_init(Sim *s, i64 universe, i64 gpu_cap, i64 cpu_cap, i64 k, i64 block_tokens, i64 step_tokens, int soe,
                    int vllm_flavor) {
    memset(s, 0, sizeof *s);
    s->gpu_cap = gpu_cap; s->k = k; s->block_tokens = block_tokens; s->step_tokens = step_tokens;
    s->has_cpu = cpu_cap >= 0; s->soe = soe; s->vllm_flavor = vllm_flavor;
    int err = 0;
    s->first = malloc(sizeof(i32) * (universe + 1));
    s->ends = calloc(universe + 1, 1);
    err |= !s->first || !s->ends;
    if (s->first) memset(s->first, 0xff, sizeof(i32) * (universe + 1));
    err |= list_init(&s->q, (i32)(gpu_cap + 64));
    if (s->has_cpu) {
        s->cpu.node = malloc(sizeof(i32) * (universe + 1));
        err |= !s->cpu.node || list_init(&s->cpu.l, (i32)((cpu_cap < universe ? cpu_cap : universe) + 64));
        if (s->cpu.node) memset(s->cpu.node, 0xff, sizeof(i32) * (universe + 1));
        s->cpu.cap = cpu_cap;
    }
    return err;
}

static void sim_free(Sim *s) {
    list_free(&s->q); free(s->first); free(s->ends);
    if (s->has_cpu) { list_free(&s->cpu.l); free(s->cpu.node); }
}

/* A request's lookups in both tiers and the CPU tier's stores for it (TieredCache._lookup):
 * out = GPU blocks hit, GPU blocks loaded, chunks loaded, chunks stored. 'vllm' flavor: seen[j]
 * (m = n / k entries) marks the chunks to re-rank when the request ends (sim_rerank). */
static int sim_lookup(Sim *s, const i64 *b, i64 n, i64 mh, i64 tokens, char *seen, i64 out[4]) {
    i64 lim = mh < n ? mh : n, g = 0, loaded = 0, chunks = 0, stored = 0, k = s->k;
    const i32 *first = s->first;
    Cpu *cpu = &s->cpu;
    int err = 0;
    while (g < lim && first[b[g]] >= 0) g++;
    if (s->has_cpu) {
        i64 m = n / k;  /* chunk j is named by block (j + 1) k - 1 */
#define KEY(j) b[((j) + 1) * k - 1]
        if (s->vllm_flavor) {  /* vLLM 0.32 native offloading: see TieredCache._native */
            i64 start = g / k, c = 0;
            while (start + c < m && cpu->node[KEY(start + c)] >= 0) c++;
            if (c && (start + c) * k - g >= k) { loaded = (start + c) * k - g; chunks = c; }
            /* seen[j]: chunk j loaded or recorded by an offer */
            memset(seen, 0, m);
            if (loaded) memset(seen + start, 1, c);
            if (!s->soe) {
                i64 nxt = loaded ? start + c : 0, steps = 0, done = 0, tpc = k * s->block_tokens, step = s->step_tokens;
                if (step > 0) {
                    done = (g + loaded) * s->block_tokens;
                    i64 cap = loaded ? tokens - 1 : tokens;
                    if (done > cap) done = cap;
                    steps = done < tokens ? (tokens - done + step - 1) / step : 0;
                }
                s->clock += 2;  /* the previous request's copies are done */
                i64 clock = s->clock, npinned = 0;  /* keys stored by the previous step: pin == clock - 1 */
                for (i64 st = 0; st <= steps && !err; st++, clock++) {
                    i64 upto = m;
                    if (st < steps) {
                        i64 d = done + (st + 1) * step;
                        if (d > tokens) d = tokens;
                        upto = d / tpc < m ? d / tpc : m;
                    } else npinned = 0;  /* the end's offer: a step after the last decode step */
                    i64 stored_now = 0;
                    if (upto > nxt) {
                        i64 absent = 0, ready = 0, offer_id = ++s->offer_id;
                        for (i64 j = nxt; j < upto; j++) {
                            i32 x = cpu->node[KEY(j)];
                            if (x < 0) { absent++; seen[j] = 1; continue; }
                            cpu->l.stamp[x] = offer_id;
                            if (cpu->l.pin[x] != clock - 1) { ready++; seen[j] = 1; }
                        }
                        int ok = 1;
                        if (absent) {
                            i64 need = cpu->l.len + absent - cpu->cap;
                            if (need > 0) {  /* evict the least recent chunks neither offered nor in flight */
                                ok = need <= cpu->l.len - ready - npinned;
                                i32 x = cpu->l.next[0];
                                while (ok && need > 0 && x != 0) {
                                    i32 nx = cpu->l.next[x];
                                    if (cpu->l.stamp[x] != offer_id && cpu->l.pin[x] != clock - 1) {
                                        cpu->node[cpu->l.key[x]] = -1; list_release(&cpu->l, x); need--;
                                    }
                                    x = nx;
                                }
                            }
                            if (ok) {
                                for (i64 j = nxt; j < upto && !err; j++)
                                    if (cpu->node[KEY(j)] < 0) {
                                        err |= cpu_touch_in_order(cpu, KEY(j));
                                        if (!err) cpu->l.pin[cpu->node[KEY(j)]] = clock;
                                    }
                                stored += absent;  /* TieredCache.stored_chunks counts these */
                                stored_now = absent;
                            }
                        }
                        if (ok) nxt = upto;
                    }
                    npinned = stored_now;
                }
                s->clock = clock;
            }
        } else if (g < mh) {  /* LMCache, on a GPU miss only */
            i64 c = 0;
            while (c < m && cpu->node[KEY(c)] >= 0) c++;
            for (i64 j = c - 1; j >= 0; j--) list_to_back(&cpu->l, cpu->node[KEY(j)]);  /* touch_cache */
            if (c) {
                i64 reach = c * k < mh ? c * k : mh;
                if (reach > g) { loaded = reach - g; chunks = c - g / k; }
            }
            if (!s->soe) {  /* puts of the absent chunks */
                for (i64 j = c; j < m && !err; j++)
                    if (cpu->node[KEY(j)] < 0) err |= cpu_touch_in_order(cpu, KEY(j));
                cpu_trim(cpu);
            }
        }
        if (s->soe) for (i64 j = 0; j < m; j++) s->ends[KEY(j)] = 1;
    }
    out[0] = g; out[1] = loaded; out[2] = chunks; out[3] = stored;
    return err;
}

/* The request's end in the CPU tier ('vllm' flavor, on_request_finished): the chunks it loaded or
 * offered, still present, re-ranked tail first, so the head is the most recent. */
static void sim_rerank(Sim *s, const i64 *b, i64 n, const char *seen) {
    i64 k = s->k;
    for (i64 j = n / k - 1; j >= 0; j--) {
        if (!seen[j]) continue;
        i32 x = s->cpu.node[KEY(j)];
        if (x >= 0) list_to_back(&s->cpu.l, x);
    }
}
#undef KEY

/* A new copy of block `id` (id < 0: a block that can never hit), last in the id's chain (hash-map order). */
static i32 sim_new_copy(Sim *s, i64 id) {
    i32 x = list_new(&s->q, id < 0 ? 0 : id, id >= 0);
    if (x < 0 || id < 0) return x;
    i32 h = s->first[id];
    if (h < 0) s->first[id] = x;
    else { while (s->q.chain[h] >= 0) h = s->q.chain[h]; s->q.chain[h] = x; }
    return x;
}

/* Evict the copy at the front of the free queue (store_on_evict: a chunk whose last copy goes is stored). */
static int sim_evict_front(Sim *s) {
    List *q = &s->q;
    i32 x = q->next[0];
    int err = 0;
    if (q->real[x]) {
        i64 id = q->key[x];
        i32 h = s->first[id];
        if (h == x) {
            if (q->chain[x] >= 0) s->first[id] = q->chain[x];
            else {
                s->first[id] = -1;
                if (s->has_cpu && s->soe && s->ends[id]) {  /* its last copy: store the chunk */
                    s->ends[id] = 0;
                    err |= cpu_touch_in_order(&s->cpu, id);
                    cpu_trim(&s->cpu);
                }
            }
        } else {
            while (q->chain[h] != x) h = q->chain[h];
            q->chain[h] = q->chain[x];
        }
    }
    list_release(q, x);
    return err;
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
    Sim s;
    int err = sim_init(&s, universe, gpu_cap, cpu_cap, k, block_tokens, step_tokens, soe, vllm_flavor);
    i64 seen_cap = 16;
    char *seen = malloc(seen_cap);  /* vllm flavor: per chunk of a request */
    err |= !seen;
    Py_BEGIN_ALLOW_THREADS
    for (i64 r = 0; r < R && !err; r++) {
        const i64 *b = ids + off[r];
        i64 n = off[r + 1] - off[r], out[4];
        if (n / k > seen_cap) {
            seen_cap = 2 * (n / k);
            char *t = realloc(seen, seen_cap);
            if (!t) { err = 1; break; }
            seen = t;
        }
        err |= sim_lookup(&s, b, n, max_hit[r], tokens[r], seen, out);
        if (err) break;
        if (s.has_cpu && vllm_flavor) sim_rerank(&s, b, n, seen);
        i64 g = out[0];
        /* release: fresh copies (the partial block when it joins the LRU, generated blocks, the
         * computed blocks last to first), then the hit blocks' first copies, last to first */
        i64 fresh_unique = unique[r] + (unhashed_first ? 0 : scratch[r]);
        for (i64 j = 0; j < fresh_unique && !err; j++) err |= sim_new_copy(&s, -1) < 0;
        for (i64 j = n - 1; j >= g && !err; j--) err |= sim_new_copy(&s, b[j]) < 0;
        for (i64 j = g - 1; j >= 0; j--) list_to_back(&s.q, s.first[b[j]]);
        i64 limit = gpu_cap - (unhashed_first ? scratch[r] : 0);
        if (limit < 0) limit = 0;
        while (s.q.len > limit && !err) err |= sim_evict_front(&s);
        out_g[r] = g; out_loaded[r] = out[1]; out_chunks[r] = out[2]; out_stored[r] = out[3];
    }
    Py_END_ALLOW_THREADS
    sim_free(&s); free(seen);
    PyBuffer_Release(&ids_b); PyBuffer_Release(&off_b); PyBuffer_Release(&maxhit_b); PyBuffer_Release(&scratch_b);
    PyBuffer_Release(&unique_b); PyBuffer_Release(&tokens_b); PyBuffer_Release(&g_b); PyBuffer_Release(&loaded_b); PyBuffer_Release(&chunks_b);
    PyBuffer_Release(&stored_b);
    if (err) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* ---- requests that overlap in time: kvtier.sim.resident.replay_admitted compiled ----
 * It exists because the admitted replay (the sweep's prediction, the curve check's fit) spent most
 * of its time in Python bookkeeping per block of BlockPool.acquire / give_back. The same rules as
 * ResidentCache (write-through, vLLM >= 0.24's free order; the readable reference, tests require
 * equal outcomes per request): a running request's copies leave the free queue (refs[x]: how many
 * running requests hold copy x), so nothing evicts them; they rejoin its back when the last
 * holder ends. Events come sorted (kvtier.sim.fast.replay_admitted_flat): 2 i + 1 = request i
 * arrives, 2 i = it finishes. */
typedef struct {
    Sim s;
    const i64 *ids, *off, *max_hit, *scratch, *unique, *tokens;
    i64 *out_g, *out_loaded, *out_chunks, *out_stored;
    i32 *hold; i64 *hold_off;  /* request r's copies: hold[hold_off[r] ..], in the order it frees them */
    char *seen;                /* request r's chunks to re-rank at its end: seen[off[r] ..] */
    i64 held, scratch_held;    /* copies held (BlockPool._refs) and unhashed slots held (_scratch) */
} Admitted;

/* ResidentCache.begin: the lookups, then BlockPool.acquire; returns the slots it could not get (< 0: no memory). */
static i64 adm_begin(Admitted *a, i64 r) {
    Sim *s = &a->s;
    List *q = &s->q;
    const i64 *b = a->ids + a->off[r];
    i64 n = a->off[r + 1] - a->off[r], out[4];
    if (sim_lookup(s, b, n, a->max_hit[r], a->tokens[r], a->seen + a->off[r], out)) return -1;
    i64 g = out[0], nfresh = a->unique[r] + n - g;
    a->out_g[r] = g; a->out_loaded[r] = out[1]; a->out_chunks[r] = out[2]; a->out_stored[r] = out[3];
    i32 *h = a->hold + a->hold_off[r];  /* fresh copies first (its free order), then the hits, last to first */
    for (i64 j = g - 1; j >= 0; j--) {  /* the hit blocks' first copies: held, out of the queue */
        i32 x = s->first[b[j]];
        if (q->refs[x]++ == 0) { list_unlink(q, x); q->len--; a->held++; }
        h[nfresh + (g - 1 - j)] = x;
    }
    i64 excess = q->len + a->held + a->scratch_held + nfresh + a->scratch[r] - s->gpu_cap;
    if (excess < 0) excess = 0;
    i64 evict = excess < q->len ? excess : q->len;
    for (i64 e = 0; e < evict; e++) if (sim_evict_front(s)) return -1;
    for (i64 j = 0; j < nfresh; j++) {  /* generated blocks, then the computed ones last to first */
        i32 x = sim_new_copy(s, j < a->unique[r] ? -1 : b[n - 1 - (j - a->unique[r])]);
        if (x < 0) return -1;
        list_unlink(q, x); q->len--; q->refs[x] = 1; a->held++;
        h[j] = x;
    }
    a->scratch_held += a->scratch[r];
    return excess - evict;
}

/* ResidentCache.end: BlockPool.give_back, then the CPU tier's re-rank. */
static void adm_end(Admitted *a, i64 r) {
    Sim *s = &a->s;
    List *q = &s->q;
    i64 n = a->off[r + 1] - a->off[r], nh = a->unique[r] + n;
    const i32 *h = a->hold + a->hold_off[r];
    for (i64 j = 0; j < nh; j++) {
        i32 x = h[j];
        if (--q->refs[x] > 0) continue;
        i32 back = q->prev[0];  /* its last holder ended: to the back of the free queue */
        q->prev[x] = back; q->next[x] = 0; q->next[back] = x; q->prev[0] = x;
        q->len++; a->held--;
    }
    a->scratch_held -= a->scratch[r];
    if (s->has_cpu && s->vllm_flavor) sim_rerank(s, a->ids + a->off[r], n, a->seen + a->off[r]);
}

static PyObject *replay_admitted(PyObject *self, PyObject *args) {
    Py_buffer ids_b, off_b, maxhit_b, scratch_b, unique_b, tokens_b, ev_b, g_b, loaded_b, chunks_b, stored_b, adm_b;
    long long universe, gpu_cap, cpu_cap, k, block_tokens, step_tokens;
    int vllm_flavor;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*LLLLLLpw*w*w*w*w*", &ids_b, &off_b, &maxhit_b, &scratch_b, &unique_b, &tokens_b,
                          &ev_b, &universe, &gpu_cap, &cpu_cap, &k, &block_tokens, &step_tokens, &vllm_flavor,
                          &g_b, &loaded_b, &chunks_b, &stored_b, &adm_b))
        return NULL;
    Admitted a;
    memset(&a, 0, sizeof a);
    a.ids = ids_b.buf; a.off = off_b.buf; a.max_hit = maxhit_b.buf; a.scratch = scratch_b.buf; a.unique = unique_b.buf;
    a.tokens = tokens_b.buf;
    a.out_g = g_b.buf; a.out_loaded = loaded_b.buf; a.out_chunks = chunks_b.buf; a.out_stored = stored_b.buf;
    const i64 *ev = ev_b.buf;
    i64 *adm = adm_b.buf;  /* waited, forced, short, max_running */
    i64 R = (i64)(off_b.len / sizeof(i64)) - 1, E = (i64)(ev_b.len / sizeof(i64));
    int err = sim_init(&a.s, universe, gpu_cap, cpu_cap, k, block_tokens, step_tokens, 0, vllm_flavor);
    a.hold_off = malloc(sizeof(i64) * (R + 1));
    a.seen = malloc(a.off[R] + 1);
    i64 *wnext = malloc(sizeof(i64) * (R + 1)), *wprev = malloc(sizeof(i64) * (R + 1));  /* waiting queue; R: sentinel */
    char *state = calloc(R + 1, 1);  /* 0 not arrived, 1 waiting, 2 running, 3 done */
    err |= !a.hold_off || !a.seen || !wnext || !wprev || !state;
    if (!err) {
        a.hold_off[0] = 0;
        for (i64 r = 0; r < R; r++) a.hold_off[r + 1] = a.hold_off[r] + a.unique[r] + (a.off[r + 1] - a.off[r]);
        a.hold = malloc(sizeof(i32) * (a.hold_off[R] + 1));
        err |= !a.hold;
    }
    i64 waited = 0, forced = 0, shortfall = 0, peak = 0, running = 0;
    Py_BEGIN_ALLOW_THREADS
    if (!err) { wnext[R] = wprev[R] = R; }
    for (i64 e = 0; e < E && !err; e++) {
        i64 i = ev[e] >> 1, s;
        if (ev[e] & 1) {  /* arrives: to the back of the waiting queue */
            wprev[i] = wprev[R]; wnext[i] = R; wnext[wprev[R]] = i; wprev[R] = i; state[i] = 1;
        } else if (state[i] == 2) {
            adm_end(&a, i); state[i] = 3; running--;
        } else if (state[i] == 1) {  /* finished on the server before the model found room: admit it now */
            wnext[wprev[i]] = wnext[i]; wprev[wnext[i]] = wprev[i];
            if ((s = adm_begin(&a, i)) < 0) { err = 1; break; }
            adm_end(&a, i); state[i] = 3;
            forced++; shortfall += s;
        } else { err = 2; break; }  /* a finish before its arrival */
        while (wnext[R] != R) {  /* first come, first served, while the head's blocks fit */
            i64 j = wnext[R];
            if (running && a.held + a.scratch_held + (a.off[j + 1] - a.off[j]) + a.unique[j] + a.scratch[j] > gpu_cap) break;
            wnext[R] = wnext[j]; wprev[wnext[j]] = R;
            if ((s = adm_begin(&a, j)) < 0) { err = 1; break; }
            shortfall += s; state[j] = 2; running++;
            if (running > peak) peak = running;
        }
        if ((ev[e] & 1) && wnext[R] != R && wprev[R] == i) waited++;
    }
    Py_END_ALLOW_THREADS
    adm[0] = waited; adm[1] = forced; adm[2] = shortfall; adm[3] = peak;
    sim_free(&a.s); free(a.hold_off); free(a.hold); free(a.seen); free(wnext); free(wprev); free(state);
    PyBuffer_Release(&ids_b); PyBuffer_Release(&off_b); PyBuffer_Release(&maxhit_b); PyBuffer_Release(&scratch_b);
    PyBuffer_Release(&unique_b); PyBuffer_Release(&tokens_b); PyBuffer_Release(&ev_b); PyBuffer_Release(&g_b);
    PyBuffer_Release(&loaded_b); PyBuffer_Release(&chunks_b); PyBuffer_Release(&stored_b); PyBuffer_Release(&adm_b);
    if (err == 2) { PyErr_SetString(PyExc_ValueError, "a request finishes before it arrives"); return NULL; }
    if (err) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"replay", replay, METH_VARARGS, "replay(ids, offsets, max_hit, scratch, unique, tokens, universe, gpu_cap, cpu_cap, k, "
     "block_tokens, step_tokens, store_on_evict, vllm_flavor, unhashed_first, out_gpu_blocks, out_loaded, out_chunks, "
     "out_stored); step_tokens <= 0: all of a request's chunks offered at once"},
    {"replay_admitted", replay_admitted, METH_VARARGS, "replay_admitted(ids, offsets, max_hit, scratch, unique, tokens, "
     "events, universe, gpu_cap, cpu_cap, k, block_tokens, step_tokens, vllm_flavor, out_gpu_blocks, out_loaded, "
     "out_chunks, out_stored, out_admission); events sorted, 2 i + 1: request i arrives, 2 i: it finishes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_core", "Compiled replay loops of kvtier.sim", -1, methods};

PyMODINIT_FUNC PyInit__core(void) { return PyModule_Create(&module); }
