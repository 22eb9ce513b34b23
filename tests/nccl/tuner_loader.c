/* tests/nccl/tuner_loader.c: stands in for NCCL 2.28.9 loading and calling a tuner plugin: dlopen as NCCL does,
 * dlsym of ncclTunerPlugin_v5, init per communicator with NCCL's arguments, getCollInfo with a cost table set up as
 * NCCL sets it up, NCCL's pick from the table, finalize, dlclose. Prints one JSON line per step for
 * test_tuner_plugin.py to check.
 *
 * usage: tuner_loader PLUGIN STEP...   with STEP one of
 *   comm RANKS NODES            init a communicator (the later calls go to the newest one)
 *   call COLL BYTES [PIPEOPS]   getCollInfo for ncclFunc_t COLL (0 broadcast .. 4 allreduce) of BYTES
 *   threads T N COLL BYTES      T threads, each N calls like `call`, on the newest communicator: all must agree
 *
 * The interface is declared here from NCCL v2.28.9-1's src/include/plugin/tuner/tuner_v5.h and nccl_common.h,
 * independently of shunt's own declaration of it (interpose/nccl_tuner_abi.hpp). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { ncclSuccess = 0 } ncclResult_t;
typedef enum { NCCL_LOG_NONE = 0, NCCL_LOG_VERSION = 1, NCCL_LOG_WARN = 2, NCCL_LOG_INFO = 3 } ncclDebugLogLevel;
typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                  const char* fmt, ...);
typedef enum {
    ncclFuncBroadcast = 0,
    ncclFuncReduce = 1,
    ncclFuncAllGather = 2,
    ncclFuncReduceScatter = 3,
    ncclFuncAllReduce = 4
} ncclFunc_t;

#define NCCL_NUM_ALGORITHMS 7
#define NCCL_NUM_PROTOCOLS 3
#define NCCL_ALGO_PROTO_IGNORE -1.0

typedef struct {
    int nNvlDomains;
    int minRanksPerNvlDomain;
    int maxRanksPerNvlDomain;
} ncclNvlDomainInfo_v5_t;

typedef struct {
    double baseLatencies[7][3];
    double hwLatencies[3][7][3];
    double llMaxBws[4][3];
    double perChMaxRingLL128Bws[4][3];
    double perChMaxTreeLL128Bws[4][3];
    double perChMaxTreeBws[4][3];
    double perChMaxNVLSTreeBws[4][3];
} ncclTunerConstants_v5_t;

typedef struct {
    const char* name;
    ncclResult_t (*init)(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                         ncclNvlDomainInfo_v5_t* nvlDomainInfo, ncclTunerConstants_v5_t* constants);
    ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                float** collCostTable, int numAlgo, int numProto, int regBuff, int* nChannels);
    ncclResult_t (*finalize)(void* context);
} ncclTuner_v5_t;

/* What NCCL's logger received during the current step, as one JSON array body. */
static char log_lines[8192];

static void json_string(char* out, size_t cap, const char* s) {
    size_t n = strlen(out);
    if (n + 2 >= cap) return;
    out[n++] = '"';
    for (; *s && n + 8 < cap; ++s) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char)c;
        } else if (c < 0x20) {
            n += (size_t)snprintf(out + n, cap - n, "\\u%04x", c);
        } else {
            out[n++] = (char)c;
        }
    }
    out[n++] = '"';
    out[n] = '\0';
}

static void logger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
    (void)level, (void)flags, (void)file, (void)line;
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (log_lines[0]) strncat(log_lines, ",", sizeof log_lines - strlen(log_lines) - 1);
    json_string(log_lines, sizeof log_lines, text);
}

/* NCCL's estimates for a machine with tree and ring only (no CollNet, NVLS or PAT): a latency in us
 * and a bandwidth in GB/s per protocol, time = latency + bytes / (1000 * bandwidth), as NCCL's
 * ncclTopoGetAlgoTime computes it. Set up as getAlgoInfo does: every cell ignored, then the enabled ones. */
static void nccl_cost_table(float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS], size_t bytes) {
    static const double latency[2][3] = {{5, 7, 12}, {4, 6, 10}}; /* tree, ring x LL, LL128, Simple */
    static const double bandwidth[3] = {1, 4, 8};
    for (int a = 0; a < NCCL_NUM_ALGORITHMS; ++a)
        for (int p = 0; p < NCCL_NUM_PROTOCOLS; ++p) table[a][p] = NCCL_ALGO_PROTO_IGNORE;
    for (int a = 0; a < 2; ++a)
        for (int p = 0; p < NCCL_NUM_PROTOCOLS; ++p)
            table[a][p] = (float)(latency[a][p] + (double)bytes / (1000 * bandwidth[p]));
}

/* NCCL 2.28's topoGetAlgoInfo: the first cell of least non-negative time. */
static void nccl_pick(float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS], int* algo, int* proto) {
    float least = 3600000000.0f;
    *algo = *proto = -1;
    for (int a = 0; a < NCCL_NUM_ALGORITHMS; ++a)
        for (int p = 0; p < NCCL_NUM_PROTOCOLS; ++p) {
            if (table[a][p] == NCCL_ALGO_PROTO_IGNORE) continue;
            if (table[a][p] >= 0.0 && table[a][p] < least) *algo = a, *proto = p, least = table[a][p];
        }
}

static void print_table(const char* key, float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS]) {
    printf("\"%s\":[", key);
    for (int i = 0; i < NCCL_NUM_ALGORITHMS * NCCL_NUM_PROTOCOLS; ++i)
        printf("%s%.9g", i ? "," : "", (double)table[i / NCCL_NUM_PROTOCOLS][i % NCCL_NUM_PROTOCOLS]);
    printf("]");
}

static const ncclTuner_v5_t* tuner;

/* One getCollInfo as NCCL's getAlgoInfo makes it; fills `after` and the channel count. */
static ncclResult_t coll_info(void* ctx, int coll, size_t bytes, int pipe_ops,
                              float after[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS], int* channels) {
    nccl_cost_table(after, bytes);
    *channels = 0;
    return tuner->getCollInfo(ctx, (ncclFunc_t)coll, bytes, pipe_ops, (float**)after, NCCL_NUM_ALGORITHMS,
                              NCCL_NUM_PROTOCOLS, 0, channels);
}

struct thread_job {
    void* ctx;
    int coll, calls, failures;
    size_t bytes;
    float first[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
};

static void* thread_main(void* arg) {
    struct thread_job* job = (struct thread_job*)arg;
    for (int i = 0; i < job->calls; ++i) {
        float t[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
        int channels = 0;
        if (coll_info(job->ctx, job->coll, job->bytes, 1, t, &channels) != ncclSuccess || channels != 0 ||
            memcmp(t, job->first, sizeof t) != 0)
            ++job->failures;
    }
    return NULL;
}

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: tuner_loader PLUGIN STEP...\n");
        return 2;
    }
    /* ncclOpenTunerPluginLib: dlopen(name, RTLD_NOW | RTLD_LOCAL), then the newest symbol first. */
    void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "tuner_loader: dlopen: %s\n", dlerror());
        return 1;
    }
    tuner = (const ncclTuner_v5_t*)dlsym(lib, "ncclTunerPlugin_v5");
    if (!tuner || !tuner->name || !tuner->init || !tuner->getCollInfo || !tuner->finalize) {
        fprintf(stderr, "tuner_loader: no complete ncclTunerPlugin_v5 in %s\n", argv[1]);
        return 1;
    }
    printf("{\"plugin\":");
    char name[256] = "";
    json_string(name, sizeof name, tuner->name);
    printf("%s}\n", name);

    void* comms[16];
    int ncomms = 0, status = 0;
    for (int i = 2; i < argc;) {
        log_lines[0] = '\0';
        if (strcmp(argv[i], "comm") == 0 && i + 2 < argc && ncomms < 16) {
            const size_t ranks = strtoull(argv[i + 1], NULL, 10), nodes = strtoull(argv[i + 2], NULL, 10);
            i += 3;
            ncclNvlDomainInfo_v5_t nvl = {(int)nodes, (int)(ranks / nodes), (int)(ranks / nodes)};
            ncclTunerConstants_v5_t constants, before;
            for (size_t k = 0; k < sizeof constants / sizeof(double); ++k) ((double*)&constants)[k] = 0.5 + (double)k;
            before = constants;
            void* ctx = (void*)&comms; /* NCCL leaves it unset: the plugin must write it */
            const ncclResult_t rc =
                tuner->init(&ctx, 0x1234abcdULL + (uint64_t)ncomms, ranks, nodes, logger, &nvl, &constants);
            comms[ncomms++] = ctx;
            printf("{\"init\":%d,\"ranks\":%zu,\"nodes\":%zu,\"context\":%s,\"constants_kept\":%s,\"log\":[%s]}\n",
                   (int)rc, ranks, nodes, ctx ? "true" : "false",
                   memcmp(&before, &constants, sizeof before) == 0 ? "true" : "false", log_lines);
            status |= rc != ncclSuccess || ctx == (void*)&comms;
        } else if (strcmp(argv[i], "call") == 0 && i + 2 < argc && ncomms > 0) {
            const int coll = atoi(argv[i + 1]);
            const size_t bytes = strtoull(argv[i + 2], NULL, 10);
            int pipe_ops = 1;
            i += 3;
            if (i < argc && strcmp(argv[i], "comm") && strcmp(argv[i], "call") && strcmp(argv[i], "threads"))
                pipe_ops = atoi(argv[i++]);
            float before[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS], after[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
            nccl_cost_table(before, bytes);
            int channels = -7;
            const ncclResult_t rc = coll_info(comms[ncomms - 1], coll, bytes, pipe_ops, after, &channels);
            int na, np, a, p;
            nccl_pick(before, &na, &np);
            nccl_pick(after, &a, &p);
            printf("{\"call\":%d,\"coll\":%d,\"bytes\":%zu,\"pipe_ops\":%d,\"channels\":%d,", (int)rc, coll, bytes,
                   pipe_ops, channels);
            print_table("before", before);
            printf(",");
            print_table("after", after);
            printf(",\"nccl_pick\":[%d,%d],\"pick\":[%d,%d]}\n", na, np, a, p);
            status |= rc != ncclSuccess;
        } else if (strcmp(argv[i], "threads") == 0 && i + 4 < argc && ncomms > 0) {
            const int n = atoi(argv[i + 1]);
            struct thread_job jobs[16];
            pthread_t threads[16];
            int failures = 0, started = 0;
            for (int t = 0; t < n && t < 16; ++t) {
                jobs[t].ctx = comms[ncomms - 1];
                jobs[t].calls = atoi(argv[i + 2]);
                jobs[t].coll = atoi(argv[i + 3]);
                jobs[t].bytes = strtoull(argv[i + 4], NULL, 10);
                jobs[t].failures = 0;
                int channels = 0;
                coll_info(jobs[t].ctx, jobs[t].coll, jobs[t].bytes, 1, jobs[t].first, &channels);
                if (t > 0 && memcmp(jobs[t].first, jobs[0].first, sizeof jobs[t].first) != 0) ++failures;
            }
            for (int t = 0; t < n && t < 16; ++t)
                started += pthread_create(&threads[t], NULL, thread_main, &jobs[t]) == 0;
            for (int t = 0; t < started; ++t) {
                pthread_join(threads[t], NULL);
                failures += jobs[t].failures;
            }
            i += 5;
            printf("{\"threads\":%d,\"failures\":%d}\n", started, failures);
            status |= failures != 0 || started != n;
        } else {
            fprintf(stderr, "tuner_loader: bad step '%s'\n", argv[i]);
            return 2;
        }
        fflush(stdout);
    }
    /* ncclCommDestroy: finalize per communicator, then the last one closes the library. */
    while (ncomms > 0) {
        const ncclResult_t rc = tuner->finalize(comms[--ncomms]);
        printf("{\"finalize\":%d}\n", (int)rc);
        status |= rc != ncclSuccess;
    }
    if (dlclose(lib) != 0) {
        fprintf(stderr, "tuner_loader: dlclose: %s\n", dlerror());
        status = 1;
    }
    return status;
}
