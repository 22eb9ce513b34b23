/* tests/interpose/p2p_ops.c: every point-to-point call shunt intercepts, with derived datatypes, on a ring
 * (any number of ranks; one rank talks to itself). Received buffers are checked byte for byte against
 * the library's own PMPI_Pack/PMPI_Unpack of the sender's data (bytes outside the type untouched),
 * statuses (count, elements, source, tag, cancelled, error class) are hashed, and rank 0 prints one
 * deterministic line per rank, so the runner can compare runs without and with shunt. */
#include "common.h"

typedef struct {
    const char* name;
    MPI_Datatype type;
    int count;
} tcase;

static uint64_t hash = 14695981039346656037ull;
static long checks = 0;
static int rank = 0, size = 1, right = 0, left = 0;
/* MPI_STATUSES_IGNORE through a volatile pointer: GCC 12 warns (-Wstringop-overflow) that MPICH's
 * (MPI_Status *)1 is a region of size 0 when passed for an array parameter. */
static MPI_Status* volatile statuses_ignore;

static void note(const char* what, long long v) {
    hash = test_hash(hash, what, strlen(what));
    hash = test_hash_int(hash, v);
}

static uint32_t seed_of(int sender, int what) { return (uint32_t)(1000 * sender + what + 17); }

/* Notes a status: source, tag, count and elements in the case's type. */
static void note_status(const char* what, const tcase* c, const MPI_Status* st) {
    int n = 0, e = 0;
    SHUNT_TEST_MPI(MPI_Get_count(st, c->type, &n));
    SHUNT_TEST_MPI(MPI_Get_elements(st, c->type, &e));
    note(what, st->MPI_SOURCE == MPI_PROC_NULL ? -2 : st->MPI_SOURCE);
    note(what, st->MPI_TAG);
    note(what, n);
    note(what, e);
}

/* Requires `got` (made with recv seed `rseed`) to hold what the library writes when it receives
 * `sent` elements of c packed from the sender's buffer made with seed `sseed`. */
static void check_data(const char* what, const tcase* c, const test_typed* got, uint32_t rseed, uint32_t sseed,
                       int sent) {
    test_typed src = test_typed_make(c->type, c->count, sseed);
    test_typed exp = test_typed_make(c->type, c->count, rseed);
    int bytes = 0;
    SHUNT_TEST_MPI(PMPI_Pack_size(c->count, c->type, MPI_COMM_WORLD, &bytes));
    unsigned char* tmp = (unsigned char*)malloc((size_t)bytes + 1);
    int pos = 0;
    SHUNT_TEST_MPI(PMPI_Pack(src.base, sent, c->type, tmp, bytes + 1, &pos, MPI_COMM_WORLD));
    int upos = 0;
    SHUNT_TEST_MPI(PMPI_Unpack(tmp, pos, &upos, exp.base, sent, c->type, MPI_COMM_WORLD));
    SHUNT_TEST_REQUIRE(got->alloc_bytes == exp.alloc_bytes, "%s %s", what, c->name);
    for (size_t i = 0; i < exp.alloc_bytes; ++i)
        SHUNT_TEST_REQUIRE(got->alloc[i] == exp.alloc[i], "%s %s x %d: byte %zu is %d, expected %d (rank %d)", what,
                           c->name, sent, i, got->alloc[i], exp.alloc[i], rank);
    hash = test_hash(hash, got->alloc, got->alloc_bytes);
    ++checks;
    free(tmp);
    free(src.alloc);
    free(exp.alloc);
}

/* Blocking send modes to the right, each received by an Irecv posted first. */
static void blocking_sends(const tcase* c, MPI_Comm comm) {
    for (int mode = 0; mode < 4; ++mode) {
        const int tag = 10 + mode;
        test_typed r = test_typed_make(c->type, c->count, 5u + (uint32_t)mode);
        test_typed s = test_typed_make(c->type, c->count, seed_of(rank, mode));
        MPI_Request req;
        SHUNT_TEST_MPI(MPI_Irecv(r.base, c->count, c->type, left, tag, comm, &req));
        SHUNT_TEST_MPI(MPI_Barrier(comm)); /* every receive is posted: MPI_Rsend is legal */
        if (mode == 0) SHUNT_TEST_MPI(MPI_Send(s.base, c->count, c->type, right, tag, comm));
        if (mode == 1) SHUNT_TEST_MPI(MPI_Ssend(s.base, c->count, c->type, right, tag, comm));
        if (mode == 2) SHUNT_TEST_MPI(MPI_Rsend(s.base, c->count, c->type, right, tag, comm));
        if (mode == 3) SHUNT_TEST_MPI(MPI_Bsend(s.base, c->count, c->type, right, tag, comm));
        MPI_Status st;
        SHUNT_TEST_MPI(MPI_Wait(&req, &st));
        SHUNT_TEST_REQUIRE(req == MPI_REQUEST_NULL, "request not freed");
        note_status("blocking", c, &st);
        check_data("blocking send", c, &r, 5u + (uint32_t)mode, seed_of(left, mode), c->count);
        free(r.alloc);
        free(s.alloc);
    }
}

/* Nonblocking send modes, each received by a blocking MPI_Recv (MPI_ANY_SOURCE/MPI_ANY_TAG on one). */
static void nonblocking_sends(const tcase* c, MPI_Comm comm) {
    for (int mode = 0; mode < 4; ++mode) {
        const int tag = 20 + mode;
        test_typed r = test_typed_make(c->type, c->count, 6u + (uint32_t)mode);
        test_typed s = test_typed_make(c->type, c->count, seed_of(rank, 10 + mode));
        MPI_Request req;
        if (mode == 2) { /* ready mode: the receive must be posted first */
            MPI_Request rr;
            SHUNT_TEST_MPI(MPI_Irecv(r.base, c->count, c->type, left, tag, comm, &rr));
            SHUNT_TEST_MPI(MPI_Barrier(comm));
            SHUNT_TEST_MPI(MPI_Irsend(s.base, c->count, c->type, right, tag, comm, &req));
            MPI_Status st;
            SHUNT_TEST_MPI(MPI_Wait(&rr, &st));
            note_status("irsend", c, &st);
        } else {
            if (mode == 0) SHUNT_TEST_MPI(MPI_Isend(s.base, c->count, c->type, right, tag, comm, &req));
            if (mode == 1) SHUNT_TEST_MPI(MPI_Issend(s.base, c->count, c->type, right, tag, comm, &req));
            if (mode == 3) SHUNT_TEST_MPI(MPI_Ibsend(s.base, c->count, c->type, right, tag, comm, &req));
            MPI_Status st;
            SHUNT_TEST_MPI(MPI_Recv(r.base, c->count, c->type, mode == 1 ? MPI_ANY_SOURCE : left,
                                    mode == 1 ? MPI_ANY_TAG : tag, comm, &st));
            note_status("recv", c, &st);
        }
        int flag = 0;
        while (!flag) SHUNT_TEST_MPI(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
        check_data("nonblocking send", c, &r, 6u + (uint32_t)mode, seed_of(left, 10 + mode), c->count);
        free(r.alloc);
        free(s.alloc);
    }
}

/* Fewer elements than the receive holds, MPI_Sendrecv, MPI_Sendrecv_replace. */
static void exchanges(const tcase* c, MPI_Comm comm) {
    test_typed r = test_typed_make(c->type, c->count, 7u);
    test_typed s = test_typed_make(c->type, c->count, seed_of(rank, 30));
    MPI_Status st;
    const int fewer = c->count - 1 > 0 ? c->count - 1 : 1;
    SHUNT_TEST_MPI(MPI_Sendrecv(s.base, fewer, c->type, right, 30, r.base, c->count, c->type, left, 30, comm, &st));
    note_status("sendrecv", c, &st);
    check_data("sendrecv", c, &r, 7u, seed_of(left, 30), fewer);
    free(r.alloc);

    test_typed x = test_typed_make(c->type, c->count, seed_of(rank, 31));
    SHUNT_TEST_MPI(MPI_Sendrecv_replace(x.base, c->count, c->type, right, 31, left, 31, comm, &st));
    note_status("sendrecv_replace", c, &st);
    check_data("sendrecv_replace", c, &x, seed_of(rank, 31), seed_of(left, 31), c->count);
    free(x.alloc);
    free(s.alloc);
}

/* Persistent sends of every mode and receives, each started three times with new data. */
static void persistent(const tcase* c, MPI_Comm comm) {
    int packed = 0;
    SHUNT_TEST_MPI(MPI_Pack_size(c->count, c->type, comm, &packed));
    for (int mode = 0; mode < 4; ++mode) {
        /* Open MPI 4.1 delivers stale data on the second start of a persistent buffered send of
         * 24 KiB to self: buffered mode with small messages only. */
        if (mode == 3 && packed > 2048) continue;
        const int tag = 40 + mode;
        test_typed r = test_typed_make(c->type, c->count, 8u);
        test_typed s = test_typed_make(c->type, c->count, 1u);
        MPI_Request req[2];
        SHUNT_TEST_MPI(MPI_Recv_init(r.base, c->count, c->type, left, tag, comm, &req[0]));
        if (mode == 0) SHUNT_TEST_MPI(MPI_Send_init(s.base, c->count, c->type, right, tag, comm, &req[1]));
        if (mode == 1) SHUNT_TEST_MPI(MPI_Ssend_init(s.base, c->count, c->type, right, tag, comm, &req[1]));
        if (mode == 2) SHUNT_TEST_MPI(MPI_Rsend_init(s.base, c->count, c->type, right, tag, comm, &req[1]));
        if (mode == 3) SHUNT_TEST_MPI(MPI_Bsend_init(s.base, c->count, c->type, right, tag, comm, &req[1]));
        for (int round = 0; round < 3; ++round) {
            test_fill(s.alloc, s.alloc_bytes, seed_of(rank, 50 + round));
            test_fill(r.alloc, r.alloc_bytes, 8u);
            MPI_Status st[2];
            if (round == 1) { /* MPI_Start one by one, the receive first */
                SHUNT_TEST_MPI(MPI_Start(&req[0]));
                SHUNT_TEST_MPI(MPI_Barrier(comm));
                SHUNT_TEST_MPI(MPI_Start(&req[1]));
                SHUNT_TEST_MPI(MPI_Wait(&req[1], MPI_STATUS_IGNORE));
                SHUNT_TEST_MPI(MPI_Wait(&req[0], &st[0]));
            } else {
                SHUNT_TEST_MPI(MPI_Start(&req[0]));
                SHUNT_TEST_MPI(MPI_Barrier(comm));
                SHUNT_TEST_MPI(MPI_Startall(1, &req[1]));
                SHUNT_TEST_MPI(MPI_Waitall(2, req, round == 0 ? st : MPI_STATUSES_IGNORE));
            }
            SHUNT_TEST_REQUIRE(req[0] != MPI_REQUEST_NULL && req[1] != MPI_REQUEST_NULL, "persistent request freed");
            if (round != 2) note_status("persistent", c, &st[0]);
            /* the expected data: the sender's buffer as filled for this round */
            test_typed src = test_typed_make(c->type, c->count, 1u);
            test_fill(src.alloc, src.alloc_bytes, seed_of(left, 50 + round));
            test_typed exp = test_typed_make(c->type, c->count, 8u);
            int bytes = 0, pos = 0, upos = 0;
            SHUNT_TEST_MPI(PMPI_Pack_size(c->count, c->type, comm, &bytes));
            unsigned char* tmp = (unsigned char*)malloc((size_t)bytes);
            SHUNT_TEST_MPI(PMPI_Pack(src.base, c->count, c->type, tmp, bytes, &pos, comm));
            SHUNT_TEST_MPI(PMPI_Unpack(tmp, pos, &upos, exp.base, c->count, c->type, comm));
            SHUNT_TEST_REQUIRE(memcmp(exp.alloc, r.alloc, r.alloc_bytes) == 0, "persistent %s mode %d round %d",
                               c->name, mode, round);
            hash = test_hash(hash, r.alloc, r.alloc_bytes);
            ++checks;
            free(tmp);
            free(src.alloc);
            free(exp.alloc);
        }
        /* An inactive persistent request: MPI_Wait returns at once with an empty status. */
        MPI_Status empty;
        SHUNT_TEST_MPI(MPI_Wait(&req[0], &empty));
        note("inactive", empty.MPI_TAG == MPI_ANY_TAG && empty.MPI_SOURCE == MPI_ANY_SOURCE);
        SHUNT_TEST_MPI(MPI_Request_free(&req[0]));
        SHUNT_TEST_MPI(MPI_Request_free(&req[1]));
        SHUNT_TEST_REQUIRE(req[0] == MPI_REQUEST_NULL && req[1] == MPI_REQUEST_NULL, "Request_free");
        free(r.alloc);
        free(s.alloc);
    }
}

/* Matched probes: MPI_Mprobe + MPI_Mrecv and MPI_Improbe + MPI_Imrecv. */
static void matched(const tcase* c, MPI_Comm comm) {
    for (int way = 0; way < 2; ++way) {
        const int tag = 60 + way;
        test_typed r = test_typed_make(c->type, c->count, 9u);
        test_typed s = test_typed_make(c->type, c->count, seed_of(rank, tag));
        MPI_Request sreq;
        SHUNT_TEST_MPI(MPI_Isend(s.base, c->count, c->type, right, tag, comm, &sreq));
        MPI_Message msg;
        MPI_Status st;
        if (way == 0) {
            SHUNT_TEST_MPI(MPI_Mprobe(left, tag, comm, &msg, &st));
            note_status("mprobe", c, &st);
            SHUNT_TEST_MPI(MPI_Mrecv(r.base, c->count, c->type, &msg, &st));
        } else {
            int flag = 0;
            while (!flag) SHUNT_TEST_MPI(MPI_Improbe(MPI_ANY_SOURCE, tag, comm, &flag, &msg, &st));
            MPI_Request rreq;
            SHUNT_TEST_MPI(MPI_Imrecv(r.base, c->count, c->type, &msg, &rreq));
            SHUNT_TEST_MPI(MPI_Wait(&rreq, &st));
        }
        note_status("mrecv", c, &st);
        SHUNT_TEST_MPI(MPI_Wait(&sreq, MPI_STATUS_IGNORE));
        check_data("matched", c, &r, 9u, seed_of(left, tag), c->count);
        free(r.alloc);
        free(s.alloc);
    }
    /* MPI_PROC_NULL: a message from nowhere */
    MPI_Message msg;
    MPI_Status st;
    SHUNT_TEST_MPI(MPI_Mprobe(MPI_PROC_NULL, 0, comm, &msg, &st));
    test_typed r = test_typed_make(c->type, c->count, 9u);
    SHUNT_TEST_MPI(MPI_Mrecv(r.base, c->count, c->type, &msg, &st));
    note_status("mrecv proc null", c, &st);
    check_data("mrecv proc null", c, &r, 9u, 9u, 0);
    free(r.alloc);
}

/* Arrays of requests mixing shunt's (derived types) and the library's (MPI_INT), with null
 * entries, completed by Waitany, Waitsome, Testany, Testsome, Testall and Waitall. */
static void arrays(const tcase* cases, int ncases, MPI_Comm comm) {
    enum { max_req = 32 };
    for (int how = 0; how < 6; ++how) {
        MPI_Request req[max_req];
        test_typed recvs[max_req], sends[max_req];
        int ints_in[8], ints_out[8];
        int n = 0;
        const int tag0 = 100 + 20 * how;
        for (int i = 0; i < 8; ++i) ints_out[i] = rank * 100 + i + how, ints_in[i] = -1;
        req[n++] = MPI_REQUEST_NULL;
        for (int k = 0; k < ncases; ++k) {
            recvs[k] = test_typed_make(cases[k].type, cases[k].count, 11u);
            SHUNT_TEST_MPI(MPI_Irecv(recvs[k].base, cases[k].count, cases[k].type, left, tag0 + k, comm, &req[n++]));
        }
        SHUNT_TEST_MPI(MPI_Irecv(ints_in, 8, MPI_INT, left, tag0 + 19, comm, &req[n++]));
        req[n++] = MPI_REQUEST_NULL;
        for (int k = 0; k < ncases; ++k) {
            sends[k] = test_typed_make(cases[k].type, cases[k].count, seed_of(rank, tag0 + k));
            SHUNT_TEST_MPI(MPI_Isend(sends[k].base, cases[k].count, cases[k].type, right, tag0 + k, comm, &req[n++]));
        }
        SHUNT_TEST_MPI(MPI_Isend(ints_out, 8, MPI_INT, right, tag0 + 19, comm, &req[n++]));
        MPI_Status st[max_req];
        int tag_of[max_req], count_of[max_req];
        for (int i = 0; i < n; ++i) tag_of[i] = -1, count_of[i] = -1;
        /* statuses by request index, so the output does not depend on completion order */
        int left_n = n;
        while (left_n > 0) {
            int idx[max_req], out = 0, flag = 0;
            MPI_Status one;
            if (how == 0) {
                SHUNT_TEST_MPI(MPI_Waitany(n, req, &idx[0], &one));
                if (idx[0] == MPI_UNDEFINED) break;
                out = 1;
                st[0] = one;
            } else if (how == 1) {
                SHUNT_TEST_MPI(MPI_Waitsome(n, req, &out, idx, st));
                if (out == MPI_UNDEFINED) break;
            } else if (how == 2) {
                SHUNT_TEST_MPI(MPI_Testany(n, req, &idx[0], &flag, &one));
                if (flag && idx[0] == MPI_UNDEFINED) break;
                out = flag ? 1 : 0;
                st[0] = one;
            } else if (how == 3) {
                SHUNT_TEST_MPI(MPI_Testsome(n, req, &out, idx, statuses_ignore));
                if (out == MPI_UNDEFINED) break;
                for (int j = 0; j < out; ++j) st[j].MPI_TAG = -7;
            } else if (how == 4) {
                MPI_Status all[max_req];
                SHUNT_TEST_MPI(MPI_Testall(n, req, &flag, all));
                if (!flag) continue;
                out = 0;
                for (int i = 0; i < n; ++i) idx[out] = i, st[out++] = all[i];
                left_n = 0;
            } else {
                SHUNT_TEST_MPI(MPI_Waitall(n, req, statuses_ignore));
                break;
            }
            for (int j = 0; j < out; ++j) {
                const int i = idx[j];
                tag_of[i] = st[j].MPI_TAG;
                int cnt = -1;
                const int k = i >= 1 && i <= ncases ? i - 1 : -1;
                if (k >= 0 && st[j].MPI_TAG != -7) MPI_Get_count(&st[j], cases[k].type, &cnt);
                count_of[i] = cnt;
                --left_n;
            }
        }
        for (int i = 0; i < n; ++i) {
            SHUNT_TEST_REQUIRE(req[i] == MPI_REQUEST_NULL, "request %d of %d not completed (how %d)", i, n, how);
            if (i >= 1 && i <= ncases) { /* receives: status tag and count */
                note("array tag", tag_of[i]);
                note("array count", count_of[i]);
            }
        }
        for (int k = 0; k < ncases; ++k) {
            check_data("array", &cases[k], &recvs[k], 11u, seed_of(left, tag0 + k), cases[k].count);
            free(recvs[k].alloc);
            free(sends[k].alloc);
        }
        for (int i = 0; i < 8; ++i) SHUNT_TEST_REQUIRE(ints_in[i] == left * 100 + i + how, "MPI_INT array data");
        ++checks;
    }
}

/* Zero counts, MPI_PROC_NULL, truncation under MPI_ERRORS_RETURN, cancel, Request_get_status,
 * and MPI_Request_free of active requests. */
static void edges(const tcase* c, MPI_Comm comm) {
    MPI_Status st;
    test_typed r = test_typed_make(c->type, c->count, 12u);
    test_typed s = test_typed_make(c->type, c->count, seed_of(rank, 70));
    /* zero elements */
    MPI_Request req;
    SHUNT_TEST_MPI(MPI_Irecv(r.base, 0, c->type, left, 70, comm, &req));
    SHUNT_TEST_MPI(MPI_Send(s.base, 0, c->type, right, 70, comm));
    SHUNT_TEST_MPI(MPI_Wait(&req, &st));
    note_status("zero", c, &st);
    check_data("zero", c, &r, 12u, 12u, 0);
    /* MPI_PROC_NULL */
    SHUNT_TEST_MPI(MPI_Send(s.base, c->count, c->type, MPI_PROC_NULL, 71, comm));
    SHUNT_TEST_MPI(MPI_Recv(r.base, c->count, c->type, MPI_PROC_NULL, 71, comm, &st));
    note_status("proc null", c, &st);
    SHUNT_TEST_MPI(MPI_Irecv(r.base, c->count, c->type, MPI_PROC_NULL, 71, comm, &req));
    SHUNT_TEST_MPI(MPI_Wait(&req, &st));
    note_status("proc null", c, &st);
    check_data("proc null", c, &r, 12u, 12u, 0);

    /* truncation: one element more than the receive holds. Small messages only: Open MPI 4.1
     * writes a truncated message above its eager limit past the end of a contiguous receive
     * buffer (5000 bytes into a 2500-byte MPI_BYTE receive), which shunt's packed receive is. */
    int packed = 0;
    SHUNT_TEST_MPI(MPI_Pack_size(c->count, c->type, comm, &packed));
    if (c->count >= 2 && packed <= 2048) {
        MPI_Comm errs;
        SHUNT_TEST_MPI(MPI_Comm_dup(comm, &errs));
        SHUNT_TEST_MPI(MPI_Comm_set_errhandler(errs, MPI_ERRORS_RETURN));
        /* MPICH 4.0 raises a self-message's truncation on MPI_COMM_WORLD's handler in MPI_Wait */
        SHUNT_TEST_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        for (int way = 0; way < 2; ++way) {
            test_typed t = test_typed_make(c->type, c->count, 13u);
            SHUNT_TEST_MPI(MPI_Isend(s.base, c->count, c->type, right, 72 + way, errs, &req));
            int rc = 0;
            if (way == 0) {
                rc = MPI_Recv(t.base, c->count - 1, c->type, left, 72, errs, &st);
            } else {
                MPI_Request rr;
                SHUNT_TEST_MPI(MPI_Irecv(t.base, c->count - 1, c->type, left, 73, errs, &rr));
                rc = MPI_Wait(&rr, &st);
                if (rr != MPI_REQUEST_NULL) MPI_Request_free(&rr);
            }
            int cls = -1;
            MPI_Error_class(rc, &cls);
            note("truncate class", cls);
            SHUNT_TEST_REQUIRE(cls == MPI_ERR_TRUNCATE, "truncation gave class %d", cls);
            hash = test_hash(hash, t.alloc, t.alloc_bytes);
            /* MPICH 4.0 reports the truncation on a message to self on the send request too */
            const int src = MPI_Wait(&req, MPI_STATUS_IGNORE);
            MPI_Error_class(src, &cls);
            note("truncate send class", cls);
            free(t.alloc);
        }
        SHUNT_TEST_MPI(MPI_Comm_free(&errs));
        SHUNT_TEST_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    }

    /* cancel a receive that never matches */
#ifdef MPICH_VERSION
    /* MPICH 4.0 leaks a cancelled receive's derived datatype across ranks and prints "yaksa: N
     * leaked handle pool objects" at MPI_Finalize: cancel a receive of bytes there. */
    const tcase bytes_case = {"bytes", MPI_BYTE, 1};
    const tcase* cc = size > 1 ? &bytes_case : c;
#else
    const tcase* cc = c;
#endif
    SHUNT_TEST_MPI(MPI_Irecv(r.base, cc->count, cc->type, left, 999, comm, &req));
    SHUNT_TEST_MPI(MPI_Cancel(&req));
    SHUNT_TEST_MPI(MPI_Wait(&req, &st));
    int cancelled = 0;
    SHUNT_TEST_MPI(MPI_Test_cancelled(&st, &cancelled));
    note("cancelled", cancelled);
    SHUNT_TEST_REQUIRE(cancelled, "the receive was not cancelled");
    check_data("cancelled", c, &r, 12u, 12u, 0);

    /* MPI_Request_get_status does not free the request, but once it says the receive is
     * complete the data is in the buffer; the MPI_Wait that frees the request writes nothing
     * more (the buffer is the application's again: what it writes there stays). */
    SHUNT_TEST_MPI(MPI_Irecv(r.base, c->count, c->type, left, 74, comm, &req));
    SHUNT_TEST_MPI(MPI_Send(s.base, c->count, c->type, right, 74, comm));
    int flag = 0;
    while (!flag) SHUNT_TEST_MPI(MPI_Request_get_status(req, &flag, &st));
    SHUNT_TEST_REQUIRE(req != MPI_REQUEST_NULL, "MPI_Request_get_status freed the request");
    note_status("get_status", c, &st);
    check_data("get_status before the wait", c, &r, 12u, seed_of(left, 70), c->count);
    memset(r.alloc, 0x5a, r.alloc_bytes);
    SHUNT_TEST_MPI(MPI_Wait(&req, &st));
    note_status("after get_status", c, &st);
    for (size_t i = 0; i < r.alloc_bytes; ++i)
        SHUNT_TEST_REQUIRE(r.alloc[i] == 0x5a, "MPI_Wait after MPI_Request_get_status wrote byte %zu (rank %d)", i,
                           rank);

    /* MPI_Request_free of an active send and of an active receive. The receive's data is
     * checked only where the message is eager (written when matched): a rendezvous transfer
     * may still be under way when the program looks. */
    test_typed fr = test_typed_make(c->type, c->count, 14u);
    const int eager = packed <= 2048;
    MPI_Request freq;
    SHUNT_TEST_MPI(MPI_Irecv(fr.base, c->count, c->type, left, 75, comm, &freq));
    if (eager) {
        SHUNT_TEST_MPI(MPI_Request_free(&freq));
        SHUNT_TEST_REQUIRE(freq == MPI_REQUEST_NULL, "Request_free");
    }
    SHUNT_TEST_MPI(MPI_Barrier(comm));
    MPI_Request sreq;
    SHUNT_TEST_MPI(MPI_Isend(s.base, c->count, c->type, right, 75, comm, &sreq));
    SHUNT_TEST_MPI(MPI_Request_free(&sreq));
    int mark_out = rank, mark_in = -1;
    SHUNT_TEST_MPI(MPI_Isend(&mark_out, 1, MPI_INT, right, 76, comm, &sreq));
    SHUNT_TEST_MPI(MPI_Irecv(&mark_in, 1, MPI_INT, left, 76, comm, &req));
    SHUNT_TEST_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE)); /* by non-overtaking, tag 75 was matched first */
    SHUNT_TEST_MPI(MPI_Wait(&sreq, MPI_STATUS_IGNORE));
    /* Before the barrier: the freed send's buffer may be read until this receive completes, and
     * its sender frees it once past the barrier (MPICH 5 read freed memory otherwise). */
    if (!eager) SHUNT_TEST_MPI(MPI_Wait(&freq, MPI_STATUS_IGNORE));
    SHUNT_TEST_MPI(MPI_Barrier(comm));
    SHUNT_TEST_REQUIRE(mark_in == left, "mark");
    check_data("freed receive", c, &fr, 14u, seed_of(left, 70), c->count);

    /* A freed receive that ends in truncation, under the default (fatal) error handler: the
     * library drops the error of a freed request, so nothing may abort in the calls after
     * (regression: shunt tested the freed request in a later call and raised it there). Not to
     * self: MPICH 4.0 raises a self-message's truncation on the blocking send too. */
    if (size > 1 && c->count >= 2 && eager) {
        SHUNT_TEST_MPI(MPI_Irecv(fr.base, c->count - 1, c->type, left, 77, comm, &freq));
        SHUNT_TEST_MPI(MPI_Request_free(&freq));
        SHUNT_TEST_MPI(MPI_Send(s.base, c->count, c->type, right, 77, comm));
        SHUNT_TEST_MPI(MPI_Barrier(comm));
        for (int k = 0; k < 3; ++k) {
            SHUNT_TEST_MPI(MPI_Sendrecv(&mark_out, 1, MPI_INT, right, 78, &mark_in, 1, MPI_INT, left, 78, comm, &st));
            SHUNT_TEST_MPI(
                MPI_Sendrecv(s.base, c->count, c->type, right, 79, r.base, c->count, c->type, left, 79, comm, &st));
        }
        note("after a freed truncated receive", mark_in);
    }
    free(fr.alloc);
    free(r.alloc);
    free(s.alloc);
}

/* A truncated receive on an inter-communicator (pairs of ranks, each alone in its group), under
 * MPI_ERRORS_RETURN, after a first message that fits: what lands in the buffer must be the
 * library's (regression: MPICH's truncated receive was judged a message to self, where the
 * source rank, one of the other group, equalled this rank, and shunt unpacked a stale block). */
static void intercomm_truncation(MPI_Datatype vec) {
    if (size < 2) return;
    const int partner = rank ^ 1;
    MPI_Comm local, inter;
    SHUNT_TEST_MPI(MPI_Comm_split(MPI_COMM_WORLD, rank, 0, &local));
    if (partner < size) {
        SHUNT_TEST_MPI(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, partner, 7, &inter));
        SHUNT_TEST_MPI(MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN));
        SHUNT_TEST_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        int out[64], in[64];
        for (int i = 0; i < 64; ++i) out[i] = 1000 * (rank + 1) + i;
        if (rank % 2 == 1) {
            SHUNT_TEST_MPI(MPI_Send(out, 2, vec, 0, 1, inter)); /* fits */
            SHUNT_TEST_MPI(MPI_Send(out + 1, 3, vec, 0, 2, inter)); /* one element too many */
        } else {
            MPI_Status st;
            for (int i = 0; i < 64; ++i) in[i] = -1;
            int cls = -1, rc = MPI_Recv(in, 2, vec, 0, 1, inter, &st);
            MPI_Error_class(rc, &cls);
            note("inter first class", cls);
            hash = test_hash(hash, in, sizeof in);
            for (int i = 0; i < 64; ++i) in[i] = -1;
            rc = MPI_Recv(in, 2, vec, 0, 2, inter, &st);
            MPI_Error_class(rc, &cls);
            note("inter truncated class", cls);
            SHUNT_TEST_REQUIRE(cls == MPI_ERR_TRUNCATE, "inter-communicator truncation gave class %d", cls);
            hash = test_hash(hash, in, sizeof in);
        }
        SHUNT_TEST_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
        SHUNT_TEST_MPI(MPI_Comm_free(&inter));
    }
    SHUNT_TEST_MPI(MPI_Comm_free(&local));
}

/* One element more than the receive holds, received through MPI_Recv and MPI_Irecv and, as the
 * oracle, through the library's PMPI_Recv and PMPI_Irecv into identically prefilled buffers: the
 * same error class and every byte of the buffer the same (regression: shunt left the buffer as
 * it was, by MPICH 4.0's rule, where MPICH 5 copies the message's first bytes). On `comm` (an
 * intra- or an inter-communicator, MPI_ERRORS_RETURN set) to rank `to`, from rank `from`. */
static void truncation_like_library(const tcase* c, MPI_Comm comm, int to, int from) {
    int packed = 0;
    SHUNT_TEST_MPI(MPI_Pack_size(c->count, c->type, comm, &packed));
#ifndef MPICH_VERSION
    /* Open MPI writes a truncated message above its eager limit past the end of the buffer. */
    if (packed > 2048) return;
#endif
    if (c->count < 2) return;
    /* MPICH 4.0 raises a self-message's truncation on MPI_COMM_WORLD's handler in MPI_Wait */
    SHUNT_TEST_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    test_typed s = test_typed_make(c->type, c->count, seed_of(rank, 90));
    for (int way = 0; way < 2; ++way) {
        const int tag = 90 + 2 * way;
        MPI_Request sreq[2], rr;
        SHUNT_TEST_MPI(MPI_Isend(s.base, c->count, c->type, to, tag, comm, &sreq[0]));
        SHUNT_TEST_MPI(MPI_Isend(s.base, c->count, c->type, to, tag + 1, comm, &sreq[1]));
        test_typed got = test_typed_make(c->type, c->count, 16u);
        test_typed lib = test_typed_make(c->type, c->count, 16u);
        MPI_Status st;
        int rc = 0, lrc = 0;
        if (way == 0) {
            rc = MPI_Recv(got.base, c->count - 1, c->type, from, tag, comm, &st);
            lrc = PMPI_Recv(lib.base, c->count - 1, c->type, from, tag + 1, comm, &st);
        } else {
            SHUNT_TEST_MPI(MPI_Irecv(got.base, c->count - 1, c->type, from, tag, comm, &rr));
            rc = MPI_Wait(&rr, &st);
            if (rr != MPI_REQUEST_NULL) MPI_Request_free(&rr);
            SHUNT_TEST_MPI(PMPI_Irecv(lib.base, c->count - 1, c->type, from, tag + 1, comm, &rr));
            lrc = PMPI_Wait(&rr, &st);
            if (rr != MPI_REQUEST_NULL) PMPI_Request_free(&rr);
        }
        int cls = -1, lcls = -1;
        MPI_Error_class(rc, &cls);
        MPI_Error_class(lrc, &lcls);
        SHUNT_TEST_REQUIRE(cls == lcls, "truncated %s (way %d): class %d, the library's %d", c->name, way, cls, lcls);
        for (size_t i = 0; i < got.alloc_bytes; ++i)
            SHUNT_TEST_REQUIRE(got.alloc[i] == lib.alloc[i],
                               "truncated %s (way %d, rank %d): byte %zu is %d, the library wrote %d", c->name, way,
                               rank, i, got.alloc[i], lib.alloc[i]);
        note("truncated like the library", cls);
        /* Above the eager limit MPICH 5 drops a truncated message sent non-contiguous but copies
         * the first bytes of a contiguous one, which shunt's packed send is: not hashed. */
        if (packed <= 2048) hash = test_hash(hash, got.alloc, got.alloc_bytes);
        ++checks;
        /* MPICH 4.0 reports the truncation on a message to self on the send requests too */
        MPI_Wait(&sreq[0], MPI_STATUS_IGNORE);
        MPI_Wait(&sreq[1], MPI_STATUS_IGNORE);
        free(got.alloc);
        free(lib.alloc);
    }
    free(s.alloc);
    SHUNT_TEST_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
}

/* truncation_like_library for every case, on a ring and, from 2 ranks, on inter-communicators of
 * pairs of ranks (MPICH 5 drops a truncated message above its eager limit there). */
static void truncations(const tcase* cases, int ncases, MPI_Comm comm) {
    MPI_Comm errs;
    SHUNT_TEST_MPI(MPI_Comm_dup(comm, &errs));
    SHUNT_TEST_MPI(MPI_Comm_set_errhandler(errs, MPI_ERRORS_RETURN));
    for (int k = 0; k < ncases; ++k) truncation_like_library(&cases[k], errs, right, left);
    SHUNT_TEST_MPI(MPI_Comm_free(&errs));
    const int partner = rank ^ 1;
    MPI_Comm local, inter;
    SHUNT_TEST_MPI(MPI_Comm_split(MPI_COMM_WORLD, rank, 0, &local));
    if (size > 1 && partner < size) {
        SHUNT_TEST_MPI(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, partner, 8, &inter));
        SHUNT_TEST_MPI(MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN));
        for (int k = 0; k < ncases; ++k) truncation_like_library(&cases[k], inter, 0, 0);
        SHUNT_TEST_MPI(MPI_Comm_free(&inter));
    }
    SHUNT_TEST_MPI(MPI_Comm_free(&local));
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    statuses_ignore = MPI_STATUSES_IGNORE;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    right = (rank + 1) % size;
    left = (rank + size - 1) % size;
    MPI_Comm comm;
    SHUNT_TEST_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comm));

    MPI_Datatype vec, idx, st, rsz;
    SHUNT_TEST_MPI(MPI_Type_vector(5, 2, 3, MPI_INT, &vec)); /* 8-byte blocks */
    SHUNT_TEST_MPI(MPI_Type_commit(&vec));
    const int bl[3] = {1, 3, 2}, dp[3] = {0, 4, 9};
    SHUNT_TEST_MPI(MPI_Type_indexed(3, bl, dp, MPI_DOUBLE, &idx)); /* gaps between blocks */
    SHUNT_TEST_MPI(MPI_Type_commit(&idx));
    const int sbl[3] = {1, 1, 3};
    const MPI_Aint sdp[3] = {0, 8, 16};
    const MPI_Datatype sty[3] = {MPI_INT, MPI_DOUBLE, MPI_CHAR};
    SHUNT_TEST_MPI(MPI_Type_create_struct(3, sbl, sdp, sty, &st));
    SHUNT_TEST_MPI(MPI_Type_commit(&st));
    SHUNT_TEST_MPI(MPI_Type_create_resized(vec, -8, 80, &rsz)); /* negative lower bound, larger extent */
    SHUNT_TEST_MPI(MPI_Type_commit(&rsz));
    MPI_Datatype big; /* 24 KiB packed per message: above the libraries' eager limits */
    SHUNT_TEST_MPI(MPI_Type_vector(1024, 3, 5, MPI_INT, &big));
    SHUNT_TEST_MPI(MPI_Type_commit(&big));
    const tcase cases[] = {{"vector", vec, 3},  {"indexed", idx, 2},    {"struct", st, 4},
                           {"resized", rsz, 3}, {"big vector", big, 2}, {"int", MPI_INT, 5}};
    const int ncases = (int)(sizeof cases / sizeof cases[0]);

    int bsize = 0;
    SHUNT_TEST_MPI(MPI_Pack_size(2, big, comm, &bsize));
    bsize = 8 * (bsize + MPI_BSEND_OVERHEAD);
    void* attached = malloc((size_t)bsize);
    SHUNT_TEST_MPI(MPI_Buffer_attach(attached, bsize));

    for (int k = 0; k < ncases; ++k) {
        blocking_sends(&cases[k], comm);
        nonblocking_sends(&cases[k], comm);
        exchanges(&cases[k], comm);
        persistent(&cases[k], comm);
        matched(&cases[k], comm);
        edges(&cases[k], comm);
    }
    arrays(cases, ncases, comm);
    intercomm_truncation(vec);
    truncations(cases, ncases, comm);

    void* detached = NULL;
    int dsize = 0;
    SHUNT_TEST_MPI(MPI_Buffer_detach(&detached, &dsize));
    free(attached);
    /* A receive whose datatype is freed before it completes (MPI allows it): shunt's request
     * keeps what it needs to unpack. */
    {
        MPI_Datatype gone;
        SHUNT_TEST_MPI(MPI_Type_vector(5, 2, 3, MPI_INT, &gone));
        SHUNT_TEST_MPI(MPI_Type_commit(&gone));
        test_typed r = test_typed_make(vec, 3, 15u);
        test_typed s = test_typed_make(vec, 3, seed_of(rank, 80));
        MPI_Request req;
        SHUNT_TEST_MPI(MPI_Irecv(r.base, 3, gone, left, 80, comm, &req));
        SHUNT_TEST_MPI(MPI_Type_free(&gone));
        SHUNT_TEST_MPI(MPI_Send(s.base, 3, vec, right, 80, comm));
        SHUNT_TEST_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
        check_data("freed type", &cases[0], &r, 15u, seed_of(left, 80), 3);
        free(r.alloc);
        free(s.alloc);
    }
    MPI_Type_free(&vec);
    MPI_Type_free(&idx);
    MPI_Type_free(&st);
    MPI_Type_free(&rsz);
    MPI_Type_free(&big);
    MPI_Comm_free(&comm);

    char line[128];
    snprintf(line, sizeof line, "rank %d: %ld checks, hash %016llx", rank, checks, (unsigned long long)hash);
    test_print_ranks(MPI_COMM_WORLD, line);
    MPI_Finalize();
    return 0;
}
