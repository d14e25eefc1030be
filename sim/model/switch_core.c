/* The fast switch model's compiled core.
 *
 * The same event-driven model as sim/model/switch.py and the same closed loop as
 * sim/replay/loop.py (ClosedLoop), statement for statement, so that both produce identical
 * results: tests/test_switch_core.py replays random traces through both and demands every
 * injection, delivery, result, stall and flit count equal. The Python model is the readable
 * reference; read it first. Its class _SwitchRun is the struct SwitchRun below, field for field,
 * and its methods are the functions of the section "The model", of the same names and in the
 * same order (arb_choose and arb_start stand for ArbiterModel.choose and .start, loop_* for
 * ClosedLoop's methods). This
 * file only changes the data structures:
 *
 *   - a packet is an index (pid) into the plan's flat arrays; an ingress's packets are numbered
 *     by position i in the order they entered (ing_n[k] so far), its FIFO (Python's fifo[k])
 *     the positions [fifo_head, ing_n) and its history (hist[k]) [hist_head, fifo_head). The
 *     switch's per-packet state (pk.j0, pk.grant, pk.visible) lives in the ingress's ring of
 *     InPkt, which holds only the live positions [hist_head, ing_n): a whole iteration is
 *     tens of millions of packets, a few dozen of which are live, and per-pid arrays that
 *     size cost more in first-touched memory than the events;
 *   - a result packet is its number r at its egress: egress d's table rtabs[d] (an RTab) holds
 *     its fields and, packet r owning result flits [r*P, (r+1)*P), each flit's read cycle;
 *     the flits' issue cycles, the same at every member egress, are one table (iss) for all.
 *     Python's result_q[d] is rtabs[d] from rq_head, result_hist[d] from rh_head, and
 *     result_count[d] is rtabs[d].n * P. The table keeps only packets from
 *     min(rq_head, rh_head) on (nothing older is read again): a whole iteration makes tens
 *     of millions of result packets, a few dozen of which are live;
 *   - the visible heads are head_mem (per egress, per ingress: a position at that ingress) and
 *     head_res (per egress), where Python has one table heads with the results at heads[d][d];
 *   - the chunk being issued is eng_r (its result packets, one per member) with eng_nissues
 *     and eng_last_issue standing for the length and last entry of Python's issues list;
 *   - ClosedLoop's active list, scanned in (issue, id) order for the first message whose next
 *     packet may start, is split: memory messages (always eligible) in active[port], and
 *     contributions by their next chunk's credit — eligible ones in ready[port], ones whose
 *     credit returns at a known later cycle in the heap pend[port], ones whose credit is not
 *     back yet nowhere (loop_result finds them by chunk_owner). The first of active and ready
 *     is the message the scan would find, without visiting every contribution waiting for a
 *     credit (thousands of messages per port when a slot pool holds the reduction back);
 *   - ClosedLoop's result_at[(port, seq)] is the output results[port * chunks + seq] (the same
 *     cycle, written at the same moment; -1 until then), and its chunk_msg the contribution
 *     messages of each port sorted by first chunk (con_off, con_first, con_mid);
 *   - Python's src_tries[k] (the cycles of port k's pending source events) and its entries in
 *     the event heap are src_q[k], the port's source events sorted by (cycle, order), of which
 *     the event queue holds only the first (and any it held when an earlier one came in, each
 *     popped when it is the first): the queue pops the same events in the same order, but
 *     stays a few dozen entries long where every credit in flight would make it hundreds;
 *   - Python's event heap is a calendar queue (Cal): the same events in the same (cycle,
 *     kind, order) order, a bucket per cycle near the present;
 *   - "None" is NONE (INT64_MIN).
 *
 * Built by sim/model/switch_core.py with the system C compiler and called through ctypes.
 */

#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int64_t i64;
typedef int32_t i32;   /* the plan's packet arrays (sim.replay.plan.PACKET_DTYPE) */
typedef int8_t i8;     /* but the destination port's (sim.replay.plan.SMALL_DTYPE) */
#define NONE INT64_MIN

/* ------------------------------------------------------------------------------------------ */
/* Growable arrays; an allocation failure unwinds to innet_switch_run, which frees everything. */

typedef struct { i64 *v; i64 n, cap; } vec;
typedef struct { i64 a, b, c; } trip;       /* heap and sorted-list entries, ordered by (a, b) */
typedef struct { trip *v; i64 n, cap; } tvec;
typedef struct { trip *v; i64 head, n, cap; } tqueue;   /* sorted; live entries [head, n) */

static _Thread_local jmp_buf oom;   /* ctypes drops the GIL: replays may run in threads */

static void *grow(void *p, i64 *cap, i64 need, size_t size) {
    if (need <= *cap) return p;
    i64 c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(p, (size_t)c * size);
    if (!q) longjmp(oom, 1);
    *cap = c;
    return q;
}

static void push(vec *a, i64 x) {
    a->v = grow(a->v, &a->cap, a->n + 1, sizeof(i64));
    a->v[a->n++] = x;
}

static void tpush(tvec *a, trip x) {
    a->v = grow(a->v, &a->cap, a->n + 1, sizeof(trip));
    a->v[a->n++] = x;
}

static int trip_less(trip x, trip y) { return x.a < y.a || (x.a == y.a && x.b < y.b); }

static void heap_push(tvec *h, trip x) {
    h->v = grow(h->v, &h->cap, h->n + 1, sizeof(trip));
    i64 i = h->n++;
    while (i > 0) {
        i64 up = (i - 1) / 2;
        if (!trip_less(x, h->v[up])) break;
        h->v[i] = h->v[up];
        i = up;
    }
    h->v[i] = x;
}

static trip heap_pop(tvec *h) {
    trip top = h->v[0], x = h->v[--h->n];
    i64 i = 0;
    for (;;) {
        i64 c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && trip_less(h->v[c + 1], h->v[c])) c++;
        if (!trip_less(h->v[c], x)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = x;
    return top;
}

static void sorted_insert(tvec *s, trip x) {
    s->v = grow(s->v, &s->cap, s->n + 1, sizeof(trip));
    i64 lo = 0, hi = s->n;
    while (lo < hi) {
        i64 mid = (lo + hi) / 2;
        if (trip_less(s->v[mid], x)) lo = mid + 1; else hi = mid;
    }
    if (lo < s->n) memmove(s->v + lo + 1, s->v + lo, (size_t)(s->n - lo) * sizeof(trip));
    s->v[lo] = x;
    s->n++;
}

static i64 max64(i64 a, i64 b) { return a > b ? a : b; }

/* ------------------------------------------------------------------------------------------ */
/* The event queue: pops (cycle, key, arg) in (cycle, key) order, as a binary heap would, but  */
/* in O(1) for the events within CAL_W cycles of the last one popped (nearly all: a port's    */
/* next packet, an egress's next start, the engine's next flit are a few cycles ahead). Those */
/* sit in a ring of per-cycle buckets, each a list sorted by key (mostly appended to its end), */
/* with a bitmap of the non-empty ones; later events wait in a heap (`far`) and move into     */
/* their bucket when the window reaches them, before anything else can be put there; events   */
/* before the last one popped (none in the model's own use, but a heap would take them) go to */
/* a heap (`past`) popped first.                                                              */

#define CAL_BITS 14
#define CAL_W ((i64)1 << CAL_BITS)
#define CAL_WORDS (CAL_W / 64)

typedef struct { i64 key, arg, next; } CalNode;   /* next: node index, -1 at the end */
/* A bucket holds one list per key class (key >> CAL_CLASS_SHIFT: 0 or 1), the lower popped
 * first: an event of class 0 joins a bucket after the other class 0 ones only, not past those
 * of class 1 too. */
#define CAL_CLASS_SHIFT 40
typedef struct {
    i64 cur, n;                  /* the window starts at cycle cur; events held */
    /* per bucket, per class: first and last node, -1 (together: a pop or push touches one
     * cache line) */
    struct { int32_t head[2], tail[2]; } at[CAL_W];
    uint64_t bits[CAL_WORDS];    /* non-empty buckets */
    CalNode *pool;
    i64 pool_n, pool_cap, free;  /* nodes made; the first free node, -1 */
    tvec far, past;              /* heaps of (cycle, key, arg) */
} Cal;

static void cal_init(Cal *q) {
    q->cur = q->n = q->pool_n = q->pool_cap = 0;
    q->pool = NULL;
    q->free = -1;
    for (i64 i = 0; i < CAL_W; i++)
        q->at[i].head[0] = q->at[i].tail[0] = q->at[i].head[1] = q->at[i].tail[1] = -1;
    memset(q->bits, 0, sizeof(q->bits));
    q->far = (tvec){0};
    q->past = (tvec){0};
}

static void cal_free(Cal *q) {
    if (!q) return;
    free(q->pool);
    free(q->far.v);
    free(q->past.v);
}

/* Into its bucket (t within the window), after the entries of its class of smaller key. */
static void cal_bucket(Cal *q, i64 t, i64 key, i64 arg) {
    i64 node = q->free;
    if (node >= 0) {
        q->free = q->pool[node].next;
    } else {
        if (q->pool_n == INT32_MAX) longjmp(oom, 1);
        q->pool = grow(q->pool, &q->pool_cap, q->pool_n + 1, sizeof(CalNode));
        node = q->pool_n++;
    }
    i64 b = t & (CAL_W - 1), c = key >> CAL_CLASS_SHIFT, last = q->at[b].tail[c];
    if (last >= 0 && q->pool[last].key < key) {   /* the usual case: after all of them */
        q->pool[node] = (CalNode){key, arg, -1};
        q->pool[last].next = node;
        q->at[b].tail[c] = (int32_t)node;
    } else {
        i64 prev = -1, at = q->at[b].head[c];
        while (at >= 0 && q->pool[at].key < key) {
            prev = at;
            at = q->pool[at].next;
        }
        q->pool[node] = (CalNode){key, arg, at};
        if (prev < 0) q->at[b].head[c] = (int32_t)node; else q->pool[prev].next = node;
        if (at < 0) q->at[b].tail[c] = (int32_t)node;
    }
    q->bits[b >> 6] |= (uint64_t)1 << (b & 63);
}

static void cal_push(Cal *q, i64 t, i64 key, i64 arg) {
    q->n++;
    if (t < q->cur) heap_push(&q->past, (trip){t, key, arg});
    else if (t - q->cur >= CAL_W) heap_push(&q->far, (trip){t, key, arg});
    else cal_bucket(q, t, key, arg);
}

/* Cycles from bucket `b` (excluded) to the next non-empty bucket, or 0 if none. */
static i64 cal_gap(const Cal *q, i64 b) {
    for (i64 d = 1; d < CAL_W;) {
        i64 i = (b + d) & (CAL_W - 1);
        uint64_t w = q->bits[i >> 6] >> (i & 63);
        if (w) return d + __builtin_ctzll(w);
        d += 64 - (i & 63);
    }
    return 0;
}

/* The first event; q->n must be positive. */
static trip cal_pop(Cal *q) {
    q->n--;
    if (q->past.n) return heap_pop(&q->past);
    for (;;) {
        i64 b = q->cur & (CAL_W - 1), c = q->at[b].head[0] < 0, node = q->at[b].head[c];
        if (node >= 0) {
            CalNode *e = &q->pool[node];
            q->at[b].head[c] = (int32_t)e->next;
            if (e->next < 0) {
                q->at[b].tail[c] = -1;
                if (c == 1 || q->at[b].head[1] < 0) q->bits[b >> 6] &= ~((uint64_t)1 << (b & 63));
            }
            e->next = q->free;
            q->free = node;
            return (trip){q->cur, e->key, e->arg};
        }
        i64 gap = cal_gap(q, b), next = gap ? q->cur + gap : INT64_MAX;
        if (q->far.n && q->far.v[0].a < next) next = q->far.v[0].a;
        q->cur = next;
        while (q->far.n && q->far.v[0].a - q->cur < CAL_W) {
            trip e = heap_pop(&q->far);
            cal_bucket(q, e.a, e.b, e.c);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* An egress's result packets: packet r (absolute, counted from 0) is at r - base; its flit n  */
/* (absolute) at n - base * P. Packets below base are forgotten.                              */

typedef struct { i64 seq, a0, visible, grant, nissues, nreads; } RPkt;   /* read together */
typedef struct {
    i64 base, n, cap, P;
    RPkt *pk;     /* per packet */
    i64 *read;    /* per flit (their issues: SwitchRun.iss, the same at every egress) */
} RTab;

/* Room for packet t->n: forget the packets below `keep` if that frees half the table, else
 * double it. It starts at 64 packets: a dozen are live, and a smaller table shifts them at
 * every few packets. */
static void rtab_reserve(RTab *t, i64 keep) {
    if (t->n - t->base < t->cap) return;
    i64 drop = keep - t->base, live = t->n - keep;
    if (drop > 0 && drop >= t->cap / 2) {
        memmove(t->pk, t->pk + drop, (size_t)live * sizeof(RPkt));
        memmove(t->read, t->read + drop * t->P, (size_t)(live * t->P) * sizeof(i64));
        t->base = keep;
        return;
    }
    i64 cap = t->cap, pcap;
    t->pk = grow(t->pk, &cap, t->cap ? t->cap * 2 : 64, sizeof(RPkt));
    i64 flits = t->cap * t->P;
    pcap = flits;
    t->read = grow(t->read, &pcap, cap * t->P, sizeof(i64));
    t->cap = cap;
}

/* ------------------------------------------------------------------------------------------ */
/* An ingress's live packets: position i at v[i & mask]. */

typedef struct { i64 pid, j0, flits, grant, visible; } InPkt;
typedef struct { i64 j0, flits, pop; } Hold;   /* a hold FIFO's packet: first flit, flits, first pop */
typedef struct { InPkt *v; i64 mask; } Ring;

#define ING(k, i) (&s->ring[k].v[(i) & s->ring[k].mask])

#define R_(d, f, r) (s->rtabs[d].pk[(r) - s->rtabs[d].base].f)
#define R_READ(d, n) (s->rtabs[d].read[(n) - s->rtabs[d].base * s->P])

/* ------------------------------------------------------------------------------------------ */
/* The entry point's argument: one struct, SwitchArgs, whose fields are listed once, here.    */
/* innet_switch_args() names them in order with their types, and innet_switch_args_size()     */
/* gives the struct's size, so that sim/model/switch_core.py checks its ctypes mirror against */
/* the library it loaded instead of trusting an argument order.                               */

#define SWITCH_ARGS(X)                                                                         \
    /* parameters */                                                                           \
    X(i64, ports) X(i64, depth) X(i64, result_lag) X(i64, result_depth) X(i64, chunk_flits)    \
    X(i64, slots) X(i64, policy) X(i64, quantum) X(i64, deficit_bits) X(i64, members)          \
    X(i64, chunks) X(i64, mtu) X(i64, packets) X(i64, packet_cap) X(i64, messages)             \
    X(i64, message_cap) X(i64, ingress_latency) X(i64, pick_latency) X(i64, round_trip)        \
    X(i64, hold_depth) X(i64, judge_phase) X(i64, egress_pick_lag) X(i64, egress_out_lag)      \
    X(i64, engine_restart) X(i64, hold_read)                                                   \
    /* arbiter inputs, per egress, per requester: ports x ports */                             \
    X(const i64 *, priority) X(const i64 *, weight)                                            \
    /* the plan's packets (packet_cap) and messages (message_cap), grown by read responses */  \
    X(i32 *, pk_flits) X(i8 *, pk_dst) X(i32 *, pk_seq) X(i32 *, pk_msg)                       \
    X(i64 *, m_src) X(i64 *, m_dst) X(i64 *, m_issue) X(i64 *, m_kind)                         \
    X(i64 *, m_resp_flits) X(i64 *, m_resp_to) X(i64 *, m_ndeps)                              \
    X(i64 *, m_pk_off) X(i64 *, m_pk_len)                                                      \
    /* dependants of each message (offsets: messages + 1); each port's contribution        */ \
    /* messages (offsets: ports + 1), sorted by their first chunk: that chunk, the message   */ \
    X(const i64 *, wait_off) X(const i64 *, wait_list)                                         \
    X(const i64 *, con_off) X(const i64 *, con_first) X(const i64 *, con_mid)                  \
    /* outputs: per packet, per (port, chunk), per message, per port; counters[4] */           \
    X(i64 *, inject) X(i64 *, deliver) X(i64 *, results) X(i64 *, done_at)                     \
    X(i64 *, out_flits) X(i64 *, in_flits) X(i64 *, stall) X(i64 *, counters)                  \
    /* per chunk: its contributions' first injection (-1: none), for slot occupancy */         \
    X(i64 *, chunk_start)

typedef struct {
#define FIELD(type, name) type name;
    SWITCH_ARGS(FIELD)
#undef FIELD
} SwitchArgs;

/* Arbitration policies, in the order of hw.spec.Policy; innet_switch_policies() names them so
   that sim/model/switch_core.py checks the codes it passes. */
#define POLICIES(X) X(RR, rr) X(PRIO, prio) X(WRR, wrr) X(DRR, drr)
#define POLICY_CODE(code, name) code,
enum { POLICIES(POLICY_CODE) };
#undef POLICY_CODE
enum { K_OTHER, K_READ_REQ, K_READ_RESP };
enum { EV_SOURCE, EV_EGRESS };
#define KIND_SHIFT CAL_CLASS_SHIFT   /* event order key: kind above the insertion counter */

typedef struct { i64 seq, at; } Credit;

/* A message's closed-loop state, in one place: a packet start reads most of it. */
typedef struct {
    i64 next, end;   /* its next packet to send, and the end of its packets (pids) */
    i64 act_key;     /* the issue key it became active with */
    i64 con_at;      /* a pending contribution: the cycle its credit makes it eligible */
    i64 remaining;   /* its packets not yet delivered (contributions: results not yet back) */
    i64 con_state;   /* a contribution: CON_* */
} Msg;

typedef struct {
    /* configuration */
    i64 N, D, result_lag, result_depth, P, S, policy, quantum, dbits, members, nmembers;
    i64 chunks, mtu;
    i64 ingress_latency, pick_latency, hist_limit, rt;
    i64 hold_depth, hold_read, judge_phase, pick_lag, out_lag, engine_restart;
    const i64 *priority, *weight;
    /* plan: packets (growing with read responses) */
    i64 npk, pk_cap;
    i32 *pk_flits, *pk_seq, *pk_msg;
    i8 *pk_dst;
    /* plan: messages */
    i64 nmsg, nmsg0, msg_cap, *m_src, *m_dst, *m_issue, *m_kind, *m_resp_flits, *m_resp_to;
    i64 *m_ndeps;   /* per message: its dependencies not yet delivered */
    i64 *m_pk_off, *m_pk_len;
    const i64 *wait_off, *wait_list, *con_off, *con_first, *con_mid;
    i64 *con_hint;   /* per port, two lookups: the last message chunk_owner found */
    /* outputs */
    i64 *inject, *deliver, *results, *done_at, *out_flits, *in_flits, *stall, *chunk_start;
    i64 started;
    /* closed loop */
    tvec *future, *active, *ready, *pend;
    Msg *msg;
    vec woken;
    /* packet state: a0 is the output inject (-1 while unknown) */
    i64 *src_start;              /* per ingress: the pending packet's start (Python's pk.start) */
    /* ingress state: the live packets, positions [hist_head, ing_n) */
    Ring *ring;
    i64 *ing_n;
    i64 *fifo_head, *hist_head, *written, *prev_last_read, *src_busy, *src_free, *pending;
    tqueue *src_q;   /* per ingress: pending source events (cycle, event key, in the heap) */
    /* egress state */
    i64 *egress_free, *egress_armed, *egress_last, *head_mem, *head_res, *streaming;
    i64 *nmem;   /* per egress: ingresses with a visible memory packet for it in head_mem */
    i64 *result_last_read;
    RTab *rtabs;
    i64 *rq_head, *rh_head;
    /* arbiters */
    i64 *arb_ptr, *arb_count, *arb_deficit;
    /* reduction unit: per port, its hold FIFO (Python's hold_taken, hold_free, and hold_hist
       as a ring of hold_cap entries, a power of two, from hold_lo to hold_hi) */
    i64 *hold_taken, *hold_free, hold_cap, *hold_lo, *hold_hi;
    Hold *hold;
    i64 judge_mask;   /* N - 1 when N is a power of two (the judge's turn without a division) */
    i64 slot_mask;    /* S - 1 when S is a power of two (a chunk's slot likewise) */
    i64 *room_q, *room_rem;   /* room_time's packet offset and flit, per flit of a chunk */
    i64 *eng_when;            /* per flit of a chunk: its issue, while a run is issued */
    /* per result packet r, per flit: its issue, from packet iss_base on (room for iss_cap
     * packets). Every member egress has packet r (the engine makes a chunk's packets at all
     * of them at once, so their counts agree) and the same issues: one copy, not one per
     * member. */
    i64 *iss, iss_base, iss_cap;
    /* per slot, for the chunk arr_seq whose contributions are arriving: contributions still
       to come (nmembers when none is) and the last one's cycle. A contribution of chunk q
       waits for chunk q - S's result, so q - S has arrived whole before q's first comes:
       a slot, not a chunk, per entry (a whole iteration is millions of chunks). */
    i64 *arrivals, *arrived_at, *arr_seq;
    tvec engine;   /* complete chunks: (ready cycle, slot, seq) */
    i64 engine_free, engine_armed, engine_blocked;
    i64 eng_active, eng_nissues, eng_last_issue, *eng_r, *mem_ports;
    /* events */
    Cal *events;
    i64 order, now, handled;
    i64 *valid, *scratch;
    /* per port, per slot: the last result of a chunk of that slot, which con_from reads
     * (results[] is hundreds of MB, long out of cache when a credit is looked up; chunk q's
     * result needs the port's contribution of q, so a slot holds q - S's until q is sent) */
    Credit *credit;
} SwitchRun;

/* ------------------------------------------------------------------------------------------ */
/* The closed loop (sim/replay/loop.py ClosedLoop).                                           */

/* Chunk seq's slot (seq >= 0). */
static i64 slot_of(const SwitchRun *s, i64 seq) {
    return s->slot_mask ? seq & s->slot_mask : seq % s->S;
}

enum { CON_IDLE, CON_READY, CON_PENDING, CON_BLOCKED };

static void loop_push_future(SwitchRun *s, i64 port, i64 issue, i64 mid) {
    heap_push(&s->future[port], (trip){issue, mid, 0});
}

static i64 next_seq(SwitchRun *s, i64 mid) {
    return s->pk_seq[s->msg[mid].next];
}

/* An active contribution message, by its next chunk's credit: eligible at `cycle` (ready),
 * from a known later cycle (pending), or when the credit comes back (blocked). The scan's
 * test, got + round trip < cycle, is ready-from = got + round trip + 1 <= cycle. */
static i64 con_from(SwitchRun *s, i64 port, i64 mid, i64 cycle) {
    i64 q = next_seq(s, mid);
    if (q < s->S) return cycle;
    const Credit *c = &s->credit[port * s->S + slot_of(s, q)];
    return c->seq == q - s->S ? c->at + s->rt + 1 : NONE;
}

static void con_place_from(SwitchRun *s, i64 port, i64 mid, i64 cycle, i64 from) {
    if (from == NONE) {
        s->msg[mid].con_state = CON_BLOCKED;
    } else if (from <= cycle) {
        s->msg[mid].con_state = CON_READY;
        sorted_insert(&s->ready[port], (trip){s->msg[mid].act_key, mid, 0});
    } else {
        s->msg[mid].con_state = CON_PENDING;
        s->msg[mid].con_at = from;
        heap_push(&s->pend[port], (trip){from, mid, 0});
    }
}

static void con_place(SwitchRun *s, i64 port, i64 mid, i64 cycle) {
    con_place_from(s, port, mid, cycle, con_from(s, port, mid, cycle));
}

static void list_pop_front(tvec *l) {
    if (--l->n) memmove(l->v, l->v + 1, (size_t)l->n * sizeof(trip));
}

static i64 loop_next_packet(SwitchRun *s, i64 port, i64 cycle) {
    tvec *fut = &s->future[port], *act = &s->active[port], *rdy = &s->ready[port];
    tvec *pend = &s->pend[port];
    while (fut->n && fut->v[0].a <= cycle) {
        trip e = heap_pop(fut);
        s->msg[e.b].act_key = e.a;
        if (next_seq(s, e.b) >= 0) con_place(s, port, e.b, cycle);
        else sorted_insert(act, e);
    }
    while (pend->n && pend->v[0].a <= cycle) {
        trip e = heap_pop(pend);
        if (s->msg[e.b].con_state != CON_PENDING || s->msg[e.b].con_at != e.a) continue;   /* stale */
        s->msg[e.b].con_state = CON_READY;
        sorted_insert(rdy, (trip){s->msg[e.b].act_key, e.b, 0});
    }
    /* The scan's first eligible message: the first memory message or the first ready
     * contribution, whichever comes first in (issue, id) order. */
    int con;
    if (act->n && rdy->n) con = trip_less(rdy->v[0], act->v[0]);
    else if (act->n || rdy->n) con = rdy->n > 0;
    else return NONE;
    tvec *list = con ? rdy : act;
    i64 mid = list->v[0].b, p = s->msg[mid].next++;
    int done = s->msg[mid].next == s->msg[mid].end;
    if (!con) {
        if (done) list_pop_front(list);
    } else if (done) {
        list_pop_front(list);
        s->msg[mid].con_state = CON_IDLE;
    } else {
        /* Still ready: it goes back where it was, at the front (its key is the least), so it
         * stays there instead of leaving and coming back. */
        i64 from = con_from(s, port, mid, cycle);
        if (from == NONE || from > cycle) {
            list_pop_front(list);
            con_place_from(s, port, mid, cycle, from);
        }
    }
    s->started++;
    return p;
}

static i64 loop_wake_time(SwitchRun *s, i64 port) {
    return s->future[port].n ? s->future[port].v[0].a : NONE;
}

/* _done: appends the woken ports to s->woken. Only the plan's own messages have dependants.
 * A dependant's m_ndeps counts its dependencies not yet delivered and its m_issue becomes the
 * cycle the delivered ones allow; it is issued when the last one is delivered. */
static void loop_done(SwitchRun *s, i64 mid, i64 cycle) {
    s->done_at[mid] = cycle;
    if (mid >= s->nmsg0) return;
    for (i64 i = s->wait_off[mid]; i < s->wait_off[mid + 1]; i++) {
        i64 w = s->wait_list[i];
        s->m_issue[w] = max64(s->m_issue[w], cycle + 1 + s->rt);
        if (--s->m_ndeps[w] > 0) continue;
        loop_push_future(s, s->m_src[w], s->m_issue[w], w);
        push(&s->woken, s->m_src[w]);
    }
}

static void loop_respond(SwitchRun *s, i64 req, i64 cycle) {
    i64 mid = s->nmsg++;
    s->m_src[mid] = s->m_dst[req];
    s->m_dst[mid] = s->m_src[req];
    s->m_kind[mid] = K_READ_RESP;
    s->m_issue[mid] = cycle + 1 + s->rt;
    s->m_resp_flits[mid] = 0;
    s->m_resp_to[mid] = req;
    s->m_pk_off[mid] = s->npk;   /* a message's packets are consecutive */
    s->m_pk_len[mid] = 0;
    for (i64 off = 0; off < s->m_resp_flits[req]; off += s->mtu) {
        i64 p = s->npk++;
        i64 left = s->m_resp_flits[req] - off;
        s->pk_flits[p] = (i32)(left < s->mtu ? left : s->mtu);
        s->pk_dst[p] = (i8)s->m_src[req];
        s->pk_seq[p] = -1;
        s->pk_msg[p] = (i32)mid;
        s->m_pk_len[mid]++;
    }
    s->msg[mid].remaining = s->m_pk_len[mid];
    s->msg[mid].next = s->m_pk_off[mid];
    s->msg[mid].end = s->m_pk_off[mid] + s->m_pk_len[mid];
    loop_push_future(s, s->m_src[mid], s->m_issue[mid], mid);
    push(&s->woken, s->m_src[mid]);
}

static void loop_delivered(SwitchRun *s, i64 pid, i64 cycle) {
    s->woken.n = 0;
    i64 mid = s->pk_msg[pid];
    if (--s->msg[mid].remaining != 0) return;
    if (s->m_kind[mid] == K_READ_REQ && s->m_resp_flits[mid]) {
        loop_respond(s, mid, cycle);
    } else if (s->m_kind[mid] == K_READ_RESP) {
        loop_done(s, s->m_resp_to[mid], cycle);
        loop_done(s, mid, cycle);
    } else {
        loop_done(s, mid, cycle);
    }
}

/* The contribution message of `port` that sends chunk `seq`, or -1: the last of the port's
 * messages starting at or before seq, if it reaches seq. Lookup `which` (0: the credit's
 * owner, 1: the result's own message) starts from where its last one ended: results come
 * back nearly in chunk order. */
static i64 chunk_owner(SwitchRun *s, i64 port, i64 seq, int which) {
    i64 lo = s->con_off[port], hi = s->con_off[port + 1], *hint = &s->con_hint[2 * port + which];
    i64 h = *hint;
    if (!(h >= lo && h < hi && s->con_first[h] <= seq && (h + 1 == hi || s->con_first[h + 1] > seq))) {
        if (h >= lo && h + 1 < hi && s->con_first[h + 1] <= seq &&
            (h + 2 == hi || s->con_first[h + 2] > seq)) {
            h++;
        } else {
            i64 a = lo, b = hi;   /* the first index whose first chunk is above seq */
            while (a < b) {
                i64 mid = (a + b) / 2;
                if (s->con_first[mid] <= seq) a = mid + 1; else b = mid;
            }
            if (a == lo) return -1;
            h = a - 1;
        }
        *hint = h;
    }
    i64 mid = s->con_mid[h];
    return seq < s->con_first[h] + s->m_pk_len[mid] ? mid : -1;
}

/* The result's cycle is already in results[port * chunks + seq] (ClosedLoop's result_at). */
static void loop_result(SwitchRun *s, i64 port, i64 seq, i64 cycle) {
    s->woken.n = 0;
    /* The credit for chunk seq + S: a contribution blocked on it is eligible a round trip on. */
    if (seq + s->S < s->chunks) {
        i64 owner = chunk_owner(s, port, seq + s->S, 0);
        if (owner >= 0 && s->msg[owner].con_state == CON_BLOCKED && next_seq(s, owner) == seq + s->S) {
            s->msg[owner].con_state = CON_PENDING;
            s->msg[owner].con_at = cycle + s->rt + 1;
            heap_push(&s->pend[port], (trip){s->msg[owner].con_at, owner, 0});
        }
    }
    i64 mid = chunk_owner(s, port, seq, 1);
    push(&s->woken, port);
    if (--s->msg[mid].remaining == 0) loop_done(s, mid, cycle);
}

/* ------------------------------------------------------------------------------------------ */
/* The arbiter (sim/model/arbiter.py), as the model uses it: packet-atomic, output ready.     */

static i64 first_after(const i64 *mask, i64 n, i64 ptr) {
    for (i64 off = 1, k = ptr; off <= n; off++) {   /* k = (ptr + off) % n */
        if (++k == n) k = 0;
        if (mask[k]) return k;
    }
    return NONE;
}

static void set_deficit(SwitchRun *s, i64 *deficit, i64 k, i64 value) {
    i64 lo = -((i64)1 << (s->dbits - 1)), hi = ((i64)1 << (s->dbits - 1)) - 1;
    deficit[k] = value < lo ? lo : value > hi ? hi : value;
}

/* ArbiterModel.choose: egress d's choice among valid[0..N) (requester d: the reduction
 * results), or NONE; *new_turn says whether it starts a new turn. No side effects. */
static i64 arb_choose(SwitchRun *s, i64 d, const i64 *valid, i64 *new_turn) {
    i64 n = s->N, ptr = s->arb_ptr[d], sel;
    i64 *mask = s->scratch, *deficit = s->arb_deficit + d * n;
    const i64 *priority = s->priority + d * n, *weight = s->weight + d * n;
    *new_turn = 1;
    if (s->policy == RR) {
        sel = first_after(valid, n, ptr);
    } else if (s->policy == PRIO) {
        i64 top = NONE;
        for (i64 k = 0; k < n; k++)
            if (valid[k] && priority[k] > top) top = priority[k];
        for (i64 k = 0; k < n; k++) mask[k] = valid[k] && priority[k] == top;
        sel = first_after(mask, n, ptr);
    } else if (s->policy == WRR) {
        for (i64 k = 0; k < n; k++) mask[k] = valid[k] && weight[k] != 0;
        if (mask[ptr] && s->arb_count[d] < weight[ptr]) {
            sel = ptr;
            *new_turn = 0;
        } else {
            sel = first_after(mask, n, ptr);
        }
    } else {
        if (valid[ptr] && deficit[ptr] > 0) {
            sel = ptr;
            *new_turn = 0;
        } else {
            for (i64 k = 0; k < n; k++) mask[k] = valid[k] && deficit[k] + s->quantum > 0;
            sel = first_after(mask, n, ptr);
            if (sel == NONE) sel = first_after(valid, n, ptr);
        }
    }
    return sel;
}

/* ArbiterModel.start: requester sel starts a packet at egress d, valid[0..N) the requests of
 * that cycle. The caller charges a DRR requester for the rest of a multi-flit packet (the
 * arbiter sees only its first flit). */
static void arb_start(SwitchRun *s, i64 d, const i64 *valid, i64 sel, i64 new_turn) {
    i64 n = s->N, ptr = s->arb_ptr[d];
    i64 *deficit = s->arb_deficit + d * n;
    if (s->policy == WRR) s->arb_count[d] = new_turn ? 1 : s->arb_count[d] + 1;
    if (s->policy == DRR) {
        if (!new_turn) {
            set_deficit(s, deficit, sel, deficit[sel] - 1);
        } else {
            i64 *was = s->scratch;   /* the deficits before this start */
            memcpy(was, deficit, (size_t)n * sizeof(i64));
            if (deficit[ptr] > 0) deficit[ptr] = 0;
            for (i64 k = (ptr + 1) % n; k != sel; k = (k + 1) % n)
                if (valid[k]) deficit[k] = was[k] + s->quantum;
            deficit[sel] = was[sel] + s->quantum - 1;
            for (i64 k = 0; k < n; k++) set_deficit(s, deficit, k, deficit[k]);
        }
    }
    s->arb_ptr[d] = sel;
}

/* ------------------------------------------------------------------------------------------ */
/* The model (sim/model/switch.py _SwitchRun).                                                */

static void at(SwitchRun *s, i64 t, i64 kind, i64 arg) {
    s->order++;
    cal_push(s->events, t, (kind << KIND_SHIFT) | s->order, arg);
}

/* Python's `if t in tries: return; tries.add(t); at(t, SOURCE, k)`, on src_q[k]. */
static void try_source(SwitchRun *s, i64 k, i64 t) {
    tqueue *q = &s->src_q[k];
    i64 lo = q->head, hi = q->n;   /* the first entry at or after cycle t */
    if (lo == hi || q->v[hi - 1].a < t) {
        lo = hi;   /* the usual case: after them all */
    } else if (q->v[lo].a >= t) {
        /* before them all (a port's next packet) */
    } else if (hi - lo >= 2 && q->v[hi - 2].a < t) {
        lo = hi - 1;   /* before the last only (a wake for a message issued much later) */
    } else {   /* branchless (a conditional move per step): the entry is in [b, b + n) */
        const trip *b = q->v + lo;
        for (i64 n = hi - lo; n > 1; n -= n / 2) b = b[n / 2 - 1].a < t ? b + n / 2 : b;
        lo = b - q->v;
    }
    if (lo < q->n && q->v[lo].a == t) return;
    if (lo < q->n && q->head > 0 && lo - q->head < q->n - lo) {
        /* Nearer the front (a port's next packet, before its wakes a round trip on): the
         * entries before it move into the room the popped ones left. */
        if (lo > q->head)
            memmove(q->v + q->head - 1, q->v + q->head, (size_t)(lo - q->head) * sizeof(trip));
        q->head--;
        lo--;
    } else {
        /* Reuse the room the popped entries left once it is half the queue, else grow: a
         * port's ~64 pending retries, moved at every few pushes when the queue is full. */
        if (q->n == q->cap && q->head >= q->cap / 2) {
            memmove(q->v, q->v + q->head, (size_t)(q->n - q->head) * sizeof(trip));
            q->n -= q->head;
            lo -= q->head;
            q->head = 0;
        }
        q->v = grow(q->v, &q->cap, q->n + 1, sizeof(trip));
        if (lo == q->n - 1) q->v[q->n] = q->v[lo];   /* one entry: no call */
        else if (lo < q->n) memmove(q->v + lo + 1, q->v + lo, (size_t)(q->n - lo) * sizeof(trip));
        q->n++;
    }
    s->order++;
    trip e = {t, ((i64)EV_SOURCE << KIND_SHIFT) | s->order, 0};
    if (lo == q->head) {   /* the port's first source event: the heap must hold it */
        e.c = 1;
        cal_push(s->events, e.a, e.b, k);
    }
    q->v[lo] = e;
}

/* The event heap popped port k's first source event (Python's tries.discard(t)); make sure it
 * holds the next one. */
static void pop_source(SwitchRun *s, i64 k) {
    tqueue *q = &s->src_q[k];
    q->head++;
    if (q->head == q->n) {
        q->head = q->n = 0;
    } else if (!q->v[q->head].c) {
        q->v[q->head].c = 1;
        cal_push(s->events, q->v[q->head].a, q->v[q->head].b, k);
    }
}

/* One live event per egress, at egress_armed[d]: egress() drops the superseded ones. */
static void arm_egress(SwitchRun *s, i64 d, i64 t) {
    if (s->streaming[d] >= 0) return;
    t = max64(t, s->egress_free[d]);
    if (s->egress_armed[d] == NONE || s->egress_armed[d] > t) {
        s->egress_armed[d] = t;
        at(s, t, EV_EGRESS, d);
    }
}

static void arm_engine_at(SwitchRun *s, i64 t) {
    if (s->engine_armed == NONE || s->engine_armed > t) {
        s->engine_armed = t;
        at(s, t, EV_EGRESS, -1);
    }
}

static void arm_engine(SwitchRun *s) {
    if (!s->engine.n) return;
    i64 lo = s->engine.v[0].a;
    for (i64 i = 1; i < s->engine.n; i++)
        if (s->engine.v[i].a < lo) lo = s->engine.v[i].a;
    arm_engine_at(s, max64(lo, s->engine_free));
}

/* A new position at ingress k; the ring doubles when the live packets fill it. */
static i64 ring_push(SwitchRun *s, i64 k) {
    Ring *g = &s->ring[k];
    i64 lo = s->hist_head[k], n = s->ing_n[k];
    if (n - lo == g->mask + 1) {
        i64 cap = 2 * (g->mask + 1);
        InPkt *v = malloc((size_t)cap * sizeof(InPkt));
        if (!v) longjmp(oom, 1);
        for (i64 i = lo; i < n; i++) v[i & (cap - 1)] = g->v[i & g->mask];
        free(g->v);
        g->v = v;
        g->mask = cap - 1;
    }
    return s->ing_n[k]++;
}

/* The live packets hold consecutive flit ranges, oldest first, and the ones asked for are
 * near the oldest (a depth back): searched from there. */
static i64 read_time(SwitchRun *s, i64 k, i64 j) {
    if (j < 0) return -1;
    for (i64 i = s->hist_head[k], n = s->ing_n[k]; i < n; i++) {
        InPkt *e = ING(k, i);
        if (j < e->j0) break;
        if (j < e->j0 + e->flits) return i >= s->fifo_head[k] ? NONE : e->grant + (j - e->j0);
    }
    return -1;
}

static void update_visible(SwitchRun *s, i64 k);

/* pending[k]: the position of the packet being written, or -1. */
static void resolve_writes(SwitchRun *s, i64 k) {
    i64 i = s->pending[k];
    if (i < 0) return;
    InPkt *e = ING(k, i);
    i64 p = e->pid, j0 = e->j0, flits = e->flits;
    if (s->inject[p] < 0) {
        i64 r = read_time(s, k, j0 - s->D);
        if (r == NONE) return;
        i64 in = s->inject[p] = max64(s->src_start[k], r + 1), seq = s->pk_seq[p];
        if (seq >= 0 && (s->chunk_start[seq] < 0 || in < s->chunk_start[seq]))
            s->chunk_start[seq] = in;   /* kept here: no pass over every packet afterwards */
        update_visible(s, k);
        if (s->pending[k] != i) return;
    }
    i64 r = read_time(s, k, j0 + flits - 1 - s->D);
    if (r == NONE) return;
    i64 a_last = max64(s->inject[p] + flits - 1, r + 1);
    s->stall[k] += a_last - (s->src_start[k] + flits - 1);
    s->pending[k] = -1;
    s->src_free[k] = a_last + 1;
    s->src_busy[k] = 0;
    try_source(s, k, a_last + 1);
}

static void leave_fifo(SwitchRun *s, i64 k, i64 i) {
    InPkt *e = ING(k, i);
    s->prev_last_read[k] = e->grant + e->flits - 1;
    s->fifo_head[k]++;
    update_visible(s, k);
    resolve_writes(s, k);
}

static i64 hold_bound(SwitchRun *s, i64 k) {
    i64 x = s->hold_taken[k] - (s->hold_depth - s->P) - 1;
    if (x < 0) return -1;
    i64 mask = s->hold_cap - 1, *lo = &s->hold_lo[k];
    const Hold *ring = s->hold + k * s->hold_cap;
    while (*lo < s->hold_hi[k] && ring[*lo & mask].j0 + ring[*lo & mask].flits <= x) (*lo)++;
    const Hold *h = &ring[*lo & mask];
    return h->pop + (x - h->j0) + 1;
}

static void grant_contribution(SwitchRun *s, i64 k, i64 i) {
    InPkt *e = ING(k, i);
    e->grant = max64(e->visible, hold_bound(s, k));
    s->in_flits[k] += e->flits;
    i64 head = max64(e->grant + s->hold_read, s->hold_free[k]);
    i64 turn = k - head - s->judge_phase;   /* the wait for port k's turn: turn mod N */
    i64 judged = head + (s->judge_mask ? turn & s->judge_mask : (turn % s->N + s->N) % s->N);
    s->hold[k * s->hold_cap + (s->hold_hi[k]++ & (s->hold_cap - 1))] =
        (Hold){s->hold_taken[k], e->flits, judged};
    s->hold_taken[k] += e->flits;
    s->hold_free[k] = judged + e->flits;
    i64 last = judged + e->flits - 2, seq = s->pk_seq[e->pid];
    i64 slot = slot_of(s, seq);
    if (s->arr_seq[slot] != seq) {   /* the chunk's first contribution */
        if (s->arrivals[slot] != s->nmembers) longjmp(oom, 2);
        s->arr_seq[slot] = seq;
    }
    i64 left = s->arrivals[slot] - 1;
    s->arrived_at[slot] = max64(s->arrived_at[slot], last);
    s->arrivals[slot] = left;
    if (left == 0) {
        tpush(&s->engine, (trip){s->arrived_at[slot] + s->pick_latency, slot, seq});
        s->arrivals[slot] = s->nmembers;
        s->arrived_at[slot] = -1;
        arm_engine(s);
    }
    leave_fifo(s, k, i);
}

static void update_visible(SwitchRun *s, i64 k) {
    i64 i = s->fifo_head[k];
    if (i == s->ing_n[k]) return;
    InPkt *e = ING(k, i);
    i64 p = e->pid;
    if (e->visible != NONE || s->inject[p] < 0) return;
    e->visible = max64(s->inject[p] + s->ingress_latency, s->prev_last_read[k] + 1);
    if (s->pk_dst[p] < 0) {
        grant_contribution(s, k, i);
    } else {
        s->head_mem[s->pk_dst[p] * s->N + k] = i;
        s->nmem[s->pk_dst[p]]++;
        arm_egress(s, s->pk_dst[p], e->visible + s->pick_lag);
    }
}

/* Python's result_read(d, n), of flit n = idx * P + rem (0 <= rem < P): n < 0 is idx < 0. */
static i64 result_read(SwitchRun *s, i64 d, i64 idx, i64 rem) {
    if (idx < 0) return -1;
    if (idx < s->rh_head[d] || idx >= s->rtabs[d].n) return -1;
    return rem < R_(d, nreads, idx) ? R_READ(d, idx * s->P + rem) : NONE;
}

/* Earliest issue of flit i of the engine's chunk; `tentative`: its packets are not made yet
 * and would start at each egress's result count. */
static i64 room_time(SwitchRun *s, i64 i, int tentative) {
    /* Flit j0 + i - (depth - 1) of each member's egress, j0 = its packet's number times P:
     * packet number + q, flit rem of that packet (room_q, room_rem: the floor division,
     * made once per i at the start). */
    i64 q = s->room_q[i], rem = s->room_rem[i], need = -1;
    for (i64 m = 0; m < s->nmembers; m++) {
        i64 d = s->mem_ports[m];
        i64 r = result_read(s, d, (tentative ? s->rtabs[d].n : s->eng_r[m]) + q, rem);
        if (r == NONE) return NONE;
        need = max64(need, r + 1);
    }
    return need;
}

static void expose_result(SwitchRun *s, i64 d) {
    i64 r = s->rq_head[d];
    R_(d, visible, r) = max64(R_(d, a0, r), s->result_last_read[d] + 1);
    s->head_res[d] = r;
    arm_egress(s, d, R_(d, visible, r) + s->pick_lag);
}

static void stream_result(SwitchRun *s, i64 d) {
    i64 r = s->streaming[d], j0 = r * s->P;
    {   /* Python's loop, on locals: the packet's flits, its reads so far (flit 0 is read at
         * max(avail, grant), i.e. after a previous read at grant - 1) */
        RTab *tab = &s->rtabs[d];
        i64 at = r - tab->base, n = tab->pk[at].nreads, issued = tab->pk[at].nissues;
        const i64 *issue = s->iss + (r - s->iss_base) * s->P;
        i64 *read = tab->read + at * s->P, lag = s->result_lag;
        i64 prev = n == 0 ? tab->pk[at].grant - 1 : read[n - 1];
        for (; n < issued; n++) read[n] = prev = max64(issue[n] + lag, prev + 1);
        tab->pk[at].nreads = n;
    }
    if (s->engine_blocked) {
        arm_engine_at(s, s->now);
        s->engine_blocked = 0;
    }
    if (R_(d, nreads, r) < s->P) return;
    s->streaming[d] = -1;
    i64 last = R_READ(d, j0 + s->P - 1), seq = R_(d, seq, r);
    s->egress_free[d] = last + 1;
    s->egress_last[d] = last;
    s->out_flits[d] += s->P;
    s->rq_head[d]++;
    s->result_last_read[d] = last;
    i64 out = last + s->out_lag;   /* the link register, the egress stage */
    s->results[d * s->chunks + seq] = out;
    s->credit[d * s->S + slot_of(s, seq)] = (Credit){seq, out};
    loop_result(s, d, seq, out);
    for (i64 i = 0; i < s->woken.n; i++) try_source(s, s->woken.v[i], out + 1 + s->rt);
    /* Its next start first: the next result's arm, later, then makes no event to drop. */
    arm_egress(s, d, last + 1);
    if (s->rq_head[d] < s->rtabs[d].n) expose_result(s, d);
}

/* Flits i0 .. of the engine's chunk whose room is in older result packets only (room_q < 0),
 * up to the first without room: their issues, in eng_when; returns the first flit not issued.
 * Those packets' reads cannot change while the chunk is issued (an egress streams an older
 * packet whole when it grants it, the chunk's are streamed only here), so the issues are the
 * ones flit-by-flit issuing would find. */
static i64 engine_run_of_flits(SwitchRun *s, i64 i0) {
    i64 end = i0, *need = s->eng_when, P = s->P;
    while (end < P && s->room_q[end] < 0) end++;
    for (i64 i = i0; i < end; i++) need[i] = NONE;   /* not a byte pattern: no memset call */
    /* room_time of each flit, member by member: the run ends at the first flit a member has
     * no room for yet. Flit i's room is flit n0 + i of the member's egress, read when its
     * packet's nreads passes it (packets before rh_head count as read at -1): the first flit
     * without room is in the first packet not read whole, found a packet at a time. */
    for (i64 m = 0; m < s->nmembers && end > i0; m++) {
        i64 d = s->mem_ports[m], lo = s->rh_head[d];
        const RTab *tab = &s->rtabs[d];
        i64 n0 = s->eng_r[m] * P - (s->result_depth - 1), first = lo * P - n0;
        for (i64 r = max64(s->eng_r[m] + s->room_q[i0], lo); r * P < n0 + end; r++) {
            i64 got = tab->pk[r - tab->base].nreads;
            if (got < P) {
                end = max64(i0, r * P + got - n0 < end ? r * P + got - n0 : end);
                break;
            }
        }
        i64 mid = first < i0 ? i0 : first > end ? end : first;
        for (i64 i = i0; i < mid; i++) need[i] = max64(need[i], 0);
        const i64 *read = tab->read;
        for (i64 i = mid, off = n0 - tab->base * P; i < end; i++)
            need[i] = max64(need[i], read[off + i] + 1);
    }
    for (i64 i = i0; i < end; i++)
        need[i] = s->eng_last_issue = max64(s->eng_last_issue + 1, need[i]);
    return end;
}

/* Room in iss for packet r, the next one: forget the packets below every member egress's
 * oldest kept one if that frees half the table, else double it (as rtab_reserve). */
static void iss_reserve(SwitchRun *s, i64 r) {
    if (r - s->iss_base < s->iss_cap) return;
    i64 keep = r, P = s->P;
    for (i64 m = 0; m < s->nmembers; m++) {
        i64 d = s->mem_ports[m];
        keep = s->rq_head[d] < keep ? s->rq_head[d] : keep;
        keep = s->rh_head[d] < keep ? s->rh_head[d] : keep;
    }
    i64 drop = keep - s->iss_base;
    if (drop > 0 && drop >= s->iss_cap / 2) {
        memmove(s->iss, s->iss + drop * P, (size_t)((r - keep) * P) * sizeof(i64));
        s->iss_base = keep;
        return;
    }
    i64 cap = s->iss_cap * P;
    s->iss = grow(s->iss, &cap, (s->iss_cap ? s->iss_cap * 2 : 64) * P, sizeof(i64));
    s->iss_cap = cap / P;
}

static void continue_engine(SwitchRun *s) {
    while (s->eng_nissues < s->P) {
        i64 i0 = s->eng_nissues, i1 = engine_run_of_flits(s, i0);
        if (i1 > i0) {
            /* Issued as a run: each member's flits, then each member's stream once (only the
             * chunk's last flit completes a packet, so the completions keep member order). */
            if (s->nmembers) {
                i64 *issue = s->iss + (s->eng_r[0] - s->iss_base) * s->P;
                for (i64 i = i0; i < i1; i++) issue[i] = s->eng_when[i];
            }
            for (i64 m = 0; m < s->nmembers; m++) {
                RTab *tab = &s->rtabs[s->mem_ports[m]];
                tab->pk[s->eng_r[m] - tab->base].nissues = i1;
            }
            s->eng_nissues = i1;
            for (i64 m = 0; m < s->nmembers; m++)
                if (s->streaming[s->mem_ports[m]] == s->eng_r[m]) stream_result(s, s->mem_ports[m]);
        }
        if (i1 == s->P) break;
        if (s->room_q[i1] < 0) {   /* the run stopped at a flit without room */
            s->engine_blocked = 1;
            return;
        }
        i64 need = room_time(s, s->eng_nissues, 0);
        if (need == NONE) {
            s->engine_blocked = 1;
            return;
        }
        i64 when = max64(s->eng_last_issue + 1, need), i = s->eng_nissues++;
        s->eng_last_issue = when;
        if (s->nmembers) s->iss[(s->eng_r[0] - s->iss_base) * s->P + i] = when;
        for (i64 m = 0; m < s->nmembers; m++) {
            RTab *tab = &s->rtabs[s->mem_ports[m]];
            tab->pk[s->eng_r[m] - tab->base].nissues++;
        }
        for (i64 m = 0; m < s->nmembers; m++)
            if (s->streaming[s->mem_ports[m]] == s->eng_r[m]) stream_result(s, s->mem_ports[m]);
    }
    s->engine_free = s->eng_last_issue + s->engine_restart;
    s->eng_active = 0;
    arm_engine(s);
}

static void run_engine(SwitchRun *s, i64 t) {
    if (t != s->engine_armed) return;   /* superseded by an earlier arm_engine_at */
    s->engine_armed = NONE;
    s->engine_blocked = 0;
    if (!s->eng_active) {
        if (t < s->engine_free) {
            arm_engine(s);
            return;
        }
        i64 choice = -1;
        trip *engine = s->engine.v;
        for (i64 i = 0; i < s->engine.n; i++)
            if (engine[i].a <= t && (choice < 0 || engine[i].b < engine[choice].b)) choice = i;
        if (choice < 0) {
            arm_engine(s);
            return;
        }
        /* Room for the first flit decides the start (the RTL re-picks every cycle). */
        i64 need = room_time(s, 0, 1);
        if (need == NONE || need > t) {
            if (need == NONE) s->engine_blocked = 1; else arm_engine_at(s, need);
            return;
        }
        i64 seq = engine[choice].c;
        engine[choice] = engine[--s->engine.n];
        s->eng_active = 1;
        s->eng_nissues = 1;
        s->eng_last_issue = t;
        if (s->nmembers) {
            /* Python's issues = [t], reads = []: flits at or past nissues (nreads) are unset */
            i64 r = s->rtabs[s->mem_ports[0]].n;
            iss_reserve(s, r);
            s->iss[(r - s->iss_base) * s->P] = t;
        }
        for (i64 m = 0; m < s->nmembers; m++) {
            i64 d = s->mem_ports[m];
            RTab *tab = &s->rtabs[d];
            rtab_reserve(tab, s->rq_head[d] < s->rh_head[d] ? s->rq_head[d] : s->rh_head[d]);
            i64 r = tab->n++;
            tab->pk[r - tab->base] = (RPkt){seq, t + s->result_lag, NONE, NONE, 1, 0};
            s->eng_r[m] = r;
            s->rh_head[d] = max64(s->rh_head[d], tab->n - s->hist_limit);
            if (tab->n - s->rq_head[d] == 1) expose_result(s, d);
        }
    }
    continue_engine(s);
}

static void wake(SwitchRun *s, i64 k) {
    i64 t = loop_wake_time(s, k);
    if (t != NONE) try_source(s, k, max64(t, s->src_free[k]));
}

/* Egress d grants its head result at t. */
static void grant_result(SwitchRun *s, i64 d, i64 t) {
    i64 r = s->head_res[d];
    s->head_res[d] = -1;
    R_(d, grant, r) = t;
    /* Held until its last flit is read; the engine may still be issuing it. */
    s->egress_free[d] = (i64)1 << 62;
    s->streaming[d] = r;
    stream_result(s, d);
}

static void egress(SwitchRun *s, i64 d, i64 t) {
    if (t != s->egress_armed[d]) return;   /* superseded by an earlier arm_egress */
    s->egress_armed[d] = NONE;
    if (s->streaming[d] >= 0) return;
    if (t < s->egress_free[d]) {
        arm_egress(s, d, s->egress_free[d]);
        return;
    }
    /* The arbiter presents at t what it chose at t - pick_lag from the requests then; the
     * requester whose last flit left then counts as requesting. With no memory packet at a
     * visible head (nmem[d] == 0: in-switch traffic), only the results may request. */
    i64 N = s->N, *valid = s->valid, *hm = s->head_mem + d * N, any = 0, nxt = NONE;
    i64 seen = t - s->pick_lag, res = s->head_res[d] >= 0 ? R_(d, visible, s->head_res[d]) : NONE;
    if (!s->nmem[d] && s->policy == RR) {
        /* Round robin with at most two requesters, the results (d) and the last one served
         * (arb_ptr[d], counted as requesting when its last flit left at `seen`): the code
         * below with arb_choose's scan, which visits arb_ptr[d] last, worked out. Every
         * other head is empty, so only the results can be granted. */
        int results = res != NONE && res <= seen;
        if (!results && s->egress_last[d] != seen) {
            if (res != NONE) arm_egress(s, d, res + s->pick_lag);
            return;
        }
        i64 sel = results ? d : s->arb_ptr[d];
        if (sel != d || res == NONE || res > t) {
            arm_egress(s, d, t + 1);
            return;
        }
        s->arb_ptr[d] = d;
        grant_result(s, d, t);
        return;
    }
    if (s->nmem[d]) {
        for (i64 k = 0; k < N; k++) {
            i64 vis = k != d ? (hm[k] >= 0 ? ING(k, hm[k])->visible : NONE) : res;
            valid[k] = vis != NONE && vis <= seen;
            if (vis != NONE && (nxt == NONE || vis < nxt)) nxt = vis;
        }
    } else {
        memset(valid, 0, (size_t)N * sizeof(i64));
        valid[d] = res != NONE && res <= seen;
        nxt = res;
    }
    if (s->egress_last[d] == seen) valid[s->arb_ptr[d]] = 1;
    for (i64 k = 0; k < N; k++) any |= valid[k];
    if (!any) {
        if (nxt != NONE) arm_egress(s, d, nxt + s->pick_lag);
        return;
    }
    i64 new_turn, sel = arb_choose(s, d, valid, &new_turn);
    if (sel == NONE) return;   /* only when every valid requester has weight 0 */
    {   /* chosen as its last flit left, with no next packet here now: an idle cycle */
        i64 vis = sel != d ? (hm[sel] >= 0 ? ING(sel, hm[sel])->visible : NONE) : res;
        if (vis == NONE || vis > t) {
            arm_egress(s, d, t + 1);
            return;
        }
    }
    if (s->nmem[d]) {   /* this cycle's requests */
        for (i64 k = 0; k < N; k++) {
            i64 vis = k != d ? (hm[k] >= 0 ? ING(k, hm[k])->visible : NONE) : res;
            valid[k] = vis != NONE && vis <= t;
        }
    } else {
        memset(valid, 0, (size_t)N * sizeof(i64));
        valid[d] = res != NONE && res <= t;
    }
    arb_start(s, d, valid, sel, new_turn);
    i64 flits = sel == d ? s->P : ING(sel, hm[sel])->flits, *deficit = s->arb_deficit + d * N;
    if (s->policy == DRR && flits > 1) set_deficit(s, deficit, sel, deficit[sel] - (flits - 1));
    if (sel == d) {
        grant_result(s, d, t);
        return;
    }
    i64 i = hm[sel];
    hm[sel] = -1;
    s->nmem[d]--;
    InPkt *e = ING(sel, i);
    i64 p = e->pid;
    e->grant = t;
    i64 last = t + flits - 1;
    s->egress_free[d] = last + 1;
    s->egress_last[d] = last;
    s->out_flits[d] += flits;
    s->in_flits[sel] += flits;
    i64 out = last + s->out_lag;   /* the link register, the egress stage */
    s->deliver[p] = out;
    loop_delivered(s, p, out);
    /* wake() never touches the loop's woken list, so iterate it in place */
    for (i64 w = 0; w < s->woken.n; w++) wake(s, s->woken.v[w]);
    leave_fifo(s, sel, i);
    arm_egress(s, d, last + 1);
}

static void source(SwitchRun *s, i64 k, i64 t) {
    pop_source(s, k);
    if (s->src_busy[k] || t < s->src_free[k]) return;
    i64 p = loop_next_packet(s, k, t);
    if (p == NONE) {
        wake(s, k);
        return;
    }
    i64 j0 = s->written[k], flits = s->pk_flits[p];
    s->src_start[k] = t;
    while (s->hist_head[k] < s->fifo_head[k]) {
        InPkt *h = ING(k, s->hist_head[k]);
        if (h->j0 + h->flits > j0 - s->D) break;
        s->hist_head[k]++;
    }
    s->written[k] += flits;
    i64 i = ring_push(s, k);
    *ING(k, i) = (InPkt){p, j0, flits, NONE, NONE};
    s->src_busy[k] = 1;
    s->pending[k] = i;
    resolve_writes(s, k);
    if (s->ing_n[k] - s->fifo_head[k] == 1) update_visible(s, k);
}

/* ------------------------------------------------------------------------------------------ */
/* Entry points. innet_switch_run's arrays are the caller's (numpy); the packet and message   */
/* arrays have room for the read responses the replay creates. It returns 0, 1 when memory   */
/* ran out, or 2 when a chunk's contributions began arriving before those of the previous      */
/* chunk of its slot were all in (the credit loop prevents it).                                */

#define ALLOC(ptr, count, fill)                                                              \
    do {                                                                                     \
        ptr = malloc((size_t)((count) > 0 ? (count) : 1) * sizeof(*(ptr)));                 \
        if (!ptr) goto fail;                                                                 \
        for (i64 z_ = 0; z_ < (count); z_++) ptr[z_] = fill;                                 \
    } while (0)
#define ZALLOC(ptr, count)                                                                   \
    do {                                                                                     \
        ptr = calloc((size_t)((count) > 0 ? (count) : 1), sizeof(*(ptr)));                  \
        if (!ptr) goto fail;                                                                 \
    } while (0)

/* "name type" per field of SwitchArgs, one a line, in order. */
const char *innet_switch_args(void) {
#define DESCRIBE(type, name) #name " " #type "\n"
    return SWITCH_ARGS(DESCRIBE);
#undef DESCRIBE
}

i64 innet_switch_args_size(void) { return (i64)sizeof(SwitchArgs); }

/* The policy names, space-separated, in the order of their codes. */
const char *innet_switch_policies(void) {
#define POLICY_NAME(code, name) #name " "
    return POLICIES(POLICY_NAME);
#undef POLICY_NAME
}

int innet_switch_run(const SwitchArgs *a) {
    SwitchRun sw, *s = &sw;
    memset(s, 0, sizeof(sw));
    int status = 1;
    i64 N = a->ports;
    s->N = N;
    s->D = a->depth;
    s->result_lag = a->result_lag;
    s->result_depth = a->result_depth;
    s->P = a->chunk_flits;
    s->S = a->slots;
    s->policy = a->policy;
    s->quantum = a->quantum;
    s->dbits = a->deficit_bits;
    s->members = a->members;
    s->chunks = a->chunks;
    s->mtu = a->mtu;
    s->npk = a->packets;
    s->pk_cap = a->packet_cap;
    s->nmsg = s->nmsg0 = a->messages;
    s->msg_cap = a->message_cap;
    s->ingress_latency = a->ingress_latency;
    s->pick_latency = a->pick_latency;
    s->rt = a->round_trip;
    s->hold_depth = a->hold_depth;
    s->judge_phase = a->judge_phase;
    s->hold_read = a->hold_read;
    s->pick_lag = a->egress_pick_lag;
    s->out_lag = a->egress_out_lag;
    s->engine_restart = a->engine_restart;
    /* live entries: at most hold_depth - P + 2 */
    for (s->hold_cap = 1; s->hold_cap < s->hold_depth - s->P + 4;) s->hold_cap *= 2;
    s->judge_mask = (N & (N - 1)) == 0 ? N - 1 : 0;
    s->slot_mask = (s->S & (s->S - 1)) == 0 ? s->S - 1 : 0;
    s->hist_limit = 4 + s->result_depth / s->P;
    s->priority = a->priority;
    s->weight = a->weight;
    s->pk_flits = a->pk_flits, s->pk_dst = a->pk_dst, s->pk_seq = a->pk_seq;
    s->pk_msg = a->pk_msg;
    s->m_src = a->m_src, s->m_dst = a->m_dst, s->m_issue = a->m_issue, s->m_kind = a->m_kind;
    s->m_resp_flits = a->m_resp_flits, s->m_resp_to = a->m_resp_to, s->m_ndeps = a->m_ndeps;
    s->m_pk_off = a->m_pk_off, s->m_pk_len = a->m_pk_len;
    s->wait_off = a->wait_off, s->wait_list = a->wait_list;
    s->con_off = a->con_off, s->con_first = a->con_first, s->con_mid = a->con_mid;
    s->inject = a->inject, s->deliver = a->deliver, s->results = a->results;
    s->done_at = a->done_at;
    s->out_flits = a->out_flits, s->in_flits = a->in_flits, s->stall = a->stall;
    s->chunk_start = a->chunk_start;
    i64 R = N;

    ZALLOC(s->future, N);
    ZALLOC(s->active, N);
    ZALLOC(s->ready, N);
    ZALLOC(s->pend, N);
    ZALLOC(s->msg, s->msg_cap);
    ZALLOC(s->src_start, N);
    ZALLOC(s->ring, N);
    for (i64 k = 0; k < N; k++) {
        ALLOC(s->ring[k].v, 16, ((InPkt){-1, NONE, 0, NONE, NONE}));
        s->ring[k].mask = 15;
    }
    ZALLOC(s->ing_n, N);
    ZALLOC(s->con_hint, 2 * N);
    ZALLOC(s->fifo_head, N);
    ZALLOC(s->hist_head, N);
    ZALLOC(s->written, N);
    ALLOC(s->prev_last_read, N, -1);
    ZALLOC(s->src_busy, N);
    ZALLOC(s->src_free, N);
    ALLOC(s->pending, N, -1);
    ZALLOC(s->src_q, N);
    ZALLOC(s->egress_free, N);
    ALLOC(s->egress_armed, N, NONE);
    ALLOC(s->egress_last, N, NONE);
    ALLOC(s->head_mem, N * N, -1);
    ZALLOC(s->nmem, N);
    ALLOC(s->head_res, N, -1);
    ALLOC(s->streaming, N, -1);
    ALLOC(s->result_last_read, N, -1);
    ZALLOC(s->rtabs, N);
    for (i64 d = 0; d < N; d++) s->rtabs[d].P = s->P;
    ZALLOC(s->rq_head, N);
    ZALLOC(s->rh_head, N);
    ZALLOC(s->arb_ptr, N);
    ZALLOC(s->arb_count, N);
    ZALLOC(s->arb_deficit, N * R);
    ZALLOC(s->hold_taken, N);
    ZALLOC(s->hold_free, N);
    ZALLOC(s->hold_lo, N);
    ZALLOC(s->hold_hi, N);
    ZALLOC(s->hold, N * s->hold_cap);
    ZALLOC(s->room_q, s->P);
    ZALLOC(s->room_rem, s->P);
    ZALLOC(s->eng_when, s->P);
    for (i64 i = 0; i < s->P; i++) {   /* floor division of i - (depth - 1) by P */
        i64 back = i - (s->result_depth - 1), q = back / s->P, rem = back - q * s->P;
        if (rem < 0) {
            rem += s->P;
            q--;
        }
        s->room_q[i] = q;
        s->room_rem[i] = rem;
    }
    ZALLOC(s->arrivals, s->S);
    ALLOC(s->arrived_at, s->S, -1);
    ALLOC(s->arr_seq, s->S, -1);
    ALLOC(s->credit, N * s->S, ((Credit){-1, -1}));
    ZALLOC(s->eng_r, N);
    ZALLOC(s->mem_ports, N);
    ZALLOC(s->valid, R);
    ZALLOC(s->scratch, R);
    ZALLOC(s->events, 1);
    cal_init(s->events);

    for (i64 d = 0; d < N; d++)
        if (s->members >> d & 1) s->mem_ports[s->nmembers++] = d;
    for (i64 c = 0; c < s->S; c++) s->arrivals[c] = s->nmembers;
    s->engine_armed = NONE;

    switch (setjmp(oom)) {   /* 1: out of memory, 2: a slot's chunks overlapped */
    case 0:
        break;
    case 2:
        status = 2;
        goto fail;
    default:
        goto fail;
    }
    for (i64 m = 0; m < s->nmsg0; m++) {
        s->msg[m].remaining = s->m_pk_len[m];
        s->msg[m].next = s->m_pk_off[m];
        s->msg[m].end = s->m_pk_off[m] + s->m_pk_len[m];
        if (s->m_ndeps[m] == 0) loop_push_future(s, s->m_src[m], s->m_issue[m], m);
    }
    for (i64 k = 0; k < N; k++) try_source(s, k, 0);
    while (s->events->n) {
        trip e = cal_pop(s->events);
        s->now = e.a;
        i64 kind = e.b >> KIND_SHIFT;
        if (kind == EV_SOURCE) source(s, e.c, e.a);
        else if (e.c < 0) run_engine(s, e.a);
        else egress(s, e.c, e.a);
        s->handled++;
    }
    a->counters[0] = s->npk;
    a->counters[1] = s->nmsg;
    a->counters[2] = s->started;
    a->counters[3] = s->handled;
    status = 0;

fail:
    for (i64 k = 0; s->ring && k < N; k++) {
        if (s->future) free(s->future[k].v);
        if (s->active) free(s->active[k].v);
        if (s->ready) free(s->ready[k].v);
        if (s->pend) free(s->pend[k].v);
        free(s->ring[k].v);
        if (s->src_q) free(s->src_q[k].v);
        if (s->rtabs) {
            free(s->rtabs[k].pk);
            free(s->rtabs[k].read);
        }
    }
    vec *vs[] = {&s->woken};
    for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); i++) free(vs[i]->v);
    free(s->engine.v);
    cal_free(s->events);
    void *ps[] = {s->future, s->active, s->ready, s->pend, s->msg, s->con_hint,
                  s->src_start, s->ring, s->ing_n, s->fifo_head,
                  s->hist_head, s->written, s->prev_last_read, s->src_busy, s->src_free,
                  s->pending, s->src_q, s->egress_free, s->egress_armed, s->egress_last,
                  s->head_mem, s->nmem, s->head_res, s->streaming, s->result_last_read, s->rtabs, s->rq_head,
                  s->rh_head, s->arb_ptr, s->arb_count, s->arb_deficit, s->hold_taken,
                  s->hold_free, s->hold_lo, s->hold_hi, s->hold, s->room_q, s->room_rem, s->eng_when,
                  s->arrivals, s->arrived_at, s->arr_seq, s->eng_r, s->mem_ports,
                  s->valid, s->scratch, s->events, s->credit, s->iss};
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) free(ps[i]);
    return status;
}
